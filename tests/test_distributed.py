"""workbench.simulate.distributed: the sharding rule, exact merge, resumable shard files, and real torchrun runs
(2 CPU processes, gloo) that must give byte-identical JSON and per-chain files to one process.

The smoke demo's drafts accept every chain on its data (histogram [0, 0, 0, N]), which would make
"identical" too easy; these tests use a tiny chaotic target and a briefly trained draft whose
acceptance counts vary (checked), like tests/test_acceptance_sim.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import greedy_rows, save_world, tiny_draft, tiny_target

from workbench.model import capture, train
from workbench.simulate import distributed as wd
from workbench.simulate.acceptance import simulate
from workbench.stats.statistics import AcceptanceResult
from workbench.core.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[1]
TAPS = "L0,L1,L2"
K = 3
BS = 3          # 12 samples -> 4 batches -> 2 per rank with 2 ranks


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    target = tiny_target(initializer_range=0.3)
    draft = tiny_draft(target, trained=TAPS.split(","))
    rows = greedy_rows(target, [12 + (i * 5) % 11 for i in range(12)])   # prompts of 2-4, responses of 12-22
    train.train_draft(draft, target, rows, TAPS.split(","), K=K, epochs=6, lr=1e-2, batch_size=12, progress=False)
    draft.eval()
    folder = save_world(tmp_path_factory.mktemp("dist"), target, {"draft": draft}, rows,
                        keys=("input_ids", "loss_mask", "source"))
    yield target, draft, rows, folder
    torch.set_num_threads(n)


def _same(a: AcceptanceResult, b: AcceptanceResult):
    assert a.to_json() == b.to_json()
    for k in a.chains:
        assert a.chains[k].tolist() == b.chains[k].tolist(), k
    for k in a.samples:
        assert a.samples[k].tolist() == b.samples[k].tolist(), k


def test_shard_plan_is_extracts_batches_round_robin():
    lengths = [7, 3, 9, 3, 5, 12, 4, 4, 8, 6, 11]
    single = wd.shard_plan(lengths, 3, 1)[0]
    assert [single[i:i + 3] for i in range(0, 11, 3)] == \
        capture._plan([{"input_ids": [0] * n} for n in lengths], 3)      # the very batches extract builds
    per_rank = wd.shard_plan(lengths, 3, 2)
    assert per_rank == [single[0:3] + single[6:9], single[3:6] + single[9:11]]
    assert sorted(sum(per_rank, [])) == list(range(11))
    assert wd.shard_plan(lengths, 3, 5)[4] == []                           # more ranks than batches
    # lengths are capped at the target's max positions, as extract truncates before planning
    assert wd.shard_plan([9, 5, 7], 1, 1, max_positions=5)[0] == [0, 1, 2]


@pytest.mark.parametrize("world", [2, 3, 5])
def test_shards_merge_to_exactly_the_single_process_result(tiny, world):
    target, draft, rows, _ = tiny
    single = simulate(target, draft, rows, [TAPS], K=K, batch_size=BS, progress=False)[TAPS]
    assert len(set(single.chains["accepted"].tolist())) >= 3, "degenerate: acceptance counts do not vary"
    parts = []
    for r in range(world):
        mine = wd.shard_rows(rows, r, world, BS, target.max_positions)
        assert world < 5 or r < 4 or mine == []
        res = simulate(target, draft, mine, [TAPS], K=K, batch_size=BS, progress=False) if mine else \
            {TAPS: AcceptanceResult(spec=TAPS, taps=tuple(TAPS.split(",")), steps=K)}
        parts.append(wd.decode_results(wd.encode_results(res))[0])        # through the wire format
    order = [rows[i]["_row"] for i in wd.shard_plan([len(r["input_ids"]) for r in rows], BS, 1)[0]]
    merged = wd.gather_results(parts, order)[TAPS]
    merged.cost_ratio = single.cost_ratio = 0.1                            # timings are the one difference
    merged.cost_model = single.cost_model = None
    _same(merged, single)
    assert sorted(merged.samples["sample"].tolist()) == list(range(12))     # GLOBAL row ids


def test_shard_file_round_trip_and_keys(tmp_path):
    r = AcceptanceResult.from_arrays("L1,L2", 2, sample=[4, 4, 9], t=[0, 1, 0], accepted=[2, 0, 1],
                                     source=["x", "x", "y"], on_path=[True, False, True])
    empty = AcceptanceResult(spec="L0", taps=("L0",), steps=2)
    p = wd.shard_path(tmp_path, 1, 2)
    wd.save_shard(p, {"L1,L2": r, "L0": empty}, {"K": 2})
    back, why = wd.load_shard(p, {"K": 2})
    assert why == "reused" and list(back) == ["L1,L2", "L0"] and back["L0"].n_chains == 0
    _same(back["L1,L2"], r)
    assert back["L1,L2"].chains["source"].dtype == object
    got, why = wd.load_shard(p, {"K": 3})
    assert got is None and "stale" in why and "K" in why
    p.write_bytes(b"not a zip")
    assert wd.load_shard(p, {"K": 2})[0] is None
    with pytest.raises(WorkbenchError, match="wirings"):
        wd.gather_results([{"L1,L2": r}, {"L0": empty}])


def test_cli_shard_dir_resumes_in_one_process(tiny, tmp_path, capsys):
    from workbench.cli import main

    _, _, _, folder = tiny
    base = ["accept", "--target", str(folder / "target"), "--draft", str(folder / "draft"), "--data",
            str(folder / "data.jsonl"), "--steps", str(K), "--batch-size", str(BS), "--quiet", "--cost-ratio", "0.1"]
    assert main(base + ["--json", str(tmp_path / "plain.json")]) == 0
    shards = tmp_path / "shards"
    assert main(base + ["--json", str(tmp_path / "a.json"), "--shard-dir", str(shards)]) == 0
    assert "wrote" in capsys.readouterr().err and (shards / "rank-0-of-1.npz").is_file()
    mtime = (shards / "rank-0-of-1.npz").stat().st_mtime_ns
    assert main(base + ["--json", str(tmp_path / "b.json"), "--shard-dir", str(shards)]) == 0
    assert "reused" in capsys.readouterr().err and (shards / "rank-0-of-1.npz").stat().st_mtime_ns == mtime
    plain = (tmp_path / "plain.json").read_text()
    assert (tmp_path / "a.json").read_text() == plain == (tmp_path / "b.json").read_text()
    # another K is another key: recomputed, not reused
    assert main(base + ["--steps", "2", "--shard-dir", str(shards)]) == 0
    err = capsys.readouterr().err
    assert "stale shard file (differs in K)" in err and "recomputing" in err


def test_environment_errors(monkeypatch):
    with pytest.raises(WorkbenchError, match="RANK=2 WORLD_SIZE=2"):
        wd.torchrun_env({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(WorkbenchError, match="LOCAL_RANK='x'"):
        wd.torchrun_env({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"})
    with pytest.raises(WorkbenchError, match="RANK is missing"):
        wd.torchrun_env({"WORLD_SIZE": "2"})
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(WorkbenchError, match="nproc-per-node 1"):
        wd.init("cpu", device_map="auto")


# ---- real torchrun, 2 CPU processes ---------------------------------------------------------------

def _torchrun(folder, out, extra_env=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **(extra_env or {}))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", "2",
           "-m", "workbench", "accept", "--target", str(folder / "target"), "--draft", str(folder / "draft"),
           "--data", str(folder / "data.jsonl"), "--steps", str(K), "--batch-size", str(BS), "--quiet",
           "--cost-ratio", "0.1", "--json", str(out), "--per-chain", str(out) + ".chains.jsonl"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def single(tiny, tmp_path_factory):
    """The single-process `workbench accept` outputs (JSON text, per-chain text)."""
    from workbench.cli import main

    _, _, _, folder = tiny
    out = tmp_path_factory.mktemp("single") / "one.json"
    assert main(["accept", "--target", str(folder / "target"), "--draft", str(folder / "draft"), "--data",
                 str(folder / "data.jsonl"), "--steps", str(K), "--batch-size", str(BS), "--quiet", "--cost-ratio",
                 "0.1", "--json", str(out), "--per-chain", str(out) + ".chains.jsonl"]) == 0
    js = json.loads(out.read_text())
    assert js["n_samples"] == 12 and sum(1 for h in js["histogram"] if h) >= 3      # not degenerate
    return out.read_text(), Path(str(out) + ".chains.jsonl").read_text()


@pytest.mark.slow            # ~20 s: two fresh Python processes importing torch + transformers
def test_torchrun_two_processes_equal_one_process(tiny, single, tmp_path):
    out = tmp_path / "two.json"
    p = _torchrun(tiny[3], out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert out.read_text() == single[0]
    assert Path(str(out) + ".chains.jsonl").read_text() == single[1]
    assert p.stdout.count("wrote " + str(out)) == 1                   # rank 0 alone reports
    assert sorted(os.listdir(str(out) + ".shards")) == ["rank-0-of-2.npz", "rank-1-of-2.npz"]


@pytest.mark.slow            # ~40 s: a crashed torchrun run, then the resumed one
def test_killed_run_resumes_from_finished_shards(tiny, single, tmp_path):
    out = tmp_path / "two.json"
    shards = Path(str(out) + ".shards")
    p = _torchrun(tiny[3], out, {wd.FAIL_ENV: "1"})
    assert p.returncode != 0 and not out.exists()
    assert os.listdir(shards) == ["rank-0-of-2.npz"], (os.listdir(shards), p.stderr[-2000:])
    mtime = (shards / "rank-0-of-2.npz").stat().st_mtime_ns
    p = _torchrun(tiny[3], out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[rank 0/2] reused" in p.stderr and "[rank 1/2] wrote" in p.stderr
    assert (shards / "rank-0-of-2.npz").stat().st_mtime_ns == mtime         # not recomputed
    assert out.read_text() == single[0]
    assert Path(str(out) + ".chains.jsonl").read_text() == single[1]


_GENERIC = '''
import json, sys
from workbench.simulate import distributed as wd
from workbench.stats.statistics import AcceptanceResult

def fn(shard):
    sample, t, acc, src = [], [], [], []
    for r in shard:
        for p in range(len(r["input_ids"]) - 2):
            sample.append(r["_row"]); t.append(p); acc.append((r["_row"] * 3 + p) % 3); src.append(r["source"])
    return {"X": AcceptanceResult.from_arrays("X", 2, sample=sample, t=t, accepted=acc, source=src)}

rows = [{"input_ids": [1] * (3 + (i * 7) % 5), "_row": i, "source": "ab"[i % 2]} for i in range(9)]
if sys.argv[2] == "local":
    res = {"rank": 0, "X": fn([rows[i] for i in wd.shard_plan([len(r["input_ids"]) for r in rows], 2, 1)[0]])["X"]}
else:
    with wd.init("cpu") as ctx:
        res = {"rank": ctx.rank, "X": wd.sharded(rows, fn, ctx=ctx, batch_size=2, everywhere=True)["X"]}
x = res["X"]
with open(f"{sys.argv[1]}/{sys.argv[2]}-{res['rank']}.json", "w") as f:
    json.dump({"json": x.to_json(), "chains": {k: v.tolist() for k, v in x.chains.items()}}, f)
'''


@pytest.mark.slow            # ~10 s: three processes importing torch
def test_sharded_everywhere_gives_every_rank_the_merged_result(tmp_path):
    """The generic mechanism for multi-stage callers (diagnose): 3 ranks, 5 batches (2, 2, 1 per rank)."""
    script = tmp_path / "generic.py"
    script.write_text(_GENERIC)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(script), str(tmp_path), "local"], env=env, check=True, timeout=120)
    p = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", "3",
                        str(script), str(tmp_path), "dist"], env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    local = json.loads((tmp_path / "local-0.json").read_text())
    assert len(set(local["chains"]["accepted"])) == 3
    for r in range(3):
        assert json.loads((tmp_path / f"dist-{r}.json").read_text()) == local, r
