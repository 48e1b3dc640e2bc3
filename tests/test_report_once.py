"""Issue 58: the report a colleague reads. One engine's answer with measured tokens/s (the demo's own sweep on the
one-line fix it makes), other engines in one table, nothing said twice, no empty section, words a reader can use.
The executed pages are checked in test_notebooks.py; these are the parts, each on its own."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from workbench.core.errors import WorkbenchError
from workbench.engines.ids_fix import fixed_copy
from workbench.engines.records import wiring_for
from workbench.report.export import Page
from workbench.report.index_page import GLOSSARY, about_html, engines_card, live_line, write_index
from workbench.report.sections import ABSENT_KEY, leave_out_absent


def _n_layers(demo: Path) -> int:
    return json.loads((demo / "target" / "config.json").read_text())["num_hidden_layers"]


def test_the_one_line_fix_is_a_copy_vllm_reads_as_the_trained_taps_and_the_source_is_untouched(smoke_demo, tmp_path):
    d = Path(smoke_demo)
    src = d / "draft-mismatched"
    before = (src / "config.json").read_text()
    cfg = json.loads(before)
    trained = ",".join(cfg["workbench"]["trained_taps"]) if "workbench" in cfg else None
    out = fixed_copy(src, d / "target", tmp_path)
    assert out == tmp_path / "draft-mismatched-fixed" and (src / "config.json").read_text() == before
    fixed = json.loads((out / "config.json").read_text())
    served = wiring_for("vllm", fixed, _n_layers(d)).spec
    assert served != wiring_for("vllm", cfg, _n_layers(d)).spec
    if trained:
        assert served == trained
    stamp = (out / ".made-from.json").stat().st_mtime_ns
    assert fixed_copy(src, d / "target", tmp_path) == out and (out / ".made-from.json").stat().st_mtime_ns == stamp
    with pytest.raises(WorkbenchError, match="cannot feed the embedding"):      # SGLang: no one-line fix
        fixed_copy(src, d / "target", tmp_path, engine="sglang")
    bare = tmp_path / "bare"
    shutil.copytree(src, bare)
    c = json.loads((bare / "config.json").read_text())
    c.pop("workbench", None)
    (bare / "config.json").write_text(json.dumps(c))
    with pytest.raises(WorkbenchError, match=r"bare/config.json: no record of the taps it was trained on"):
        fixed_copy(bare, d / "target", tmp_path)


def _small_demo(smoke_demo, tmp_path) -> Path:
    demo = tmp_path / "demo"
    demo.mkdir()
    for name in ("target", "draft-mismatched", "draft-aligned"):   # the stand-in baseline serves draft-aligned
        shutil.copytree(Path(smoke_demo) / name, demo / name)
    shutil.copy(Path(smoke_demo) / "val.jsonl", demo / "val.jsonl")
    return demo


def test_the_demo_measures_tokens_per_s_as_served_and_with_the_fix_and_every_answer_quotes_them(
        smoke_demo, tmp_path, monkeypatch):
    """``make demo``'s sweep (workbench.demo.speed) through ``vllm speed``'s own path, on stand-in servers here:
    the baseline, the shape twin, the draft as served and its one-line fix; every offline answer then quotes the
    same sentence; a sweep of another key is kept aside, never overwritten silently."""
    import workbench as wb
    from workbench.demo import speed
    from workbench.live import vllm_speed
    from workbench.testing.fake_vllm import Stand

    demo = _small_demo(smoke_demo, tmp_path)
    monkeypatch.setattr(speed, "SETTINGS", {"rows": 2, "max_tokens": 8, "repeats": 2, "concurrency": 2})
    stand = Stand(demo)
    out = speed.measure(demo, 2, start=stand.start, stop=stand.stop)
    assert out == demo / "vllm-speed.json" and not stand.live
    state = json.loads(out.read_text())
    assert sorted({r["draft"] for r in state["rows"]}) == ["draft-mismatched", "draft-mismatched-fixed"]
    fixed = next(r for r in state["rows"] if r["draft"] == "draft-mismatched-fixed")
    assert fixed["served_wiring"] == fixed["trained_wiring"]            # the fix feeds the trained taps
    said = vllm_speed.measured_words(state, "draft-mismatched", k=2)
    assert said.startswith("measured on vLLM 0.32.0, K=2, 2 prompts x 8 tokens, 2 passes: ") and \
        "with the one-line fix" in said and "At 2 requests in flight: " in said
    run = wb.diagnose(demo / "target", demo / "draft-mismatched", demo / "val.jsonl", engine="vllm", K=2, limit=6)
    assert f"Tokens/s {said}." in run.answer.cost
    sg = wb.diagnose(demo / "target", demo / "draft-mismatched", demo / "val.jsonl", engine="sglang", K=2, limit=6)
    assert "Tokens/s: not measured here" in sg.answer.cost           # a vLLM's tokens/s never answer for SGLang
    # the same sweep again: nothing measured (resumed); another setting: the old file kept aside, measured again
    n = len(stand.started)
    speed.measure(demo, 2, start=stand.start, stop=stand.stop)
    assert len(stand.started) == n
    monkeypatch.setattr(speed, "SETTINGS", {"rows": 2, "max_tokens": 8, "repeats": 1, "concurrency": 2})
    speed.measure(demo, 2, start=stand.start, stop=stand.stop)
    assert json.loads((demo / "vllm-speed.previous.json").read_text())["rows"] == state["rows"]
    assert json.loads(out.read_text())["settings"]["repeats"] == 1


def test_without_a_real_vllm_the_demo_measures_nothing_and_says_why_in_one_line(tmp_path, monkeypatch):
    from workbench.demo import speed

    monkeypatch.setattr(speed.vllm_server, "available", lambda: (False, "no .venv-vllm (make vllm)"))
    said = []
    assert speed.measure(tmp_path, 4, say=said.append) is None
    assert said == ["note: tokens/s not measured: no .venv-vllm (make vllm)"]


def test_a_section_whose_input_is_absent_is_left_out_and_listed_at_the_end():
    v4 = nbformat.v4
    absent_out = v4.new_output("display_data", data={"text/markdown": "*X*: not in this report. run y"},
                               metadata={ABSENT_KEY: {"section": "X", "how": "run `y`"}})
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell("## Kept"), v4.new_code_cell("a()", outputs=[v4.new_output("stream", text="ok\n")]),
        v4.new_markdown_cell("## X"), v4.new_markdown_cell("words about X"),
        v4.new_code_cell("x.show()", outputs=[absent_out]), v4.new_code_cell("x.plot()"),
        v4.new_markdown_cell("## After"), v4.new_code_cell("b()")])
    assert leave_out_absent(nb) == ["- **X**: run `y`"]
    assert [c.source for c in nb.cells] == ["## Kept", "a()", "## After", "b()",
                                            "## Not in this report\n- **X**: run `y`"]
    assert leave_out_absent(nb) == []                                  # nothing absent: nothing changes


def _pages(tmp_path, *, matched="L0,L2,L3"):
    answer = {"the server feeds": "vLLM V1 (current) feeds the draft `L0,L2,L3`.", "what it costs": "accept length "
              "1.20 instead of 2.10. Tokens/s measured on vLLM 0.32.0, K=3: 10.0 tokens/s as served.",
              "the fix": "set `eagle_aux_hidden_state_layer_ids (top level)` to `[0, 2, 4]`", "command": "python -c x",
              "the evidence": "this page: all of it"}
    others = [{"engine": "SGLang (current)", "taps it feeds": "L1,L3,L4", "accept length": "1.10 [95% 1.0–1.2]",
               "the fix": "rewire or retrain, not measured here", "source": "from the record"}]
    three = Page(name="03_acceptance", title="Acceptance", description="", status="ok")
    three.headline = {"answer": answer, "vllm wiring": "L0,L2,L3", "if you serve with": others}
    four = Page(name="04_live_server", title="Live server", description="", status="ok")
    four.headline = {"answer": {**answer, "the evidence": "live"}, "server": "a real vLLM", "server engine": "vllm",
                     "matched wiring": matched, f"identical · {matched}": "16/16"}
    return [three, four]


def test_the_index_answers_once_for_one_engine_with_the_live_check_the_other_engines_and_a_glossary(
        smoke_demo, tmp_path):
    pages = _pages(tmp_path)
    index = write_index(tmp_path, pages, parameters={"demo": str(smoke_demo), "size": "smoke", "engine": "vllm"})
    text = index.read_text()
    words = " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())
    assert text.count('class="answer"') == 1 and "Parameters:" not in text and "='" not in text
    assert "Every answer is for <b>vLLM V1 (current)</b>" in text
    assert f"{_n_layers(Path(smoke_demo))} layers, hidden size" in text and "toy target" in words
    assert "<dt>Checked live</dt>" in text and "fed L0,L2,L3 on 16/16 requests" in words and "confirmed" in words
    assert text.count("If you serve with another engine") == 1 and "SGLang (current)" in words
    assert "if you serve with" not in text                              # the rows are a table, not a card's line
    for term, said in GLOSSARY:
        assert f"<dt>{term}</dt>" in text and " ".join(said.replace("`", "").split()) in words
        assert said.endswith("."), f"the glossary's {term!r} stops mid-sentence"
    assert live_line(_pages(tmp_path, matched="L1,L3,L4"), "L0,L2,L3").endswith("not the L0,L2,L3 its record says.")
    assert live_line(pages[:1], "L0,L2,L3") == "" and engines_card([]) == ""
    assert live_line(pages, "L1,L3,L4", "sglang").startswith("not checked live: page 04 checked a vLLM V1 (current)")
    assert about_html({}) == ""
