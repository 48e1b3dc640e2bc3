"""Benchmark of workbench.simulate.distributed (issue 9): wall time of `workbench accept` under torchrun with
N processes vs one process on the demo, and a check that both write the same JSON.

    $ .venv/bin/python -m bench.distributed                          # data/demo or the smoke demo, 2 vs 1
    $ .venv/bin/python -m bench.distributed --demo data/demo --data val.jsonl --nproc 2 --json b.json
    $ .venv/bin/python -m bench.distributed --device auto --nproc 8  # one GPU per rank on a GPU node

Wall time is end to end (process start, imports, loading, capture, K draft steps, merge): what a user
waits for. On a 2-core CPU box the ranks share the same cores and each pays its own start-up, so expect
a ratio near or above 1; the speed-up shows with one GPU per rank, on data large enough that capture
and the draft dominate start-up. ``measure`` is what ``bench.run`` calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, find_demo


def _accept(cmd_prefix, demo: Path, data: str, draft: str, out: Path, steps: int, batch_size: int,
            device: str) -> float:
    cmd = cmd_prefix + ["-m", "workbench", "accept", "--target", str(demo / "target"), "--draft",
                        str(demo / draft), "--data", str(demo / data), "--steps", str(steps),
                        "--batch-size", str(batch_size), "--device", device, "--quiet",
                        "--cost-ratio", "0.1", "--json", str(out)]        # fixed ratio: JSONs comparable
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd[:6])} ...: {tail}")
    return dt


def measure(demo=None, device: str = "cpu", repeats: int = 3, quick: bool = False, nproc: int = 2,
            data: str = "val.jsonl", draft: str = "draft-mismatched", steps: int = 3, batch_size: int = 4) -> list[dict]:
    """One figure: wall time of N torchrun processes ÷ one process, per repeat (fresh shard dirs)."""
    demo = find_demo(demo)
    repeats = 1 if quick else max(1, int(repeats))
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-dist-"))
    one, many = [], []
    for i in range(repeats):
        one.append(_accept([sys.executable], demo, data, draft, tmp / f"one-{i}.json", steps, batch_size, device))
        many.append(_accept([torchrun, "--standalone", "--nproc-per-node", str(nproc)], demo, data, draft,
                            tmp / f"many-{i}.json", steps, batch_size, device))    # fresh <json>.shards: no resume
    ref = (tmp / "one-0.json").read_text()
    same = all((tmp / f"{w}-{i}.json").read_text() == ref for i in range(repeats) for w in ("one", "many"))
    if not same:
        raise RuntimeError(f"{nproc} processes wrote a different JSON than one process (see {tmp})")
    n = json.loads(ref)["n_samples"]
    ratios = [m / o for m, o in zip(many, one)]
    return [{"key": "distributed_wall_time_ratio", "figure": f"torchrun {nproc} processes vs 1 (time)",
             "target": f"demo {demo.name} ({data}, {n} samples)", "unit": "x", "values": ratios,
             "ratio": statistics.median(ratios), "ratio_unit": f"{nproc}-process / 1-process wall time",
             "goal": None,
             "detail": {"one_process_s": one, f"{nproc}_processes_s": many, "same_json": same, "nproc": nproc,
                        "n_samples": n, "K": steps, "batch_size": batch_size, "device": device,
                        "cpu_cores": os.cpu_count()},
             "note": f"end-to-end wall time incl. start-up; same JSON: {same}; "
                     f"{os.cpu_count()} CPU cores shared by the ranks" if device == "cpu" else
                     f"end-to-end wall time incl. start-up; same JSON: {same}"}]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default=None, help="a built demo folder (default: data/demo, else the smoke demo)")
    ap.add_argument("--data", default="val.jsonl", help="data file inside the demo folder")
    ap.add_argument("--draft", default="draft-mismatched")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the figure here")
    args = ap.parse_args(argv)
    fig = measure(args.demo, args.device, args.repeats, nproc=args.nproc, data=args.data, draft=args.draft,
                  steps=args.steps, batch_size=args.batch_size)[0]
    d = fig["detail"]
    print(f"{d['n_samples']} samples, K={args.steps}, device {args.device}: 1 process "
          f"{statistics.median(d['one_process_s']):.1f} s, {args.nproc} processes "
          f"{statistics.median(d[f'{args.nproc}_processes_s']):.1f} s -> wall-time ratio {fig['ratio']:.2f} "
          f"(same JSON; {os.cpu_count()} CPU cores)")
    if args.json:
        from workbench.core.files import write_json

        write_json(args.json, fig, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
