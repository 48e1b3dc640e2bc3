"""`workbench vllm load` (issue 56): the load model's arithmetic, the grid's bookkeeping against loopback stand-ins
(cells, the surface file, resume after a server died, the one-line refusals), and a real vLLM on the smoke demo
(the server's pooled timers at concurrency > 1; every prediction from the twin's cell alone). How close the
predictions come is the benchmark's (`make bench-load`, docs/load.md), not asserted here."""

from __future__ import annotations

import json
import os

import pytest

from workbench.core.errors import WorkbenchError
from workbench.live import vllm_load as vl
from workbench.live import vllm_speed as vs
from workbench.stats import load_surface as ls
from workbench.testing.fake_vllm import Stand


def test_at_concurrency_one_the_cell_cost_is_vllm_speeds_step_cost():
    passes = [{"baseline_wall": 10.0, "wall": 4.0 + 0.2 * s, "decode": 0.2 * s, "steps": s, "concurrency": 1}
              for s in (30, 40, 50)]
    c, s = ls.cell_cost(passes), vs.step_cost(passes)
    assert (c["fixed"], c["per_step"]) == (s["fixed"], s["per_step"])
    assert ls.speedup_at(c, [61, 61], 3.0, 1) == vs.predict_speedup(s, vs.verify_steps([61, 61], 3.0))


def test_batched_steps_divide_the_decode_wall_by_the_requests_in_flight():
    """8 requests, 4 in flight, 10 verify steps each of 0.1 s: 2 rounds of 1 s of decode wall; each request's decode
    timer counts its own 1 s, so the pass's summed decode is 8 s. A draft with twice the accept length halves the
    steps, and the decode wall with them."""
    p = {"baseline_wall": 4.0, "wall": 2.5, "decode": 8.0, "steps": 80, "concurrency": 4}
    c = ls.cell_cost([p])
    assert c["fixed"] == round((2.5 - 2.0) / 4.0, 6) and c["per_step"] == round(0.1 / 4.0, 6)
    one = ls.speedup_at(c, [11] * 8, 1.0, 4)                 # the twin itself: 1 / (0.125 + 0.025 x 80 / 4)
    assert one == round(4.0 / 2.5, 4)
    assert ls.speedup_at(c, [11] * 8, 2.0, 4) == round(1 / (0.125 + 0.025 * 40 / 4), 4)
    with pytest.raises(WorkbenchError, match="no vllm:request_decode_time_seconds"):
        ls.cell_cost([{**p, "decode": None}])


def _pred(c, k, sp, side=None, noisy=False):
    p = {"draft": "d", "k": k, "context": "data", "concurrency": c, "served": {"speedup": sp, "tokens_per_s": sp * 10},
         "trained": {"speedup": sp + 0.1, "tokens_per_s": sp * 10 + 1}}
    if side is not None:
        p["measured"] = {"measured_speedup": side, "too_noisy": noisy, "measured_tokens_per_s": side * 10,
                         "measured_spread": {"min": side * 10 - 0.1, "max": side * 10 + 0.1}}
    return p


def test_the_crossover_is_the_first_concurrency_where_no_k_pays_and_undecided_when_a_cell_is_noisy():
    preds = [_pred(1, 1, 1.3, 1.25), _pred(1, 2, 1.4, 1.35), _pred(2, 1, 1.1, 1.08), _pred(2, 2, 1.05, 1.2),
             _pred(4, 1, 0.9, 0.85), _pred(4, 2, 0.8, 0.8)]
    co = ls.crossover(preds, "d")
    assert (co["predicted_served"], co["measured"], co["within_one_step"]) == (4, 4, True)
    assert co["predicted_trained"] == 4                       # 0.9 + 0.1 is not faster: 4 under both
    noisy = preds[:2] + [_pred(2, 1, 1.1, 1.08, noisy=True), _pred(2, 2, 1.05, 1.02, noisy=True)] + preds[4:]
    assert ls.crossover(noisy, "d")["measured"] == "undecided"
    bk = ls.best_k_by_c(preds, "d")["data"]
    assert bk["1"] == {"predicted_served": 2, "predicted_trained": 2, "measured": 2, "right": True}
    assert bk["2"]["measured"] == 2 and bk["2"]["right"] is False   # predicted K=1 (1.1 > 1.05), measured K=2 ranked


def _grid(demo, out, stand, **kw):
    drafts = {"draft-mismatched": str(demo / "draft-mismatched")}
    return vl.measure(str(demo / "target"), drafts, {"data": str(demo / "val.jsonl")}, [1],
                      concurrency=kw.pop("concurrency", [1, 2]), max_tokens=6, repeats=1, min_requests=2, out=str(out),
                      start=stand.start, stop=stand.stop, **kw)


def test_the_grid_writes_every_cell_predicts_each_from_the_twins_cell_and_resumes(smoke_demo, tmp_path):
    out = tmp_path / "empty" / "vllm-load.json"
    stand = Stand(smoke_demo)
    st = _grid(smoke_demo, out, stand)
    assert st["complete"] and not stand.live and json.loads(out.read_text())["complete"]
    twin = st["twins"]["draft-mismatched"]
    assert sorted((c["server"], c["concurrency"]) for c in st["cells"]) == sorted(
        (s, c) for s in (twin, "draft-mismatched") for c in (1, 2))
    assert all(c["passes"][0]["decode"] is not None for c in st["cells"])        # pooled timers at C = 2 too
    assert {(s["twin"], s["concurrency"]) for s in st["surface"]["cells"]} == {(twin, 1), (twin, 2)}
    # every draft cell predicted from its twin's cell and the offline accept length: never its own passes
    for p in st["predictions"]:
        tw = next(c for c in st["cells"] if (c["server"], c["concurrency"]) == (twin, p["concurrency"]))
        assert p["served"]["speedup"] == ls.speedup_at(ls.cell_cost(tw["passes"]), [6] * tw["passes"][0]["requests"],
                                                       p["served_accept_length"], p["concurrency"])
        assert "error" in p and p["measured"]["measured_tokens_per_s"] > 0
    assert p["served_wiring"] == "L0,L2,L3" and p["trained_wiring"] == "embed,L1,L3"
    again = Stand(smoke_demo)                             # the same command again: nothing measured twice
    st2 = _grid(smoke_demo, out, again)
    assert again.started == [] and st2["predictions"] == st["predictions"]


def test_a_server_that_dies_mid_grid_keeps_the_finished_cells_and_the_same_command_resumes(smoke_demo, tmp_path):
    out = tmp_path / "vllm-load.json"
    dying = Stand(smoke_demo, die_at=2)                   # the draft's server (after the twin's) refuses everything
    with pytest.raises(WorkbenchError, match="finished cells kept") as e:
        _grid(smoke_demo, out, dying)
    assert "\n" not in str(e.value) and not dying.live
    kept = json.loads(out.read_text())["cells"]
    assert [c["kind"] for c in kept] == ["twin", "twin"]
    again = Stand(smoke_demo)
    st = _grid(smoke_demo, out, again)
    assert [d is None for _, d, _ in again.started] == [True, False]          # the baseline, then the draft only
    assert str(again.started[1][1]).endswith("draft-mismatched") and st["complete"] and len(st["cells"]) == 4


def test_bad_inputs_are_one_line_each(smoke_demo, tmp_path):
    stand = Stand(smoke_demo)
    with pytest.raises(WorkbenchError, match="above the server's --max-num-seqs 2") as e:
        _grid(smoke_demo, tmp_path / "a.json", stand, concurrency=[1, 4], server_kw={"max_num_seqs": 2})
    assert "\n" not in str(e.value) and stand.started == []
    cfg = json.loads((smoke_demo / "target" / "config.json").read_text())
    row = json.loads((smoke_demo / "val.jsonl").read_text().splitlines()[0])
    n = cfg["max_position_embeddings"]
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({**row, "input_ids": row["input_ids"][:1] * (n + 10), "loss_mask": [0] * n + [1] * 10,
                                "seq_len": n + 10, "n_prompt_tokens": n, "n_response_tokens": 10}) + "\n")
    with pytest.raises(WorkbenchError, match=f"longer than the target's max_position_embeddings {n}"):
        vl.buckets(smoke_demo / "target", {"long": str(long)}, 6)
    st = _grid(smoke_demo, tmp_path / "s.json", Stand(smoke_demo))
    surf = json.loads(json.dumps(st["surface"]))
    vl.check_surface(surf, target=smoke_demo / "target", twin=st["twins"]["draft-mismatched"], engine_version="0.32.0")
    other = {**surf, "key": {**surf["key"], "machine": {**surf["key"]["machine"], "cpu": "another CPU"}}}
    with pytest.raises(WorkbenchError, match="measured on another machine"):
        vl.check_surface(other)
    with pytest.raises(WorkbenchError, match="not twin-000"):
        vl.check_surface(surf, twin="twin-000")
    with pytest.raises(WorkbenchError, match="not 0.20.0"):
        vl.check_surface(surf, engine_version="0.20.0")
    with pytest.raises(WorkbenchError, match="a load grid of another .*concurrency; use another --json"):
        _grid(smoke_demo, tmp_path / "s.json", Stand(smoke_demo), concurrency=[1, 4])


def test_the_bench_command_reruns_into_an_empty_folder(smoke_demo, tmp_path):
    from bench import load as bl

    out = tmp_path / "empty" / "vllm-load.json"
    stand = Stand(smoke_demo)
    st = bl.measure(smoke_demo, quick=True, out=out, start=stand.start, stop=stand.stop)
    drafts = {"draft-mismatched", "draft-mismatched-fixed"}
    assert {p["draft"] for p in st["predictions"]} == drafts
    assert {(p["draft"], p["concurrency"]) for p in st["predictions"] if "measured" in p} == {
        (d, c) for d in drafts for c in bl.QUICK["concurrency"]}
    assert json.loads(out.with_name("vllm-load-surface.json").read_text()) == json.loads(json.dumps(st["surface"]))
    assert set(bl.figures(st)) >= {"worst_error", "crossover_within_one_step", "best_k_right"}


@pytest.mark.slow
def test_a_real_vllm_at_concurrency_two_reports_pooled_timers_and_every_cell_is_predicted(smoke_demo, tmp_path):
    """A real vLLM on the smoke demo at C = 1 and 2: the server's own request timers split every pass (pooled over
    the requests in flight at C = 2), every draft cell's prediction is the twin cell's cost applied to its offline
    accept length. The errors are printed, not asserted (smoke passes last under a second)."""
    from workbench.live.vllm_server import available

    ok, why = available()
    if not ok:
        if os.environ.get("WORKBENCH_REQUIRE_VLLM") == "1":
            pytest.fail(f"no real vLLM: {why}")
        pytest.skip(f"NO REAL vLLM: {why}")
    st = vl.measure(str(smoke_demo / "target"), {"draft-mismatched": str(smoke_demo / "draft-mismatched")},
                    {"data": str(smoke_demo / "val.jsonl")}, [1], concurrency=[1, 2], max_tokens=12, repeats=1,
                    min_requests=4, out=str(tmp_path / "load.json"), say=lambda m: print(m, flush=True))
    print("MEASURED vllm load (smoke demo)\n" + vl.table(st))
    for c in st["cells"]:
        for p in c["passes"]:
            assert p["decode"] is not None and 0 < p["decode"] / p["concurrency"] <= p["wall"] * 1.05, (c["server"], p)
            assert p["tokens"] == 12 * p["requests"] and p["steps"] > 0
    twin = st["twins"]["draft-mismatched"]
    for p in st["predictions"]:
        tw = next(c for c in st["cells"] if (c["server"], c["concurrency"]) == (twin, p["concurrency"]))
        assert p["served"]["speedup"] == ls.speedup_at(ls.cell_cost(tw["passes"]), [12] * 4, p["served_accept_length"],
                                                       p["concurrency"])
    assert len(st["predictions"]) == 2 and all("error" in p for p in st["predictions"])


def test_a_surface_predicts_another_draft_of_the_shape_without_a_server(smoke_demo, tmp_path, capsys):
    """The twin's surface, measured once, predicts a draft it never served (same shape: draft-aligned) from its
    offline accept length alone; the CLI prints the answer line and the table."""
    from workbench.cli import main as cli

    out = tmp_path / "vllm-load.json"
    st = _grid(smoke_demo, out, Stand(smoke_demo))
    surf = tmp_path / "vllm-load-surface.json"
    surf.write_text(json.dumps(st["surface"]))
    got = vl.from_surface(surf, smoke_demo / "target", {"draft-aligned": str(smoke_demo / "draft-aligned")},
                          {"data": str(smoke_demo / "val.jsonl")})
    assert {(p["draft"], p["concurrency"]) for p in got["predictions"]} == {("draft-aligned", 1), ("draft-aligned", 2)}
    assert all("measured" not in p for p in got["predictions"])
    cost = {c["concurrency"]: c for c in st["surface"]["cells"]}
    for p in got["predictions"]:
        assert p["served"]["speedup"] == ls.speedup_at(cost[p["concurrency"]], [6] * cost[p["concurrency"]]["requests"],
                                                       p["served_accept_length"], p["concurrency"])
    rc = cli(["vllm", "load", "--surface", str(surf), "--target", str(smoke_demo / "target"), "--draft",
              str(smoke_demo / "draft-aligned"), "--data", str(smoke_demo / "val.jsonl")])
    text = capsys.readouterr().out
    assert rc == 0 and "draft-aligned as served, prompts of the data bucket:" in text and "| draft-aligned | 1 |" in text


def test_servers_the_user_started_are_measured_at_their_urls_and_key_the_surface(smoke_demo, tmp_path, capsys):
    """``--url``: servers the user started elsewhere (a GPU box) are measured, none is started or stopped here; the
    first run names the twin folder to serve; a baseline that speculates, a twin without per-request metrics or at
    another K are one line each; the surface is keyed by the machine the user names, so predicting from it here
    needs --any-machine."""
    from workbench.cli import main as cli
    from workbench.testing.fake_vllm import serve

    target, mismatched = smoke_demo / "target", smoke_demo / "draft-mismatched"
    drafts, data = {"draft-mismatched": str(mismatched)}, {"data": str(smoke_demo / "val.jsonl")}

    def nothing(*a, **k):
        pytest.fail("a server was started or stopped here")

    def run(urls, out):
        return vl.measure(str(target), drafts, data, [1], concurrency=[1, 2], max_tokens=6, repeats=1, min_requests=2,
                          out=str(out), urls=urls, server_machine="1x H100 80GB", start=nothing, stop=nothing)

    out = tmp_path / "gpu" / "vllm-load.json"
    with serve(target, mismatched, K=1, detail="none") as base:
        with pytest.raises(WorkbenchError, match="no twin@1=URL: serve the shape twin written at ") as e:
            run({"baseline": base}, out)
        assert "\n" not in str(e.value)
        twin = next((out.parent / "vllm-load-twins").iterdir())
        with serve(target, twin, K=1) as tw:
            st = run({"baseline": base, "twin@1": tw}, out)
        assert st["complete"] and {c["kind"] for c in st["cells"]} == {"twin"}
        assert {(p["draft"], p["concurrency"]) for p in st["predictions"]} == {("draft-mismatched", 1),
                                                                               ("draft-mismatched", 2)}
        assert all("measured" not in p for p in st["predictions"])          # served nowhere: predicted only
        assert st["surface"]["key"]["machine"] == {"server": "1x H100 80GB", "remote": True}
        assert st["measured_on"].startswith("1x H100 80GB, vLLM 0.32.0")
        with serve(target, twin, K=2) as k2, pytest.raises(WorkbenchError, match="drafts 2 tokens per step, not 1"):
            run({"baseline": base, "twin@1": k2}, tmp_path / "k2.json")
        with serve(target, twin, K=1, detail="none") as bare, pytest.raises(
                WorkbenchError, match="--per-request-spec-decode-metrics detailed"):
            run({"baseline": base, "twin@1": bare}, tmp_path / "bare.json")
    with serve(target, mismatched, K=1) as spec, pytest.raises(WorkbenchError, match="this server speculates"):
        run({"baseline": spec, "twin@1": spec}, tmp_path / "spec.json")
    with pytest.raises(WorkbenchError, match="'draft-x' is neither the baseline"):
        run({"baseline": "http://127.0.0.1:9", "draft-x@1": "http://127.0.0.1:9"}, tmp_path / "x.json")
    surf = out.with_name("vllm-load-surface.json")
    surf.write_text(json.dumps(st["surface"]))
    with pytest.raises(WorkbenchError, match="measured on another machine"):
        vl.from_surface(surf, target, drafts, data)
    common = ["vllm", "load", "--target", str(target), "--draft", str(mismatched), "--data", data["data"], "-K", "1",
              "--json", str(tmp_path / "cli.json")]
    assert cli(common + ["--url", "baseline=http://127.0.0.1:9"]) == 2
    assert "--server-machine" in capsys.readouterr().err
    assert cli(common + ["--url", "baseline", "--server-machine", "gpu"]) == 2
    assert "expected NAME=URL" in capsys.readouterr().err


def test_the_offline_accept_lengths_capture_once_per_tap_set_and_equal_the_reference(smoke_demo, monkeypatch):
    """The grid's offline side keeps the target's features per (bucket, tap set) for every K and draft: fewer target
    passes than recapturing each time (the reference), and the same accept lengths."""
    from workbench.model import capture

    rows = vl.buckets(smoke_demo / "target", {"data": str(smoke_demo / "val.jsonl")}, 6, 4)
    drafts = {n: str(smoke_demo / n) for n in ("draft-mismatched", "draft-aligned")}
    calls, real = [], capture._forward
    monkeypatch.setattr(capture, "_forward", lambda *a, **k: calls.append(tuple(a[1])) or real(*a, **k))
    fast = vl.offline_accept(smoke_demo / "target", drafts, rows, [1, 2], 6, "vllm")
    n_fast, taps = len(calls), set(calls)
    calls.clear()
    assert vl.offline_accept(smoke_demo / "target", drafts, rows, [1, 2], 6, "vllm", cache=False) == fast
    nb = len(calls) // 8                 # 2 drafts x 2 Ks x 2 wirings, each a pass of nb batches when recaptured
    assert nb >= 1 and len(calls) == 8 * nb and set(calls) == taps
    assert len(taps) == 3 and n_fast == 3 * nb           # L0,L2,L3 (both as vLLM feeds them), and each trained set
