"""The flag advisor (workbench.analysis.tune): every swept shape equals simulate() of that shape (draft work reused
exactly), the ranking and advice follow the cost model, the heat map and `workbench tune` end to end."""

import json

import numpy as np
import pytest
import torch
from conftest import greedy_rows, save_world, tiny_draft, tiny_target

from workbench.report import plots
from workbench.model import train
from workbench.simulate.acceptance import simulate
from workbench.stats.cost import CostModel
from workbench.core.setting import Setting
from workbench.analysis.tune import shapes, sweep

TRAINED = "L0,L1,L2"


@pytest.fixture(scope="module")
def setup():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    target = tiny_target(initializer_range=0.3)
    draft = tiny_draft(target, trained=TRAINED.split(","))
    rows = greedy_rows(target, [20] * 5)
    train.train_draft(draft, target, rows, TRAINED.split(","), K=3, epochs=10, lr=1e-2, batch_size=5, progress=False)
    yield target, draft.eval(), rows
    torch.set_num_threads(n)


GRID = dict(steps=(1, 2, 3, 4), topks=(1, 2, 4), max_tokens=16, n_grid=(2, 3, 4, 6, 8, 12, 16))


def test_every_swept_shape_equals_simulate_of_that_shape(setup):
    target, draft, rows = setup
    sw = sweep(target, draft, rows, TRAINED, batch_size=3, progress=False, **GRID)
    assert set(sw.results) == set(shapes(**GRID))
    for S, k, N in [(4, 1, 5), (2, 1, 3), (3, 2, 6), (4, 4, 16), (1, 4, 3), (2, 2, 2)]:
        setting = Setting(steps=S, eagle_topk=k, num_draft_tokens=N if k > 1 else None)
        want = simulate(target, draft, rows, [TRAINED], setting=setting, batch_size=3, progress=False,
                        acc_topk=0)[TRAINED]
        got = sw.results[(S, k, N)]
        assert got.setting == setting
        for col in ("sample", "t", "accepted", "on_path"):
            np.testing.assert_array_equal(got.chains[col], want.chains[col], err_msg=f"{(S, k, N)} {col}")
    accs = {s: r.accept_length for s, r in sw.results.items()}
    assert len(set(round(a, 6) for a in accs.values())) > 3, "degenerate sweep: accept lengths all equal"


def test_advice_follows_the_cost_model(setup):
    target, draft, rows = setup
    small = dict(steps=(1, 2, 3), topks=(1, 2), max_tokens=8, n_grid=(2, 4, 8))
    sw = sweep(target, draft, rows, TRAINED, batch_size=5, progress=False, **small)
    assert sw.recommended_flags is None and "ranked by accept length" in sw.summary()
    t = sw.table
    assert list(t["accept_length"]) == sorted(t["accept_length"], reverse=True) and "speedup" not in t
    gpu = CostModel(device="cuda", device_name="test GPU", draft_step={1: 1.0, 2: 1.1},
                    verify={1: 10.0, 2: 10.1, 4: 10.3, 8: 30.0}, repeats=3)
    sw2 = sweep(target, draft, rows, TRAINED, batch_size=5, progress=False, cost_model=gpu, **small)
    t2 = sw2.table
    assert list(t2["speedup"]) == sorted(t2["speedup"], reverse=True)
    S, k, N = sw2.best()[0]
    assert sw2.recommended_flags == (f"--speculative-num-steps {S} --speculative-eagle-topk {k} "
                                     f"--speculative-num-draft-tokens {N}")
    assert "recommended SGLang flags: --speculative-num-steps" in sw2.summary()
    assert "measured on cuda (test GPU)" in sw2.summary()
    cpu = CostModel(device="cpu", draft_step={1: 1.0}, verify={1: 10.0, 8: 12.0})
    sw3 = sweep(target, draft, rows, TRAINED, batch_size=5, progress=False, cost_model=cpu, **small)
    assert sw3.recommended_flags is None and "indicative only" in sw3.summary()
    js = sw2.to_json()
    assert js["ranked_by"] == "speedup" and js["recommended_flags"] == sw2.recommended_flags
    assert len(js["table"]) == len(shapes(**small))
    fig = plots.tree_sweep(sw2)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["eagle_topk 1 (chain)", "eagle_topk 2"]
    assert plots.tree_sweep(sw).axes


def test_cli_tune(setup, tmp_path, capsys):
    from workbench.cli import main

    target, draft, rows = setup
    save_world(tmp_path, target, {"draft": draft}, rows, keys=("input_ids", "loss_mask", "source"))
    base = ["tune", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--quiet"]
    rc = main(base + ["--data", str(tmp_path / "data.jsonl"), "--steps", "1,2,3", "--eagle-topk", "1,2",
                      "--max-draft-tokens", "8", "--json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png"),
                      "--engine", "sglang-2026.04"])
    out = capsys.readouterr().out
    assert rc == 0 and "best shapes by accept length" in out and (tmp_path / "s.png").stat().st_size > 0
    js = json.loads((tmp_path / "s.json").read_text())
    assert js["recommended_flags"] is None and js["ranked_by"] == "accept_length"
    assert any("drafts a tree: steps 5, eagle_topk 4, 8 draft tokens" in n for n in js["notes"])
    # measuring a cost model (CPU here: indicative), then using it
    assert main(base + ["--measure-cost-model", str(tmp_path / "cost.json")]) == 0
    assert "indicative only" in capsys.readouterr().out
    assert json.loads((tmp_path / "cost.json").read_text())["device"] == "cpu"
    assert main(base + ["--data", str(tmp_path / "data.jsonl"), "--steps", "1,2", "--eagle-topk", "1,2",
                        "--max-draft-tokens", "4", "--cost-model", str(tmp_path / "cost.json")]) == 0
    out = capsys.readouterr().out
    assert "speed-up" in out and "indicative only" in out and "recommended SGLang flags" not in out
    assert main(base + ["--steps", "1,x"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
