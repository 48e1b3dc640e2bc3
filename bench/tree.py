"""Benchmarks of tree drafting (issue 18); every ratio is measured in this one run.

    $ .venv/bin/python -m bench.tree                 # CPU, synthetic target + the demo, a few minutes
    $ .venv/bin/python -m bench.run --only tree      # the same rows in the benchmark table

(a) tree vs chain draft time at equal steps on the synthetic target (``tree.draft_trees`` with
    eagle_topk k vs ``draft.run_chains``, the same features, paired per repeat): goal <= 1.3·k.
(b) peak memory of a tree ``simulate`` on 10x more samples vs the smaller run, each in a fresh process
    (bench.acceptance.memory_scaling with eagle_topk 4): goal <= 1.1x (flat in the number of samples).
(c) ``workbench tune``'s full default grid (steps 1..8, eagle_topk 1, 2, 4, 8, N <= 64: 210 shapes) on
    the demo (data/demo when built, else the smoke demo): seconds, goal <= 180 s on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from bench.common import find_demo, sync

FULL = {"layers": 16, "hidden": 64, "vocab": 256, "T": 256, "samples": 8, "prompt": 16, "train_epochs": 4,
        "steps": 5, "topk": 4, "N": 8, "mem_samples": 8, "mem_T": 256}
QUICK = {"layers": 16, "hidden": 32, "vocab": 128, "T": 32, "samples": 2, "prompt": 8, "train_epochs": 1,
         "steps": 3, "topk": 2, "N": 4, "mem_samples": 2, "mem_T": 32}


def tree_vs_chain(target, draft, rows, spec, *, steps: int, topk: int, N: int, repeats: int) -> dict:
    """Paired timings of ``draft_trees`` (S, k, N) and ``run_chains`` (K = S) on one batch of features."""
    from workbench.model import capture
    from workbench.model.draft import run_chains
    from workbench.model.tree import draft_trees

    b = next(capture.extract(target, rows, [spec], batch_size=len(rows), progress=False))
    feats = b.concat(spec.split(",")).to(device=draft.device, dtype=draft.dtype)
    ids, att = b.input_ids.to(draft.device), b.attention_mask.to(draft.device)

    def chain():
        with torch.no_grad():
            run_chains(draft, feats, ids, att, steps)
        sync(draft.device)

    def tree():
        with torch.no_grad():
            draft_trees(draft, feats, ids, att, steps, topk, N)
        sync(draft.device)

    chain(), tree()                                                   # warm-up
    tc, tt = [], []
    for _ in range(repeats):
        for fn, acc in ((chain, tc), (tree, tt)):
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    return {"chain_s": tc, "tree_s": tt, "ratios": [t / c for t, c in zip(tt, tc)], "B": len(rows),
            "T": int(ids.shape[1]), "steps": steps, "topk": topk, "N": N}


def advisor_grid(demo: Path, *, device: str = "cpu") -> dict:
    """One timed run of the default sweep (workbench.analysis.tune) on the demo's aligned draft and val.jsonl."""
    from workbench.load import inputs
    from workbench.demo.build import read_manifest
    from workbench.analysis.tune import shapes, sweep

    spec = ",".join(read_manifest(demo)["taps"]["aligned"])
    tgt, d, ds = inputs.load(str(demo / "target"), str(demo / "draft-aligned"), str(demo / "val.jsonl"),
                             device=device, progress=False)
    t0 = time.perf_counter()
    sw = sweep(tgt, d, ds, spec, progress=False)
    seconds = time.perf_counter() - t0
    best = sw.best(3)
    return {"seconds": seconds, "shapes": len(shapes()), "samples": next(iter(sw.results.values())).n_samples,
            "best": best, "best_accept_length": sw.results[best[0]].accept_length,
            "chain4_accept_length": sw.results[(4, 1, 5)].accept_length}


def measure(*, demo=None, device: str = "cpu", repeats: int = 5, quick: bool = False, threads: int = 1) -> list[dict]:
    """The rows of the benchmark table (bench/run.py ``--only tree``)."""
    from bench.acceptance import build, memory_scaling
    from workbench.model.checkpoint import save_draft

    size = QUICK if quick else FULL
    args = SimpleNamespace(seed=0, device=device, K=size["steps"], **{k: size[k] for k in
                                                                     ("layers", "hidden", "vocab", "T", "samples",
                                                                      "prompt", "train_epochs")})
    target, draft, rows, spec = build(args, device)
    label = f"synthetic Llama N={size['layers']} H={size['hidden']} V={size['vocab']}, T={size['T']}"
    a = tree_vs_chain(target, draft, rows, spec, steps=size["steps"], topk=size["topk"], N=size["N"],
                      repeats=repeats)
    k = size["topk"]
    figs = [{"key": "tree_vs_chain_time", "figure": f"tree (steps {size['steps']}, topk {k}, N {size['N']}) vs "
                                                     f"chain draft time, per topk", "target": label, "unit": "x",
             "values": [r / k for r in a["ratios"]], "goal": "<= 1.3",
             "detail": {"chain_s": statistics.median(a["chain_s"]), "tree_s": statistics.median(a["tree_s"]),
                        "tree_over_chain": statistics.median(a["ratios"]), "B": a["B"], "T": a["T"]},
             "note": f"(tree time / chain time) / topk, paired per repeat; B={a['B']}"}]
    with tempfile.TemporaryDirectory() as tmp:
        target.model.save_pretrained(str(Path(tmp) / "target"))
        save_draft(draft, str(Path(tmp) / "draft"))
        m = memory_scaling(str(Path(tmp) / "target"), str(Path(tmp) / "draft"), spec, vocab=size["vocab"],
                           device=device, K=size["steps"], n_small=size["mem_samples"], mem_T=size["mem_T"],
                           threads=threads, eagle_topk=k, num_draft_tokens=size["N"])
    figs.append({"key": "tree_memory_samples", "figure": f"tree simulate peak memory, 10x samples "
                                                          f"(topk {k})", "target": label, "unit": "x",
                 "values": m["ratios"], "goal": "<= 1.1",
                 "detail": {"small_MiB": m["small"]["peak_bytes"] / 2 ** 20, "big_MiB": m["big"]["peak_bytes"] / 2 ** 20,
                            "increment_ratio": m["increment_ratio"]},
                 "note": f"{size['mem_samples']} vs {10 * size['mem_samples']} samples of T={size['mem_T']}, "
                         f"fresh process each"})
    if not quick:
        demo = find_demo(demo)
        g = advisor_grid(demo, device=device)
        figs.append({"key": "tune_default_grid_seconds", "figure": "workbench tune, full default grid (210 shapes)",
                     "target": f"demo {demo.name}", "unit": "s", "values": [g["seconds"]], "goal": "<= 180",
                     "detail": g, "note": f"one run (not {repeats}): {g['samples']} samples; best {g['best'][0]} "
                                          f"accept length {g['best_accept_length']:.2f} vs chain K=4 "
                                          f"{g['chain4_accept_length']:.2f}"})
    return figs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--demo", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for f in measure(demo=args.demo, device=args.device, repeats=args.repeats, quick=args.quick, threads=args.threads):
        vals = f["values"]
        print(f"{f['key']}: median {statistics.median(vals):.3f} {f['unit']} (min {min(vals):.3f}, max "
              f"{max(vals):.3f}; goal {f['goal']}) {f['detail']}  [{f['note']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
