"""Tables a reader can read: every cell in full, wrapped only at spaces and separators, a key under each table.

    >>> import pandas as pd
    >>> from workbench.report.tables import table, cell_text
    >>> t = table(pd.DataFrame({"wiring": ["L0,L6,L11"], "accept length": [1.8327]}),
    ...           {"wiring": "the taps fed", "accept length": "decode path"})
    >>> t.cells(), cell_text(10000.0)
    ([['L0,L6,L11', '1.833']], '10000')

:func:`table` makes a :class:`Table` (HTML in a notebook, text in a terminal); :func:`cell_text` writes one value as
the pages show it (floats to 3 decimals, whole numbers written out, lists as ``8·3·1·4``); :func:`wrap_html` keeps
words, numbers, wirings and id lists whole. A table wider than :data:`CUE_PX` says above itself that it scrolls.
"""

from __future__ import annotations

import html
import math
import re
import textwrap

from workbench.core.errors import WorkbenchError
from workbench.report.figure import BRACKETED

_WRAP_AFTER = re.compile(r"([;/·=|])")      # a long cell may wrap after these separators, never inside a word
_PIECE = re.compile(rf"{BRACKETED.pattern}|\s+|[^\s\[]+|\[")   # a bracketed list is one piece: never broken
_TABLE_CSS = (".wb-table{max-width:100%;overflow-x:auto}"      # a wide table scrolls in its own box (issue 35)
              ".wb-table table{table-layout:auto;width:auto;border-collapse:collapse}"
              ".wb-table td,.wb-table th{white-space:normal;overflow-wrap:normal;word-break:normal;hyphens:none;"
              "max-width:32em;text-align:left;vertical-align:top;padding:.2em .6em}"
              ".wb-table td.num{white-space:nowrap;text-align:right}"
              ".wb-table span.w{white-space:nowrap}"
              ".wb-table p.wb-cue{color:#555;font-size:smaller;margin:.2em 0}")
#: a table at least this wide (estimated) says so above itself: at 800 px a reader sees a cue, never a silent cut
CUE_PX = 560


def wrap_html(text) -> str:
    """``text`` escaped, breakable only at spaces and after the separators ``; / · = |`` (never inside a word,
    a number, a wiring such as ``L0,L6,L11``, a list such as ``[2, 8, 13]``, or at a '-'): each piece a ``span.w``
    (``white-space:nowrap``), ``<wbr>`` after each separator. A list keeps its plain spaces (copied, it pastes as
    JSON or Python), inside one ``span.w``.

        >>> wrap_html("a/b c")
        '<span class="w">a/</span><wbr><span class="w">b</span> <span class="w">c</span>'
        >>> wrap_html("to [2, 8].")
        '<span class="w">to</span> <span class="w">[2, 8]</span><span class="w">.</span>'
    """
    out = []
    for m in _PIECE.finditer(str(text)):
        piece = m.group(0)
        if piece.isspace():
            out.append(" ")
        elif BRACKETED.fullmatch(piece):
            out.append(f'<span class="w">{html.escape(piece)}</span>')
        else:
            out.append("<wbr>".join(f'<span class="w">{html.escape(p)}</span>'
                                    for p in _WRAP_AFTER.sub("\\1\0", piece).split("\0") if p))
    return "".join(out).strip()


def integral(column) -> bool:
    """True for a numeric column whose every finite value is a whole number (64.0 is shown as 64)."""
    import numpy as np

    try:
        v = np.asarray(column, dtype=float)
    except (TypeError, ValueError):
        return False
    v = v[np.isfinite(v)]
    return column.dtype.kind in "iuf" and bool(len(v)) and bool(np.all(v == np.round(v))) and bool(np.all(abs(v) < 1e15))


def cell_text(v, *, whole: bool = False) -> str:
    """One table cell or index value as text: floats to 3 decimals (the precision of every printed accept
    length, so a table, a figure and a summary agree), whole numbers as integers (written out from 1000 on, never
    ``1e+04``), a list of numbers as ``8·3·1·4``, a dict as ``key: value; ...``, None/NaN as "—".

        >>> cell_text(2048.0, whole=True), cell_text(3.5952), cell_text([8, 3, 1, 4]), cell_text({"a": 1, "b": [1, 2]})
        ('2048', '3.595', '8·3·1·4', 'a: 1; b: 1·2')
        >>> cell_text(10000.0), cell_text(500000.0), cell_text(1234.5678)
        ('10000', '500000', '1235')
    """
    import numbers

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool):                          # a reader reads words, not Python's True/False
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        v = float(v)
        if (whole or abs(v) >= 1000) and v == round(v):
            return str(int(v))
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {cell_text(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)) or type(v).__name__ == "ndarray":
        sep = "·" if all(isinstance(x, numbers.Number) for x in v) else ", "
        return sep.join(cell_text(x) for x in v)
    return str(v)


class Table:
    """A table that never cuts meaning (:func:`table`): every cell in full, long text wrapped at separators
    (never inside a word or a number), whole numbers as integers, no dict or list reprs, a key per column."""

    def __init__(self, frame, key: dict, title: str | None = None):
        self.frame, self.key, self.title = frame, dict(key), title

    def cells(self) -> list[list[str]]:
        """Every cell as the text shown (:func:`cell_text`), row by row."""
        whole = {c: integral(self.frame[c]) for c in self.frame.columns}
        return [[cell_text(v, whole=whole[c]) for c, v in zip(self.frame.columns, row)]
                for row in self.frame.itertuples(index=False, name=None)]

    def min_width_px(self) -> int:
        """An estimate of the narrowest this table renders (pixels): per column, its longest piece that never
        breaks (a header word, a number, a wiring) at about 7 px a character, plus its padding."""
        cells = self.cells()
        total = 0
        for j, c in enumerate(self.frame.columns):
            texts = [str(c)] + [r[j] for r in cells]
            longest = max(len(p) for t in texts for p in re.split(r"[\s;/·=|]+", t) if p) if texts else 0
            total += 7 * longest + 20
        return total

    def _repr_html_(self) -> str:
        e = html.escape
        num = [self.frame[c].dtype.kind in "iuf" for c in self.frame.columns]

        pieces = wrap_html

        def td(text, is_num):
            return f'<td class="num">{pieces(text)}</td>' if is_num else f"<td>{pieces(text)}</td>"

        head = "".join(f"<th>{pieces(c)}</th>" for c in self.frame.columns)
        rows = "".join("<tr>" + "".join(td(t, n) for t, n in zip(r, num)) + "</tr>" for r in self.cells())
        keys = "".join(f"<li><b>{e(str(c))}</b>: {e(self.key[c])}</li>" for c in self.frame.columns)
        title = f"<p><b>{e(self.title)}</b></p>" if self.title else ""
        n = len(self.frame.columns)
        if self.min_width_px() >= CUE_PX:
            title += (f'<p class="wb-cue">{n} columns: on a narrow screen, scroll the table sideways to see them '
                      f"all →</p>")
        return (f'<div class="wb-table">{title}<style>{_TABLE_CSS}</style><table class="dataframe">'
                f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
                f'<details open><summary>columns</summary><ul style="font-size:smaller">{keys}</ul></details></div>')

    def __repr__(self) -> str:
        import pandas as pd

        shown = pd.DataFrame(self.cells(), columns=[str(c) for c in self.frame.columns])
        lines = ([self.title] if self.title else []) + [shown.to_string(index=False), "columns:"]
        for c in self.frame.columns:
            lines += textwrap.wrap(f"{c}: {self.key[c]}", width=100, initial_indent="  ", subsequent_indent="    ")
        return "\n".join(lines)


def table(frame, key: dict, *, title: str | None = None) -> Table:
    """A DataFrame shown in full with a key explaining every column; a column without one is an error.

        >>> import pandas as pd
        >>> t = table(pd.DataFrame({"a": [1], "why": ["x" * 80]}), {"a": "a count", "why": "the reason, in full"})
        >>> "x" * 80 in t._repr_html_() and "…" not in t._repr_html_(), repr(t).splitlines()[-1]
        (True, '  why: the reason, in full')
    """
    missing = [str(c) for c in frame.columns if c not in key]
    if missing:
        raise WorkbenchError(f"table: no explanation for column(s) {', '.join(missing)}: every column needs one")
    return Table(frame, key, title)


def agreement_table(agreement, title: str | None = None) -> Table:
    """The greedy agreement by source (``workbench.load.agreement.Agreement.by_source``) as a :func:`table`."""
    import pandas as pd

    rows = [{"source": k, **v} for k, v in agreement.by_source().items()]
    frame = pd.DataFrame(rows, columns=["source", "samples", "tokens", "matches", "share", "min_sample"])
    return table(frame.rename(columns={"min_sample": "lowest row"}), {
        "source": "the rows' source ((all): every row)", "samples": "rows", "tokens": "response tokens counted",
        "matches": "response tokens equal to the target's greedy choice", "share": "matches / tokens",
        "lowest row": "the lowest share of any one row"}, title=title)


__all__ = ["Table", "table", "agreement_table", "cell_text", "wrap_html", "integral", "CUE_PX"]
