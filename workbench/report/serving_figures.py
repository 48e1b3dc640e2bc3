"""Figures of what a serving engine measured: its captured features against HF's, and its tokens/s.

    >>> from workbench.report.serving_figures import speed_sweep
    >>> st = {"rows": [{"draft": "d", "k": k, "measured_tokens_per_s": t, "measured_spread": {"min": t - 1, "max": t + 1},
    ...                 "baseline_tokens_per_s": 40.0, "predicted_tokens_per_s": t + 0.5, "served_wiring": "L0,L13,L25"}
    ...                for k, t in ((1, 36.0), (2, 31.0))]}
    >>> [ax.get_title() for ax in speed_sweep(st).axes]
    ['d as served (L0,L13,L25)']

Re-exported by :mod:`workbench.report.plots` (``wb.plots.engine_fidelity``, ``wb.plots.speed_sweep``): drawing has
one face. Inputs are the JSON results of ``workbench vllm capture --fidelity`` and ``workbench vllm speed --json``.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.report.figure import new_figure, wrap


def engine_fidelity(fid, *, title: str | None = None):
    """Features a serving engine captured against HF's hooks: per tap (left, log scale) and as accept lengths
    (right). ``fid``: a :class:`workbench.live.engine_fidelity.Fidelity` (``workbench vllm capture --fidelity``).

        >>> # fig = plots.engine_fidelity(wb.fidelity.find("data/demo-real/engine-fidelity.json"))

    The dotted lines are float32's and bfloat16's rounding steps (2^-23, 2^-8): a gap at the first is the
    kernels' summation order (vLLM fuses the residual add into its RMSNorm), not a wiring or dtype defect.
    """
    taps = list(fid.taps)
    if not taps or not fid.accept:
        raise WorkbenchError("engine_fidelity: the fidelity result has no taps or no accept lengths")
    floor = 1e-10
    fig, (ax, bx) = new_figure(2, height=3.8)
    x = np.arange(len(taps))
    for off, key, label, color in ((-0.2, "max_rel", "max |diff| / max |HF|", "#4c78a8"),
                                   (0.2, "token_rel_median", "per token ‖diff‖/‖HF‖ (median)", "#f58518")):
        vals = [max(fid.taps[t][key], floor) for t in taps]
        ax.bar(x + off, vals, 0.4, color=color, label=label)
    for xi, t in zip(x, taps):
        if fid.taps[t]["max_rel"] == 0:
            ax.annotate("bit-equal", (xi, floor), ha="center", va="bottom", fontsize="x-small", xytext=(0, 3),
                        textcoords="offset points")
    ax.set_yscale("log")
    ax.axhline(2.0 ** -23, color="grey", linestyle=":", linewidth=1, label="float32 rounding (1.2e-07)")
    ax.axhline(2.0 ** -8, color="black", linestyle=":", linewidth=1, label="bfloat16 rounding (3.9e-03)")
    ax.set_ylim(floor, 1.0)
    ax.set_yticks([10.0 ** e for e in range(-10, 1, 2)])
    ax.minorticks_off()
    ax.set_xticks(x, taps, fontsize="small")
    ax.set_ylabel("relative difference (0 drawn at 1e-10)")
    ax.set_xlabel("tap")
    ax.set_title("Engine features against HF, per tap")
    ax.legend(fontsize="x-small", loc="upper left", ncol=2)
    ax.grid(axis="y", alpha=0.3)
    ws = list(fid.accept)
    xw = np.arange(len(ws))
    for off, key, label, color in ((-0.2, "engine", "engine features", "#54a24b"), (0.2, "hf", "HF features", "#9d9d9d")):
        vals = [fid.accept[w][key] for w in ws]
        bx.bar(xw + off, vals, 0.4, color=color, label=label)
        for xi, v in zip(xw + off, vals):
            bx.annotate(f"{v:.3f}", (xi, v), ha="center", va="bottom", fontsize="x-small", xytext=(0, 2),
                        textcoords="offset points")
    bx.set_xticks(xw, ws, fontsize="small")
    bx.set_ylim(0, fid.K + 1.5)
    bx.set_ylabel("accept length E[A]+1")
    bx.set_xlabel(f"wiring (decode path, chain K={fid.K}, greedy, {fid.rows} rows)")
    bx.set_title("Accept length from each")
    bx.legend(fontsize="x-small", loc="upper right", ncol=2)
    bx.grid(axis="y", alpha=0.3)
    e, n = fid.tokens["equal"], fid.tokens["total"]
    fig.suptitle(wrap(title or f"{fid.source} ({fid.dtype}) against HF hooks: worst tap {fid.worst:.1e}, greedy "
                       f"tokens equal at {e}/{n} positions, accept lengths differ by at most {fid.accept_gap:.3f}"))
    return fig


def speed_sweep(state: dict, *, title: str | None = None):
    """Tokens/s by K on a real server, one panel per draft: measured (median, bars: the passes' range), no
    speculation measured beside each K, and the predictions from the server's own step costs (served wiring, and
    trained wiring where known and not the served one) and from the in-process cost model. ``state``: ``workbench vllm speed --json``."""
    rows = state.get("rows") or []
    if not rows:
        raise WorkbenchError("speed_sweep: the sweep has no measured rows (run `workbench vllm speed --json OUT`)")
    drafts = list(dict.fromkeys(r["draft"] for r in rows))
    fig, axes = new_figure(len(drafts), height=4.0)
    top = max(max(r["measured_spread"]["max"], r["baseline_tokens_per_s"], r.get("predicted_tokens_per_s") or 0,
                  r.get("predicted_tokens_per_s_trained") or 0, r.get("predicted_tokens_per_s_in_process") or 0)
              for r in rows)
    for ax, name in zip(axes, drafts):
        rs = sorted((r for r in rows if r["draft"] == name), key=lambda r: r["k"])
        ks = [r["k"] for r in rs]
        med = np.array([r["measured_tokens_per_s"] for r in rs], float)
        lo = med - np.array([r["measured_spread"]["min"] for r in rs], float)
        hi = np.array([r["measured_spread"]["max"] for r in rs], float) - med
        ax.errorbar(ks, med, yerr=[lo, hi], color="#e45756", marker="o", capsize=4, label="measured, as served")
        ax.plot(ks, [r["baseline_tokens_per_s"] for r in rs], color="black", marker="s", linestyle="-", linewidth=1,
                label="no speculation (measured beside it)")
        for key, label, style, color in (("predicted_tokens_per_s", "predicted: server's step cost", "--", "#4c78a8"),
                                         ("predicted_tokens_per_s_trained", "predicted, trained wiring", "-.", "#54a24b"),
                                         ("predicted_tokens_per_s_in_process", "predicted: in-process model", ":",
                                          "#9d9d9d")):
            vals = [r.get(key) for r in rs]
            if key.endswith("_trained") and all(r.get("trained_wiring") == r.get("served_wiring") for r in rs):
                continue                     # served as trained: the same line as the served prediction
            if all(v is not None for v in vals):
                ax.plot(ks, vals, color=color, linestyle=style, marker="x", label=label)
        ax.set_xticks(ks)
        ax.set_xlabel("K (num_speculative_tokens)")
        ax.set_ylabel("tokens/s (one request at a time)")
        ax.set_ylim(0, top * 1.55)
        ax.set_title(f"{name} as served ({rs[0].get('served_wiring', '?')})")
        ax.legend(fontsize="x-small", loc="upper left", ncol=2)
        ax.grid(alpha=0.3)
    s = state.get("settings", {})
    fig.suptitle(wrap(title or (f"A real vLLM serving {s.get('target', '?')}: tokens/s with and without speculation "
                                f"({s.get('rows', '?')} prompts, "
                                f"{s.get('max_tokens', '?')} tokens each, greedy, median of {s.get('repeats', '?')} "
                                f"interleaved passes)")))
    return fig


def _best_by_c(preds, draft: str, context: str, wiring: str = "served"):
    """Per C, the cell of the K predicted best for ``draft`` on ``context``."""
    best = {}
    for p in preds:
        if p["draft"] == draft and p["context"] == context:
            c = p["concurrency"]
            if c not in best or p[wiring]["tokens_per_s"] > best[c][wiring]["tokens_per_s"]:
                best[c] = p
    return best


def load_figure(state: dict, *, context: str | None = None, title: str | None = None):
    """Aggregate tokens/s against concurrency, one panel per K: no speculation (measured), each draft as served
    (predicted from the twin's surface: lines; measured: dots with the passes' range) and, for a draft served with
    the wrong taps, its trained wiring predicted. ``state``: ``workbench vllm load --json``."""
    preds = state.get("predictions") or []
    if not preds:
        raise WorkbenchError("load_figure: the grid has no predictions (run `workbench vllm load --json OUT`)")
    context = context or next(iter(state.get("crossover", {}).values()), {}).get("context") or preds[0]["context"]
    ks = sorted({p["k"] for p in preds})
    drafts = list(dict.fromkeys(p["draft"] for p in preds))
    fig, axes = new_figure(len(ks), height=4.2)
    colors = ["#e45756", "#4c78a8", "#f58518", "#72b7b2"]
    for ax, k in zip(axes, ks):
        mine = [p for p in preds if p["k"] == k and p["context"] == context]
        cs = sorted({p["concurrency"] for p in mine})
        base = {}
        for p in mine:
            base[p["concurrency"]] = (p.get("measured") or {}).get("baseline_tokens_per_s", p["baseline_tokens_per_s"])
        ax.plot(cs, [base[c] for c in cs], color="black", marker="s", linewidth=1, label="no speculation (measured)")
        for i, d in enumerate(drafts):
            rs = sorted((p for p in mine if p["draft"] == d), key=lambda p: p["concurrency"])
            if not rs:
                continue
            col = colors[i % len(colors)]
            ax.plot([p["concurrency"] for p in rs], [p.get("predicted_tokens_per_s", p["served"]["tokens_per_s"])
                                                     for p in rs], color=col, linestyle="--",
                    label=f"{d}: predicted from the twin's surface")
            if rs[0].get("served_wiring") != rs[0].get("trained_wiring") and \
                    rs[0]["served_accept_length"] != rs[0]["trained_accept_length"]:
                ax.plot([p["concurrency"] for p in rs], [p["trained"]["tokens_per_s"] for p in rs], color=col,
                        linestyle=":", label=f"{d}: predicted, trained wiring")
            m = [p for p in rs if "measured" in p]
            if m:
                med = np.array([p["measured"]["measured_tokens_per_s"] for p in m], float)
                lo = med - np.array([p["measured"]["measured_spread"]["min"] for p in m], float)
                hi = np.array([p["measured"]["measured_spread"]["max"] for p in m], float) - med
                ax.errorbar([p["concurrency"] for p in m], med, yerr=[lo, hi], color=col, marker="o", linestyle="none",
                            capsize=3, label=f"{d}: measured (median, range of passes)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(cs)
        ax.set_xticklabels([str(c) for c in cs])
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("tokens/s, all requests together")
        ax.set_title(f"K = {k} drafted tokens per step")
        ax.legend(fontsize="x-small", loc="upper left")
        ax.grid(alpha=0.3)
    s = state.get("settings", {})
    fig.suptitle(wrap(title or (f"Tokens/s against load on a real vLLM ({context} prompts, "
                                f"{s.get('max_tokens', '?')} tokens each, greedy; median of {s.get('repeats', '?')} "
                                f"interleaved passes)")))
    return fig


def context_figure(state: dict, *, concurrency: int = 1, title: str | None = None):
    """Tokens/s against prompt length at one concurrency, one panel per K (None when the grid has one context)."""
    preds = [p for p in state.get("predictions") or [] if p["concurrency"] == concurrency]
    if len({p["context"] for p in preds}) < 2:
        return None
    ks = sorted({p["k"] for p in preds})
    drafts = list(dict.fromkeys(p["draft"] for p in preds))
    fig, axes = new_figure(len(ks), height=4.2)
    colors = ["#e45756", "#4c78a8", "#f58518", "#72b7b2"]
    for ax, k in zip(axes, ks):
        mine = sorted((p for p in preds if p["k"] == k), key=lambda p: p["prompt_tokens"])
        xs = sorted({p["prompt_tokens"] for p in mine})
        base = {p["prompt_tokens"]: (p.get("measured") or {}).get("baseline_tokens_per_s", p["baseline_tokens_per_s"])
                for p in mine}
        ax.plot(xs, [base[x] for x in xs], color="black", marker="s", linewidth=1, label="no speculation (measured)")
        for i, d in enumerate(drafts):
            rs = [p for p in mine if p["draft"] == d]
            col = colors[i % len(colors)]
            ax.plot([p["prompt_tokens"] for p in rs], [p.get("predicted_tokens_per_s", p["served"]["tokens_per_s"])
                                                       for p in rs], color=col, linestyle="--",
                    label=f"{d}: predicted")
            m = [p for p in rs if "measured" in p]
            if m:
                med = np.array([p["measured"]["measured_tokens_per_s"] for p in m], float)
                lo = med - np.array([p["measured"]["measured_spread"]["min"] for p in m], float)
                hi = np.array([p["measured"]["measured_spread"]["max"] for p in m], float) - med
                ax.errorbar([p["prompt_tokens"] for p in m], med, yerr=[lo, hi], color=col, marker="o",
                            linestyle="none", capsize=3, label=f"{d}: measured")
        ax.set_xlabel("prompt length (tokens, median of the bucket)")
        ax.set_ylabel(f"tokens/s at concurrency {concurrency}")
        ax.set_title(f"K = {k} drafted tokens per step")
        ax.legend(fontsize="x-small", loc="upper right")
        ax.grid(alpha=0.3)
    fig.suptitle(wrap(title or f"Tokens/s against prompt length on a real vLLM, {concurrency} request(s) in flight"))
    return fig


__all__ = ["engine_fidelity", "speed_sweep", "load_figure", "context_figure"]
