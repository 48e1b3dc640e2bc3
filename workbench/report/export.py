"""Notebooks → shareable HTML: execute them with papermill, export self-contained pages, link them.

    >>> from workbench.report.export import run_report
    >>> rep = run_report("reports", parameters={"size": "smoke"}, no_code=True)   # doctest: +SKIP
    >>> rep.index                                                                 # doctest: +SKIP
    PosixPath('reports/index.html')

What a report run does, per notebook of ``notebooks/`` (``01_dataset``, ``02_wiring``,
``03_acceptance``, ``04_live_server`` when present; missing ones keep their slot in the index):

1. papermill executes ``<name>.ipynb`` (parameters injected after the cell tagged ``parameters``;
   only the parameters a notebook declares are passed to it) in the caller's working folder, with
   ``WORKBENCH_REPORT=1`` and ``WORKBENCH_REPORT_OUT=<out>`` in the kernel's environment.
2. Inside the kernel, :func:`setup_notebook` (each notebook's first code cell after the parameters)
   turns progress bars into plain text and :func:`in_report` tells widgets to show static figures.
   :func:`record_headline` writes ``<out>/<name>.headline.json`` (the numbers the index shows).
3. nbconvert exports ``<out>/<name>.html``: images embedded as base64, no script or stylesheet
   fetched from the network (require.js, MathJax, mermaid and the widget manager are left out),
   no widget state; ``no_code=True`` hides the inputs.
4. ``<out>/index.html`` links the pages with their headline numbers; ``<out>/report.json`` holds the
   same in machine-readable form. Every text written into the index is HTML-escaped.
"""

from __future__ import annotations

import ast
import contextlib
import html
import json
import math
import os
import re
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, jsonable, write_json
from workbench.engines.candidates import engine_label
from workbench.report.figure import BRACKETED, describe
from workbench.report.layout import ENV_CHECK, record_layout

ENV_MODE = "WORKBENCH_REPORT"
ENV_OUT = "WORKBENCH_REPORT_OUT"

# Every notebook that has a slot in the report, in order (name, title, what it shows).
NOTEBOOKS = (
    ("01_dataset", "Dataset", "schema and validation, lengths by source, a decoded sample"),
    ("02_wiring", "Wiring", "target, draft, engine presets with warnings, per-tap feature statistics"),
    ("03_acceptance", "Acceptance", "acceptance curves, histograms, decode path, by source, diagnosis, speed-up"),
    ("04_live_server", "Live server", "a running server (SGLang or vLLM), or a real vLLM started here, against the "
                                      "offline decodes, request by request"),
)

# nbconvert's lab template, minus everything that would be fetched from the network.
_TEMPLATE_NAME = "workbench_report.html.j2"
_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block extra_css %}<style>
.jp-RenderedText pre, .jp-OutputArea-output pre{white-space:pre-wrap !important;word-break:normal !important;
overflow-wrap:break-word !important}
.jp-RenderedMarkdown pre{white-space:pre-wrap !important;overflow-wrap:break-word !important}
.jp-RenderedMarkdown code{white-space:nowrap}
.wb-nw{white-space:nowrap}
.jp-RenderedMarkdown pre code{white-space:pre-wrap}
</style>{% endblock extra_css %}
"""
_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


# ------------------------------------------------------------------------------ inside the kernel

def in_report() -> bool:
    """True inside a ``workbench report`` run (widgets then show their static figure instead)."""
    return os.environ.get(ENV_MODE) == "1"


def setup_notebook(*, dpi: int = 100) -> None:
    """Call once at the top of a notebook: inline PNG figures; plain-text progress bars in reports.

        >>> setup_notebook()          # outside IPython and outside a report: does nothing
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with ipykernel
        get_ipython = lambda: None  # noqa: E731
    ip = get_ipython()
    if ip is not None and "IPKernelApp" in getattr(ip, "config", {}):
        ip.run_line_magic("matplotlib", "inline")
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("png")
        import matplotlib

        matplotlib.rcParams["figure.dpi"] = dpi
        describe_on_display(ip)                  # every figure's PNG carries its alt text (the exported <img alt>)
        if os.environ.get(ENV_CHECK):            # a file: every figure shown is layout-checked into it
            check_layout_on_display(ip)
    try:
        import pandas as pd

        pd.set_option("display.max_colwidth", None)   # a table never ends a cell in "…" (issue 22)
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    if in_report():
        plain_progress_bars()
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()   # model-loading bars are noise on a shared page


def show(obj) -> None:
    """Display ``obj`` as the last value of a cell would be (IPython's ``display``; ``print`` outside IPython)."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with ipykernel
        print(obj)
        return
    if get_ipython() is None:
        print(obj)
    else:
        display(obj)


def describe_on_display(ip) -> None:
    """Give every matplotlib figure the kernel shows its alt text (:func:`workbench.report.figure.describe`): the
    PNG's output metadata ``alt``, which the exported page writes as the image's ``alt`` attribute."""
    from matplotlib.figure import Figure

    png = ip.display_formatter.formatters["image/png"]
    render = png.lookup_by_type(Figure)

    def described(fig, render=render):
        data = render(fig)
        if data is None:
            return None
        data, meta = data if isinstance(data, tuple) else (data, {})
        return data, {**(meta or {}), "alt": describe(fig)}

    png.for_type(Figure, described)


#: the output metadata key of a section whose input is absent (:func:`absent`); the export leaves the section out
ABSENT_KEY = "workbench_absent"


def absent(section: str, how: str) -> None:
    """Say that ``section`` has no input here and ``how`` to get it. In a notebook this is one display that the
    exported page turns into a line of its "Not in this report" list, leaving the section out
    (:func:`clean_for_export`); in a terminal, one printed line.

        >>> absent("Features from the serving engine", "make engine-fidelity-real measures them")
        Features from the serving engine: not in this report. make engine-fidelity-real measures them
    """
    line = f"{section}: not in this report. {how}"
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with ipykernel
        get_ipython = lambda: None  # noqa: E731
    if get_ipython() is None:
        print(line)
        return
    display({"text/markdown": f"*{section}*: not in this report. {how}", "text/plain": line},
            raw=True, metadata={ABSENT_KEY: {"section": section, "how": how}})


def check_layout_on_display(ip) -> None:
    """Run :func:`workbench.report.layout.record_layout` on every matplotlib figure the kernel shows (as a PNG),
    before the inline backend renders it: the tests read the file ``WORKBENCH_LAYOUT_CHECK`` names."""
    from matplotlib.figure import Figure

    png = ip.display_formatter.formatters["image/png"]
    render = png.lookup_by_type(Figure)

    def checked(fig, render=render):
        record_layout(fig)
        return render(fig)

    png.for_type(Figure, checked)


def plain_progress_bars() -> None:
    """Make ``tqdm.auto`` (and modules that already imported it) print plain text to stdout.

    In a papermill kernel ``tqdm.auto`` would pick the ipywidgets bar, which an exported HTML page
    cannot render ("kernel required"). The text bar updates at most every 5 s; nbclient folds its
    carriage returns, so the page shows the final line of each bar.
    """
    import tqdm.auto
    import tqdm.autonotebook
    import tqdm.std

    class PlainTqdm(tqdm.std.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("mininterval", 5.0)
            kwargs.setdefault("ascii", True)
            kwargs.setdefault("file", sys.stdout)
            kwargs.setdefault("dynamic_ncols", False)
            kwargs.setdefault("ncols", 100)
            super().__init__(*args, **kwargs)

    def trange(*args, **kwargs):
        return PlainTqdm(range(*args), **kwargs)

    for mod in (tqdm.auto, tqdm.autonotebook):
        mod.tqdm, mod.trange = PlainTqdm, trange
    from tqdm.notebook import tqdm_notebook

    for name, mod in list(sys.modules.items()):
        if name.startswith("workbench") and isinstance(getattr(mod, "tqdm", None), type) \
                and issubclass(mod.tqdm, tqdm_notebook):
            mod.tqdm = PlainTqdm




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


def record_headline(name: str, values: dict, *, out=None) -> Path | None:
    """Write the numbers the report index shows for notebook ``name``; returns the file written.

        >>> import tempfile
        >>> p = record_headline("01_dataset", {"rows": 16, "mean length": 31.5}, out=tempfile.mkdtemp())
        >>> json.loads(p.read_text())["values"]["rows"]
        16

    ``out`` defaults to the report folder of the current ``workbench report`` run; outside a report
    run (a notebook opened in JupyterLab) nothing is written and None is returned.
    """
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise WorkbenchError(f"headline name {name!r}: expected letters, digits, '_', '-' or '.' only")
    if not isinstance(values, dict):
        raise WorkbenchError(f"headline {name!r}: expected a dict of values, got {type(values).__name__}")
    out = out if out is not None else os.environ.get(ENV_OUT)
    if not out:
        return None
    path = Path(out) / f"{name}.headline.json"
    write_json(path, {"name": name, "values": values}, indent=1)
    return path


# ------------------------------------------------------------------------------ the report run

@dataclass
class Page:
    """One notebook of a report: ``status`` is "ok", "failed" or "missing" (no such notebook)."""

    name: str
    title: str
    description: str
    status: str
    notebook: Path | None = None          # the executed notebook
    html: Path | None = None
    headline: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0


@dataclass
class Report:
    """The result of :func:`run_report`: the output folder, ``index.html`` and one Page per slot."""

    out: Path
    index: Path
    pages: list[Page]

    @property
    def failed(self) -> list[Page]:
        return [p for p in self.pages if p.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed


def notebook_dir() -> Path:
    """The project's ``notebooks/`` folder (next to the ``workbench`` package)."""
    return Path(__file__).resolve().parents[2] / "notebooks"


def select_notebooks(selection=None, folder=None) -> list[tuple[str, str, str, Path | None]]:
    """(name, title, description, path or None) for each slot; ``selection`` like "01,03" or a list.

        >>> [s[0] for s in select_notebooks("01,03")]
        ['01_dataset', '03_acceptance']
    """
    folder = Path(folder) if folder is not None else notebook_dir()
    slots = list(NOTEBOOKS)
    # Extra notebooks in a custom folder get a slot after the known ones.
    if folder.is_dir():
        known = {n for n, _, _ in slots}
        for p in sorted(folder.glob("*.ipynb")):
            if p.stem not in known:
                slots.append((p.stem, p.stem.split("_", 1)[-1].replace("_", " ").capitalize(), ""))
    if selection:
        wanted = [s.strip() for s in (selection.split(",") if isinstance(selection, str) else selection)]
        picked = []
        for w in wanted:
            if not w:
                continue
            match = [s for s in slots if s[0] == w or s[0].split("_", 1)[0] == w]
            if not match:
                raise WorkbenchError(f"--notebooks: unknown notebook {w!r} (expected one of "
                                     f"{', '.join(s[0] for s in slots)}, or their numbers like 01)")
            if match[0] not in picked:
                picked.append(match[0])
        slots = picked
    out = []
    for name, title, desc in slots:
        path = folder / f"{name}.ipynb"
        out.append((name, title, desc, path if path.is_file() else None))
    return out


def parse_value(text: str):
    """A ``-p name value`` value: Python literal (int, float, bool, None, list) when it parses, else the string.

        >>> parse_value("3"), parse_value("0.5"), parse_value("true"), parse_value("data/demo")
        (3, 0.5, True, 'data/demo')
    """
    if not isinstance(text, str):
        return text
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return value if isinstance(value, (int, float, bool, list, tuple, type(None))) else text


def declared_parameters(path) -> dict:
    """{name: default source text} of the assignments in a notebook's cell tagged ``parameters``.

    Empty when the notebook has no such cell (papermill then injects nothing into it).
    """
    import nbformat

    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as e:  # nbformat raises several unrelated types for unreadable files
        raise WorkbenchError(f"{path}: not a readable notebook ({type(e).__name__})") from None
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            try:
                tree = ast.parse(cell.source)
            except SyntaxError as e:
                raise WorkbenchError(f"{path}: cell {i + 1} (parameters) line {e.lineno}: invalid Python "
                                     f"({e.msg})") from None
            return {t.id: ast.get_source_segment(cell.source, node.value)
                    for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    if isinstance(t, ast.Name)}
    return {}


@contextlib.contextmanager
def _environ(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def clean_for_export(nb) -> None:
    """Drop widget state and widget views (they need a live kernel) from an executed notebook, in place; leave out
    every section whose input is absent (:func:`absent`) and list it at the end (:func:`leave_out_absent`)."""
    nb.metadata.pop("widgets", None)
    leave_out_absent(nb)
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is not None and _WIDGET_MIME in data:
                data.pop(_WIDGET_MIME)
                if set(data) <= {"text/plain"}:  # only the widget's repr is left: nothing to show
                    continue
            kept.append(out)
        cell["outputs"] = kept


def leave_out_absent(nb) -> list[str]:
    """Remove, in place, each section of ``nb`` whose code said :func:`absent`: that code cell, the markdown cells
    just before it (its heading and words) and the code cells after it that show nothing, up to the next markdown
    cell. One "Not in this report" markdown cell at the end lists each section and how to get it. Returns the lines."""
    import nbformat

    def said(cell):
        return next((o["metadata"][ABSENT_KEY] for o in cell.get("outputs", [])
                     if isinstance(o.get("metadata"), dict) and ABSENT_KEY in o["metadata"]), None)

    cells, drop, lines = nb.cells, set(), []
    for i, cell in enumerate(cells):
        what = said(cell) if cell.get("cell_type") == "code" else None
        if what is None:
            continue
        lines.append(f"- **{what['section']}**: {what['how']}")
        drop.add(i)
        j = i - 1
        while j >= 0 and cells[j].get("cell_type") == "markdown":
            drop.add(j)
            j -= 1
        j = i + 1
        while j < len(cells) and cells[j].get("cell_type") == "code" and not cells[j].get("outputs"):
            drop.add(j)
            j += 1
    if not lines:
        return []
    nb.cells = [c for k, c in enumerate(cells) if k not in drop]
    nb.cells.append(nbformat.v4.new_markdown_cell("## Not in this report\n" + "\n".join(dict.fromkeys(lines))))
    return lines


def export_html(nb, html_path, *, title: str, no_code: bool = False) -> Path:
    """Export an executed notebook (path or NotebookNode) to one self-contained HTML file, atomically."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    if not hasattr(nb, "cells"):
        try:
            nb = nbformat.read(str(nb), as_version=4)
        except Exception as e:
            raise WorkbenchError(f"{nb}: not a readable notebook ({type(e).__name__})") from None
    clean_for_export(nb)
    nb.metadata["title"] = title
    exporter = HTMLExporter(template_name="lab", extra_loaders=[jinja2.DictLoader({_TEMPLATE_NAME: _TEMPLATE})],
                            template_file=_TEMPLATE_NAME, embed_images=True, exclude_input=no_code,
                            exclude_input_prompt=no_code, exclude_output_prompt=no_code)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    with atomic_write(html_path) as f:
        f.write(keep_lists_together(alt_texts(body, nb)))
    return Path(html_path)


def alt_texts(page: str, nb) -> str:
    """``page`` with each embedded figure's ``alt`` set from its output's metadata (:func:`describe_on_display`),
    matched by the image's data; nbconvert's lab template drops it and writes a placeholder instead.

        >>> import nbformat
        >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        ...     "display_data", data={"image/png": "QUJD"}, metadata={"image/png": {"alt": "A figure of x & y."}})])])
        >>> alt_texts('<img alt="No description has been provided for this image" class="" src="data:image/png;base64,QUJD"/>', nb)
        '<img alt="A figure of x &amp; y." class="" src="data:image/png;base64,QUJD"/>'
    """
    alts = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = (out.get("data") or {}).get("image/png")
            alt = ((out.get("metadata") or {}).get("image/png") or {}).get("alt")
            if data and alt:
                alts["".join(str(data).split())] = str(alt)
    if not alts:
        return page

    def one(m):
        tag = m.group(0)
        src = re.search(r'src="data:image/png;base64,([^"]+)"', tag)
        alt = alts.get(src.group(1)) if src else None
        if alt is None:
            return tag
        return re.sub(r'\salt="[^"]*"', "", tag).replace("<img", f'<img alt="{html.escape(alt)}"', 1)

    return _IMG.sub(one, page)


_IMG = re.compile(r"<img\b[^>]*>")
_ID_LIST = re.compile(r"\[\d+(?:, \d+)+\]")
_TEXT_NODE = re.compile(r">([^<]+)<")
_RAW_BLOCK = re.compile(r"(<(?:script|style|textarea)\b.*?</(?:script|style|textarea)>)", re.S | re.I)


def keep_lists_together(page: str) -> str:
    """``page`` with every list of ids in its text (``[2, 8, 13]``) kept on one line: a wrapped output block may
    break at its spaces otherwise (issue 48). Only text between tags is touched; copied text is unchanged.

        >>> keep_lists_together("<pre>set the ids to [2, 8, 13] now</pre>")
        '<pre>set the ids to <span class="wb-nw">[2, 8, 13]</span> now</pre>'
    """
    def text(m):
        return ">" + _ID_LIST.sub(lambda x: f'<span class="wb-nw">{x.group(0)}</span>', m.group(1)) + "<"

    parts = _RAW_BLOCK.split(page)       # script, style and textarea contents are never touched
    return "".join(p if i % 2 else _TEXT_NODE.sub(text, p) for i, p in enumerate(parts))


def _read_headline(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{path}: unreadable headline file ({type(e).__name__}: {e})") from None
    values = data.get("values") if isinstance(data, dict) else None
    if not isinstance(values, dict):
        raise WorkbenchError(f"{path}: expected a JSON object with a 'values' object")
    return values


def _one_line(text: str, limit: int = 300) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text))  # ANSI colours from IPython tracebacks
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def run_report(out="reports", *, notebooks=None, parameters: dict | None = None, no_code: bool = False,
               folder=None, kernel_name: str | None = None, timeout: int = 3600,
               progress: bool = True, cards=()) -> Report:
    """Execute the selected notebooks, export each to HTML, write ``index.html``; returns a :class:`Report`.

    ``parameters``: {name: value}; each notebook receives the ones its ``parameters`` cell declares
    (a name no selected notebook declares is an error). ``folder``: where the notebooks live
    (default :func:`notebook_dir`). A notebook that fails still gets its page (with the error) and
    the run goes on; ``Report.failed`` lists those. ``cards``: more index cards, as HTML (:func:`write_index`).
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"{out}: exists and is not a folder (expected the report output folder)")
    parameters = {str(k): parse_value(v) for k, v in (parameters or {}).items()}
    slots = select_notebooks(notebooks, folder)
    declared = {name: declared_parameters(path) for name, _, _, path in slots if path is not None}
    known = set().union(*declared.values()) if declared else set()
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise WorkbenchError(f"parameter {unknown[0]!r} is not declared by any selected notebook "
                             f"(known parameters: {', '.join(sorted(known)) or 'none'})")
    out.mkdir(parents=True, exist_ok=True)
    pages: list[Page] = []
    for name, title, desc, path in slots:
        page = Page(name=name, title=title, description=desc, status="missing")
        pages.append(page)
        if path is None:
            continue
        page.parameters = {k: v for k, v in parameters.items() if k in declared[name]}
        executed = out / f"{name}.ipynb"
        headline = out / f"{name}.headline.json"
        headline.unlink(missing_ok=True)  # never show the numbers of an earlier run
        if progress:
            print(f"[report] {name}: running ...", flush=True)
        t0 = time.perf_counter()
        with _environ(**{ENV_MODE: "1", ENV_OUT: str(out.resolve()), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}):
            try:
                papermill.execute_notebook(str(path), str(executed), parameters=page.parameters,
                                           kernel_name=kernel_name or "python3", language="python", progress_bar=False,
                                           cwd=os.getcwd(), execution_timeout=timeout, coalesce_streams=True,
                                           extra_arguments=["--IPKernelApp.log_level=ERROR"])
                page.status = "ok"
            except PapermillExecutionError as e:
                page.status, page.error = "failed", _one_line(f"{e.ename}: {e.evalue}")
            except Exception as e:  # kernel died, timeout, unreadable notebook: the page says so
                page.status, page.error = "failed", _one_line(f"{type(e).__name__}: {e}")
        page.seconds = time.perf_counter() - t0
        if executed.is_file():
            page.notebook = executed
            page.html = export_html(executed, out / f"{name}.html", title=f"{title} · workbench", no_code=no_code)
        page.headline = _read_headline(headline)
        if progress:
            extra = f": {page.error}" if page.error else ""
            print(f"[report] {name}: {page.status} ({page.seconds:.1f} s){extra}", flush=True)
    index = write_index(out, pages, parameters=parameters, cards=cards)
    return Report(out=out, index=index, pages=pages)


# ------------------------------------------------------------------------------ the index page

_INDEX_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em} .sub{color:#666;margin-top:0}
.card{border:1px solid #ddd;border-radius:8px;padding:.8em 1.1em;margin:1em 0}
.card h2{font-size:1.15em;margin:.1em 0 .3em} .desc{color:#555;margin:.2em 0 .6em}
.status{font-size:.8em;padding:.1em .5em;border-radius:4px;margin-left:.5em;vertical-align:middle}
.ok{background:#e3f4e1;color:#1d6b1a} .failed{background:#fde2e1;color:#9b1c1c} .missing{background:#eee;color:#666}
table{border-collapse:collapse;font-size:.92em} td{padding:.15em .8em .15em 0;vertical-align:top}
td.k{color:#555} .err{color:#9b1c1c;font-family:monospace;font-size:.85em;white-space:pre-wrap}
code{background:#f4f4f4;padding:0 .25em;border-radius:3px}
.answer{border:2px solid #1d6b1a;border-radius:8px;padding:.6em 1.1em;margin:1em 0;background:#f6fbf5;overflow-x:auto}
span.w{white-space:nowrap}
.answer dt{font-weight:600;margin-top:.3em} .answer dd{margin:0 0 .2em 0}
pre.cmd{background:#f4f4f4;padding:.5em;overflow-x:auto;white-space:pre;max-width:100%}
dl.gloss dt{font-weight:600;margin-top:.4em} dl.gloss dd{margin:0 0 .2em 1em;color:#333}
div.scroll{overflow-x:auto;max-width:100%} div.scroll::after{content:"";display:block}
table.foreign th{text-align:left;font-weight:600;padding:.15em .8em .15em 0} table.foreign tr.mis{background:#fff4e0}
"""


def answer_html(answer: dict, where: str = "", live: str = "") -> str:
    """The answer block of a page (``Answer.to_dict()``) as HTML, every text escaped; ``where``: the page it is from;
    ``live``: what a live check of the same engine found (:func:`live_line`), shown under the fix."""
    e = wrap_html           # a line breaks only at spaces and separators (a path never splits at '-')

    out = ['<div class="answer"><h2>The answer' + (f" ({html.escape(where)})" if where else "") + "</h2><dl>"]
    if answer.get("note"):
        out.append(f"<dt>Note</dt><dd>{e(answer['note'])}</dd>")
    for key in ("the server feeds", "what it costs", "the fix"):
        if answer.get(key):
            out.append(f"<dt>{e(key.capitalize())}</dt><dd>{e(answer[key].replace('`', ''))}</dd>")
    if answer.get("command"):
        out.append(f'<dd><pre class="cmd">{html.escape(answer["command"])}</pre></dd>')
    if live:
        out.append(f"<dt>Checked live</dt><dd>{e(live)}</dd>")
    if answer.get("the evidence"):
        evidence = answer["the evidence"].replace("`", "")
        if where:                                          # shown on the index, not on the page it speaks of
            evidence = evidence.replace("this page:", f"{where.removeprefix('from ')}:", 1)
        out.append(f"<dt>The evidence</dt><dd>{e(evidence)}</dd>")
    return "".join(out) + "</dl></div>"


#: The index's glossary (issue 58): every word a page uses that a reader cannot look up elsewhere, complete sentences.
GLOSSARY = (
    ("tap", "a hidden state of the target that the draft reads. An EAGLE-3 draft reads three and concatenates them."),
    ("wiring", "which three taps the server feeds the draft, written like `embed,L1,L7`. The wiring the draft was "
               "trained on and the one the engine feeds can differ: that mismatch is what these pages measure."),
    ("L-numbering", "`L{k}` is the output of decoder layer k, counted from 0 (`L0` is the first layer's output); "
                    "`embed` is the embedding output, before any layer; `final` is after the final norm. Engines and "
                    "trainers number their own layer ids differently; every page converts them to this."),
    ("fc", "the draft's first linear layer: it maps the three concatenated taps (3 × hidden size) to one hidden "
           "state. `workbench rewire` refits it so that other taps stand in for the trained ones."),
    ("accept length", "the tokens a server emits per verify step: the accepted draft tokens plus the one the target "
                      "adds (E[A] + 1, as SGLang and vLLM report it). 1.0 means no draft token is ever accepted."),
    ("decode path", "the estimator every headline uses: the chains a server verifies when the reply is the "
                    "target's greedy output, i.e. what the server reports."),
    ("every position", "the estimator the diagnosis ranks wirings by: a chain started at every position of the "
                       "data (teacher-forced). It is higher than the decode path on the same wiring; neither is "
                       "wrong, and every page says which one a number is."),
    ("α_k", "the conditional acceptance of draft step k: the chance that token k is accepted when tokens 1..k-1 "
            "were (α1 is step 1's)."),
    ("chain K, tree", "chain drafting proposes K tokens in a row (topk 1); a tree proposes topk candidates per step "
                      "for a number of steps and verifies N of them (SGLang's `--speculative-eagle-topk`)."),
    ("shape twin", "a draft with the same config and tensor shapes as yours but seeded random weights. A verify "
                   "step costs the same whatever the weights, so the twin's server measures the step cost that "
                   "predicts your draft's tokens/s without using your draft's own passes."),
)


def glossary_html() -> str:
    """The glossary as an HTML definition list (every text escaped)."""
    items = "".join(f"<dt>{html.escape(k)}</dt><dd>{wrap_html(v.replace('`', ''))}</dd>" for k, v in GLOSSARY)
    return f'<div class="card" id="glossary"><h2>Words these pages use</h2><dl class="gloss">{items}</dl></div>'


def about_html(parameters: dict) -> str:
    """What the report is of, in words (never a repr): the engine it answers for, the demo folder, and what the
    target is (its layers and hidden size read from its config; a toy for the built-in demo)."""
    e = html.escape
    p = dict(parameters or {})
    parts = []
    if p.get("engine"):
        parts.append(f"Every answer is for <b>{e(engine_label(str(p['engine'])))}</b>.")
    demo = p.get("demo")
    if demo:
        cfg = Path(str(p.get("target") or Path(str(demo)) / "target")) / "config.json"
        try:
            c = json.loads(cfg.read_text())
            shape = f"{c['num_hidden_layers']} layers, hidden size {c['hidden_size']}"
        except (OSError, ValueError, KeyError):
            shape = ""
        size = str(p.get("size", ""))
        what = ("the real demo: SmolLM2-135M-Instruct" if size == "real" else
                "the built-in demo: a toy target trained here in minutes, not a production model")
        parts.append(f"Inputs: <code>{e(str(demo))}</code>, {e(what)}" + (f" ({e(shape)}, CPU float32)." if shape
                                                                           else ", CPU float32."))
    return f'<p class="sub">{" ".join(parts)}</p>' if parts else ""


def live_line(pages: list[Page], engine_wiring: str | None, engine: str | None = None) -> str:
    """What the live check (page 04's headline) found, in one sentence, against the wiring the engine's record says
    it feeds (``engine_wiring``); '' when no page checked a server. A server of another engine record than the
    report's ``engine`` checks nothing of this answer, and the line says so."""
    live = next((p.headline for p in pages if p.headline.get("matched wiring")), None)
    if live is None:
        return ""
    served = live.get("server engine")
    if engine and served and served != engine:
        return (f"not checked live: page 04 checked a {engine_label(served)} server, which reads the draft as "
                f"another record than {engine_label(engine)}.")
    matched = live["matched wiring"]
    if matched == "none":
        return f"not decided: {live.get('verdict (in words)', 'no wiring separated from the runner-up')} (page 04)."
    n = live.get(f"identical · {matched}", "")
    said = f"the real server of page 04 fed {matched}" + (f" on {n} requests (identical replies)" if n else "")
    agrees = ("the wiring its record says, confirmed" if engine_wiring and matched == engine_wiring else
              f"not the {engine_wiring} its record says" if engine_wiring else "")
    return said + (f": {agrees}." if agrees else ".")


def engines_card(rows: list) -> str:
    """The "if you serve with another engine" rows (notebook 03's headline) as one compact table card."""
    if not rows:
        return ""
    e = html.escape
    cols = [c for c in rows[0] if c != "source"]
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{wrap_html(str(r.get(c, '')).replace('`', ''))}</td>" for c in cols)
                   + "</tr>" for r in rows)
    return ('<div class="card" id="other-engines"><h2>If you serve with another engine</h2><p class="desc">From each '
            "engine's record (offline; only this report's engine is checked live), on the same rows and the decode "
            f'path as the answer.</p><div class="scroll"><table class="foreign"><tr>{head}</tr>{body}</table></div></div>')


def write_index(out, pages: list[Page], *, parameters: dict | None = None, cards=()) -> Path:
    """Write ``<out>/index.html`` and ``<out>/report.json`` for ``pages``; every text is escaped. ``cards``: more
    cards after the pages', each already HTML (:func:`workbench.report.foreign.card_html`)."""
    out = Path(out)
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>workbench report</title>", f"<style>{_INDEX_CSS}</style></head><body>",
             "<h1>workbench report</h1>",
             f'<p class="sub">Generated {e(time.strftime("%Y-%m-%d %H:%M"))}. Each page is a self-contained '
             f"HTML file (figures embedded; no network needed).</p>"]
    parts.append(about_html(parameters or {}))
    first = next((p for p in sorted(pages, key=lambda p: p.name != "03_acceptance")
                  if isinstance(p.headline.get("answer"), dict)), None)
    if first is not None:                  # the answer first (issue 35): from 03, else the first page that has one
        wiring = next((v for k, v in first.headline.items() if k.endswith(" wiring") and k != "trained wiring"), None)
        parts.append(answer_html(first.headline["answer"], where=f"from {first.name.split('_', 1)[0]} · {first.title}",
                                 live=live_line(pages, wiring, (parameters or {}).get("engine"))))
    others = next((p.headline.get("if you serve with") for p in pages if p.headline.get("if you serve with")), [])
    parts.append(engines_card(others))            # the other engines, once, right under the answer
    for p in pages:
        heading = e(f"{p.name.split('_', 1)[0]} · {p.title}")
        if p.html is not None:
            heading = f'<a href="{e(p.html.name)}">{heading}</a>'
        label = {"ok": "ok", "failed": "failed", "missing": "not in this report"}[p.status]
        parts.append(f'<div class="card" id="{e(p.name)}"><h2>{heading}'
                     f'<span class="status {e(p.status)}">{e(label)}</span></h2>')
        if p.description:
            parts.append(f'<p class="desc">{e(p.description)}</p>')
        if p.status == "missing":
            parts.append(f'<p class="desc">No notebook <code>notebooks/{e(p.name)}.ipynb</code> yet.</p>')
        if p.error:
            parts.append(f'<p class="err">{e(p.error)}</p>')
        if p.headline:
            rows = "".join(f'<tr><td class="k">{wrap_html(str(k))}</td><td>{wrap_html(cell_text(v))}</td></tr>'
                           for k, v in p.headline.items() if k not in ("answer", "if you serve with"))
            parts.append(f"<table>{rows}</table>")
        if p.status != "missing":
            parts.append(f'<p class="desc">This page ran in {p.seconds:.1f} s.</p>')
        parts.append("</div>")
    parts.extend(cards)
    parts.append(glossary_html())
    parts.append("</body></html>")
    index = out / "index.html"
    with atomic_write(index) as f:
        f.write("\n".join(parts) + "\n")
    summary = {"parameters": jsonable(parameters or {}), "pages": [
        {"name": p.name, "title": p.title, "status": p.status, "html": p.html.name if p.html else None,
         "headline": jsonable(p.headline), "error": p.error, "seconds": round(p.seconds, 2)} for p in pages]}
    write_json(out / "report.json", summary, indent=1)
    return index
