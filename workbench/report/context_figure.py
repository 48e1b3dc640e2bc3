"""The figure of accept length by position in the context (:mod:`workbench.stats.context_length`), no pyplot.

    >>> from workbench.stats.statistics import AcceptanceResult
    >>> from workbench.stats.context_length import by_position
    >>> r = AcceptanceResult.from_arrays("L1,L2,L3", K=2, sample=[0, 0, 1, 1], t=[0, 70, 3, 90], accepted=[2, 0, 1, 1])
    >>> fig = position_figure(by_position(r, width=64, n_boot=50))
    >>> [ax.get_xlabel() for ax in fig.axes][0]
    "chain start t (the draft's first rotary position)"

Left: accept length (E[A]+1, bonus counted) per bin of chain starts, 95% bootstrap bars over samples; a dashed line
at the draft's ``max_position_embeddings`` when given. Right: the chains behind each bin (one line when every table
counts the same rows, e.g. two drafts on one data set). Docs: docs/context-length.md.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.report.figure import new_figure, wrap


def _tables(tables) -> dict:
    if hasattr(tables, "rows") and hasattr(tables, "width"):
        return {tables.spec: tables}
    out = dict(tables) if isinstance(tables, dict) else {t.spec: t for t in tables}
    if not out:
        raise WorkbenchError("nothing to plot: no position tables given")
    for label, t in out.items():
        if not (hasattr(t, "rows") and hasattr(t, "width")):
            raise WorkbenchError(f"table {label!r} is a {type(t).__name__}, expected a PositionTable "
                                 "(workbench.stats.context_length.by_position)")
    return out


def position_figure(tables, *, title: str | None = None, max_positions: int | None = None):
    """Accept length against the chain start ``t``: ``tables`` is one :class:`PositionTable`, a list, or a
    ``{label: PositionTable}`` dict; ``max_positions``: the draft's ``max_position_embeddings`` (a dashed line)."""
    import matplotlib

    tables = _tables(tables)
    fig, (ax, ax_n) = new_figure(2, height=4.2)
    colors = [matplotlib.colormaps["tab10"](i % 10) for i in range(len(tables))]
    counts = {label: [(r["start"], r["n_chains"]) for r in t.rows] for label, t in tables.items()}
    same = len({tuple(c) for c in counts.values()}) == 1
    for i, ((label, t), color) in enumerate(zip(tables.items(), colors)):
        if not t.rows:
            continue
        x = np.array([(r["start"] + r["end"] - 1) / 2 for r in t.rows])
        y = np.array([r["accept_length"] for r in t.rows])
        lo = np.array([r["low"] for r in t.rows], float)
        hi = np.array([r["high"] for r in t.rows], float)
        err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])
        err = np.nan_to_num(err)
        n = sum(r["n_chains"] for r in t.rows)
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=color, label=f"{label}  ({n} chains)")
        if not same:
            ax_n.plot(x, [r["n_chains"] for r in t.rows], marker=".", color=color, lw=max(2.5 - 0.5 * i, 0.8))
    if same:
        first = next(iter(tables.values()))
        if first.rows:
            ax_n.plot([(r["start"] + r["end"] - 1) / 2 for r in first.rows], [r["n_chains"] for r in first.rows],
                      marker=".", color="grey")
    ends = [r["end"] for t in tables.values() for r in t.rows]
    if max_positions is not None and ends and max_positions > 1.25 * max(ends):
        from matplotlib.lines import Line2D

        ax.add_line(Line2D([], [], linestyle="none", label=f"the draft's max_position_embeddings ({max_positions}) "
                                                            f"lies past the longest row (t < {max(ends)})"))
    elif max_positions is not None:
        ax.axvline(max_positions, color="grey", linestyle="--", linewidth=1,
                   label=f"the draft's max_position_embeddings ({max_positions})")
    widths = {t.width for t in tables.values()}
    labels = {t.label for t in tables.values()}
    ax.set_xlabel("chain start t (the draft's first rotary position)")
    ax.set_ylabel("accept length (E[A]+1)")
    ax.set_title("Accept length by position in the context")
    ax_n.set_xlabel("chain start t")
    ax_n.set_ylabel("counted chains per bin")
    ax_n.set_title("Chains behind each bin" + (" (every draft)" if same and len(tables) > 1 else ""))
    for a in (ax, ax_n):
        a.grid(alpha=0.3)
        a.set_xlim(left=0)
    ax_n.set_ylim(bottom=0)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize="small", ncols=1)
    width = widths.pop() if len(widths) == 1 else None
    label = labels.pop() if len(labels) == 1 else "accept length (settings differ)"
    fig.suptitle(wrap(title or (f"{label[0].upper()}{label[1:]} against chain start"
                                + (f", bins of {width} tokens" if width else "")
                                + "; bars: 95% bootstrap over samples"), 100))
    return fig


__all__ = ["position_figure"]
