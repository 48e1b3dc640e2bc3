"""`workbench accept/diagnose/tune --temperature ...`: the sampling flags reach the library, results are
labelled with them, the lossy-threshold and rejection-sampling modes say what they cost, wrong data is
named once."""

from __future__ import annotations

import json

import pytest
from conftest import save_world, tiny_draft, tiny_target
from test_sampled import sampled_rows

from workbench.cli import main
from workbench.core.sampling import Sampling


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def world(tmp_path_factory, one_thread):
    target = tiny_target(0)
    draft = tiny_draft(target, (0, 1, 2), trained=["L0", "L1", "L2"], seed=3)
    rows = sampled_rows(target, 6, 12, Sampling(temperature=0.7))
    folder = save_world(tmp_path_factory.mktemp("cli21"), target, {"draft": draft}, rows)
    greedy = [{k: v for k, v in r.items() if k != "generation"} | {"generation": {"by": "target", "temperature": 0}}
              for r in rows]
    save_world(folder, rows=greedy, data="greedy.jsonl")
    return folder


def args(folder, data="data.jsonl"):
    return ["--target", str(folder / "target"), "--draft", str(folder / "draft"), "--data", str(folder / data),
            "--wiring", "L0,L1,L2", "--quiet"]


def test_accept_at_temperature_with_lossy_thresholds_and_rejection(world, capsys):
    out = world / "acc.json"
    rc = main(["accept", *args(world), "--steps", "3", "--temperature", "0.7",
               "--speculative-accept-threshold-acc", "0.5", "--speculative-use-rejection-sampling",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "temperature 0.7" in text and "per depth (Rao–Blackwellised" in text
    assert "extra target forward" in text and "lossy thresholds (single 1, acc 0.5)" in text
    assert "rejection-sampling chain" in text and "the settings this run evaluates" in text
    js = json.loads(out.read_text())
    assert js["setting"]["temperature"] == 0.7 and js["per_depth"]["n_starts"] == js["n_chains"]
    kinds = [m["estimator"][:20] for m in js["served_modes"]]
    assert len(kinds) == 2 and js["served_modes"][0]["cost"]["target_forwards"] >= 1


def test_accept_names_greedy_data_at_temperature_once(world, capsys):
    rc = main(["accept", *args(world, "greedy.jsonl"), "--steps", "2", "--eagle-topk", "2", "--num-draft-tokens", "4",
               "--temperature", "0.7", "--top-p", "0.9"])
    text = capsys.readouterr().out
    assert rc == 0
    assert text.count("evaluates sampling at T=0.7 top_p=0.9, but no sample records being sampled") == 1


def test_bad_sampling_flags_are_one_line_errors(world, capsys):
    assert main(["accept", *args(world), "--temperature", "-1"]) == 2
    assert "--temperature -1" in capsys.readouterr().err
    assert main(["accept", *args(world), "--top-k", "0"]) == 2
    assert "--top-k 0" in capsys.readouterr().err
    assert main(["accept", *args(world), "--speculative-use-rejection-sampling", "--eagle-topk", "2",
                 "--num-draft-tokens", "3", "--temperature", "0.7"]) == 2
    assert "chain" in capsys.readouterr().err


def test_diagnose_and_tune_take_the_sampling_flags(world, capsys):
    rc = main(["diagnose", *[a for a in args(world) if a not in ("--wiring", "L0,L1,L2")], "--steps", "2",
               "--temperature", "0.7", "--top-k", "8", "--json", str(world / "dx.json")])
    text = capsys.readouterr().out
    assert rc in (0, 1) and "temperature 0.7" in text
    assert json.loads((world / "dx.json").read_text())["setting"]["top_k"] == 8
    rc = main(["tune", *args(world), "--steps", "1,2", "--eagle-topk", "1,2", "--max-draft-tokens", "4",
               "--temperature", "0.7", "--json", str(world / "sw.json")])
    assert rc == 0, capsys.readouterr()
    sw = json.loads((world / "sw.json").read_text())
    assert "0.7" in json.dumps(sw)
