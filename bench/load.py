"""Tokens/s at load and context on a real vLLM, predicted from the twin's cost surface against measured (issue 56).

    $ make bench-load                                            # = the next line
    $ .venv/bin/python -m bench.load --demo data/demo-real      # bench/vllm-load.json (+ -surface.json), resumes
    $ .venv/bin/python -m bench.load --docs                      # docs/load.md's tables and figures from the file
    $ .venv/bin/python -m bench.load --demo tests/data/smoke-demo --quick --json /tmp/l/vllm-load.json

One :func:`workbench.live.vllm_load.measure` (``workbench vllm load``) over :data:`GRID`: a real vLLM without
speculation, the drafts' shape twin, the demo's ``draft-mismatched`` as shipped (vLLM feeds it the wrong taps) and
``draft-mismatched-fixed`` (the one-line fix, made by :func:`workbench.engines.ids_fix.drafts`), at each K, over the
concurrencies and context buckets: the data's own prompts, and on the real demo the long rows' 1k, 2k and 4k
(``val-long.jsonl``, :mod:`workbench.demo.long_rows`, built first when missing). Every draft cell is predicted from
the twin's cell (the surface) and its offline accept length, never from its own passes.

Figures (measured and reported, never asserted): the worst |error| over measured cells (goal <= 0.10), the share of
cells within 10%, the crossover within one grid step, the best K right where the measurement ranks the top two.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import splice

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "vllm-load.json"
DOC = ROOT / "docs" / "load.md"
IMG = ROOT / "docs" / "img"
GRID = {"ks": [1, 2], "concurrency": [1, 2, 4, 8, 16], "max_tokens": 32, "repeats": 3, "min_requests": 2,
        "in_flight": 4096, "long": [1024, 2048, 4096]}      # ~55 min on 2 cores: 7 servers, 14 cells each
QUICK = {"ks": [1], "concurrency": [1, 2], "max_tokens": 8, "repeats": 1, "min_requests": 2, "in_flight": 8192,
         "long": []}
DRAFTS = ["draft-mismatched", "fixed:draft-mismatched"]


def grid_inputs(demo: Path, out: Path, quick: bool = False) -> tuple[dict, dict, dict]:
    """(drafts, contexts, settings) of the benchmark on ``demo``: the fixed draft made beside ``out``; the long
    buckets only where the demo has ``val-long.jsonl`` rows of that length."""
    from workbench.engines.ids_fix import drafts as resolve

    kw = dict(QUICK if quick else GRID)
    long = kw.pop("long")
    drafts = resolve(demo, DRAFTS, out.parent / f"{out.stem}-drafts")
    contexts = {"data": str(demo / "val.jsonl")}
    if long and (demo / "val-long.jsonl").is_file():
        contexts.update({str(n): str(demo / "val-long.jsonl") for n in long})
    return drafts, contexts, kw


def measure(demo=None, *, quick: bool = False, out=None, say=None, start=None, stop=None, build_long: bool = True):
    """Run the grid on ``demo`` into ``out`` (default bench/vllm-load.json; resumes), write the surface beside it,
    return the state."""
    from bench.common import find_demo
    from workbench.live import vllm_load
    from workbench.live.vllm_server import find_python

    if start is None:
        find_python()
    demo = find_demo(demo)
    out = Path(out) if out else OUT
    if not quick and build_long and (demo / "manifest.json").is_file() and "real" in str(
            json.loads((demo / "manifest.json").read_text()).get("size", "")) and not (demo / "val-long.jsonl").is_file():
        from workbench.demo.long_rows import build_long_rows
        build_long_rows(demo)
    drafts, contexts, kw = grid_inputs(demo, out, quick)
    ks = kw.pop("ks")
    state = vllm_load.measure(str(demo / "target"), drafts, contexts, ks, out=str(out), say=say, start=start,
                              stop=stop, **kw)
    write_json(out.with_name(out.stem + "-surface.json"), state["surface"], indent=1)
    return state


def figures(state: dict) -> dict:
    """The benchmark's figures from a finished grid."""
    cells = [p for p in state["predictions"] if "error" in p]
    err = [abs(p["error"]) for p in cells]
    co = [c for c in state["crossover"].values() if "within_one_step" in c]
    ranked = [r for d in state["best_k"].values() for b in d.values() for r in b.values() if r.get("right") is not None]
    return {"cells": len(cells), "worst_error": max(err) if err else None,
            "within_10pct": round(sum(e <= 0.10 for e in err) / len(err), 3) if err else None,
            "crossover_within_one_step": [c["within_one_step"] for c in co],
            "best_k_right": f"{sum(r['right'] for r in ranked)} of {len(ranked)} ranked cells"}


def render(state: dict) -> str:
    """docs/load.md's measured section, from a finished grid."""
    from workbench.live.vllm_load import answer_line, table
    from workbench.stats.load_surface import measured_line

    f = figures(state)
    lines = [f"Measured on {state.get('measured_on', '?')}; {state.get('wall_s', 0) / 60:.0f} minutes of servers "
             f"(`wall_s`); {state['settings']['max_tokens']} tokens per request, greedy, median of "
             f"{state['settings']['repeats']} interleaved passes.", "",
             *[f"- {answer_line(state, d)} (predicted from the surface); "
               f"{measured_line(state['predictions'], d)}" for d in state["twins"]], "",
             f"{f['cells']} measured cells: worst |error| {f['worst_error'] * 100:.1f}%, "
             f"{f['within_10pct'] * 100:.0f}% within 10% (goal: every cell). Crossover within one grid step: "
             f"{f['crossover_within_one_step'] or 'undecided (no measured crossover)'}. Best K right: "
             f"{f['best_k_right']}.", "", table(state), ""]
    for d, c in state["crossover"].items():
        lines.append(f"- {d}: crossover on the {c['context']} bucket (grid {c['grid']}): measured "
                     f"{c['measured']}, predicted {c['predicted_served']} as served, {c['predicted_trained']} under "
                     f"the trained wiring" + (f" ({c['measured_note']})" if c.get("measured_note") else ""))
    for d, per in state["best_k"].items():
        for b, cs in per.items():
            lines.append(f"- {d}, {b} bucket, best K by C: " + ", ".join(
                f"C={c}: predicted K={r['predicted_served']}, measured "
                + (f"K={r['measured']}" if r.get("measured") else "too close to rank") for c, r in cs.items()))
    if state.get("left_out"):
        lines.append("- left out: " + "; ".join(f"{x['context']} at C={x['concurrency']} ({x['why']})"
                                                for x in state["left_out"]))
    return "\n".join(lines)


def docs(state: dict, doc=DOC, img=IMG) -> None:
    """Render the section (between the markers of ``doc``) and the figures from a finished grid."""
    from workbench.report.serving_figures import context_figure, load_figure

    load_figure(state).savefig(img / "load-concurrency.png", dpi=110, bbox_inches="tight")
    fig = context_figure(state)
    if fig is not None:
        fig.savefig(img / "load-context.png", dpi=110, bbox_inches="tight")
    splice(doc, "<!-- bench.load:begin -->", "<!-- bench.load:end -->", render(state))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", help="demo folder (default: data/demo when built, else the smoke demo)")
    p.add_argument("--quick", action="store_true", help="K=1, C=1,2, one pass (checks the runner)")
    p.add_argument("--json", help="where to write it (default bench/vllm-load.json; resumes)")
    p.add_argument("--docs", action="store_true", help="render docs/load.md's tables and figures from the file")
    args = p.parse_args(argv)
    try:
        if args.docs:
            state = json.loads(Path(args.json or OUT).read_text())
            docs(state)
            print(json.dumps(figures(state)))
            return 0
        state = measure(args.demo, quick=args.quick, out=args.json, say=lambda m: print(m, flush=True))
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(figures(state)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
