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
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, write_json
from workbench.report.figure import describe
from workbench.report.index_page import write_index
from workbench.report.layout import ENV_CHECK, record_layout
from workbench.report.sections import leave_out_absent

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
    every section whose input is absent (:func:`workbench.report.sections.absent`) and list it at the end (:func:`~workbench.report.sections.leave_out_absent`)."""
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

