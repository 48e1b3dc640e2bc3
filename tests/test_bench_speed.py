"""Issue 57: the speed benchmark reruns from its own command, its docs come from its file, and its accuracy is
checked on what a real server measured.

- ``bench.speed`` into an empty folder on the smoke demo (loopback stand-in servers: the command's bookkeeping,
  not the speed): it makes the fixed draft itself and writes every (draft, K) row its settings name;
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
SWEEPS = sorted((ROOT / "bench").glob("vllm-speed*.json"))


def test_the_speed_benchmark_reruns_into_an_empty_folder(smoke_demo, tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "QUICK", {**speed.QUICK, "ks": [1, 2]})
    out = tmp_path / "empty" / "vllm-speed.json"
    stand = Stand(smoke_demo)
    figs = speed.measure(smoke_demo, quick=True, out=out, start=stand.start, stop=stand.stop)
    state = json.loads(out.read_text())
    assert state["complete"] and not stand.live
    assert sorted((r["draft"], r["k"]) for r in state["rows"]) == [
        ("draft-mismatched", 1), ("draft-mismatched", 2), ("draft-mismatched-fixed", 1), ("draft-mismatched-fixed", 2)]
    fixed = json.loads((tmp_path / "empty" / "vllm-speed-drafts" / "draft-mismatched-fixed" / "config.json").read_text())
    assert fixed["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]      # vLLM then feeds the trained embed,L1,L3
    served = {r["draft"]: r["served_wiring"] for r in state["rows"]}
    assert served == {"draft-mismatched": "L0,L2,L3", "draft-mismatched-fixed": "embed,L1,L3"}
    assert {f["key"] for f in figs} >= {"speed_predicted_error", "speed_sign_right"}
    again = Stand(smoke_demo)                             # the same command again: everything resumed
    speed.measure(smoke_demo, quick=True, out=out, start=again.start, stop=again.stop)
    assert again.started == []


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
