"""The demo's story over seeds: builds the demo for each seed and reports the contrast (opt-in).

    $ .venv/bin/python -m bench.demo_story                         # default size, seeds 0..4 (~5 CPU-min each)
    $ .venv/bin/python -m bench.demo_story --size smoke            # seconds per seed
    $ .venv/bin/python -m bench.demo_story --seeds 0,3 --work /tmp/story

Each seed is a full ``workbench demo --build-only`` build into ``--work`` (default
``data/demo-story/<size>-<seed>``, git-ignored; a finished build is reused, so an interrupted run
resumes at the first seed not built). Per seed it reads the story the build measured itself
(``manifest.json`` ``story``: ``acceptance.simulate`` on ``val.jsonl``, decode path, K=4, bonus
counted) and the build's wall and CPU seconds. Writes ``bench/demo_story.json`` (one entry per
size, the last run of each kept); ``workbench bench`` shows that last summary in its table without
re-running it (five default builds take half an hour on 2 busy cores).

Goals (issue 15): ``draft-mismatched`` fed SGLang's taps keeps <= 65% (default) / <= 70% (smoke)
of its accept length on its training taps; ``draft-aligned`` >= 3.0 (default); build <= 360 s (default)
and <= 60 s (smoke), judged on CPU seconds (the build is single-threaded; wall time depends on the load).
Numbers are measured and reported, never asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

from workbench.report import benchmark
from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

OUT = BENCH / "demo_story.json"
GOALS = {"default": {"ratio": "<= 0.65", "aligned": ">= 3.0", "build_s": "<= 360"},
         "smoke": {"ratio": "<= 0.70", "aligned": None, "build_s": "<= 60"}}


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` → [0, 1, 2, 3, 4]; ``"0,3"`` → [0, 3].

        >>> parse_seeds("0-2,7")
        [0, 1, 2, 7]
    """
    seeds = []
    try:
        for part in text.split(","):
            a, _, b = part.strip().partition("-")
            seeds.extend(range(int(a), int(b) + 1) if b else [int(a)])
    except ValueError:
        raise WorkbenchError(f"--seeds {text!r}: expected seeds like 0-4 or 0,3,5") from None
    if not seeds or min(seeds) < 0:
        raise WorkbenchError(f"--seeds {text!r}: expected non-negative seeds like 0-4")
    return seeds


def seed_row(manifest: dict) -> dict:
    """One seed's numbers from a built demo's manifest."""
    st, tm = manifest["story"], manifest.get("timings", {})
    mm, al = st["draft-mismatched"], st["draft-aligned"]
    return {"seed": manifest["seed"], "mismatched_own": mm["own_taps"], "mismatched_sglang": mm["sglang_taps"],
            "ratio": round(mm["sglang_taps"] / mm["own_taps"], 4), "aligned": al["sglang_taps"],
            "build_s": tm.get("total"), "build_cpu_s": tm.get("cpu_total"), "sampled_s": tm.get("sampled"),
            "target_final_loss": manifest.get("target", {}).get("final_loss")}


def figures(size: str, rows: list[dict]) -> list[dict]:
    """Bench-table figures (``workbench.report.benchmark`` schema) for one size: judged by the worst seed."""
    goals = GOALS.get(size, GOALS["default"])
    label = f"demo {size}, seeds {','.join(str(r['seed']) for r in rows)}"
    ratios, aligned = [r["ratio"] for r in rows], [r["aligned"] for r in rows]
    wall = [r["build_s"] for r in rows if r["build_s"] is not None]
    cpu = [r["build_cpu_s"] for r in rows if r["build_cpu_s"] is not None]
    out = [{"key": f"demo_story_ratio_{size}", "figure": "demo story: mismatched draft on SGLang's taps / on its own",
            "target": label, "unit": "x", "values": ratios, "ratio": max(ratios), "ratio_unit": "x (worst seed)",
            "goal": goals["ratio"], "note": "decode-path accept length, K=4, val.jsonl (bench/demo_story.py)"},
           {"key": f"demo_story_aligned_{size}", "figure": "demo story: aligned draft accept length",
            "target": label, "unit": "tokens", "values": aligned, "ratio": min(aligned),
            "ratio_unit": "(worst seed)", "goal": goals["aligned"], "note": "decode path, K=4, val.jsonl"}]
    if cpu:
        out.append({"key": f"demo_build_seconds_{size}", "figure": "demo build CPU time (workbench demo --build-only)",
                    "target": label, "unit": "s", "values": cpu, "ratio": max(cpu), "ratio_unit": "CPU s (slowest)",
                    "goal": goals["build_s"], "detail": {"wall_s": wall},
                    "note": f"wall {min(wall):.0f}-{max(wall):.0f} s on this machine (load-dependent); "
                            f"one thread, so CPU s ~ wall s on an idle core" if wall else ""})
    return out


def last_figures(path=OUT) -> list:
    """The last run's summary as bench-table rows (what ``workbench bench`` shows; nothing is re-run)."""
    return benchmark.saved_figures(path, "demo_story", "demo story over seeds",
                                   "opt-in: run bench/demo_story.py (builds the demo for seeds 0..4)",
                                   lambda doc: [f for run in doc["runs"].values() for f in run["figures"]])


def markdown(size: str, rows: list[dict]) -> str:
    """Per-seed table."""
    lines = [f"| seed ({size}) | mismatched, own taps | mismatched, SGLang's taps | share kept | aligned | "
             f"build s (CPU s) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['mismatched_own']:.2f} | {r['mismatched_sglang']:.2f} | {r['ratio']:.0%} | "
                     f"{r['aligned']:.2f} | {r['build_s']:.0f} ({r['build_cpu_s']:.0f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="default", help="demo size (default, smoke)")
    p.add_argument("--seeds", default="0-4", help="seeds, e.g. 0-4 or 0,3 (default 0-4)")
    p.add_argument("--work", help="folder for the builds (default data/demo-story)")
    p.add_argument("--json", default=str(OUT), help=f"summary JSON (default {OUT.relative_to(ROOT)})")
    p.add_argument("--force", action="store_true", help="rebuild seeds already built")
    args = p.parse_args(argv)
    from workbench.demo.build import build_demo, read_manifest
    from workbench.demo.recipe import SIZES

    try:
        if args.size not in SIZES:
            raise WorkbenchError(f"--size {args.size!r}: expected one of {', '.join(SIZES)}")
        seeds = parse_seeds(args.seeds)
        work = Path(args.work) if args.work else ROOT / "data" / "demo-story"
        rows = []
        for seed in seeds:
            out = build_demo(work / f"{args.size}-{seed}", size=args.size, seed=seed, force=args.force, progress=False)
            rows.append(seed_row(read_manifest(out)))
            r = rows[-1]
            print(f"[demo_story] {args.size} seed {seed}: mismatched {r['mismatched_own']:.2f} -> "
                  f"{r['mismatched_sglang']:.2f} ({r['ratio']:.0%}), aligned {r['aligned']:.2f}; build "
                  f"{r['build_s']} s wall, {r['build_cpu_s']} s CPU", flush=True)
        path = Path(args.json)
        doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"schema": 1, "runs": {}}
        doc["runs"][args.size] = {"seeds": seeds, "rows": rows, "figures": figures(args.size, rows),
                                  "machine": benchmark.machine("cpu"),
                                  "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        write_json(path, doc, indent=1)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown(args.size, rows))
    print(benchmark.markdown_table([benchmark.summarize(f) for f in figures(args.size, rows)]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
