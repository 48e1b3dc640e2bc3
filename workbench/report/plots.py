"""Figures of result objects: acceptance curves, histograms, speed-up, tap statistics, coloured tokens.

    >>> from workbench.stats.statistics import AcceptanceResult
    >>> from workbench.report import plots
    >>> r = AcceptanceResult.from_arrays("L1,L3,L4", K=3, sample=[0, 0, 1, 1], t=[0, 1, 0, 1],
    ...                                  accepted=[3, 1, 0, 2], source=["code", "code", "prose", "prose"])
    >>> fig = plots.acceptance_curves({"L1,L3,L4": r})
    >>> [ax.get_title() for ax in fig.axes]
    ['Conditional acceptance α_k = P(A≥k | A≥k−1)', 'Cumulative acceptance P(A≥k)']

Every function returns a ``matplotlib.figure.Figure`` built without pyplot (no global state, nothing
leaks, works headless); a notebook shows it as a PNG, :func:`save` writes it. ``results`` is a
``{label: AcceptanceResult}`` dict (e.g. what ``acceptance.simulate`` returns), a list, or one
result. Conventions in every label: chain drafting, greedy; accept length counts the bonus token
(E[A]+1) unless it says otherwise; intervals are 95% (Wilson for proportions, bootstrap over samples
for accept lengths, from ``AcceptanceResult.intervals``).
"""

from __future__ import annotations

import html
import math

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write
from workbench.load.agreement import THRESHOLD
from workbench.report.figure import WIDTH
from workbench.report.figure import new_figure as _figure
from workbench.report.figure import wrap as _wrap
from workbench.report.serving_figures import engine_fidelity, speed_sweep  # noqa: F401 - one face for drawing
from workbench.stats.cost import projection
from workbench.stats.counts import chain_statistics
from workbench.stats.tap_stats import TapStats


def save(fig, path, *, dpi: int = 110):
    """Write a figure (PNG/SVG/PDF by extension), atomically."""
    fmt = str(path).rsplit(".", 1)[-1].lower()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format=fmt, dpi=dpi)
    return path


def _legend_below(fig, ax) -> None:
    """The legend under the panels (constrained layout makes room): it never covers a point or a label."""
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize="small", ncols=1)


def _grid_and_legend(ax) -> None:
    """The house style of a bar/curve panel: a light horizontal grid and a small legend."""
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")


def as_results(results) -> dict:
    """``{label: AcceptanceResult}`` from one result, a list or a dict (what every figure takes)."""
    if hasattr(results, "conditional") and hasattr(results, "chains"):
        return {results.spec: results}
    if isinstance(results, dict):
        out = dict(results)
    elif isinstance(results, (list, tuple)):
        out = {r.spec: r for r in results}
    else:
        raise WorkbenchError(f"expected an AcceptanceResult, a list or a {{label: AcceptanceResult}} dict, "
                             f"got {type(results).__name__}")
    if not out:
        raise WorkbenchError("nothing to plot: no acceptance results given")
    for label, r in out.items():
        if not (hasattr(r, "conditional") and hasattr(r, "chains")):
            raise WorkbenchError(f"result {label!r} is a {type(r).__name__}, expected an AcceptanceResult")
    return out


def _common_label(results: dict, estimator: str) -> str:
    """The results' shared accept-length label (Setting.accept_label), or a note that they differ."""
    labels = {r.setting.accept_label(estimator) for r in results.values()}
    return labels.pop() if len(labels) == 1 else f"accept length ({estimator.replace('-', ' ')}, settings differ)"


def _colors(n: int):
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _errs(values, bounds):
    """(lower, upper) error-bar lengths from [lo, hi] interval pairs (NaN-safe)."""
    v = np.asarray(values, float)
    b = np.asarray([[np.nan, np.nan] if x is None else x for x in bounds], float).reshape(len(v), 2)
    return np.vstack([np.clip(v - b[:, 0], 0, None), np.clip(b[:, 1] - v, 0, None)])


# ------------------------------------------------------------------------------ acceptance

def acceptance_curves(results, *, title: str | None = None, K: int | None = None):
    """Conditional α_k and cumulative P(A≥k) per draft position k, one line per wiring, 95% Wilson bars.

    ``K`` (≤ each chain result's K) shows depth K' = K: a chain that accepted A of K accepts min(A, K') of
    K', so the curves are the first K' points and the accept length in the legend is E[min(A, K')]+1.

        >>> from workbench.stats.statistics import AcceptanceResult
        >>> r = AcceptanceResult.from_arrays("L1", K=3, sample=[0, 0], t=[0, 1], accepted=[3, 1])
        >>> fig = acceptance_curves(r, K=2)
        >>> len(fig.axes[0].lines[0].get_xdata()), fig.legends[0].get_texts()[0].get_text()[:29]
        (2, 'L1  (accept length 2.500, n=2')
    """
    results = as_results(results)
    if K is not None:
        bad = [lb for lb, r in results.items() if not 1 <= int(K) <= r.steps or r.setting.eagle_topk > 1]
        if bad:
            raise WorkbenchError(f"acceptance_curves K={K}: expected 1..K of chain results (not {', '.join(bad)})")
    fig, (ax_c, ax_m) = _figure(2)
    shown = {lb: (r.setting.replace(steps=int(K)) if K is not None and r.setting.shape == "chain" else r.setting)
             for lb, r in results.items()}
    labels = {st.accept_label("every-position") for st in shown.values()}
    for (label, r), color in zip(results.items(), _colors(len(results))):
        iv = r.intervals()
        steps = r.steps if K is None else int(K)
        k = np.arange(1, steps + 1)
        acc = chain_statistics(np.minimum(r.chains["accepted"], steps), steps)["accept_length"]
        what = "accept length" if len(labels) == 1 else shown[label].accept_label("every-position")
        name = f"{label}  ({what} {acc:.3f}, n={r.n_chains} chains)"
        for ax, key in ((ax_c, "conditional"), (ax_m, "cumulative")):
            vals = np.asarray(getattr(r, key), float)[:steps]
            ax.errorbar(k, vals, yerr=_errs(vals, iv[key][:steps]), marker="o", capsize=3, color=color, label=name)
    ax_c.set_title("Conditional acceptance α_k = P(A≥k | A≥k−1)")
    ax_m.set_title("Cumulative acceptance P(A≥k)")
    kmax = max(r.steps for r in results.values()) if K is None else int(K)
    for ax in (ax_c, ax_m):
        ax.set_xlabel("draft position k (tokens after the bonus token)")
        ax.set_ylabel("acceptance rate (share of chains)" if ax is ax_c else "share of chains")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xticks(range(1, kmax + 1))
        ax.grid(alpha=0.3)
    _legend_below(fig, ax_m)
    fig.suptitle(_wrap(title or ("Per-position acceptance (bars: 95% Wilson intervals)"
                                 + (f"; legend: {labels.pop()}" if len(labels) == 1 else ""))))
    return fig


def accept_length_histogram(results, *, title: str | None = None):
    """Share of chains that accepted exactly a = 0..K draft tokens, grouped bars per wiring."""
    results = as_results(results)
    fig, (ax,) = _figure(1)
    n = len(results)
    width = 0.8 / n
    kmax = max(r.steps for r in results.values())
    for i, ((label, r), color) in enumerate(zip(results.items(), _colors(n))):
        h = np.asarray(r.histogram, float)
        share = h / h.sum() if h.sum() else h
        x = np.arange(len(h)) + (i - (n - 1) / 2) * width
        ax.bar(x, share, width=width, color=color,
               label=f"{label}  (E[A]+1 = {r.accept_length:.3f}, n={int(h.sum())} chains)")
    ax.set_xticks(range(kmax + 1))
    ax.set_xlabel("accepted draft tokens a per chain (bonus token not counted)")
    ax.set_ylabel("share of chains")
    ax.set_title(title or f"Accept-length histogram H[a]; legend: {_common_label(results, 'every-position')}")
    _grid_and_legend(ax)
    return fig


def decode_path_comparison(results, *, title: str | None = None):
    """Accept length (E[A]+1) over every position vs along the decode path, per wiring, 95% bootstrap bars."""
    results = as_results(results)
    fig, (ax,) = _figure(1, height=3.6)
    labels = list(results)
    x = np.arange(len(labels))
    every, path, e_iv, p_iv = [], [], [], []
    for r in results.values():
        iv = r.intervals()
        every.append(r.accept_length)
        path.append(r.decode_path["accept_length"])
        e_iv.append(iv["accept_length"])
        p_iv.append(iv["decode_path_accept_length"])
    ax.bar(x - 0.2, every, 0.4, yerr=_errs(every, e_iv), capsize=4, color="#4c78a8", label="every position")
    ax.bar(x + 0.2, path, 0.4, yerr=_errs(path, p_iv), capsize=4, color="#f58518",
           label="decode path (what a server verifies)")
    for xi, (a, b) in enumerate(zip(every, path)):
        for dx, v, iv in ((-0.2, a, e_iv[xi]), (0.2, b, p_iv[xi])):
            if v is not None and not math.isnan(v):
                top = max(v, iv[1]) if iv[1] is not None and not math.isnan(iv[1]) else v   # above the error bar
                ax.annotate(f"{v:.3f}", (xi + dx, top), ha="center", va="bottom", fontsize="small",
                            xytext=(0, 4), textcoords="offset points")
    ax.set_xticks(x, labels)
    ax.set_xlabel("wiring (taps fed to the draft)")
    ax.set_ylabel("accept length E[A]+1 (tokens / verify step)")
    ax.set_ylim(0, max(r.steps for r in results.values()) + 1.3)
    ax.set_title(title or (f"{_common_label(results, 'every-position')} vs the decode path (95% bootstrap over "
                           f"samples)"), fontsize="medium")
    _grid_and_legend(ax)
    return fig


def by_source(results, *, title: str | None = None):
    """Accept length (E[A]+1) per data source, grouped by wiring, with chain counts."""
    results = as_results(results)
    sources = sorted({s for r in results.values() for s in r.sources})
    fig, (ax,) = _figure(1, height=4.4)             # room for the legend under the panel
    n = len(results)
    width = 0.8 / n
    x = np.arange(len(sources))
    for i, ((label, r), color) in enumerate(zip(results.items(), _colors(n))):
        stats = r.by_source()
        vals = [stats[s]["accept_length"] if s in stats and stats[s]["accept_length"] is not None else np.nan
                for s in sources]
        ax.bar(x + (i - (n - 1) / 2) * width, vals, width, color=color, label=label)
    counts = {s: sorted({r.by_source()[s]["n_chains"] for r in results.values() if s in r.by_source()})
              for s in sources}               # the same chains for every wiring: the count once, under its source
    ax.set_xticks(x, [f"{s or '(no source)'}\n(n={'/'.join(map(str, counts[s]))} chains)" for s in sources])
    ax.set_xlabel("data source")
    ax.set_ylabel("accept length E[A]+1 (tokens / verify step)")
    ax.set_title(title or f"By source: {_common_label(results, 'every-position')}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=min(3, n), frameon=False)
    return fig


def speedup_projection(results, *, ratio: float | None = None, cost_model=None, title: str | None = None):
    """Projected speed-up vs draft depth K' = 1..K with its uncertainty (:func:`workbench.cost.projection`):
    bars span the 95% accept-length interval and the cost model's timing spread together; ★ marks a K' only
    when it is clearly best, hollow markers the K' that lie within noise of the best.

    The cost model (:mod:`workbench.stats.cost`): ``cost_model`` (a CostModel or its JSON path) or a fixed
    ``ratio`` (one draft step ÷ one target forward), default each result's own; the title names it.
    """
    results = as_results(results)
    fig, (ax,) = _figure(1, height=4.4)
    models = {}
    for (label, r), color in zip(results.items(), _colors(len(results))):
        cm = r.projection_model(ratio, cost_model)
        if cm is None:
            raise WorkbenchError(f"speedup_projection: no cost model or cost ratio for {label!r} (none was "
                                 f"measured): pass ratio=, e.g. 0.05, or cost_model=")
        models[label] = cm.label
        p = projection(r, cm, n_boot=200)
        k = np.array([d["k"] for d in p["rows"]])
        s = np.array([d["speedup"] for d in p["rows"]], float)
        err = _errs(s, [[d["speedup_low"], d["speedup_high"]] for d in p["rows"]])
        ax.errorbar(k, s, yerr=err, marker="o", capsize=3, color=color, label=f"{label}: {p['short']}")
        near = [i for i, d in enumerate(p["rows"]) if d["k"] in p["within_noise"]]
        if p["best"] is not None:
            i = [d["k"] for d in p["rows"]].index(p["best"])
            ax.plot([k[i]], [s[i]], marker="*", markersize=15, color=color)
        elif near:
            ax.plot(k[near], s[near], linestyle="none", marker="o", markersize=12, markerfacecolor="none",
                    markeredgecolor=color)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="no speculation (1×)")
    ax.set_xlabel("draft depth K' (draft tokens per verify step)")
    ax.set_ylabel("speed-up (× target-only)")
    ax.set_xticks(range(1, max(r.steps for r in results.values()) + 1))
    same = len(set(models.values())) == 1
    if not same:
        for line, (label, desc) in zip(ax.get_legend_handles_labels()[0], models.items()):
            line.set_label(f"{line.get_label()} ({desc})")
    ax.set_title(_wrap(title or ("Projected speed-up by draft depth K' (bars: 95% accept-length interval and timing "
                                 "spread; ★ clearly best K', ○ within noise)"
                                 + (f"\ncost model: {next(iter(models.values()))}" if same else "")), 120),
                 fontsize="medium")
    ax.grid(alpha=0.3)
    _legend_below(fig, ax)
    return fig


# ------------------------------------------------------------------------------ tap statistics

def tree_sweep(sweep, *, value: str | None = None, title: str | None = None):
    """Heat maps of a flag sweep (``workbench.tune.SweepResult``): one panel per eagle_topk, steps across,
    num_draft_tokens up, coloured by the accept length on the decode path, what a server reports (or
    ``value="speedup"``, the default when a GPU cost model ranks the shapes; ``"accept_length"``: every position);
    the best cell of each panel and the overall best (★, by the value shown) are marked.
    """
    t = sweep.table
    value = value or ("speedup" if sweep.ranks_by_speed else "decode_path")
    if value not in t:
        raise WorkbenchError(f"tree_sweep: no column {value!r} (a speed-up needs a cost model)")
    topks = sorted(set(int(k) for k in t["eagle_topk"]))
    fig, axes = _figure(len(topks), height=3.8)
    vmin, vmax = float(t[value].min()), float(t[value].max())
    top = t.loc[t[value].idxmax()]
    best = (int(top["steps"]), int(top["eagle_topk"]), int(top["num_draft_tokens"]))
    im = None
    for ax, k in zip(axes, topks):
        sub = t[t["eagle_topk"] == k]
        steps = sorted(set(int(x) for x in sub["steps"]))
        ns = sorted(set(int(x) for x in sub["num_draft_tokens"]))
        grid = np.full((len(ns), len(steps)), np.nan)
        for _, r in sub.iterrows():
            grid[ns.index(int(r["num_draft_tokens"])), steps.index(int(r["steps"]))] = r[value]
        im = ax.imshow(grid, origin="lower", aspect="auto", vmin=vmin, vmax=vmax, cmap="viridis")
        ax.set_xticks(range(len(steps)), [str(x) for x in steps])
        ax.set_yticks(range(len(ns)), [str(x) for x in ns])
        ax.set_xlabel("draft steps")
        if ax is axes[0]:
            ax.set_ylabel("draft tokens verified, N")
        ax.set_title(f"eagle_topk {k}" + (" (chain)" if k == 1 else ""))
        i, j = np.unravel_index(np.nanargmax(grid), grid.shape)
        star = best[1] == k and (steps.index(best[0]), ns.index(best[2])) == (j, i)
        ax.text(j, i - (0.22 if star else 0), f"{grid[i, j]:.3f}", ha="center", va="center", color="white",
                fontsize="small")
        if best[1] == k:                       # the ★ above its cell's value, never on it
            bj, bi = steps.index(best[0]), ns.index(best[2])
            ax.plot([bj], [bi + (0.2 if star else 0)], marker="*", markersize=12, color="red", linestyle="none")
    if im is not None:
        fig.colorbar(im, ax=axes, label={"speedup": "projected speed-up", "decode_path": "accept length, decode path",
                                         "accept_length": "accept length, every position"}.get(value, value))
    what = {"speedup": "projected speed-up", "decode_path": "accept length on the decode path (E[A]+1, what a server "
            "reports)", "accept_length": "accept length over every position (E[A]+1)"}.get(value, value)
    fig.suptitle(_wrap(title or f"Flag sweep, wiring {sweep.spec}: {what}; ★ best shape"))
    return fig


def tap_stats_figure(stats: TapStats, *, highlight: dict | None = None, title: str | None = None):
    """Left: feature-norm distribution per tap (log scale); right: tap-to-tap cosine heatmap.

    ``highlight``: {label: [taps]} (e.g. {"trained": [...], "served": [...]}) marks those taps on
    both panels, so a wiring that mixes the embedding with layer outputs stands out.
    """
    taps = stats.taps
    many = len(taps) > 16                    # a real target (30 layers: 32 taps) needs room for one label per tap
    fig, (ax_n, ax_c) = _figure(2, height=max(4.6, 0.16 * len(taps) + 2.0) if many else 4.6)
    data = [np.clip(stats.norms[t], 1e-6, None) for t in taps]
    from matplotlib.ticker import NullFormatter

    ax_n.boxplot(data, positions=range(len(taps)), orientation="horizontal", tick_labels=taps, showfliers=False)
    ax_n.set_xscale("log")
    ax_n.xaxis.set_minor_formatter(NullFormatter())
    ax_n.invert_yaxis()
    ax_n.set_xlabel("feature norm per token (Euclidean length, log scale)")
    ax_n.set_ylabel("tap (embed, layer outputs L0.., final)")
    ax_n.set_title(f"Feature norms ({stats.n_tokens} tokens)")
    ax_n.grid(axis="x", alpha=0.3)
    im = ax_c.imshow(stats.cosine, vmin=-1, vmax=1, cmap="RdBu_r")
    ax_c.set_xticks(range(len(taps)), taps, rotation=90)
    ax_c.set_yticks(range(len(taps)), taps)
    if many:
        for ax in (ax_n, ax_c):
            ax.tick_params(axis="both", labelsize="x-small")
    if len(taps) <= 14:
        for i in range(len(taps)):
            for j in range(len(taps)):
                ax_c.text(j, i, f"{stats.cosine[i, j]:.2f}", ha="center", va="center", fontsize=6,
                          color="white" if abs(stats.cosine[i, j]) > 0.6 else "black")
    ax_c.set_title("Mean cosine similarity between taps (same token)")
    ax_c.set_xlabel("tap")
    ax_c.set_ylabel("tap")
    fig.colorbar(im, ax=ax_c, label="cosine similarity")
    if highlight:
        n = len(highlight)
        for g, ((label, sel), color) in enumerate(zip(highlight.items(), _colors(n))):
            idx = [taps.index(t) for t in sel if t in taps]
            dy = (g - (n - 1) / 2) * 0.25
            ax_n.scatter([np.median(data[i]) for i in idx], [i + dy for i in idx], marker="D", s=45,
                         color=color, zorder=3, label=f"{label}: {','.join(sel)}")
        groups = list(highlight.values())
        if len(groups) == 2:         # slot by slot: the tap trained on against the tap served in its place
            pairs = [(taps.index(a), taps.index(b)) for a, b in zip(*groups) if a != b and a in taps and b in taps]
            if pairs:
                ax_c.scatter([b for _, b in pairs], [a for a, _ in pairs], marker="s", s=150, facecolors="none",
                             edgecolors="black", linewidths=2,
                             label=f"{list(highlight)[0]} (row) against {list(highlight)[1]} (column), slot by slot")
        handles = ax_n.get_legend_handles_labels()[0] + ax_c.get_legend_handles_labels()[0]
        fig.legend(handles=handles, loc="outside lower center", ncols=1, fontsize="small", frameon=False)
    fig.suptitle(_wrap(title or _tap_stats_title(stats)))
    return fig


def _tap_stats_title(stats: TapStats) -> str:
    """What the data shows about the embedding against the layer outputs (no conclusion written in advance)."""
    taps = stats.taps
    layers = [i for i, t in enumerate(taps) if t.startswith("L")]
    if "embed" not in taps or not layers:
        return f"Tap feature statistics ({len(taps)} taps, {stats.n_tokens} tokens)"
    e = taps.index("embed")
    ratio = float(np.median(stats.norms["embed"])) / float(np.median([np.median(stats.norms[taps[i]]) for i in layers]))
    cos = float(np.mean([stats.cosine[e, i] for i in layers]))
    return (f"Tap feature statistics: the embedding's median norm is {ratio:.2g}× the layer outputs' (median over "
            f"layers); its mean cosine with them is {cos:.2f}")


# ------------------------------------------------------------------------------ tokens

class TokenHTML(str):
    """An HTML string that notebooks render (``_repr_html_``); every token text in it is escaped."""

    def _repr_html_(self) -> str:
        return str(self)


_PALETTE = ["#f4cccc", "#fce5cd", "#fff2cc", "#d9ead3", "#b6d7a8", "#93c47d", "#6aa84f", "#38761d"]


def _shade(a: int, K: int) -> str:
    if K <= 0:
        return _PALETTE[0]
    return _PALETTE[round(a / K * (len(_PALETTE) - 1))]


def _visible(text: str) -> str:
    e = html.escape(text, quote=True)
    return e.replace("\n", "↵<br>").replace("\t", "→").replace(" ", "&nbsp;") or "∅"


def tokens_html(tokens: list[str], accepted: list[int | None], *, K: int, n_prompt_tokens: int = 0,
                title: str | None = None) -> TokenHTML:
    """Tokens coloured by how many draft tokens were accepted right after each (red 0 → green K).

        >>> h = tokens_html(["a", "<script>", "c"], [None, 2, 0], K=2)
        >>> "&lt;script&gt;" in h and "<script>" not in h
        True

    ``accepted[p]``: accepted count of the chain whose bonus token is token p (it drafts p+1..p+K),
    or None where no chain is counted (grey). Prompt tokens (the first ``n_prompt_tokens``) are
    shown in italics. Hover a token for its numbers.
    """
    if len(tokens) != len(accepted):
        raise WorkbenchError(f"tokens_html: {len(tokens)} tokens but {len(accepted)} accepted counts")
    spans = []
    for p, (tok, a) in enumerate(zip(tokens, accepted)):
        style = "padding:0 1px;margin:0;border-radius:2px;"
        if a is None or a < 0:
            style += "background:#eeeeee;color:#777;"
            tip = f"position {p}: no counted chain starts here"
        else:
            style += f"background:{_shade(int(a), K)};"
            tip = f"position {p}: {int(a)} of {K} draft tokens accepted after this token"
        if p < n_prompt_tokens:
            style += "font-style:italic;"
            tip += " (prompt)"
        spans.append(f'<span class="wb-tok" style="{style}" title="{html.escape(tip)}">{_visible(tok)}</span>')
    legend = " ".join(f'<span style="background:{_shade(a, K)};padding:0 4px">{a}</span>' for a in range(K + 1))
    head = f"<b>{html.escape(title)}</b><br>" if title else ""
    return TokenHTML(f'<div style="font-family:monospace;font-size:13px;line-height:1.7;white-space:normal">'
                     f"{head}<div>accepted after the token (of K={K}): {legend} "
                     f'<span style="background:#eeeeee;padding:0 4px">no chain</span> · <i>italic</i> = prompt</div>'
                     f'<div style="margin-top:4px">{"".join(spans)}</div></div>')


def sample_accepted(result, sample: int, length: int) -> list[int | None]:
    """Per token p of dataset row ``sample``: accepted count of the chain whose bonus token is p."""
    c = result.chains
    sel = c["sample"] == int(sample)
    if not sel.any():
        known = np.unique(c["sample"])[:10].tolist()
        raise WorkbenchError(f"sample {sample} has no counted chains in wiring {result.spec!r} "
                             f"(samples with chains include {known})")
    out: list[int | None] = [None] * int(length)
    for t, a in zip(c["t"][sel].tolist(), c["accepted"][sel].tolist()):
        if 0 <= t + 1 < length:
            out[t + 1] = int(a)
    return out


def sample_tokens_html(result, row: dict, tokenizer, *, K: int | None = None) -> TokenHTML:
    """One dataset row's tokens coloured by accepted count under ``result``'s wiring.

    ``row``: a dataset row dict (``input_ids``, ``_row``, ``n_prompt_tokens``); ``K`` caps the
    depth shown (a chain that accepted A of K accepts min(A, K') of K').
    """
    ids = list(row["input_ids"])
    K = int(result.steps if K is None else K)
    acc = sample_accepted(result, row.get("_row", 0), len(ids))
    acc = [None if a is None else min(a, K) for a in acc]
    toks = [tokenizer.decode([i]) for i in ids]
    return tokens_html(toks, acc, K=K, n_prompt_tokens=int(row.get("n_prompt_tokens", 0)),
                       title=f"row {row.get('_row', '?')} · wiring {result.spec} · K={K}")


# ------------------------------------------------------------------------------ data

def rewire_bars(result, *, title: str | None = None):
    """Accept length (decode path: E[A]+1 over the chains a server verifies) before / after a rewire and the
    reference, 95% bootstrap bars; the title's recovered share is on the same numbers.

        >>> # fig = plots.rewire_bars(workbench.rewire.rewire(target, draft, "train.jsonl", engine="sglang",
        >>> #                                                 eval_data="val.jsonl"))

    ``result`` is a :class:`workbench.rewire.RewireResult` evaluated on held-out data: "before" is the
    old draft fed the served taps B, "after" the rewired draft fed B (and "closed form" the ridge
    refit alone, when it was also fine-tuned), "reference" the old draft fed the taps A it was
    trained on. The gap the rewire should close is the dashed line at the reference.
    """
    parts = [(name, getattr(result, attr, None)) for name, attr in
             (("before", "before"), ("closed form", "after_closed_form"), ("after", "after"),
              ("reference", "reference"))]
    if not hasattr(result, "to_taps") or any(getattr(result, a, None) is None for a in ("before", "after", "reference")):
        raise WorkbenchError(f"rewire_bars: expected a RewireResult evaluated on held-out data (rewire(..., "
                             f"eval_data=...)), got {type(result).__name__} without before/after/reference")
    parts = [(n, r) for n, r in parts if r is not None]
    A, B = ",".join(result.from_taps), ",".join(result.to_taps)
    feeds = {"before": f"trained on {A}\nfed {B}", "closed form": f"ridge refit only\nfed {B}",
             "after": f"rewired\nfed {B}", "reference": f"trained on {A}\nfed {A}"}
    colors = {"before": "#e45756", "closed form": "#f2cf5b", "after": "#54a24b", "reference": "#4c78a8"}
    fig, (ax,) = _figure(1, height=3.6, width=WIDTH * 0.7)
    vals = [r.decode_path["accept_length"] for _, r in parts]      # the decode path: what a server reports
    ivs = [r.intervals()["decode_path_accept_length"] for _, r in parts]
    x = np.arange(len(parts))
    ax.bar(x, vals, 0.6, yerr=_errs(vals, ivs), capsize=4, color=[colors[n] for n, _ in parts])
    for xi, v in enumerate(vals):
        if v is not None and not math.isnan(v):
            ax.annotate(f"{v:.3f}", (xi, v), ha="left", va="bottom", fontsize="small", xytext=(8, 2),
                        textcoords="offset points")               # beside the error bar, not on it
    ax.axhline(result.reference.decode_path["accept_length"], color="#4c78a8", linestyle="--", linewidth=1)
    ax.set_xticks(x, [f"{n}\n{feeds[n]}" for n, _ in parts], fontsize="small")
    ax.set_xlabel(f"draft (K={result.K}, chain, greedy, held-out data)")
    ax.set_ylabel(_wrap(result.setting.accept_label("decode-path"), 34))
    ax.set_ylim(0, int(result.K) + 1.3)
    rec = result.recovered
    ax.set_title(_wrap(title or (f"Rewire {A} → {B}: recovered {rec:.1%} of the accept-length gap"   # = rewire.summary()
                                 if not math.isnan(rec) else f"Rewire {A} → {B}: no gap to recover"), 64))
    ax.grid(axis="y", alpha=0.3)
    return fig


def lengths_by_source(rows: list[dict], *, title: str | None = None):
    """Prompt and response lengths (tokens) per data source, from dataset rows: one dot a row (a strip per source),
    the median marked. No bins: a length is read off the axis where its dot sits, whatever the other sources hold."""
    if not rows:
        raise WorkbenchError("lengths_by_source: no rows to plot (empty dataset or every row invalid)")
    sources = sorted({str(r.get("source", "")) for r in rows})
    fig, axes = _figure(2, height=max(2.6, 0.55 * len(sources) + 1.6))
    for ax, key, what in ((axes[0], "n_prompt_tokens", "prompt"), (axes[1], "n_response_tokens", "response")):
        names = []
        for i, (s, color) in enumerate(zip(sources, _colors(len(sources)))):
            d = np.asarray([int(r[key]) for r in rows if str(r.get("source", "")) == s], float)
            jitter = (np.arange(len(d)) % 7 - 3) * 0.05
            ax.scatter(d, np.full(len(d), i) + jitter, s=12, alpha=0.6, color=color)
            med = float(np.median(d)) if len(d) else 0.0
            ax.plot([med, med], [i - 0.32, i + 0.32], color="black", lw=2)
            names.append(f"{s or '(no source)'}\n{len(d)} rows, median {med:g}")
        from matplotlib.ticker import MaxNLocator

        hi = max((int(r[key]) for r in rows), default=1)
        ax.set_xlim(0, hi * 1.08 + 1)                   # from zero: a length reads as a length, not an offset
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_yticks(range(len(sources)), names)
        ax.set_ylim(len(sources) - 0.5, -0.5)
        ax.set_xlabel(f"{what} length (tokens; bar: the median)")
        ax.set_ylabel("source")
        ax.set_title(f"{what.capitalize()} lengths by source")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title or f"Lengths by source ({len(rows)} valid rows)")
    return fig


def agreement_by_sample(agreement, *, others: dict | None = None, title: str | None = None):
    """Per-sample greedy agreement (share of response tokens equal to the target's argmax) by source,
    with the 0.98 line below which the workbench warns (:class:`workbench.agreement.Agreement`).

    ``others``: more ``{label: Agreement}`` drawn beside it (e.g. foreign data and its regenerated copy).
    """

    groups = {}
    for label, a in {"": agreement, **(others or {})}.items():
        if a is None or not a.n_samples:
            continue
        ps = a.per_sample
        for s in sorted(set(a.sources)):
            sel = np.asarray(a.sources) == s
            vals = ps[sel][np.isfinite(ps[sel])]
            if len(vals):
                groups[f"{label} · {s or '(no source)'}" if label else (s or "(no source)")] = vals
    if not groups:
        raise WorkbenchError("agreement_by_sample: no sample with response tokens to plot")
    fig, (ax,) = _figure(1, height=max(2.8, 0.45 * len(groups) + 1.8))
    names = list(groups)
    good, bad = "#2ca02c", "#d62728"         # the colour says what a dot means: at or above the line, or below it
    for i, name in enumerate(names):
        v = groups[name]
        jitter = (np.arange(len(v)) % 7 - 3) * 0.04
        ok = v >= THRESHOLD
        for sel, color in ((ok, good), (~ok, bad)):
            if sel.any():
                ax.scatter(v[sel], (np.full(len(v), i) + jitter)[sel], s=14, alpha=0.7, color=color)
        ax.plot([np.mean(v)] * 2, [i - 0.3, i + 0.3], color="black", lw=2)
    ax.axvline(THRESHOLD, color="grey", ls="--", lw=1)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=good, label=f"a sample at or above {THRESHOLD:g}: the target's "
                                                                     "own greedy output"),
               Line2D([], [], ls="", marker="o", color=bad, label=f"a sample below {THRESHOLD:g} (dashed line): not "
                                                                    "the target's greedy output"),
               Line2D([], [], color="black", lw=2, label="the source's mean")]
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("greedy agreement per sample")
    ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=handles, fontsize="small", loc="outside lower center", ncols=1, frameon=False)
    ax.set_title(title or "Greedy agreement of the data with the target, per sample and source")
    return fig


# ------------------------------------------------------------------------------ live vs offline

def live_comparison(cmp):
    """Per-sample live accept length against the offline decode path under each wiring
    (a :class:`~workbench.sglang_live.Comparison`)."""
    fig, (ax,) = _figure(1, height=3.8, width=max(6, 0.45 * len(cmp.samples) + 3))
    xs = list(range(len(cmp.samples)))
    live = [s.meta.accept_length if s.meta.accept_length is not None else math.nan for s in cmp.samples]
    ax.plot(xs, live, "ko", markersize=9, markerfacecolor="none", markeredgewidth=1.5, linestyle="none",
            label=f"live ({cmp.live_accept_length:.2f})", zorder=3)    # open circles: a line under them shows
    for c in cmp.candidates:
        ys = [cmp.offline_accept_length(c.spec, i) for i in range(len(cmp.samples))]
        tag = " trained" if c.trained else ""
        ax.plot(xs, ys, "--", marker=".", alpha=0.8, lw=1.2,
                label=f"offline {c.spec}{tag} ({cmp.offline_accept_length(c.spec):.2f})")
    ax.set_xticks(xs, [str(s.row) for s in cmp.samples], fontsize=7)
    ax.set_xlabel("sample (dataset row)")
    ax.set_ylabel("accept length (mean A + 1)")
    ax.set_ylim(0.9, cmp.K + 1.1)
    ax.set_title(f"live vs offline, K={cmp.K}: {cmp.headline}", wrap=True)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the axes: never clipped
    ax.grid(alpha=0.3)
    return fig


def live_histograms(cmp):
    """Share of verify steps that accepted exactly a drafts, a = 0..K: live against each wiring."""
    fig, (ax,) = _figure(1, height=3.4, width=6.5)
    series = []
    if cmp.live_histogram is not None:
        series.append(("live", cmp.live_histogram))
    series += [(f"offline {c.spec}" + (" (trained)" if c.trained else ""),
                [int(x) for x in cmp.offline[c.spec].decode_path["histogram"]]) for c in cmp.candidates]
    width = 0.8 / max(1, len(series))
    xs = np.arange(cmp.K + 1)
    for i, (name, h) in enumerate(series):
        h = np.asarray(list(h)[:cmp.K + 1] + [0] * max(0, cmp.K + 1 - len(h)), float)
        ax.bar(xs + (i - (len(series) - 1) / 2) * width, h / h.sum() if h.sum() else h, width,
               label=name, color="black" if name == "live" else None)
    ax.set_xticks(xs)
    ax.set_xlabel("drafts accepted in a verify step (A)")
    ax.set_ylabel("share of verify steps")
    ax.set_title("accept histogram" + ("" if cmp.live_histogram is not None else
                                       " (the server reports no histogram: offline only)"))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


STATUS_COLORS = {"identical": "#2ca02c", "tie": "#f2c744", "differs": "#d62728", "n/a": "#cccccc"}


def live_requests(cmp):
    """Per request (columns) and wiring (rows): does that wiring reproduce the server's fingerprint?
    Green identical, yellow a near-tie, red differs, grey no per-request fields
    (a :class:`~workbench.sglang_live.Comparison`)."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    st = cmp.statuses()
    order = [d["wiring"] for d in cmp.ranking()] if st else [c.spec for c in cmp.candidates]
    codes = list(STATUS_COLORS)
    grid = np.array([[codes.index(x) for x in st[w]] if st else [codes.index("n/a")] * len(cmp.samples)
                     for w in order], float).reshape(len(order), len(cmp.samples))
    fig, (ax,) = _figure(1, height=1.2 + 0.35 * len(order), width=max(6, 0.35 * len(cmp.samples) + 3.5))
    ax.imshow(grid, cmap=ListedColormap(list(STATUS_COLORS.values())), vmin=-0.5, vmax=len(codes) - 0.5,
              aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(order)), [w + (" (trained)" if w == cmp.trained else "") for w in order], fontsize=7)
    ax.set_xticks(range(len(cmp.samples)), [str(s.row) for s in cmp.samples], fontsize=7)
    ax.set_xlabel("request (dataset row)")
    ax.set_title(f"which wiring reproduces each request ({cmp.mode}): {cmp.headline}", wrap=True)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in STATUS_COLORS.items()], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig



# ------------------------------------------------------------------------------ temperature > 0

def _sweep_rows(sweep) -> list[dict]:
    if not (hasattr(sweep, "rows") and hasattr(sweep, "per_depth") and hasattr(sweep, "results")):
        raise WorkbenchError(f"expected a workbench.temperature.TemperatureSweep, got {type(sweep).__name__}")
    rows = sweep.rows()
    if not rows:
        raise WorkbenchError("nothing to plot: the temperature sweep has no results")
    return rows


def accept_vs_temperature(sweep, *, title: str | None = None):
    """Accept length (E[A]+1) against temperature: the decode path (counts) and the per-depth
    (Rao–Blackwellised) estimate of the same number, 95% bootstrap bars over samples.

        >>> # fig = plots.accept_vs_temperature(temperature.by_temperature(tgt, drf, files, "L1,L3,L4", setting))
    """
    rows = _sweep_rows(sweep)
    fig, (ax,) = _figure(1, height=3.6)
    T = np.asarray([r["temperature"] for r in rows], float)
    off = 0.006 * (T.max() - T.min() or 1.0)
    for key, iv, color, dx, name in (
            ("decode-path accept length", "decode-path 95%", "#f58518", -off, "decode path (counts: what a server verifies)"),
            ("per-depth accept length", "per-depth 95%", "#4c78a8", off, "per depth (Rao–Blackwellised; = counts at T = 0)")):
        v = np.asarray([r[key] for r in rows], float)
        ax.errorbar(T + dx, v, yerr=_errs(v, [r[iv] for r in rows]), marker="o", capsize=4, color=color, label=name)
    tops = []
    for t, r in zip(T, rows):
        v = r["decode-path accept length"]
        # the value sits above both series' markers and error bars at this T, never on them (issue 35)
        top = max([x for x in (v, r["per-depth accept length"], *(r["decode-path 95%"] or ()),
                               *(r["per-depth 95%"] or ())) if x is not None and not math.isnan(x)] or [math.nan])
        tops.append(top)
        if not math.isnan(v):
            ax.annotate(f"{v:.3f}", (t, top), ha="center", va="bottom", fontsize="small", xytext=(0, 5),
                        textcoords="offset points")
    ax.set_xticks(T, [f"{t:g}" for t in T])
    ax.set_xlabel("temperature T (each point on data sampled from the target at T; T = 0: greedy)")
    ax.set_ylabel("accept length E[A]+1 (tokens / verify step)")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(1.0, lo), max(hi, np.nanmax(tops) + 0.15 * (np.nanmax(tops) - min(1.0, lo)) if tops else hi))
    ax.set_title(title or f"Accept length against temperature · {sweep.wiring} · {sweep.setting.label} "
                          f"(95% bootstrap over samples)")
    _grid_and_legend(ax)
    return fig


def per_depth_compare(sweep, *, title: str | None = None):
    """P(A≥k) per draft depth k, greedy against each sampled temperature: counts with Wilson bands at
    T = 0, the Rao–Blackwellised estimate with bootstrap bands at T > 0 (every counted start).

        >>> # fig = plots.per_depth_compare(sweep)      # sweep: a workbench.temperature.TemperatureSweep
    """
    _sweep_rows(sweep)
    curves = sweep.per_depth()
    fig, (ax,) = _figure(1, height=3.6)
    import matplotlib

    cmap = matplotlib.colormaps["coolwarm"]
    tmax = max(curves) or 1.0
    kmax = 1
    for t, (cum, lo, hi) in curves.items():
        k = np.arange(1, len(cum) + 1)
        kmax = max(kmax, len(cum))
        color = "black" if t == 0 else cmap(0.55 + 0.45 * t / tmax)
        how = "greedy, counts" if t == 0 else "sampled, per depth (Rao–Blackwellised)"
        ax.plot(k, cum, marker="o", color=color, label=f"T = {t:g} ({how})")
        ax.fill_between(k, lo, hi, color=color, alpha=0.15, linewidth=0)
    ax.set_xticks(range(1, kmax + 1))
    ax.set_xlabel("draft depth k (tokens after the bonus token)")
    ax.set_ylabel("P(A≥k)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title or f"Per-depth acceptance, greedy vs sampled · {sweep.wiring} · {sweep.setting.label} "
                          f"(bands: 95%)")
    _grid_and_legend(ax)
    return fig
