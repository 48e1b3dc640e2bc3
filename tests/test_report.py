"""Report machinery on two tiny throw-away notebooks (no demo needed): papermill parameters, HTML
export without network references, escaping, plain-text progress, static widgets, failures, the CLI."""

import json
import re

import nbformat
import pytest

from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.report.export import parse_value, record_headline, run_report, select_notebooks

SCRIPT = "<script>alert('wb')</script>"

OK_CELLS = [
    ("code", 'token = "hello"\nn = 2', ["parameters"]),
    ("code", "from workbench.report.export import setup_notebook, record_headline, in_report\nsetup_notebook()\n"
             "from tqdm.auto import tqdm\nfor _ in tqdm(range(n), desc='work'):\n    pass\nprint('in report:', in_report())", []),
    ("code", "import torch\nfrom workbench.stats.statistics import AcceptanceResult\nfrom workbench import plots, widgets\n"
             "torch.manual_seed(0)\n"
             "r = AcceptanceResult.from_arrays('L1,L3,L4', K=2, sample=[0, 0, 0], t=[0, 1, 2], accepted=[2, 1, 0])\n"
             "plots.acceptance_curves({'L1,L3,L4': r})", []),
    ("code", "plots.tokens_html(['a', token, 'b'], [None, 1, 2], K=2)", []),
    ("code", "class Tok:\n    def decode(self, ids):\n        return {0: 'x', 1: token, 2: 'y', 3: 'z'}[ids[0]]\n"
             "w = widgets.acceptance_explorer({'L1,L3,L4': r}, [{'input_ids': [0, 1, 2, 3], '_row': 0, "
             "'n_prompt_tokens': 1}], Tok())\nprint('widget:', w)", []),
    ("code", "record_headline('01_dataset', {'token': token, 'n': n});", []),
]
FAIL_CELLS = [
    ("code", "path = 'missing.jsonl'", ["parameters"]),
    ("code", "from workbench import data\ndata.load(path)", []),
]


def _write(folder, name, cells):
    nb = nbformat.v4.new_notebook()
    for kind, src, tags in cells:
        cell = nbformat.v4.new_code_cell(src)
        cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(folder / f"{name}.ipynb"))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One CLI run over a folder with a good 01_dataset and a failing 02_wiring (bad data path)."""
    folder = tmp_path_factory.mktemp("nbs")
    _write(folder, "01_dataset", OK_CELLS)
    _write(folder, "02_wiring", FAIL_CELLS)
    out = tmp_path_factory.mktemp("out") / "reports"
    rc = main(["report", "--out", str(out), "--notebook-dir", str(folder), "--quiet", "-p", "token", SCRIPT,
               "-p", "n", "3", "-p", "path", str(folder / "nope.jsonl")])
    return rc, out


def test_cli_reports_the_failing_notebook_as_bad_input_and_still_writes_every_page(report, capsys):
    rc, out = report
    assert rc == 2  # the second notebook stopped on a WorkbenchError (missing data file)
    assert (out / "index.html").is_file() and (out / "01_dataset.html").is_file() and (out / "02_wiring.html").is_file()
    summary = json.loads((out / "report.json").read_text())
    status = {p["name"]: p["status"] for p in summary["pages"]}
    assert status == {"01_dataset": "ok", "02_wiring": "failed", "03_acceptance": "missing", "04_live_server": "missing"}
    failed = next(p for p in summary["pages"] if p["name"] == "02_wiring")
    assert failed["error"].startswith("WorkbenchError") and "nope.jsonl" in failed["error"]
    index = (out / "index.html").read_text()
    assert "nope.jsonl" in index and "04 · Live server" in index and "not in this report" in index


def test_parameters_reach_the_notebook_with_their_types(report):
    _, out = report
    head = json.loads((out / "01_dataset.headline.json").read_text())["values"]
    assert head == {"token": SCRIPT, "n": 3}


def test_token_text_is_escaped_in_pages_and_index(report):
    _, out = report
    for name in ("01_dataset.html", "index.html"):
        page = (out / name).read_text()
        assert "alert(&#x27;wb&#x27;)" in page or "alert(&#39;wb&#39;)" in page or "alert('wb')" in page
        assert "<script>alert" not in page
        assert "&lt;script&gt;alert" in page
    # the exported pages carry no script at all: nothing to run, nothing fetched
    assert "<script" not in (out / "01_dataset.html").read_text().lower()


def test_pages_are_self_contained_with_embedded_figures(report):
    _, out = report
    page = (out / "01_dataset.html").read_text()
    assert re.search(r'<img[^>]+src="data:image/png;base64,', page)
    assert not re.search(r'(src|href)="(https?:)?//', page), "a page references the network"
    assert "application/vnd.jupyter.widget" not in page and "widget-view" not in page


def test_progress_bars_are_plain_text_and_widgets_static_in_report_mode(report):
    _, out = report
    nb = nbformat.read(str(out / "01_dataset.ipynb"), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "work: 100%|" in text and "in report: True" in text
    assert "widget: None" in text
    assert "\r" not in text  # carriage-return updates folded: one line per bar
    assert "widgets" not in nb.metadata
    mimes = {m for c in nb.cells for o in c.get("outputs", []) for m in o.get("data", {})}
    assert "application/vnd.jupyter.widget-view+json" not in mimes


def test_no_code_hides_inputs(tmp_path):
    folder = tmp_path / "nbs"
    folder.mkdir()
    _write(folder, "01_dataset", [("code", "x = 1", ["parameters"]), ("code", "secret_name = 41\nprint(secret_name + x)", [])])
    rep = run_report(tmp_path / "out", folder=folder, no_code=True, progress=False, parameters={"x": "1"})
    page = rep.pages[0].html.read_text()
    assert rep.ok and "42" in page and "secret_name" not in page


def test_bad_selection_and_parameters_are_one_line_errors(tmp_path):
    with pytest.raises(WorkbenchError, match="unknown notebook '09'"):
        select_notebooks("09")
    with pytest.raises(WorkbenchError, match="parameter 'nope' is not declared"):
        run_report(tmp_path / "out", notebooks="01", parameters={"nope": 1}, progress=False)
    assert not (tmp_path / "out").exists()


def test_parse_value_and_record_headline(tmp_path, monkeypatch):
    assert [parse_value(v) for v in ("4", "0.5", "False", "none", "data/demo", "[1, 2]")] == \
        [4, 0.5, False, None, "data/demo", [1, 2]]
    monkeypatch.delenv("WORKBENCH_REPORT_OUT", raising=False)
    assert record_headline("01_dataset", {"a": 1}) is None  # outside a report run: nothing written
    p = record_headline("x", {"nan": float("nan"), "arr": __import__("numpy").arange(2)}, out=tmp_path)
    assert json.loads(p.read_text())["values"] == {"nan": None, "arr": [0, 1]}
    with pytest.raises(WorkbenchError, match="headline name"):
        record_headline("../evil", {}, out=tmp_path)
