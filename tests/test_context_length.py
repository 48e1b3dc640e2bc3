"""Accept length by position in the context (workbench/stats/context_length.py): the binned fast path equals the
plain loop, on a small hand-made result and on a real simulation of the smoke demo; its figure passes the layout
check; `workbench accept --by-position N` prints and writes it (docs/context-length.md)."""

import json
import math

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.report.context_figure import position_figure
from workbench.report.layout import layout_problems
from workbench.stats.context_length import by_position, by_position_reference
from workbench.stats.statistics import AcceptanceResult


def small_result(n=400, seed=0, K=4):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 300, n)
    return AcceptanceResult.from_arrays("L1,L2,L3", K=K, sample=rng.integers(0, 12, n), t=t,
                                        accepted=np.minimum(rng.integers(0, K + 1, n), 1 + t // 100),
                                        on_path=rng.random(n) < 0.4)


def agree(table, ref):
    assert [(r["start"], r["end"], r["n_chains"], r["n_samples"]) for r in table.rows] == \
        [(r["start"], r["end"], r["n_chains"], r["n_samples"]) for r in ref]
    for a, b in zip(table.rows, ref):
        assert math.isclose(a["accept_length"], b["accept_length"], rel_tol=0, abs_tol=1e-12)


@pytest.mark.parametrize("width", [1, 7, 64, 256, 1000])
@pytest.mark.parametrize("estimator", ["every-position", "decode-path"])
def test_binning_equals_the_plain_loop(width, estimator):
    r = small_result()
    agree(by_position(r, width, estimator=estimator, n_boot=50), by_position_reference(r, width, estimator=estimator))


def test_a_hand_counted_example():
    r = AcceptanceResult.from_arrays("x", K=3, sample=[0, 0, 1, 1, 2], t=[0, 5, 9, 10, 25], accepted=[3, 1, 0, 2, 1])
    rows = by_position(r, 10, n_boot=100).rows
    assert [(x["start"], x["n_chains"], x["n_samples"], x["accept_length"]) for x in rows] == [
        (0, 3, 2, (3 + 1 + 0) / 3 + 1), (10, 1, 1, 3.0), (20, 1, 1, 2.0)]    # the 10..19 bin: one chain
    assert rows[1]["low"] == rows[1]["high"] == 3.0                         # one sample: no spread


def test_bins_add_up_to_the_result_and_intervals_hold_the_estimate():
    r = small_result(seed=3)
    tb = by_position(r, 50)
    assert sum(x["n_chains"] for x in tb.rows) == r.n_chains
    pooled = sum((x["accept_length"] - 1) * x["n_chains"] for x in tb.rows) / r.n_chains + 1
    assert math.isclose(pooled, r.accept_length, rel_tol=1e-12)
    assert all(x["low"] <= x["accept_length"] <= x["high"] for x in tb.rows)
    assert by_position(r, 50).rows == tb.rows                              # seeded: the same intervals
    assert tb.max_t == int(r.chains["t"].max())
    # the designed drop: A <= 1 + t // 100, so the last bins accept more than the first
    assert tb.rows[0]["accept_length"] < tb.rows[-1]["accept_length"]
    doc = tb.to_dict()
    assert doc["width"] == 50 and doc["accept_label"].startswith("accept length (every position")
    assert "by chain start t (bins of 50 tokens" in tb.summary()


def test_bad_input_is_one_line_error():
    r = small_result()
    for bad in (0, -3, 2.5, True):
        with pytest.raises(WorkbenchError, match="expected a positive number of tokens per bin"):
            by_position(r, bad)
    with pytest.raises(WorkbenchError, match="estimator='tree'"):
        by_position(r, 8, estimator="tree")
    with pytest.raises(WorkbenchError, match="expected an AcceptanceResult"):
        by_position({"t": [1]}, 8)
    empty = AcceptanceResult.from_arrays("x", K=2, sample=[], t=[], accepted=[])
    assert by_position(empty, 8).rows == [] and "(no counted chains)" in by_position(empty, 8).summary()


@pytest.fixture(scope="module")
def smoke_results(smoke_demo):
    """Both smoke drafts simulated under the wiring SGLang feeds them (chain K=4, greedy)."""
    from workbench.simulate.acceptance import accept

    out = {}
    for name in ("draft-aligned", "draft-mismatched"):
        out[name], _ = accept(smoke_demo / "target", smoke_demo / name, smoke_demo / "val.jsonl", engine="sglang",
                              K=4, progress=False, acc_topk=0)
    return out


def test_binning_equals_the_plain_loop_on_a_real_simulation(smoke_results):
    for r in smoke_results.values():
        for width in (4, 8, 16):
            for est in ("every-position", "decode-path"):
                agree(by_position(r, width, estimator=est, n_boot=100), by_position_reference(r, width, estimator=est))
        assert sum(x["n_chains"] for x in by_position(r, 8).rows) == r.n_chains


def test_the_figure_passes_the_layout_check(smoke_results):
    tables = {name: by_position(r, 8, n_boot=200) for name, r in smoke_results.items()}
    for kw in ({}, {"max_positions": 16}, {"max_positions": 512}):
        fig = position_figure(tables, **kw)
        assert layout_problems(fig) == [], kw
    fig = position_figure(next(iter(tables.values())))
    assert layout_problems(fig) == []
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["L1,L3,L4  (208 chains)"]
    with pytest.raises(WorkbenchError, match="expected a PositionTable"):
        position_figure({"x": smoke_results["draft-aligned"]})


def test_accept_by_position_on_the_cli(smoke_demo, tmp_path, capsys):
    from workbench.cli import main

    js, png = tmp_path / "acc.json", tmp_path / "pos.png"
    argv = ["accept", "--target", str(smoke_demo / "target"), "--draft", str(smoke_demo / "draft-aligned"),
            "--data", str(smoke_demo / "val.jsonl"), "--engine", "sglang", "--quiet", "--by-position", "8",
            "--by-position-figure", str(png), "--json", str(js)]
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "by chain start t (bins of 8 tokens; 95% bootstrap over samples)" in out
    assert "the draft's max_position_embeddings: 512" in out
    doc = json.loads(js.read_text())
    assert doc["by_position"]["width"] == 8
    assert sum(r["n_chains"] for r in doc["by_position"]["rows"]) == doc["n_chains"]
    assert png.stat().st_size > 1000
    assert main(argv[:-4] + ["--by-position", "0"]) == 2
    assert "--by-position 0: expected a positive number" in capsys.readouterr().err
    assert main([a for a in argv if a not in ("--by-position", "8")]) == 2
    assert "--by-position-figure needs --by-position N" in capsys.readouterr().err
