"""Fast simulation vs the exact speculative-decoding loop, on a tiny random Llama target and a
briefly trained draft; `simulate` over several wirings; `workbench accept` end to end."""

import json

import numpy as np
import pytest
import torch
from conftest import greedy_rows, save_world, tiny_draft, tiny_target

from workbench.model import capture, draft as dmod, train
from workbench.simulate.acceptance import simulate
from workbench.simulate.exact import exact_decode, exact_simulate
from workbench.stats.statistics import AcceptanceResult
from workbench.core.errors import WorkbenchError

TRAINED = "L0,L1,L2"
N_RESP = 28


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny ops on a shared 2-core box are far faster single-threaded (no OpenMP spinning)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def setup(one_thread):
    target = tiny_target(initializer_range=0.3)                     # chaotic enough that taps matter
    draft = tiny_draft(target, trained=TRAINED.split(","))
    rows = greedy_rows(target, [N_RESP] * 6)                        # target-greedy responses
    train.train_draft(draft, target, rows, TRAINED.split(","), K=3, epochs=12, lr=1e-2, batch_size=6,
                      progress=False)
    draft.eval()
    return target, draft, rows


@pytest.mark.parametrize("K", [1, 2, 4])
def test_fast_decode_path_equals_exact_loop(setup, K):
    target, draft, rows = setup
    fast = simulate(target, draft, rows, [TRAINED], K=K, batch_size=4, progress=False)[TRAINED]
    f = fast.to_frame()
    assert len(set(f["accepted"])) >= 2, "degenerate test: every chain accepted the same count"
    n_steps = 0
    for row in rows[:3]:                                   # prompts of 2, 3 and 4 tokens
        assert len(f[f["sample"] == row["_row"]]) > 0
        n = row["n_prompt_tokens"]
        gen, accepts = exact_decode(target, draft, row["input_ids"][:n], TRAINED, K, N_RESP)
        assert gen == row["input_ids"][n:]                 # greedy speculative decoding = greedy decoding
        path = f[(f["sample"] == row["_row"]) & f["on_path"]].sort_values("t")
        fast_A = path["accepted"].tolist()
        assert fast_A == accepts[:len(fast_A)], (row["_row"], fast_A, accepts)
        # the fast path stops exactly where the next chain no longer fits in the sample
        t_next = (path["t"].iloc[-1] + fast_A[-1] + 1) if fast_A else n - 1
        assert t_next + K + 1 > len(row["input_ids"]) - 1
        n_steps += len(fast_A)
    on = f[f["on_path"] & (f["sample"] < 3)]
    assert n_steps == len(on) > 0
    if K == 4:                                             # the exact loop as an AcceptanceResult
        exact = exact_simulate(target, draft, rows[:3], TRAINED, K=K, progress=False)
        assert sorted(zip(exact.chains["sample"], exact.chains["t"], exact.chains["accepted"])) == \
            sorted(zip(on["sample"], on["t"], on["accepted"]))
        assert exact.decode_path["accept_length"] == pytest.approx(on["accepted"].mean() + 1)


def test_many_wirings_cost_one_target_pass(setup):
    target, draft, rows = setup
    wirings = [TRAINED, "embed,L0,L1", "L3,L2,L1"]
    with capture.count_forwards(target.model) as c:
        res = simulate(target, draft, rows, wirings, K=3, batch_size=4, progress=False)
    assert c == {"calls": 2, "samples": 6}                 # 6 rows, batch 4: two forwards, each row once
    assert list(res) == wirings and all(isinstance(r, AcceptanceResult) for r in res.values())
    for spec in wirings:
        alone = simulate(target, draft, rows, [spec], K=3, batch_size=6, progress=False)[spec]
        assert alone.to_json()["histogram"] == res[spec].to_json()["histogram"]
        assert alone.decode_path["n_verify_steps"] == res[spec].decode_path["n_verify_steps"]
    # the draft was trained on L0,L1,L2: feeding the taps reversed must hurt step 1
    assert res[TRAINED].conditional[0] > res["L3,L2,L1"].conditional[0]
    r = res[TRAINED]
    assert r.n_samples == 6 and set(r.by_source()) == {"a", "b"}
    assert r.merge(AcceptanceResult.from_arrays(TRAINED, 3, sample=[99], t=[0], accepted=[3])).n_chains == \
        r.n_chains + 1
    assert r.cost_ratio is not None and r.cost_ratio > 0
    from workbench.stats.cost import CostModel, projection
    p = projection(r, r.cost_model, n_boot=200)       # speedup() marks best exactly the K' the projection names
    assert [d["k"] for d in r.speedup() if d["best"]] == ([p["best"]] if p["best"] is not None else [])
    # a cost model given to simulate is every result's (one cost model per draft and target)
    cm = CostModel.fixed(0.25, source="given")
    given = simulate(target, draft, rows, wirings, K=3, batch_size=4, progress=False, cost_model=cm)
    assert all(x.cost_model is cm and x.cost_ratio == 0.25 for x in given.values())
    # one cost ratio per draft and target: the wirings' projections share it (issue 22: no per-wiring noise)
    assert len({res[s].cost_ratio for s in wirings}) == 1 and "pooled over its 3 wiring(s)" in r.cost_model.source


def test_topk_and_vocab_coverage(setup):
    target, draft, rows = setup
    r = simulate(target, draft, rows, [TRAINED], K=2, progress=False, acc_topk=5)[TRAINED]
    assert r.top1 == pytest.approx(r.cumulative[0])        # top-1 hit at step 1 <=> A >= 1
    assert r.top1 <= r.top5 <= 1
    assert r.coverage == 1.0                               # full draft vocab can emit everything
    # a draft whose vocab is the 16 lowest target ids can only ever produce those
    cfg = dmod.new_draft_config(target.config.to_dict(), layer_ids=[0, 1, 2], draft_vocab_size=16)
    small = dmod.Eagle3Draft.from_config(cfg, target.embed_weight()).eval()
    small.set_vocab_map(torch.zeros(16, dtype=torch.long))
    rs = simulate(target, small, rows, [TRAINED], K=2, progress=False)[TRAINED]
    resp = [x for row in rows for x in row["input_ids"][row["n_prompt_tokens"]:]]
    assert rs.coverage == pytest.approx(np.mean([x < 16 for x in resp]))
    assert 0 < rs.coverage < 1


def test_wrong_width_is_a_clear_error(setup):
    target, draft, rows = setup
    with pytest.raises(WorkbenchError, match="expects input width 96"):
        simulate(target, draft, rows, ["L0,L1"], K=2, progress=False)
    with pytest.raises(WorkbenchError, match="out of range"):
        exact_decode(target, draft, [1, 2], "L0,L1,L9", 2, 4)


def test_cli_accept(setup, tmp_path, capsys):
    from workbench.cli import main

    target, draft, rows = setup
    save_world(tmp_path, target, {"draft": draft}, rows, keys=("input_ids", "loss_mask", "source"))
    base = ["accept", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
            "--data", str(tmp_path / "data.jsonl"), "--steps", "3", "--quiet"]
    rc = main(base + ["--json", str(tmp_path / "a.json"), "--per-chain", str(tmp_path / "c.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0 and "accept length" in out and TRAINED in out
    js = json.loads((tmp_path / "a.json").read_text())
    api = simulate(target, draft, rows, [TRAINED], K=3, progress=False)[TRAINED]
    assert js["wiring"] == {"spec": TRAINED, "taps": TRAINED.split(",")} and js["steps"] == 3
    assert js["histogram"] == api.histogram.tolist() and js["n_samples"] == 6
    assert set(js["by_source"]) == {"a", "b"} and len(js["cumulative"]) == 3
    chains = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(chains) == js["n_chains"] and {"sample", "t", "accepted"} <= set(chains[0])
    # CI gate: exit 1 when the decode-path accept length is below the bar
    assert main(base + ["--min-accept-length", "9"]) == 1
    assert "FAIL" in capsys.readouterr().out
    # an engine's wiring: SGLang before 2026-05 reads eagle_config ids [0,1,2] +1 -> L0,L1,L2 (N=4)
    assert main(base + ["--engine", "sglang-2026.04"]) == 0
    assert "sglang-2026.04: eagle_config ids [0,1,2] +1" in capsys.readouterr().out
    # current SGLang reads ids not starting at 1 as capture points: 0 is the embedding, which it cannot feed
    assert main(base + ["--engine", "sglang"]) == 2
    assert "error: engine sglang: cannot feed this draft" in capsys.readouterr().err
    assert main(base + ["--sglang-rule", "classic", "--engine", "sglang"]) == 0        # the deprecated alias
    assert "use --engine sglang-2026.04" in capsys.readouterr().err
    assert main(base + ["--engine", "sglang", "--wiring", TRAINED]) == 0      # the engine's computation, given taps
    assert f"given wiring {TRAINED} (engine sglang for the rest)" in capsys.readouterr().out
    assert main(base + ["--wiring", "L0,L1,L7"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]                    # (above it: transformers' loading bar)
    assert last.startswith("error: ") and "L7" in last and "Traceback" not in err


# ------------------------------------------------------------------------------------------------ trees

def _fields(r: AcceptanceResult) -> dict:
    """Everything a result says except the setting (and the tree block derived from it); the measured
    cost ratio (a clock) is replaced by a fixed one."""
    r.cost_ratio, r.cost_model = 0.1, None
    j = r.to_json()
    labels = {r.setting.accept_label(e): f"<{e} label>" for e in ("every-position", "decode-path")}

    def unlabelled(line):
        for text, mark in labels.items():
            line = line.replace(text, mark)
        return line
    return {"json": {k: v for k, v in j.items() if k not in ("setting", "tree", "convention") and not k.endswith("_label")},
            "summary": [unlabelled(ln) for ln in r.summary().splitlines() if not ln.startswith("setting:")]}


@pytest.mark.parametrize("K", [1, 3])
def test_eagle_topk_1_through_the_tree_path_is_exactly_the_chain(setup, K):
    from workbench.core.setting import Setting

    target, draft, rows = setup
    chain = simulate(target, draft, rows, [TRAINED], K=K, batch_size=4, progress=False, acc_topk=5)[TRAINED]
    tree = simulate(target, draft, rows, [TRAINED], batch_size=4, progress=False, acc_topk=5,
                    setting=Setting(steps=K, shape="tree", eagle_topk=1))[TRAINED]
    assert tree.setting.shape == "tree" and chain.setting.shape == "chain"
    for col in chain.chains:
        np.testing.assert_array_equal(chain.chains[col], tree.chains[col], err_msg=col)
    for col in chain.samples:
        np.testing.assert_array_equal(chain.samples[col], tree.samples[col], err_msg=col)
    assert _fields(chain) == _fields(tree)
    assert chain.top1 == tree.top1 and not np.isnan(chain.top1)
    # the keyword form: eagle_topk 1 is a chain (the default path)
    kw = simulate(target, draft, rows, [TRAINED], K=K, eagle_topk=1, batch_size=4, progress=False)[TRAINED]
    assert kw.setting.shape == "chain" and kw.accept_length == chain.accept_length


@pytest.mark.parametrize("S,k,N", [(3, 2, 5), (4, 4, 10)])
def test_tree_simulate_counts_the_walk_and_its_decode_path_equals_the_exact_tree_loop(setup, S, k, N):
    from workbench.core.setting import Setting
    from workbench.model.tree import draft_trees
    from workbench.simulate.tree_verify import tree_accepted_counts

    target, draft, rows = setup
    setting = Setting(steps=S, eagle_topk=k, num_draft_tokens=N)
    fast = simulate(target, draft, rows, [TRAINED], K=S, eagle_topk=k, num_draft_tokens=N, batch_size=4,
                    progress=False)[TRAINED]
    assert fast.setting == setting
    # every counted start: the walk's A from draft_trees directly
    b = next(capture.extract(target, rows, [TRAINED], batch_size=len(rows), progress=False))
    A = tree_accepted_counts(draft_trees(draft, b.concat(TRAINED.split(",")), b.input_ids, b.attention_mask,
                                         S, k, N), b.next_token, b.loss_mask, b.lengths)
    want = {(int(b.rows[i]), int(t)): int(A[i, t]) for i, t in zip(*np.nonzero(A.numpy() >= 0))}
    f = fast.to_frame()
    assert dict(zip(zip(f["sample"], f["t"]), f["accepted"])) == want
    j = fast.to_json()
    assert j["tree"] == {"steps": S, "topk": k, "num_draft_tokens": N} and len(j["histogram"]) == S + 1
    assert "tree drafting" in j["convention"] and "tree drafting" in fast.summary()
    # the exact loop with tree verification: the same decode-path A values
    exact = exact_simulate(target, draft, rows, TRAINED, setting=setting, progress=False)
    assert exact.setting.shape == "tree" and exact.setting.estimator == "decode-path"
    ef = exact.to_frame()
    for r in rows:
        got = f[(f["sample"] == r["_row"]) & f["on_path"]].sort_values("t")[["t", "accepted"]].values.tolist()
        ref = ef[ef["sample"] == r["_row"]].sort_values("t")[["t", "accepted"]].values.tolist()
        assert got == ref, (r["_row"], got, ref)
    assert exact.decode_path["accept_length"] == fast.decode_path["accept_length"]
    assert len(set(ef["accepted"])) >= 2, "degenerate: every verify step accepted the same count"


def test_cli_accept_trees_and_shape_flags(setup, tmp_path, capsys):
    from workbench.cli import main
    from workbench.core.setting import Setting

    target, draft, rows = setup
    save_world(tmp_path, target, {"draft": draft}, rows, keys=("input_ids", "loss_mask", "source"))
    base = ["accept", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
            "--data", str(tmp_path / "data.jsonl"), "--quiet", "--cost-ratio", "0.1"]
    rc = main(base + ["--steps", "3", "--eagle-topk", "2", "--num-draft-tokens", "5", "--json", str(tmp_path / "t.json"),
                      "--per-chain", str(tmp_path / "t.jsonl")])
    out = capsys.readouterr().out
    assert rc == 0 and "tree drafting, steps 3, eagle_topk 2, 5 draft tokens" in out
    js = json.loads((tmp_path / "t.json").read_text())
    api = simulate(target, draft, rows, [TRAINED], setting=Setting(steps=3, eagle_topk=2, num_draft_tokens=5),
                   progress=False)[TRAINED]
    assert js["tree"] == {"steps": 3, "topk": 2, "num_draft_tokens": 5} and js["histogram"] == api.histogram.tolist()
    assert js["decode_path"]["accept_length"] == api.decode_path["accept_length"]
    per = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(per) == js["n_chains"] and sorted((p["sample"], p["t"], p["accepted"]) for p in per) == sorted(
        zip(api.chains["sample"].tolist(), api.chains["t"].tolist(), api.chains["accepted"].tolist()))
    # eagle_topk 1 forces N = steps + 1 with a notice (as SGLang does)
    assert main(base + ["--steps", "2", "--eagle-topk", "1", "--num-draft-tokens", "9"]) == 0
    out = capsys.readouterr().out
    assert "notice: eagle_topk 1 forces num_draft_tokens = steps + 1 = 3" in out and "K=2" in out
    # N-1 > k + (S-1)k^2: one line
    assert main(base + ["--steps", "2", "--eagle-topk", "2", "--num-draft-tokens", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "k + (S-1)*k^2 = 6" in err[0]
    # a launch command: its flags, and SGLang's auto-defaults when they are unset (a Llama target: 5, 4, 8)
    cmd = "python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
    assert main(base + ["--sglang-args", cmd + "--speculative-num-steps 2 --speculative-eagle-topk 2 "
                                              "--speculative-num-draft-tokens 4"]) == 0
    assert "steps 2, eagle_topk 2, 4 draft tokens" in capsys.readouterr().out
    assert main(base + ["--sglang-args", cmd]) == 0
    out = capsys.readouterr().out
    assert "SGLang picks steps 5, eagle_topk 4, 8 draft tokens" in out and "steps 5, eagle_topk 4, 8 draft" in out
    assert main(base + ["--sglang-args", cmd, "--steps", "3"]) == 2
    assert "give one of them" in capsys.readouterr().err
    # an engine named, no shape: the chain default, and a notice of the shape SGLang would pick
    assert main(base + ["--engine", "sglang-2026.04"]) == 0
    out = capsys.readouterr().out
    assert "notice: sglang-2026.04 with its speculative flags unset drafts a tree: steps 5" in out and "K=4" in out


def test_cli_diagnose_takes_the_tree_flags(setup, tmp_path, capsys):
    from workbench.cli import main

    target, draft, rows = setup
    save_world(tmp_path, target, {"draft": draft}, rows, keys=("input_ids", "loss_mask", "source"))
    rc = main(["diagnose", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
               "--data", str(tmp_path / "data.jsonl"), "--quiet", "--engine", "sglang-2026.04", "--steps", "3",
               "--eagle-topk", "2", "--num-draft-tokens", "6", "--top", "2", "--json", str(tmp_path / "dx.json")])
    out = capsys.readouterr().out
    assert rc in (0, 1) and "tree drafting, steps 3, eagle_topk 2, 6 draft tokens" in out
    js = json.loads((tmp_path / "dx.json").read_text())
    assert js["setting"]["eagle_topk"] == 2 and js["setting"]["num_draft_tokens"] == 6
