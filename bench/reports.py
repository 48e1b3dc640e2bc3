"""Report benchmark: how long each page of a demo's report takes, the first time and once its results are kept.

    $ .venv/bin/python -m bench.reports                                              # data/demo, the default demo
    $ .venv/bin/python -m bench.reports --demo data/demo-real --size real --json bench/reports-real.json

Runs the four notebooks exactly as ``workbench demo`` does (``run_report`` with the demo's parameters, no code),
twice: **cold**, after deleting the demo's ``.workbench-cache/`` (the rewire refit and the cost model are computed),
then **warm** (the next run reuses them: what a second ``make demo`` costs). Each page's seconds come from the
report run itself. The goals of issue 48 (2 quiet cores): notebook 03 on the default demo <= 60 s, the four pages of
the real demo <= 12 min. Prints measured numbers; asserts nothing. A real vLLM (``make vllm``) makes page 04 start
one; without it page 04 checks no server and is seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from workbench.analysis.cached import FOLDER
from workbench.core.files import write_json
from workbench.report.benchmark import machine
from workbench.report.export import run_report

GOALS = {"default": {"03_acceptance": 60.0}, "real": {"total": 12 * 60.0}}


def one_run(demo: Path, size: str, out: Path) -> dict:
    params = {"demo": str(demo), "size": size}
    if size == "real":
        from workbench.cli.demo import REAL_REGENERATE_LIMIT

        params["regenerate_limit"] = REAL_REGENERATE_LIMIT
    t0 = time.monotonic()
    rep = run_report(out, parameters=params, no_code=True, progress=False)
    pages = {p.name: {"status": p.status, "seconds": round(p.seconds, 1)} for p in rep.pages}
    return {"pages": pages, "total": round(time.monotonic() - t0, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="data/demo", help="a built demo folder (make demo / make demo-real)")
    p.add_argument("--size", default="default", choices=["smoke", "default", "real"])
    p.add_argument("--json", metavar="OUT", help="write the results here (e.g. bench/reports.json)")
    args = p.parse_args(argv)
    demo = Path(args.demo)
    if not (demo / "manifest.json").is_file():
        print(f"error: {demo}: not a built demo (no manifest.json); build it first (make demo / make demo-real)",
              file=sys.stderr)
        return 2
    shutil.rmtree(demo / FOLDER, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        cold = one_run(demo, args.size, Path(tmp) / "cold")
        warm = one_run(demo, args.size, Path(tmp) / "warm")
    goals = GOALS.get(args.size, {})
    out = {"demo": str(demo), "size": args.size, "machine": machine("cpu"), "date": time.strftime("%Y-%m-%d"),
           "cold": cold, "warm": warm, "goals_seconds": goals,
           "note": "cold: the demo's .workbench-cache deleted first (rewire refit and cost model computed once, by "
                   "the first page that needs them); warm: the same run again, reusing them"}
    for name in cold["pages"]:
        c, w = cold["pages"][name], warm["pages"][name]
        print(f"{name:16s} cold {c['seconds']:7.1f} s   warm {w['seconds']:7.1f} s   ({c['status']}, {w['status']})")
    print(f"{'all four':16s} cold {cold['total']:7.1f} s   warm {warm['total']:7.1f} s")
    print(json.dumps({"goals_seconds": goals}))
    if args.json:
        write_json(args.json, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
