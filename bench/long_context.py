"""Accept length by context position on the real model, out to 8k tokens (issue 56): the real drafts on the long rows.

    $ .venv/bin/python -m bench.long_context --demo data/demo-real   # bench/long-context.json, docs/img/long-context.png
    $ .venv/bin/python -m bench.long_context --docs                  # docs/load.md's section from the file

The rows: the demo's validation rows (82-343 prompt tokens) and its long rows (``val-long.jsonl``, prompts of 512 to
8,064 tokens with the target's 64-token greedy replies; :mod:`workbench.demo.long_rows`, built first when missing).
The demo's ``draft-mismatched`` under vLLM's reading, fed the taps vLLM feeds it and the taps it was trained on (the
one-line fix), both from one target pass (``simulate``; K=4, decode path and every position), binned by chain start (:func:`workbench.stats.context_length.by_position`, bins of :data:`WIDTH` tokens, 95%
bootstrap over rows): where the accept length falls against the drafts' trained lengths (their longest training row),
and whether the served wiring's loss holds at long context. The seconds and the process's peak memory are kept.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from bench.common import splice

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "long-context.json"
DOC = ROOT / "docs" / "load.md"
IMG = ROOT / "docs" / "img" / "long-context.png"
WIDTH = 512
K = 4
DRAFT = "draft-mismatched"


def runs(demo) -> dict:
    """{label: wiring}: what vLLM feeds the demo's :data:`DRAFT` as exported, and the taps it was trained on (the
    one-line fix), both under vLLM's reading of the draft (one target pass for both)."""
    from workbench.engines.taps import load_config
    from workbench.engines.trainers import trained_wiring_from_config
    from workbench.engines.wiring import resolve

    tcfg, dcfg = load_config(Path(demo) / "target"), load_config(Path(demo) / DRAFT)
    fed = ",".join(resolve("vllm", tcfg, dcfg).taps)
    trained = trained_wiring_from_config(dcfg, tcfg)
    if trained is None:
        raise WorkbenchError(f"{Path(demo) / DRAFT}: its config names no trained taps (workbench.trained_taps)")
    return {f"as vLLM feeds it ({fed})": fed, f"with the one-line fix: the trained taps ({trained.spec})": trained.spec}


def measure(demo, out=OUT, img=IMG, progress: bool = True) -> dict:
    from workbench.demo.long_rows import build_long_rows
    from workbench.load import inputs
    from workbench.report.context_figure import position_figure
    from workbench.rows.dataset import load
    from workbench.simulate.acceptance import simulate
    from workbench.stats.context_length import by_position

    demo = Path(demo)
    if not (demo / "val-long.jsonl").is_file():
        build_long_rows(demo, progress=progress)
    both = demo / ".val-long.work" / "val-and-long.jsonl"       # one file: one row index per row
    both.parent.mkdir(exist_ok=True)
    both.write_text((demo / "val.jsonl").read_text(encoding="utf-8") + (demo / "val-long.jsonl").read_text(
        encoding="utf-8"), encoding="utf-8")
    tgt, drf, ds = inputs.load(str(demo / "target"), str(demo / DRAFT), str(both), device="cpu", progress=progress)
    rows = ds.rows()
    trained_len = max(len(r["input_ids"]) for r in load(demo / "train.jsonl").rows())
    state = {"draft": DRAFT, "engine": "vllm", "k": K, "width": WIDTH, "rows": len(rows),
             "longest_row": max(len(r["input_ids"]) for r in rows), "longest_training_row": trained_len, "runs": {}}
    t0 = time.perf_counter()
    wirings = runs(demo)
    results = simulate(tgt, drf, ds, list(wirings.values()), K=K, engine="vllm", batch_size=1, progress=progress)
    state["seconds"] = round(time.perf_counter() - t0, 1)
    tables = {}
    for label, spec in wirings.items():
        result = results[spec]
        table = by_position(result, WIDTH, estimator="every-position")
        tables[label] = table
        state["runs"][label] = {"wiring": result.spec, "accept_length_decode_path":
                                round(result.decode_path["accept_length"], 4), "by_position": table.to_dict()}
    state["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    fig = position_figure(tables, max_positions=8192,
                          title=f"{DRAFT} served by vLLM: accept length by chain start (K={K}, every position; rows "
                                f"to {state['longest_row']} tokens; trained on rows of at most {trained_len} tokens)")
    ax = fig.axes[0]
    ax.axvline(trained_len, color="#e45756", linestyle=":", linewidth=1,
               label=f"the longest training row ({trained_len} tokens)")
    ax.legend(fontsize="x-small")
    fig.savefig(img, dpi=110, bbox_inches="tight")
    write_json(out, state, indent=1)
    write_json(demo / "long-context.json", state, indent=1)        # notebook 03 reads it beside the target
    return state


def render(state: dict) -> str:
    """The docs section: one table, the accept length per bin and run."""
    runs = state["runs"]
    starts = sorted({r["start"] for run in runs.values() for r in run["by_position"]["rows"]})
    head = "| chain start t | " + " | ".join(runs) + " |"
    lines = [f"K={state['k']}, every position, bins of {state['width']} tokens, 95% bootstrap over rows; "
             f"{state['rows']} rows (the validation rows and the long rows), the longest {state['longest_row']} "
             f"tokens; the draft's longest training row: {state['longest_training_row']} tokens. {state['draft']} "
             f"under vLLM's reading, both wirings from one target pass: {state['seconds']:.0f} s, peak memory "
             f"{state['peak_rss_mib']:.0f} MiB.", "", head,
             "|" + "---|" * (len(runs) + 1)]
    for s in starts:
        cells = []
        for run in runs.values():
            r = next((x for x in run["by_position"]["rows"] if x["start"] == s), None)
            cells.append("–" if r is None else f"{r['accept_length']:.2f} [{r['low']:.2f}–{r['high']:.2f}] "
                                               f"({r['n_samples']} rows)")
        lines.append(f"| {s}–{s + state['width'] - 1} | " + " | ".join(cells) + " |")
    lines += ["", "Decode-path accept length over every row: " + "; ".join(
        f"{label} {run['accept_length_decode_path']:.3f}" for label, run in runs.items()) + "."]
    return "\n".join(lines)


def docs(state: dict, doc=DOC) -> None:
    splice(doc, "<!-- long-context:begin -->", "<!-- long-context:end -->", render(state))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="data/demo-real")
    p.add_argument("--docs", action="store_true", help="render docs/load.md's section from bench/long-context.json")
    args = p.parse_args(argv)
    try:
        state = json.loads(OUT.read_text()) if args.docs else measure(args.demo)
        docs(state)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
