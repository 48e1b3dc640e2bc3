"""A figure layout check from matplotlib's own extents: nothing clipped, no legend over data, no axes overlap.

    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(4, 3), layout="constrained")
    >>> ax = fig.subplots()
    >>> _ = ax.plot([0, 1, 2], [0, 1, 0], marker="o", label="a line")
    >>> _ = ax.legend(loc="lower center")
    >>> layout_problems(fig)
    []
    >>> _ = ax.plot([1], [0.5], marker="o")
    >>> _ = ax.legend(loc="center")                       # over the point (1, 0.5)
    >>> [p.split(":")[0] for p in layout_problems(fig)]
    ['legend covers data']

:func:`layout_problems` draws the figure once (``canvas.draw()``) and reads the display-space extents
(``get_window_extent``) of every visible text, legend, axes and plotted element:

- **clipped text**: a title, label, tick label, legend or annotation reaching outside the figure. Outside
  the figure is cut by ``savefig`` (``plots.save``); the inline backend saves with ``bbox_inches="tight"``,
  and the figure's own box is the stricter of the two.
- **overlapping text**: two texts of the frame (titles, axis labels, tick labels, a colour bar's label,
  legends) covering each other, e.g. a two-line title over a y-label, a legend over another axes' labels.
- **legend covers data**: a legend's box holds a plotted point (a line's vertices in data coordinates), a
  bar, or an error bar's end.
- **axes overlap**: two axes (colour bars included) share display area.
- **text over text**: a label in the data area (a value over a bar, an ``n=``) over another such label, over a
  frame text, or under a legend.
- **marker over label**: a line's marker (a ★, a dot) or an error bar inside a label's box in the data area.
- **hidden artist**: a line drawn exactly under another line at least as wide, or a bar with the same extent as
  another series' bar: the reader sees one where there are two (issue 35).
- **broken wiring**: a wiring (``L0,L6,L11``) or a list of ids (``[2, 8, 13]``) split across two lines of a text.
- **diagonal highlight**: a mark (a square, a dot) on a diagonal cell of a square heatmap whose rows and columns
  are the same names: that cell compares a thing with itself, so it is never the finding (issue 48).

Text cut at the figure's right edge is **clipped text**; text cut at the page's right edge is the browser test's
(``tests/test_browser.py``: no horizontal cut at 1400 and 800 px).

Notebooks run it on every figure they show when ``WORKBENCH_LAYOUT_CHECK`` names a file
(:func:`workbench.report.export.setup_notebook` installs the hook): one JSON line per figure shown, with
its problems, so a test reads what the kernel saw on the real figures.
"""

from __future__ import annotations

import json
import os
import re

ENV_CHECK = "WORKBENCH_LAYOUT_CHECK"
TOLERANCE = 1.0       # pixels: extents that touch are not an overlap


def _visible(a) -> bool:
    return a.get_visible() and (not hasattr(a, "get_text") or bool(a.get_text().strip()))


def _overlap(a, b, tol: float = TOLERANCE) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)


def _inside(inner, outer, tol: float = TOLERANCE) -> bool:
    return (inner.x0 >= outer.x0 - tol and inner.y0 >= outer.y0 - tol and inner.x1 <= outer.x1 + tol
            and inner.y1 <= outer.y1 + tol)


def _name(a) -> str:
    text = a.get_text() if hasattr(a, "get_text") else type(a).__name__
    return repr(text if len(text) <= 50 else text[:47] + "...")


def _frame_texts(fig) -> list[tuple[str, object]]:
    """(owner, text artist) of every frame text: suptitle, figure texts, titles, axis and tick labels."""
    out = []
    for t in dict.fromkeys(list(fig.texts) + [getattr(fig, "_suptitle", None), getattr(fig, "_supxlabel", None),
                                              getattr(fig, "_supylabel", None)]):
        if t is not None and _visible(t):
            out.append(("figure", t))
    for i, ax in enumerate(fig.axes):
        own = [ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None),
               ax.xaxis.label, ax.yaxis.label]
        for axis in (ax.xaxis, ax.yaxis):                     # only the ticks drawn (inside the view limits)
            lo, hi = sorted(axis.get_view_interval())
            own += [t for loc, t in zip(axis.get_ticklocs(), axis.get_ticklabels())
                    if lo - 1e-9 * max(1, abs(hi - lo)) <= loc <= hi + 1e-9 * max(1, abs(hi - lo))]
        out += [(f"axes {i}", t) for t in own if t is not None and _visible(t)]
    return out


def _data_points(ax, renderer):
    """Display coordinates of what an axes plots: line vertices, bars' corners and centres, error-bar ends."""
    import numpy as np
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Rectangle

    pts = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_transform() != ax.transData:   # axhline: axes-spanning guides
            continue
        xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy):
            pts.append(ax.transData.transform(xy))
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_height() and patch.get_width():
            b = patch.get_window_extent(renderer)
            pts.append(np.array([[b.x0, b.y1], [b.x1, b.y1], [(b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2]]))
    for coll in ax.collections:
        if isinstance(coll, LineCollection) and coll.get_visible():
            for seg in coll.get_segments():
                if len(seg):
                    pts.append(coll.get_transform().transform(np.asarray(seg, float)))
    return np.vstack(pts) if pts else np.empty((0, 2))


def _markers(ax):
    """Display coordinates of the markers of an axes' lines (a ★, dots) and of its error bars' segments."""
    import numpy as np
    from matplotlib.collections import LineCollection

    pts, segs = [], []
    for line in ax.get_lines():
        if line.get_visible() and line.get_marker() not in (None, "None", "", " ") and line.get_markersize() >= 4:
            xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
            xy = xy[np.isfinite(xy).all(axis=1)]
            if len(xy):
                pts.append(line.get_transform().transform(xy))
    for coll in ax.collections:
        if isinstance(coll, LineCollection) and coll.get_visible():
            segs += [coll.get_transform().transform(np.asarray(seg, float)) for seg in coll.get_segments() if len(seg)]
    return (np.vstack(pts) if pts else np.empty((0, 2))), segs


def _crosses(seg, b, tol: float = TOLERANCE) -> bool:
    """Whether a two-point segment (display coordinates) runs through box ``b`` (sampled along its length)."""
    import numpy as np

    t = np.linspace(0, 1, 25)[:, None]
    p = seg[0] + t * (seg[-1] - seg[0])
    return bool(((p[:, 0] > b.x0 + tol) & (p[:, 0] < b.x1 - tol) & (p[:, 1] > b.y0 + tol) & (p[:, 1] < b.y1 - tol)).any())


def _label_problems(fig, renderer, frame, annotations) -> list[str]:
    """Text over text, and markers or error bars over a label, for the labels in the data area."""
    out = []
    boxes = [(t, t.get_window_extent(renderer)) for t in annotations]
    for i, (a, ea) in enumerate(boxes):
        for b, eb in boxes[i + 1:]:
            if _overlap(ea, eb):
                out.append(f"text over text: {_name(a)} and {_name(b)}")
        for owner, f in frame:
            if _overlap(ea, f.get_window_extent(renderer)):
                what = "under the legend of" if hasattr(f, "get_texts") else f"over {_name(f)} of"
                out.append(f"text over text: {_name(a)} {what} {owner}")
    for ax in fig.axes:
        pts, segs = _markers(ax)
        for t, b in boxes:
            if t.axes is not ax:
                continue
            inside = pts[(pts[:, 0] > b.x0 + TOLERANCE) & (pts[:, 0] < b.x1 - TOLERANCE)
                         & (pts[:, 1] > b.y0 + TOLERANCE) & (pts[:, 1] < b.y1 - TOLERANCE)] if len(pts) else pts
            if len(inside):
                out.append(f"marker over label: a marker of axes {fig.axes.index(ax)} sits on {_name(t)}")
            if any(_crosses(seg, b) for seg in segs):
                out.append(f"marker over label: an error bar of axes {fig.axes.index(ax)} runs through {_name(t)}")
    return out


def _hidden(fig, renderer, tol: float = 1.5) -> list[str]:
    """Lines drawn exactly under a line at least as wide, and bars of two series with the same extent."""
    import numpy as np
    from matplotlib.patches import Rectangle

    out = []
    for ax in fig.axes:
        lines = [ln for ln in ax.get_lines() if ln.get_visible() and ln.get_linestyle() not in ("None", "", " ")]
        lines.sort(key=lambda ln: ln.get_zorder())           # later (and higher zorder) is drawn on top
        xy = [ln.get_transform().transform(np.column_stack([np.asarray(ln.get_xdata(), float),
                                                            np.asarray(ln.get_ydata(), float)])) for ln in lines]
        for i, low in enumerate(lines):
            for j in range(i + 1, len(lines)):
                top = lines[j]
                if (xy[i].shape == xy[j].shape and len(xy[i]) and np.allclose(xy[i], xy[j], atol=tol, equal_nan=True)
                        and top.get_linewidth() >= low.get_linewidth()
                        and (top.get_marker() == low.get_marker() or low.get_marker() in (None, "None", "", " "))):
                    out.append(f"hidden artist: the line {low.get_label()!r} of axes {fig.axes.index(ax)} is drawn "
                               f"exactly under {top.get_label()!r}")
                    break
        bars = [(p, p.get_window_extent(renderer)) for c in ax.containers for p in getattr(c, "patches", [])
                if isinstance(p, Rectangle) and p.get_visible() and p.get_height() and p.get_width()]
        series = {id(p): k for k, c in enumerate(ax.containers) for p in getattr(c, "patches", [])}
        seen = set()
        for i, (a, ea) in enumerate(bars):
            for b, eb in bars[i + 1:]:
                if series[id(a)] != series[id(b)] and (series[id(a)], series[id(b)]) not in seen and all(
                        abs(u - v) <= tol for u, v in zip(ea.bounds, eb.bounds)):
                    seen.add((series[id(a)], series[id(b)]))
                    out.append(f"hidden artist: bars of two series of axes {fig.axes.index(ax)} have the same extent "
                               f"(one hides the other)")
    return out


_TAP = r"(?:embed|final|L\d+)"
_BROKEN = re.compile(rf"{_TAP},[ \t]*\n[ \t]*{_TAP}|\[[\d, ]*\d,[ \t]*\n[ \t]*\d")


def _broken_wirings(texts) -> list[str]:
    """Texts in which a wiring or a list of ids runs across a line break."""
    return [f"broken wiring: {_name(t)} splits {m.group(0)!r} across lines" for t in texts
            if hasattr(t, "get_text") for m in [_BROKEN.search(t.get_text())] if m]


def _diagonal_marks(fig) -> list[str]:
    """Marks on the diagonal of a square heatmap whose row and column names are the same."""
    import numpy as np

    out = []
    for i, ax in enumerate(fig.axes):
        if not ax.images:
            continue
        shape = np.asarray(ax.images[0].get_array()).shape
        rows = [t.get_text() for t in ax.get_yticklabels()]
        cols = [t.get_text() for t in ax.get_xticklabels()]
        if len(shape) < 2 or shape[0] != shape[1] or not rows or rows != cols:
            continue
        pts = [c.get_offsets() for c in ax.collections if hasattr(c, "get_offsets") and len(c.get_offsets())]
        pts += [np.column_stack([ln.get_xdata(), ln.get_ydata()]) for ln in ax.get_lines()
                if ln.get_marker() not in (None, "None", "", " ")]
        xy = np.vstack([np.asarray(p, float) for p in pts]) if pts else np.empty((0, 2))
        on = xy[np.isclose(xy[:, 0], xy[:, 1], atol=0.25)] if len(xy) else xy
        if len(on):
            out.append(f"diagonal highlight: {len(on)} mark(s) of axes {i} on the heatmap's diagonal (a tap against "
                       f"itself)")
    return out


def layout_problems(fig) -> list[str]:
    """The layout problems of ``fig`` (module docstring), one line each; [] when it reads cleanly."""
    import numpy as np

    if not hasattr(fig.canvas, "get_renderer"):      # a Figure built without pyplot: the canvas savefig uses
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    box = fig.bbox
    texts = _frame_texts(fig)
    legends = [(f"axes {i}", ax.get_legend()) for i, ax in enumerate(fig.axes) if ax.get_legend() is not None]
    legends += [("figure", lg) for lg in fig.legends]
    annotations = [t for ax in fig.axes for t in ax.texts if _visible(t)]
    for owner, t in texts + [(o, lg) for o, lg in legends] + [("data", t) for t in annotations]:
        if not _inside(t.get_window_extent(renderer), box):
            problems.append(f"clipped text: {_name(t)} ({owner}) reaches outside the figure")
    frame = texts + legends
    for i, (o1, a) in enumerate(frame):
        ea = a.get_window_extent(renderer)
        for o2, b in frame[i + 1:]:
            if _overlap(ea, b.get_window_extent(renderer)):
                problems.append(f"overlapping text: {_name(a)} ({o1}) and {_name(b)} ({o2})")
    for owner, lg in legends:
        lb = lg.get_window_extent(renderer)
        for ax in fig.axes:
            p = _data_points(ax, renderer)
            hit = p[(p[:, 0] > lb.x0 + TOLERANCE) & (p[:, 0] < lb.x1 - TOLERANCE)
                    & (p[:, 1] > lb.y0 + TOLERANCE) & (p[:, 1] < lb.y1 - TOLERANCE)] if len(p) else p
            if len(hit):
                problems.append(f"legend covers data: the legend of {owner} holds {len(hit)} plotted point(s) "
                                f"of axes {fig.axes.index(ax)}")
    problems += _label_problems(fig, renderer, frame, annotations)
    problems += _hidden(fig, renderer)
    problems += _broken_wirings([t for _, t in texts] + annotations +
                                [x for _, lg in legends for x in lg.get_texts()])
    problems += _diagonal_marks(fig)
    extents = [ax.get_window_extent(renderer) for ax in fig.axes]
    for i in range(len(extents)):
        for j in range(i + 1, len(extents)):
            if _overlap(extents[i], extents[j]):
                problems.append(f"axes overlap: axes {i} and axes {j}")
    return list(dict.fromkeys(problems))


def assert_clean_layout(fig) -> None:
    """Raise AssertionError naming every problem of :func:`layout_problems` (for tests)."""
    problems = layout_problems(fig)
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else \
        next((ax.get_title() for ax in fig.axes if ax.get_title()), "")
    assert not problems, f"figure {title[:80]!r}:\n  " + "\n  ".join(problems)


def record_layout(fig, path=None) -> list[str]:
    """Append ``{"title", "problems"}`` of ``fig`` as one JSON line to ``path`` (default the file named by
    ``WORKBENCH_LAYOUT_CHECK``); returns the problems. The notebooks' display hook calls it."""
    path = path or os.environ.get(ENV_CHECK)
    problems = layout_problems(fig)
    if path:
        title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else \
            next((ax.get_title() for ax in fig.axes if ax.get_title()), "")
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"title": title, "problems": problems}) + "\n")
    return problems


__all__ = ["ENV_CHECK", "layout_problems", "assert_clean_layout", "record_layout"]
