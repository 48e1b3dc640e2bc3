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


__all__ = ["WIDTH", "BRACKETED", "new_figure", "wrap"]
