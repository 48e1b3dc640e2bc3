"""Report benchmark: how long each page of a demo's report takes, the first time and once its results are kept.

    $ .venv/bin/python -m bench.reports                                              # data/demo, the default demo
    $ .venv/bin/python -m bench.reports --demo data/demo-real --size real --json bench/reports-real.json
    $ .venv/bin/python -m bench.reports --docs        # docs/bench.md's table from bench/reports.json and -real.json

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

from bench.common import splice

from workbench.analysis.cached import FOLDER
from workbench.core.files import write_json
from workbench.report.benchmark import machine
from workbench.report.export import run_report

GOALS = {"default": {"03_acceptance": 60.0}, "real": {"total": 12 * 60.0}}
BENCH = Path(__file__).resolve().parent
FILES = {"default": BENCH / "reports.json", "real": BENCH / "reports-real.json"}
DOC = BENCH.parent / "docs" / "bench.md"
BEGIN, END = "<!-- bench.reports:begin -->", "<!-- bench.reports:end -->"
LABELS = {"default": "default", "real": "real SmolLM2-135M-Instruct"}
PAGES = {"01_dataset": "01 dataset", "02_wiring": "02 wiring", "03_acceptance": "03 acceptance",
         "04_live_server": "04 live server"}


def one_run(demo: Path, size: str, out: Path, notebooks=None) -> dict:
    params = {"demo": str(demo), "size": size}
    if size == "real":
        from workbench.cli.demo import REAL_REGENERATE_LIMIT

        params["regenerate_limit"] = REAL_REGENERATE_LIMIT
    t0 = time.monotonic()
    rep = run_report(out, notebooks=notebooks, parameters=params, no_code=True, progress=False)
    pages = {p.name: {"status": p.status, "seconds": round(p.seconds, 1)} for p in rep.pages}
    return {"pages": pages, "total": round(time.monotonic() - t0, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="data/demo", help="a built demo folder (make demo / make demo-real)")
    p.add_argument("--size", default="default", choices=["smoke", "default", "real"])
    p.add_argument("--json", metavar="OUT", help="write the results here (bench/reports.json and "
                   "bench/reports-real.json also rewrite docs/bench.md's table)")
    p.add_argument("--notebooks", help="only these pages, like 01,03 (default: all four)")
    p.add_argument("--docs", action="store_true", help="only rewrite docs/bench.md's table from the two files")
    args = p.parse_args(argv)
    if args.docs:
        print(docs())
        return 0
    demo = Path(args.demo)
    if not (demo / "manifest.json").is_file():
        print(f"error: {demo}: not a built demo (no manifest.json); build it first (make demo / make demo-real)",
              file=sys.stderr)
        return 2
    shutil.rmtree(demo / FOLDER, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        cold = one_run(demo, args.size, Path(tmp) / "cold", args.notebooks)
        warm = one_run(demo, args.size, Path(tmp) / "warm", args.notebooks)
    goals = GOALS.get(args.size, {})
    out = {"demo": str(demo), "size": args.size, "machine": machine("cpu"), "date": time.strftime("%Y-%m-%d"),
           "cold": cold, "warm": warm, "goals_seconds": goals,
           "note": "cold: the demo's .workbench-cache deleted first (rewire refit and cost model computed once, by "
                   "the first page that needs them); warm: the same run again, reusing them"}
    for name in cold["pages"]:
        c, w = cold["pages"][name], warm["pages"][name]
        print(f"{name:16s} cold {c['seconds']:7.1f} s   warm {w['seconds']:7.1f} s   ({c['status']}, {w['status']})")
    print(f"{'all':16s} cold {cold['total']:7.1f} s   warm {warm['total']:7.1f} s")
    print(json.dumps({"goals_seconds": goals}))
    if args.json:
        write_json(args.json, out, indent=2)
        if Path(args.json).resolve() in {f.resolve() for f in FILES.values()}:
            docs()
    return 0


def render(results: dict) -> str:
    """docs/bench.md's table: per demo (``{"default": bench/reports.json, "real": ...}``) and page, cold and warm."""
    lines = ["| demo | page | cold | warm |", "|---|---|---|---|"]
    for size, r in results.items():
        goals = r.get("goals_seconds", {})
        first = f"{LABELS.get(size, size)} (`bench/{FILES[size].name}`)" if size in FILES else size
        for i, (name, c) in enumerate(r["cold"]["pages"].items()):
            w = r["warm"]["pages"][name]
            cold = f"{c['seconds']:.1f} s"
            if name in goals:
                cold = f"**{cold}** (goal {goals[name]:.0f} s)"
            lines.append(f"|{f' {first} ' if i == 0 else ' '}| {PAGES.get(name, name)} | {cold} | {w['seconds']:.1f} s |")
        cold, warm = r["cold"]["total"], r["warm"]["total"]
        if "total" in goals:
            row = f"**{cold / 60:.1f} min** (goal {goals['total'] / 60:.0f} min) | {warm / 60:.1f} min"
        else:
            row = f"{cold:.1f} s | {warm:.1f} s"
        lines.append(f"| | all {len(r['cold']['pages'])} (the report run, its index and exports included) | {row} |")
    return "\n".join(lines)


def docs() -> str:
    """Rewrite docs/bench.md's table from the checked-in files; returns it."""
    table = render({size: json.loads(f.read_text()) for size, f in FILES.items() if f.is_file()})
    splice(DOC, BEGIN, END, table)
    return table


if __name__ == "__main__":
    sys.exit(main())
