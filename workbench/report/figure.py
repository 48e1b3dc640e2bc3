"""The blank figure every plot starts from, and its title wrapping.

    >>> from workbench.report.figure import new_figure, wrap
    >>> fig, axes = new_figure(2)
    >>> len(axes), wrap("a " * 80, 40).count("\\n")
    (2, 3)

A ``matplotlib.figure.Figure`` built without pyplot (no global state, works headless), with constrained layout
at report width. Used by :mod:`workbench.report.plots` and :mod:`workbench.report.serving_figures`.
"""

from __future__ import annotations

import re
import textwrap

#: a bracketed list such as ``[2, 8, 13]``: never broken across lines (figure titles here, table cells in export)
BRACKETED = re.compile(r"\[[^\[\]]{0,60}\]")

WIDTH = 10.0  # inches: readable at report width (about 1000 px at 100 dpi)


def new_figure(ncols: int = 1, height: float = 3.8, width: float = WIDTH):
    """(figure, [axes]) with ``ncols`` panels side by side."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def wrap(text: str, width: int = 110) -> str:
    r"""A title wrapped to the figure's width (a line longer than the figure is cut off or runs over labels), never
    inside a list of ids such as ``[2, 8, 13]`` (its spaces become no-break spaces; a wiring has none).

        >>> wrap("set the ids to [2, 8, 13] now", width=18)
        'set the ids to\n[2,\xa08,\xa013] now'
    """
    text = BRACKETED.sub(lambda m: m.group(0).replace(" ", "\xa0"), str(text))
    return "\n".join(textwrap.fill(part, width, break_on_hyphens=False) for part in text.split("\n"))


def describe(fig) -> str:
    """The figure's alt text: what it shows, read off its own words (its ``wb_alt`` if a plot set one, else its
    title, then each panel's title and axes), so a reader who cannot see the image learns what it plots.

        >>> fig, (ax,) = new_figure(1)
        >>> _ = ax.set(title="accept length by position", xlabel="position (tokens)", ylabel="accept length")
        >>> describe(fig)
        'A figure of accept length by position: position (tokens) against accept length.'
    """
    own = getattr(fig, "wb_alt", "")
    if own:
        return str(own)

    def flat(t) -> str:
        return " ".join(str(t).replace("\xa0", " ").split())

    head = flat(fig._suptitle.get_text()) if getattr(fig, "_suptitle", None) is not None else ""
    panels = []
    for ax in fig.axes:
        if not ax.get_visible() or (not ax.has_data() and not ax.get_title() and not ax.images):
            continue
        title, x, y = flat(ax.get_title()), flat(ax.get_xlabel()), flat(ax.get_ylabel())
        axes_words = f"{x} against {y}" if x and y else (x or y)
        panels.append(": ".join(w for w in (title, axes_words) if w))
    panels = [p for p in panels if p]
    if not head and not panels:
        return "A figure (its panels carry no titles or axis labels)."
    if head:
        return f"A figure of {head}" + (f". Panels: {'; '.join(panels)}." if panels else ".")
    if len(panels) == 1:
        return f"A figure of {panels[0]}."
    return f"A figure of {len(panels)} panels: {'; '.join(panels)}."


__all__ = ["WIDTH", "BRACKETED", "new_figure", "wrap", "describe"]
