"""Issue 57: the speed benchmark reruns from its own command, its docs come from its file, and its accuracy is
checked on what a real server measured.

- ``bench.speed`` into an empty folder on the smoke demo (loopback stand-in servers: the command's bookkeeping,
  not the speed): it makes the fixed draft (and the 16x96 sweep's long-reply rows) itself and writes every
  (draft, K) row its settings name (the foreign sweep needs the trainers' exports: not here);
- ``docs/bench.md``'s speed rows are what ``workbench bench`` prints from ``bench/vllm-speed.json``;
- every checked-in sweep of a real vLLM (``bench/vllm-speed*.json``) predicted again by the current code from
  the recorded twin passes (:func:`workbench.live.vllm_speed.replay`) is within the benchmark's goal: a change to
  the cost arithmetic that moves predictions away from what the server measured fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import speed
from workbench.live.vllm_speed import replay
from workbench.report import benchmark
from workbench.testing.fake_vllm import Stand

ROOT = Path(__file__).resolve().parents[1]
# the real demo's sweeps, held to bench/speed.py's goal; the default demo's toy sweep (vllm-speed-demo.json, what
# `make demo` quotes) is measured for its tokens/s, and its twin's errors (15-19% there) are reported in
# docs/bench.md, not held to the goal
SWEEPS = sorted(p for p in (ROOT / "bench").glob("vllm-speed*.json") if p.name != "vllm-speed-demo.json")


@pytest.mark.parametrize("name", ["main", "warmup", "demo", "16x96"])
def test_each_speed_benchmark_reruns_into_an_empty_folder(name, smoke_demo, tmp_path, monkeypatch):
    ks = [1, 2] if name == "main" else [1]
    monkeypatch.setattr(speed, "QUICK", {**speed.QUICK, "ks": ks, "in_process": False})
    out = tmp_path / "empty" / speed.SWEEPS[name][2]
    stand = Stand(smoke_demo)
    figs = speed.measure(smoke_demo, quick=True, out=out, sweep_name=name, start=stand.start, stop=stand.stop)
    state = json.loads(out.read_text())
    assert state["complete"] and not stand.live
    drafts = [d.split(":", 1)[1] + "-fixed" if d.startswith("fixed:") else d for d in speed.SWEEPS[name][0]]
    assert sorted((r["draft"], r["k"]) for r in state["rows"]) == sorted((d, k) for d in drafts for k in ks)
    served = {r["draft"]: r["served_wiring"] for r in state["rows"]}
    assert served["draft-mismatched"] == "L0,L2,L3"
    if "draft-mismatched-fixed" in served:                 # the fix the command made: vLLM feeds the trained taps
        fixed = json.loads((out.parent / f"{out.stem}-drafts" / "draft-mismatched-fixed" / "config.json").read_text())
        assert fixed["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
        assert served["draft-mismatched-fixed"] == "embed,L1,L3"
    assert {f["key"] for f in figs} >= {"speed_predicted_error", "speed_sign_right"}
    if speed.SWEEPS[name][1].get("long_rows"):           # the rows whose reply holds the sweep's tokens, made by it
        n_tok = speed.QUICK["max_tokens"]
        assert state["settings"]["data"].endswith(f"val-{n_tok}.jsonl") and state["settings"]["max_tokens"] == n_tok
    again = Stand(smoke_demo)                             # the same command again: everything resumed
    speed.measure(smoke_demo, quick=True, out=out, sweep_name=name, start=again.start, stop=again.stop)
    assert again.started == []


def test_a_sweep_at_a_longer_reply_keeps_the_rows_that_have_it(smoke_demo, tmp_path):
    rows = speed.long_rows(smoke_demo / "val.jsonl", 16, tmp_path)
    lines = [json.loads(x) for x in rows.read_text().splitlines()]
    assert lines and all(sum(r["loss_mask"]) >= 16 for r in lines)
    every = [json.loads(x) for x in (smoke_demo / "val.jsonl").read_text().splitlines()]
    assert len(lines) == sum(sum(r["loss_mask"]) >= 16 for r in every)


def test_the_docs_demo_speed_table_is_the_file():
    """Issue 58: docs/bench.md's table of what `make demo` measures is bench/vllm-speed-demo.json, rendered."""
    table = speed.render(json.loads((ROOT / "bench" / "vllm-speed-demo.json").read_text()))
    assert table in (ROOT / "docs" / "bench.md").read_text()


def test_the_docs_speed_rows_are_the_files():
    rows = benchmark.markdown_table(speed.last_figures(ROOT / "bench" / "vllm-speed.json")).splitlines()[2:]
    doc = (ROOT / "docs" / "bench.md").read_text()
    assert rows and all(r in doc for r in rows), "\n".join(r for r in rows if r not in doc)


@pytest.mark.parametrize("path", SWEEPS, ids=[p.name for p in SWEEPS])
def test_recorded_real_server_sweeps_are_predicted_within_the_goal(path):
    state = json.loads(path.read_text())
    again = replay(state)
    assert again and len(again) == len(state["rows"])
    worst = max(abs(r["error"]) for r in again)
    assert worst <= 0.10, again                          # the goal bench/speed.py states


def test_the_docs_speed_figure_is_drawn_from_the_file(tmp_path, capsys):
    """docs/img/04-speed-real.png is `python -m bench.speed --figure` of bench/vllm-speed.json; a broken file is one
    line, exit 2."""
    assert speed.main(["--figure", str(tmp_path / "f.png")]) == 0
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.json").write_text("{")
    assert speed.main(["--figure", str(tmp_path / "g.png"), "--json", str(tmp_path / "bad.json")]) == 2
    assert "bad.json" in capsys.readouterr().err and not (tmp_path / "g.png").exists()


def test_the_docs_foreign_speed_table_is_the_file():
    """docs/foreign-drafts.md's served table is bench/vllm-speed-foreign.json (`--sweep foreign`), rendered."""
    table = speed.render(json.loads((ROOT / "bench" / "vllm-speed-foreign.json").read_text()))
    assert table in (ROOT / "docs" / "foreign-drafts.md").read_text()


def test_the_docs_warmup_speed_table_is_the_file():
    """docs/vllm.md's warm-up table is bench/vllm-speed-warmup.json (`--sweep warmup`), rendered."""
    table = speed.render(json.loads((ROOT / "bench" / "vllm-speed-warmup.json").read_text()))
    assert table in (ROOT / "docs" / "vllm.md").read_text()


def test_the_docs_16x96_speed_table_is_the_file():
    """docs/vllm.md's table at the issue's size is bench/vllm-speed-16x96.json (`--sweep 16x96`), rendered."""
    table = speed.render(json.loads((ROOT / "bench" / "vllm-speed-16x96.json").read_text()))
    assert table in (ROOT / "docs" / "vllm.md").read_text()
