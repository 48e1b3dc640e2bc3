"""Accept length against temperature (workbench.report.temperature, issue 21 item 5): the demo's sampled files,
one result per temperature equal to acceptance.simulate run by hand, the greedy row's per-depth numbers
being its counts, the figures, and notebook 03's section in the executed report."""

from __future__ import annotations

import doctest
import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest

from workbench.simulate import acceptance
from workbench.load import inputs
from workbench.report import plots
from workbench.core.errors import WorkbenchError
from workbench.core.setting import Setting
from workbench.report.temperature import TEMPERATURES, TemperatureSweep, by_temperature, demo_files

WIRING = "embed,L1,L3"


@pytest.fixture(scope="module")
def loaded(smoke_demo):
    d = Path(smoke_demo)
    tgt, drf, ds = inputs.load(d / "target", d / "draft-mismatched", d / "val.jsonl", device="cpu", progress=False)
    return d, tgt, drf


@pytest.fixture(scope="module")
def sweep(loaded):
    d, tgt, drf = loaded
    files, why = demo_files(d / "target")
    assert why is None, why
    return by_temperature(tgt, drf, files, WIRING, Setting(steps=3, engine="sglang"), limit=8)


def test_docstring_examples_run():
    import workbench.report.temperature

    res = doctest.testmod(workbench.report.temperature)
    assert res.attempted > 0 and res.failed == 0


def test_demo_files_names_the_sampled_files_or_says_why_not(smoke_demo, tmp_path):
    d = Path(smoke_demo)
    files, why = demo_files(d / "target")
    assert why is None and list(files) == list(TEMPERATURES)
    assert [Path(f).name for f in files.values()] == ["val.jsonl", "val-T0.3.jsonl", "val-T0.7.jsonl", "val-T1.0.jsonl"]
    old = tmp_path / "old-demo"                  # an older demo: no sampled files; a link to the target is enough
    old.mkdir()
    shutil.copy(d / "manifest.json", old / "manifest.json")
    shutil.copy(d / "val.jsonl", old / "val.jsonl")
    shutil.copy(d / "val-T0.3.jsonl", old / "val-T0.3.jsonl")
    (old / "target").symlink_to(d / "target")
    files, why = demo_files(old / "target")
    assert files == {} and "has no val-T0.7.jsonl, val-T1.0.jsonl" in why and "`make demo`" in why
    files, why = demo_files(tmp_path / "my-model")
    assert files == {} and "not a demo's target" in why and "workbench regenerate --temperature" in why


def test_each_temperature_is_simulate_on_its_own_file(loaded, sweep):
    d, tgt, drf = loaded
    assert sweep.temperatures == list(TEMPERATURES) and sweep.wiring == WIRING
    assert sweep.setting.temperature == 0 and sweep.setting.steps == 3
    rows = {r["temperature"]: r for r in sweep.rows()}
    for t, name in ((0.0, "val.jsonl"), (0.7, "val-T0.7.jsonl")):
        ref = acceptance.simulate(tgt, drf, inputs.dataset(d / name, tgt), [WIRING], progress=False, limit=8,
                                  setting=Setting(steps=3, engine="sglang", temperature=t))[WIRING]
        res = sweep.results[t]
        assert res.setting.temperature == t and rows[t]["data"] == name
        assert np.array_equal(res.chains["accepted"], ref.chains["accepted"])
        assert rows[t]["decode-path accept length"] == pytest.approx(ref.decode_path["accept_length"])
        assert rows[t]["verify steps"] == ref.decode_path["n_verify_steps"]
    # T = 0: the per-depth estimate is the count itself; T > 0: the Rao–Blackwellised table, narrower
    assert sweep.results[0.0].per_depth is None
    assert rows[0.0]["per-depth accept length"] == rows[0.0]["decode-path accept length"]
    assert rows[0.0]["P(A>=k) per depth"] == pytest.approx(list(sweep.results[0.0].cumulative))
    for t in (0.3, 0.7, 1.0):
        pdp = sweep.results[t].per_depth
        assert pdp is not None and rows[t]["per-depth accept length"] == pytest.approx(pdp.decode_path_accept_length)
        lo, hi = rows[t]["per-depth 95%"]
        assert lo <= rows[t]["per-depth accept length"] <= hi
        # data sampled at exactly the evaluated settings: the agreement line says so
        assert "the settings this run evaluates" in (sweep.results[t].data_note() or "")
    # sampling lowers the accept length on the demo (greedy data vs T = 1 data; the draft is weak but not random)
    assert rows[1.0]["decode-path accept length"] < rows[0.0]["decode-path accept length"]
    table = sweep.table()
    assert list(table.frame["temperature"]) == list(TEMPERATURES) and "per-depth 95%" in table.frame
    assert "val-T0.7.jsonl" in table._repr_html_() and "Rao–Blackwellised" in repr(table)
    assert "T=0.7" in sweep.summary() and sweep.to_dict()["rows"][2]["temperature"] == 0.7


def test_figures(sweep):
    fig = sweep.plot()
    ax = fig.axes[0]
    assert ax.get_title().startswith(f"Accept length against temperature · {WIRING}")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "0.3", "0.7", "1"]
    assert len(ax.get_legend().get_texts()) == 2
    fig = sweep.per_depth_plot()
    ax = fig.axes[0]
    assert ax.get_title().startswith("Per-depth acceptance, greedy vs sampled")
    assert [t.get_text().split(" (")[0] for t in ax.get_legend().get_texts()] == ["T = 0", "T = 0.3", "T = 0.7", "T = 1"]
    for line, t in zip(ax.get_lines(), TEMPERATURES):
        assert np.allclose(line.get_ydata(), sweep.per_depth()[t][0])
    with pytest.raises(WorkbenchError, match="expected a workbench.temperature.TemperatureSweep"):
        plots.accept_vs_temperature({"a": 1})
    with pytest.raises(WorkbenchError, match="no results"):
        plots.per_depth_compare(TemperatureSweep(WIRING, Setting(steps=3), {}))


def test_by_temperature_needs_files(loaded):
    _, tgt, drf = loaded
    with pytest.raises(WorkbenchError, match="no files given"):
        by_temperature(tgt, drf, {}, WIRING, Setting(steps=3))


@pytest.mark.slow
def test_notebook_03_shows_the_temperature_section(tmp_path_factory, smoke_demo):
    """The executed notebook 03 (the report run of test_notebooks) holds the section: the table (one row per
    temperature, the sampled files named; said once, no text summary beside it: issue 58) and the two figures."""
    from test_notebooks import _CACHE, generated_report

    out = generated_report(tmp_path_factory, Path(smoke_demo))
    page = next(p for p in _CACHE["report"].pages if p.name == "03_acceptance")
    assert page.status == "ok", page.error
    nb = nbformat.read(str(page.notebook), as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                 and c.source.startswith("## Acceptance at temperature > 0"))
    outputs = [o for c in nb.cells[start:] if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "skipped" not in text and "accept length against temperature" not in text      # the table says it
    shown = ("display_data", "execute_result")
    html = [o.data["text/html"] for o in outputs if o.output_type in shown and "text/html" in o.get("data", {})]
    assert len(html) == 1 and "per-depth accept length" in html[0] and "Accept length against temperature" in html[0]
    for t in ("0.000", "0.300", "0.700", "1.000"):                                      # one row per temperature
        assert f"<td class=\"num\">{t}</td>" in html[0].replace('<span class="w">', "").replace("</span>", ""), t
    assert all(name in html[0] for name in ("val-T0.3.jsonl", "val-T0.7.jsonl", "val-T1.0.jsonl"))
    images = [o for o in outputs if o.output_type in shown and "image/png" in o.get("data", {})]
    assert len(images) == 2
    assert "Acceptance at temperature &gt; 0" in (out / "03_acceptance.html").read_text()
