"""How often a live comparison misreads the served precision, or names a wrong wiring, on a real vLLM (issue 47).

    $ .venv/bin/python -m bench.precision                     # the smoke demo; writes bench/precision-misreading.json
    $ .venv/bin/python -m bench.precision --requests 80 --subsets 60 --json /tmp/p.json

Two real vLLM servers (``.venv-vllm``, ``--enforce-eager``), one at ``--dtype bfloat16`` and one at ``float32``,
serve the smoke demo's ``draft-mismatched`` (nested ids [1, 3, 4]: vLLM feeds ``L0,L2,L3``). One
``vllm compare`` each, over ``--requests`` rows (``val.jsonl``, then ``train.jsonl``: prompts only matter),
with the precision inferred. The requests are split in two halves:

- the **fit** half (the second): the bfloat16 server's per-request keep rate (requests with a bfloat16 near-tie
  and no flip at one, of requests with a near-tie), the measurement
  :data:`workbench.live.precision.BF16_MEASURED` is set from (the request is the rule's unit);
- the **judged** half (the first): for each subset size 2, 4, 8, 16, 32, ``--subsets`` random subsets of those
  requests (seeded) are judged again exactly as ``compare`` judges them (:func:`subset`), and counted:

- how often the precision is decided, and decided wrong (float32 for the bfloat16 server, or the reverse);
- how often a wiring is named, and how often the named wiring is not the served one (``L0,L2,L3``).

Also the per-tie keep rate of the bfloat16 server over all its requests (near-ties kept / near-ties): the
measurement over all requests. Numbers are measured, never asserted. The rule is never judged on the requests its
rate was fitted on.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from workbench.core.files import write_json

SERVED = "L0,L2,L3"
SIZES = (2, 4, 8, 16, 32)


def subset(cmp, idx: list[int]):
    """The comparison of ``cmp`` restricted to requests ``idx`` (pooled counters dropped: they counted them all)."""
    from workbench.live.comparison import offline_results

    samples = [cmp.samples[i] for i in idx]
    reqs = {k: [v[i] for i in idx] for k, v in cmp.requests.items()}
    return replace(cmp, samples=samples, requests=reqs, aggregate=None,
                   offline=offline_results(reqs, samples, cmp.K, cmp.setting))


def judge(cmp, pool: list[int], sizes=SIZES, n_subsets: int = 60, seed: int = 0) -> dict:
    """Per subset size, ``n_subsets`` random subsets of the requests ``pool``, judged as ``compare`` judges."""
    rng = random.Random(seed)
    out = {}
    for size in sizes:
        if size > len(pool):
            continue
        rows = {"subsets": 0, "decided": 0, "float32": 0, "bfloat16": 0, "named": 0, "named_wrong": 0,
                "undecided_verdict": 0}
        for _ in range(n_subsets):
            c = subset(cmp, sorted(rng.sample(pool, size)))
            p = c.precision
            rows["subsets"] += 1
            if p.decided:
                rows["decided"] += 1
                rows[p.dtype] += 1
            if c.matched is not None:
                rows["named"] += 1
                rows["named_wrong"] += c.matched != SERVED
            rows["undecided_verdict"] += c.verdict_code == "undecided"
        out[str(size)] = rows
    return out


def rows_file(demo: Path, n: int, folder: Path) -> Path:
    lines = (demo / "val.jsonl").read_text().splitlines() + (demo / "train.jsonl").read_text().splitlines()
    path = folder / "requests.jsonl"
    path.write_text("\n".join(lines[:n]) + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default="tests/data/smoke-demo")
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--subsets", type=int, default=60)
    ap.add_argument("--json", default="bench/precision-misreading.json")
    args = ap.parse_args(argv)
    from workbench.live.vllm_live import compare
    from workbench.live.vllm_server import running_server

    demo = Path(args.demo)
    result = {"demo": str(demo), "draft": "draft-mismatched", "served": SERVED, "requests": args.requests,
              "subsets_per_size": args.subsets, "servers": {}}
    with tempfile.TemporaryDirectory(prefix="wb-precision-") as tmp:
        data = rows_file(demo, args.requests, Path(tmp))
        for dtype in ("bfloat16", "float32"):
            t0 = time.time()
            with running_server(demo / "target", demo / "draft-mismatched", k=4, enforce_eager=True, dtype=dtype,
                                log=Path(tmp) / f"vllm-{dtype}.log", timeout=600) as srv:
                cmp = compare(srv.url, demo / "target", demo / "draft-mismatched", data, probe=0, progress=False)
            ev = cmp.precision_evidence()
            n = len(cmp.samples)
            judged, fit = list(range(n // 2)), list(range(n // 2, n))
            fev = subset(cmp, fit).precision_evidence()
            result["servers"][dtype] = {
                "all": {"requests": n, "verdict": cmp.verdict_code, "wiring": cmp.matched,
                        "precision": cmp.precision.to_dict(), "evidence": ev,
                        "keep_rate_ties": (ev["ties"] - ev["tie_flips"]) / ev["ties"] if ev["ties"] else None,
                        "keep_rate_requests": (ev["tied"] - ev["flipped"]) / ev["tied"] if ev["tied"] else None},
                "fit": {"requests": [fit[0], fit[-1] + 1], "evidence": fev,
                        "measured": [fev["tied"], fev["flipped"]]},
                "judged": [judged[0], judged[-1] + 1],
                "by_subset_size": judge(cmp, judged, n_subsets=args.subsets), "seconds": round(time.time() - t0, 1)}
            print(json.dumps({dtype: result["servers"][dtype]}, indent=1), flush=True)
    write_json(args.json, result, indent=1)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
