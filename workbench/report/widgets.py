"""ipywidgets over :mod:`workbench.report.plots`: pick a wiring, a sample and K; the view updates.

    >>> from workbench.stats.statistics import AcceptanceResult
    >>> from workbench.report.widgets import acceptance_explorer
    >>> r = AcceptanceResult.from_arrays("L1,L3,L4", K=2, sample=[0, 0], t=[0, 1], accepted=[2, 1])
    >>> w = acceptance_explorer({"L1,L3,L4": r}, K=2)   # doctest: +SKIP
    >>> [c.description for c in w.children[0].children]  # doctest: +SKIP
    ['wiring', 'K']

In JupyterLab the last expression of a cell shows the widget: a wiring dropdown, a K slider (and a
sample slider when dataset rows are given) above the view they control.

Thin on purpose: every view is a :mod:`workbench.report.plots` function, so what a widget shows also exists
as a static figure. Inside a ``workbench report`` run (:func:`workbench.report.in_report`) the
functions display that static figure for the default selection and return None instead of a widget,
so an exported page never holds a dead widget or a "kernel required" message.

No ``Output`` widget, on purpose: a view is an ``Image`` (the figure as PNG) and an ``HTML`` widget whose
values the kernel sets. Executed headless (papermill, ``jupyter nbconvert --execute``), nbclient mimics an
``Output`` widget by sending its state back to the kernel over the shell socket for every output shown in
it, while it waits on that same socket for the cell's ``execute_reply``; now and then the reply arrives
and the waiting coroutine is never woken (the reply sits on the socket, pyzmq's edge-triggered poll missed
it), so the run hangs with the kernel idle. Widgets whose values the kernel sets send nothing back.
"""

from __future__ import annotations

from workbench.core.errors import WorkbenchError
from workbench.report import plots
from workbench.report.export import in_report, show


def _display(*objs) -> None:
    for o in objs:
        show(o)


def _png(fig) -> bytes:
    """A figure as the inline backend shows it: PNG at the notebook's dpi, cropped to its drawing."""
    import io

    import matplotlib

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=matplotlib.rcParams["figure.dpi"], bbox_inches="tight")
    return buf.getvalue()


def _html(obj) -> str:
    """The HTML a notebook shows for ``obj`` (its ``_repr_html_``, else its escaped text)."""
    import html

    rep = getattr(obj, "_repr_html_", None)
    return rep() if rep is not None else f"<pre>{html.escape(str(obj))}</pre>"


def _static(results: dict, rows: list[dict], tokenizer, spec: str, sample_pos: int, K: int) -> list:
    """The static views of one selection: acceptance curves of ``spec`` and one sample's coloured tokens."""
    r = results[spec]
    label = r.setting.replace(steps=int(K)).accept_label("every-position") if r.setting.shape == "chain" else \
        r.setting.accept_label("every-position")
    out = [plots.acceptance_curves({spec: r}, K=K, title=f"Acceptance of wiring {spec} (K={K}); legend: {label}")]
    if rows:
        out.append(plots.sample_tokens_html(r, rows[sample_pos], tokenizer, K=K))
    return out


def acceptance_explorer(results: dict, rows: list[dict] | None = None, tokenizer=None, *, wiring: str | None = None,
                        sample: int = 0, K: int | None = None):
    """Dropdown (wiring), sliders (sample, K) → curves and the sample's tokens coloured by accepted count.

    ``results``: {spec: AcceptanceResult} (``acceptance.simulate``); ``rows``: dataset rows (their
    ``_row`` must match the results' samples); ``K`` (≤ the results' K) caps the depth shown.
    Returns the widget, or None in a report run (the static views are displayed instead).
    """
    results = plots.as_results(results)
    rows = [r for r in (rows or []) if any((res.chains["sample"] == r.get("_row", -1)).any()
                                           for res in results.values())]
    specs = list(results)
    spec = wiring if wiring is not None else specs[0]
    if spec not in results:
        raise WorkbenchError(f"wiring {spec!r} is not among the results (expected one of {', '.join(specs)})")
    kmax = min(r.steps for r in results.values())
    K = kmax if K is None else int(K)
    if not 1 <= K <= kmax:
        raise WorkbenchError(f"K={K} is out of range: the results were simulated with K={kmax} (expected 1..{kmax})")
    if rows and tokenizer is None:
        raise WorkbenchError("acceptance_explorer: rows were given without a tokenizer to decode them")
    if rows and not 0 <= sample < len(rows):
        raise WorkbenchError(f"sample {sample} is out of range (expected 0..{len(rows) - 1})")
    if in_report():
        _display(*_static(results, rows, tokenizer, spec, sample, K))
        return None

    import ipywidgets as W

    w_spec = W.Dropdown(options=specs, value=spec, description="wiring")
    w_k = W.IntSlider(value=K, min=1, max=kmax, description="K")
    controls = [w_spec, w_k]
    if rows:
        w_sample = W.IntSlider(value=sample, min=0, max=len(rows) - 1, description="sample")
        controls.append(w_sample)
    curves, tokens = W.Image(format="png"), W.HTML()

    def update(*_):
        views = _static(results, rows, tokenizer, w_spec.value, w_sample.value if rows else 0, w_k.value)
        curves.value = _png(views[0])
        tokens.value = _html(views[1]) if len(views) > 1 else ""

    for c in controls:
        c.observe(update, names="value")
    update()
    return W.VBox([W.HBox(controls), curves] + ([tokens] if rows else []))


def sample_explorer(dataset, tokenizer=None, *, sample: int = 0):
    """A slider over dataset rows showing ``dataset.preview(i)`` (prompt/response spans, escaped).

    Returns the widget, or None in a report run (the preview of ``sample`` is displayed instead).
    """
    n = len(dataset)
    if n == 0:
        raise WorkbenchError("sample_explorer: the dataset has no rows")
    if not 0 <= sample < n:
        raise WorkbenchError(f"sample {sample} is out of range (expected 0..{n - 1})")
    if in_report():
        _display(dataset.preview(sample, tokenizer))
        return None

    import ipywidgets as W

    w = W.IntSlider(value=sample, min=0, max=n - 1, description="row")
    view = W.HTML()

    def update(*_):
        view.value = _html(dataset.preview(w.value, tokenizer))

    w.observe(update, names="value")
    update()
    return W.VBox([w, view])
