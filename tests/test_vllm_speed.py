"""`workbench vllm speed`: the sweep's bookkeeping against loopback stand-ins (rows, resume, a server that dies,
every server stopped), its arithmetic (step cost, prediction, noise, best K), and against a real vLLM on the
smoke demo (the server's timers, a prediction from the twin's costs alone; its accuracy is the benchmark's)."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.live import vllm_speed as vs
from workbench.testing.fake_vllm import Stand, serve


def test_step_cost_splits_each_pass_at_the_servers_own_decode_timer():
    """A server whose passes spend 4 s outside the verify steps and 0.2 s per step, against 10 s baseline passes:
    fixed 0.4 and 0.02 per step in baseline units, whatever the number of steps; without timers the whole wall goes
    on the steps, and the cost says so."""
    passes = [{"baseline_wall": 10.0, "wall": 4.0 + 0.2 * s, "decode": 0.2 * s, "steps": s} for s in (30, 40, 50)]
    assert vs.step_cost(passes) == {"fixed": 0.4, "per_step": 0.02, "source": "server timers"}
    blind = vs.step_cost([{**p, "decode": None} for p in passes])
    assert blind["fixed"] == 0.0 and blind["per_step"] > 0.02 and "no vllm:request_decode_time_seconds" in blind["source"]
    with pytest.raises(WorkbenchError, match="no request reported a verify step"):
        vs.step_cost([{"baseline_wall": 1.0, "wall": 1.0, "decode": 1.0, "steps": 0}])


def test_prediction_counts_the_prefills_token_and_speeds_up_with_the_accept_length():
    # 2 requests of 61 tokens: 60 from verify steps each; accept length 3 -> 40 steps in all
    assert vs.verify_steps([61, 61], accept_length=3.0) == 40.0
    cost = {"fixed": 0.4, "per_step": 0.02}
    assert vs.predict_speedup(cost, 40.0) == round(1 / 1.2, 4)
    assert vs.predict_speedup(cost, vs.verify_steps([61], 4.0)) > vs.predict_speedup(cost, vs.verify_steps([61], 2.0))
    assert math.isnan(vs.verify_steps([61], 0.0))


def test_the_fake_servers_timers_split_a_pass_like_vllms(smoke_demo):
    """The loopback stand-in reports vLLM's request timers; a one-at-a-time pass reads them around each request
    and keeps the reads out of its wall time."""
    from workbench.live.vllm_live import Client

    with serve(smoke_demo / "target", smoke_demo / "draft-aligned", K=2) as url:
        p = vs.one_pass(Client(url), [[5, 6, 7], [8, 9, 10, 11]], 6)
    assert [r[0] for r in p.requests] == [6, 6] and all(r[2] > 0 and r[4] is not None for r in p.requests)
    t = p.totals()
    assert 0 < t["decode"] <= t["wall"] and t["steps"] == sum(r[2] for r in p.requests)


def _pass(tps: float, n: int = 64) -> vs.Pass:
    return vs.Pass(1, n / tps, [(n, n / tps, 0)])


def test_a_spread_that_straddles_no_speculation_is_too_noisy_and_ranks_no_k():
    cmp = vs.compare_passes([_pass(50), _pass(50), _pass(50)], [_pass(40), _pass(60), _pass(52)])
    assert cmp["too_noisy"] and vs.verdict(cmp["measured_speedup"], cmp["too_noisy"]).startswith("too noisy")
    clear = vs.compare_passes([_pass(48), _pass(50), _pass(49)], [_pass(32), _pass(33), _pass(31)])
    assert not clear["too_noisy"] and vs.verdict(clear["measured_speedup"]).startswith("slower")
    # CI on an AVX-512 machine: ratios 0.81, 0.85, 1.04 (median 0.85, far from 1) - one pass of three says faster,
    # so the passes call no side (paired t test on the log ratios p = 0.28) and no prediction is judged against them
    split = vs.compare_passes([_pass(100), _pass(100), _pass(100)], [_pass(81), _pass(85), _pass(104)])
    assert split["too_noisy"] and (split["passes_faster"], split["passes_slower"]) == (1, 2)
    assert vs.sign_right(1.07, split["measured_speedup"], split["too_noisy"]) is None
    # eight of nine passes slower, the ninth barely faster: the t test calls it (p < 0.001)
    many = vs.compare_passes([_pass(100)] * 9, [_pass(x) for x in (70, 72, 75, 71, 74, 73, 76, 70, 101)])
    assert not many["too_noisy"] and vs.verdict(many["measured_speedup"]).startswith("slower")
    rows = [{"k": 1, "measured_tokens_per_s": 40, "measured_spread": {"min": 35, "max": 45},
             "predicted_tokens_per_s": 41, "predicted_tokens_per_s_trained": 60},
            {"k": 2, "measured_tokens_per_s": 42, "measured_spread": {"min": 38, "max": 47},
             "predicted_tokens_per_s": 43, "predicted_tokens_per_s_trained": 55}]
    best = vs.best_k(rows)
    assert best["measured"] is None and "too noisy to rank" in best["measured_note"]
    assert best["predicted_served"] == 2 and best["predicted_trained"] == 1


def test_a_machine_that_speeds_up_between_rows_does_not_move_the_prediction(smoke_demo, monkeypatch):
    """Costs are kept in units of the baseline pass measured beside them: a draft whose row ran twice as fast as its
    twin's calibration (the baseline too) is predicted exactly from the twin's passes, where raw seconds would
    predict half the speed."""
    fixed, per, n_tok, rows_n, slow = 3.0, 0.05, 49, 3, {"T": 1.0, "A": 1.0, "B": 0.5}   # B's row ran 2x faster
    acc = {"T": 1.0, "A": 1.2, "B": 1.6}
    base_wall = 12.0

    def row(d):
        steps = rows_n * (n_tok - 1) / acc[d]
        wall = (fixed + per * steps) * slow[d]
        return {"draft": d, "k": 2, "passes": [{"baseline_wall": base_wall * slow[d], "wall": wall,
                                                "decode": per * steps * slow[d], "steps": steps}] * 3,
                "baseline_tokens_per_s": rows_n * n_tok / (base_wall * slow[d]),
                "measured_tokens_per_s": rows_n * n_tok / wall, "measured_speedup": base_wall / (wall / slow[d]),
                "too_noisy": False}

    monkeypatch.setattr(vs, "offline", lambda tgt, path, cut, k, model=None, engine="vllm": {
        "served_accept_length": acc[path], "trained_accept_length": 2.0, "in_process_speedup": 1.0})
    state = {"rows": [row("A"), row("B")], "calibration": [row("T")], "twins": {"A": "T", "B": "T"}}
    vs._predict(state, smoke_demo / "target", {"A": "A", "B": "B"}, [None] * rows_n, n_tok, False, lambda m: None)
    for r in state["rows"]:
        assert r["calibrated_on"] == "T" and abs(r["predicted_error"]) < 1e-3, r
        assert "shape twin of " + r["draft"] in r["calibration"] and r["sign_margin"] == 0.0
    assert state["step_cost_spread"] == {"A": {"2": 0.0}, "B": {"2": 0.0}}
    assert state["step_costs"]["T"]["2"]["unit"] == "baseline pass seconds"


def test_a_row_is_never_predicted_from_its_own_passes(smoke_demo, monkeypatch):
    """One draft (the usual user's case): its row is predicted from its shape twin's server costs. Its own passes
    may say anything - the prediction does not move; a calibration on the passes it predicts would follow them."""
    monkeypatch.setattr(vs, "offline", lambda tgt, path, cut, k, model=None, engine="vllm": {
        "served_accept_length": 1.5, "trained_accept_length": 2.0, "in_process_speedup": 1.0})
    twin = {"draft": "twin-x", "k": 1, "passes": [{"baseline_wall": 10.0, "wall": 12.0, "decode": 8.0, "steps": 40}],
            "baseline_tokens_per_s": 10.0, "measured_tokens_per_s": 8.0, "measured_speedup": 0.8, "too_noisy": False}
    predicted = []
    for own in (6.0, 9.0, 14.0):                 # the draft's own decode seconds: three different measurements
        row = {**twin, "draft": "d", "passes": [{"baseline_wall": 10.0, "wall": own + 4, "decode": own, "steps": 30}],
               "measured_tokens_per_s": 100 / (own + 4)}
        state = {"rows": [row], "calibration": [dict(twin)], "twins": {"d": "twin-x"}}
        vs._predict(state, smoke_demo / "target", {"d": "d"}, [None] * 2, 31, False, lambda m: None)
        assert row["calibrated_on"] == "twin-x" != row["draft"]
        predicted.append(row["predicted_tokens_per_s"])
    assert len(set(predicted)) == 1, predicted
    with pytest.raises(WorkbenchError, match="no measured step cost of twin-x .* at K=1"):
        vs._predict({"rows": [row], "calibration": [], "twins": {"d": "twin-x"}}, smoke_demo / "target",
                    {"d": "d"}, [None] * 2, 31, False, lambda m: None)


def test_a_shape_twin_keeps_config_shapes_and_vocab_map_and_draws_new_weights(smoke_demo, tmp_path):
    """The twin an engine serves for the calibration: the draft's config.json byte for byte, every tensor's name,
    shape and dtype, the integer tensors (d2t/t2d) equal, every floating weight new; drafts that differ only in
    their layer ids share one; made once."""
    from safetensors.torch import load_file

    from workbench.model import shape_twin

    twin = shape_twin.make(smoke_demo / "draft-mismatched", tmp_path)
    assert (twin / "config.json").read_bytes() == (smoke_demo / "draft-mismatched" / "config.json").read_bytes()
    a = load_file(str(smoke_demo / "draft-mismatched" / "model.safetensors"))
    b = load_file(str(twin / "model.safetensors"))
    assert {k: (v.shape, v.dtype) for k, v in a.items()} == {k: (v.shape, v.dtype) for k, v in b.items()}
    ints = [k for k, v in a.items() if not v.is_floating_point()]
    assert ints and all(torch.equal(a[k], b[k]) for k in ints)
    floats = [k for k, v in a.items() if v.is_floating_point() and "norm" not in k]
    assert floats and not any(torch.equal(a[k], b[k]) for k in floats)
    assert shape_twin.make(smoke_demo / "draft-aligned", tmp_path) == twin      # other layer ids, the same shapes
    assert sorted(p.name for p in tmp_path.iterdir()) == [twin.name]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(WorkbenchError, match="empty: no \\*.safetensors weights"):
        shape_twin.make(empty, tmp_path)


def _sweep(demo, tmp_path, stand, ks=(1, 2), **kw):
    drafts = {"draft-aligned": demo / "draft-aligned", "draft-mismatched": demo / "draft-mismatched"}
    return vs.sweep(demo / "target", drafts, demo / "val.jsonl", ks, rows=2, max_tokens=8, repeats=2,
                    concurrency=2, out=tmp_path / "speed.json", in_process=False, start=stand.start,
                    stop=stand.stop, **kw)


def test_sweep_writes_a_row_per_draft_and_k_and_stops_every_server(smoke_demo, tmp_path):
    stand = Stand(smoke_demo)
    state = _sweep(smoke_demo, tmp_path, stand, ks=(2,))
    assert [(r["draft"], r["k"]) for r in state["rows"]] == [("draft-aligned", 2), ("draft-mismatched", 2)]
    assert not stand.live, "a server was left running"
    (twin,) = set(state["twins"].values())                 # the two drafts differ only in their layer ids
    assert [(r["draft"], r["k"]) for r in state["calibration"]] == [(twin, 2)]
    assert [(d and d.name, k) for _, d, k in stand.started] == [(None, 1), (twin, 2), ("draft-aligned", 2),
                                                                 ("draft-mismatched", 2)]
    for r in state["rows"]:
        assert {"measured_tokens_per_s", "predicted_tokens_per_s", "baseline_tokens_per_s", "draft", "k",
                "served_wiring", "served_accept_length", "verdict", "concurrency_2"} <= set(r)
        assert len(r["steps"]) == 2 * 2 and all(s > 0 for s, *_ in r["steps"])      # rows x repeats
        assert len(r["passes"]) == 2 and r["step_cost"]["source"] == "server timers"
    # vLLM reads the mismatched draft's nested ids [1,3,4] as L0,L2,L3
    assert next(r for r in state["rows"] if r["draft"] == "draft-mismatched")["served_wiring"] == "L0,L2,L3"
    saved = json.loads((tmp_path / "speed.json").read_text())
    assert saved["complete"] and saved["rows"] == json.loads(json.dumps(state["rows"]))
    assert set(saved["step_costs"]) == {twin} and set(saved["step_costs"][twin]) == {"2"}
    assert set(saved["step_cost_spread"]) == {"draft-aligned", "draft-mismatched"}
    assert set(saved["best_k"]) == {"draft-aligned", "draft-mismatched"}
    # each row is predicted from its shape twin's step cost: never fitted on the requests it predicts
    assert {r["calibrated_on"] for r in state["rows"]} == {twin}
    assert (tmp_path / "speed-twins" / twin / "config.json").is_file()
    assert f"from the step cost of its shape twin {twin}" in vs.table(state)


def test_a_server_that_dies_names_draft_and_k_keeps_the_rows_and_the_sweep_resumes(smoke_demo, tmp_path):
    stand = Stand(smoke_demo, die_at=3)            # the third speculative server (after the twin's): draft-mismatched
    with pytest.raises(WorkbenchError, match=r"draft draft-mismatched at K=2: .*2 finished rows kept"):
        _sweep(smoke_demo, tmp_path, stand, ks=(2,))
    assert not stand.live
    kept = json.loads((tmp_path / "speed.json").read_text())
    assert [(r["draft"], r["k"]) for r in kept["rows"]] == [("draft-aligned", 2)] and len(kept["calibration"]) == 1
    again = Stand(smoke_demo)
    state = _sweep(smoke_demo, tmp_path, again, ks=(2,))
    assert [(d is not None and d.name, k) for _, d, k in again.started] == [(False, 1), ("draft-mismatched", 2)]
    assert len(state["rows"]) == 2 and state["complete"]          # only the missing row was measured


def test_a_sweep_resumes_only_what_it_would_measure_again(smoke_demo, tmp_path):
    """Issue 57: the resume key holds the drafts' bytes, the Ks, the machine, the vLLM release; not paths."""
    stand = Stand(smoke_demo, die_at=3)
    with pytest.raises(WorkbenchError, match="2 finished rows kept"):
        _sweep(smoke_demo, tmp_path, stand, ks=(2,))
    with pytest.raises(WorkbenchError, match=r"speed.json: a sweep of another ks; use another --json or remove it"):
        _sweep(smoke_demo, tmp_path, Stand(smoke_demo), ks=(1, 2))
    demo = tmp_path / "moved"                              # the same bytes elsewhere: resumed
    for name in ("target", "draft-aligned", "draft-mismatched"):
        shutil.copytree(smoke_demo / name, demo / name)
    shutil.copy(smoke_demo / "val.jsonl", demo / "val.jsonl")
    with pytest.raises(WorkbenchError, match=r"its 2 rows were measured on vLLM 0.32.0, this server is vLLM 0.31.0"):
        _sweep(demo, tmp_path, Stand(smoke_demo, version="0.31.0"), ks=(2,))
    weights = demo / "draft-mismatched" / "model.safetensors"     # one byte at the end of a tensor's data
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(WorkbenchError, match=r"a sweep of another drafts;"):
        _sweep(demo, tmp_path, Stand(smoke_demo), ks=(2,))


def test_bad_input_is_reported_before_any_server_starts(smoke_demo, tmp_path):
    stand = Stand(smoke_demo)
    with pytest.raises(WorkbenchError, match="--draft nope .*no config.json"):
        vs.sweep(smoke_demo / "target", {"nope": tmp_path / "nope"}, smoke_demo / "val.jsonl", [1],
                 start=stand.start, stop=stand.stop)
    with pytest.raises(WorkbenchError, match="fewer than --max-tokens 999"):
        vs.sweep(smoke_demo / "target", {"a": smoke_demo / "draft-aligned"}, smoke_demo / "val.jsonl", [1],
                 max_tokens=999, start=stand.start, stop=stand.stop)
    broken = tmp_path / "broken"                        # a draft vLLM would refuse: the loader says why, no server
    shutil.copytree(smoke_demo / "draft-aligned", broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg["architectures"] = []
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WorkbenchError, match="broken/config.json: architectures is \\[\\]"):
        vs.sweep(smoke_demo / "target", {"b": broken}, smoke_demo / "val.jsonl", [1], start=stand.start,
                 stop=stand.stop)
    assert stand.started == []


@pytest.mark.slow
def test_real_vllm_speed_is_predicted_from_the_twins_costs_alone(smoke_demo, tmp_path):
    """A real vLLM on the smoke demo: the server's own timers split every pass (no fallback to wall time), each
    row's prediction is the twin's step cost applied to the row's offline accept length and nothing of the row's
    own passes (recomputed here from the twin's row alone).

    How close the prediction comes is measured, not asserted here: the smoke passes last under a second, and on
    a shared 2-core machine the same server's pass wall moved 0.9 to 1.8 s between sweeps minutes apart (errors
    -21% ... +55% over one CI run and five sweeps here, 2026-12-06). The accuracy is the benchmark's: the real
    demo's sweep, goal |error| <= 10% (`workbench bench --only speed`, docs/vllm.md). The figures are printed."""
    from workbench.live.vllm_server import available

    ok, why = available()
    if not ok:
        if os.environ.get("WORKBENCH_REQUIRE_VLLM") == "1":
            pytest.fail(f"no real vLLM: {why}")
        pytest.skip(f"NO REAL vLLM: {why}")
    drafts = {"draft-mismatched": smoke_demo / "draft-mismatched"}     # one draft: its twin, it, the baseline
    state = vs.sweep(smoke_demo / "target", drafts, smoke_demo / "val.jsonl", [3], rows=6, max_tokens=16,
                     repeats=3, concurrency=1, out=tmp_path / "speed.json", in_process=True,
                     say=lambda m: print(m, flush=True))
    print("MEASURED vllm speed (smoke demo)\n" + vs.table(state))
    for r in state["rows"]:
        print(f"MEASURED {r['draft']} K={r['k']}: error {r['predicted_error']:+.1%}, sign right {r['sign_right']}, "
              f"baseline moved {r['calibration_drift']:+.1%} since the twin's row")
    n_tok, n_rows = state["settings"]["max_tokens"], state["settings"]["rows"]
    twin_rows = {(c["draft"], c["k"]): c for c in state["calibration"]}
    for c in state["calibration"] + state["rows"]:
        assert c["step_cost"]["source"] == "server timers", c["step_cost"]          # the real server's own timers
        assert [tokens for _, _, tokens, _, _ in c["steps"]] == [n_tok] * n_rows * 3, c["draft"]
    for r in state["rows"]:
        assert r["measured_tokens_per_s"] > 0 and r["baseline_tokens_per_s"] > 0
        assert r["calibrated_on"] == state["twins"][r["draft"]] != r["draft"], r         # never in sample
        twin = twin_rows[r["calibrated_on"], r["k"]]
        again = vs.predict_speedup(vs.step_cost(twin["passes"]), vs.verify_steps([n_tok] * n_rows,
                                                                                 r["served_accept_length"]))
        assert again == r["predicted_speedup"], r
        assert r["predicted_tokens_per_s"] == round(again * r["baseline_tokens_per_s"], 2)


def test_the_answer_names_no_fastest_k_when_the_passes_overlap():
    from workbench.live.vllm_speed import answer

    rows = [{"draft": "d", "k": k, "served_wiring": "L0,L2,L3", "trained_wiring": "embed,L1,L2",
             "measured_tokens_per_s": t, "baseline_tokens_per_s": 20.0, "measured_speedup": t / 20, "too_noisy": True,
             "predicted_tokens_per_s_trained": 25.0} for k, t in ((1, 20.5), (2, 19.8))]
    (line,) = answer({"rows": rows, "best_k": {"d": {"measured": None, "measured_note": "too noisy to rank: K=1 and "
                                                     "K=2 overlap", "predicted_trained": 1}}})
    assert "too noisy to name its fastest K" in line and "too noisy to tell" in line
    assert "at its fastest" not in line and "25.0 tokens/s at K=1 (1.25x no speculation)" in line


def test_a_finished_sweep_is_found_beside_the_draft_drawn_and_said_in_the_answer(smoke_demo, tmp_path):
    """Notebook 04 reads a sweep (``speed`` parameter, default vllm-speed.json beside the draft's folder), draws
    it and puts its sentence into the answer's cost line; an unfinished or missing one is one line naming it."""
    from workbench.report.layout import assert_clean_layout
    from workbench.report.live_check import speed_cost
    from workbench.report.plots import speed_sweep

    state = _sweep(smoke_demo, tmp_path, Stand(smoke_demo), ks=(1, 2))
    demo = tmp_path / "demo"
    (demo / "draft-aligned").mkdir(parents=True)
    (demo / "vllm-speed.json").write_text((tmp_path / "speed.json").read_text())
    found = vs.find("", demo / "draft-aligned")
    assert found["rows"] == json.loads(json.dumps(state["rows"])) and vs.find("", tmp_path / "nowhere") is None
    fig = speed_sweep(found)
    assert [ax.get_title() for ax in fig.axes] == ["draft-aligned as served (L0,L2,L3)",
                                                   "draft-mismatched as served (L0,L2,L3)"]
    assert_clean_layout(fig)
    said = speed_cost(found, demo / "draft-mismatched")
    assert said.startswith(" Tokens/s measured on vLLM ") and "K=" in said and " as served against " in said
    assert speed_cost(found, demo / "draft-mismatched", k=2).count("K=2,") == 1                 # the answer's K
    assert speed_cost(None, demo / "draft-mismatched") == "" and speed_cost(found, demo / "other") == ""
    assert speed_cost(found, demo / "draft-mismatched", smoke_demo / "target") == said          # the same target
    assert speed_cost(found, demo / "draft-mismatched", tmp_path) == ""                         # another one
    unfinished = tmp_path / "half.json"
    unfinished.write_text(json.dumps({**found, "complete": False}))
    with pytest.raises(WorkbenchError, match=r"half\.json: an unfinished speed sweep"):
        vs.find(unfinished)
    with pytest.raises(WorkbenchError, match=r"gone\.json: no such file"):
        vs.find(tmp_path / "gone.json")
