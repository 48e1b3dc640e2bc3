"""Time to know: the workbench's offline answer for every candidate wiring, against a real vLLM serving the
same requests once per wiring (issue 27 item 7).

    $ .venv/bin/python -m bench.vllm                                   # data/demo, else the smoke demo
    $ .venv/bin/python -m bench.vllm --demo data/demo-smoke --limit 16 --candidates 3 --json vllm-bench.json
    $ .venv/bin/python -m bench.vllm --docs                           # docs/bench.md's tables from the file
    $ workbench bench --only vllm                                      # the same, as a row of the table

Measured side by side in one run, on the demo's mismatched draft and ``val.jsonl`` (the first ``--limit``
rows, greedy, ``max_tokens`` = each row's response length):

- **offline**: the command ``workbench diagnose --engine vllm`` over every candidate wiring, in a fresh process
  (start-up, load target, draft and data, one target pass per stage, chains for every candidate): wall seconds,
  ``--repeats`` times;
- **live**: for each of the first ``--candidates`` wirings (cap 3: each restart costs 30-80 s), a real vLLM
  server (``.venv-vllm``, ``--enforce-eager``) whose draft config names that wiring's ids at the top level,
  the same requests, then stop: start-up seconds (until ``/v1/models`` answers) and serving seconds.

Figures: the live time with start-up and without it, each over the offline time (the ratio: how much longer
a server-by-server answer takes), and per wiring the offline decode-path accept length beside the live one
(pooled over requests, as vLLM reports it). Numbers are measured here and never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import find_demo, splice
from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

OUT = Path(__file__).resolve().parent / "vllm-time-to-know.json"
DOC = Path(__file__).resolve().parents[1] / "docs" / "bench.md"
BEGIN = "<!-- bench.vllm:begin -->"
END = "<!-- bench.vllm:end -->"


def draft_for(draft: Path, ids: list[int], out: Path) -> Path:
    """A copy of ``draft`` whose config names ``ids`` at the top level (what vLLM 0.32 reads first)."""
    shutil.copytree(draft, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [int(i) for i in ids]
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def serve_once(target: Path, draft: Path, rows: list[dict], *, k: int, log: Path) -> dict:
    """Start a real server, send every row once (greedy), stop: start-up s, serving s, pooled accept length."""
    from workbench.live.vllm_server import complete, running_server

    t0 = time.perf_counter()
    with running_server(target, draft, k=k, enforce_eager=True, log=log, timeout=600) as srv:
        started = time.perf_counter() - t0
        t1 = time.perf_counter()
        steps = accepted = 0
        for r in rows:
            n_prompt = int(r["n_prompt_tokens"])
            out = complete(srv.url, r["input_ids"][:n_prompt], max_tokens=int(r["n_response_tokens"]),
                           temperature=0.0, model=str(target), top_p=1.0, top_k=-1, ignore_eos=True)
            sd = (out.get("metrics") or {}).get("speculative_decoding") or {}
            steps += int(sd.get("num_spec_steps", 0))
            accepted += int(sd.get("num_accepted_draft_tokens", 0))
        served = time.perf_counter() - t1
    return {"startup_s": started, "serve_s": served, "accept_length": 1 + accepted / steps if steps else None,
            "steps": steps, "fix_applied": srv.fix_applied}


def measure(demo=None, *, repeats: int = 3, limit: int = 16, candidates: int = 3, k: int = 4, quick: bool = False,
            device: str = "cpu") -> list[dict]:
    """The figures (``workbench.report.benchmark`` schema) of one side-by-side run; see the module docstring."""
    import pandas as pd

    from workbench import rows as data
    from workbench.engines import records as engines
    from workbench.engines.wiring import load_config, resolve
    from workbench.live.vllm_server import find_python

    find_python()                                      # a one-line error when .venv-vllm is missing
    demo = find_demo(demo)
    target, draft, val = demo / "target", demo / "draft-mismatched", demo / "val.jsonl"
    limit = 4 if quick else int(limit)
    rows = data.load(val).rows(limit)
    offline_s, table = [], None
    with tempfile.TemporaryDirectory(prefix="wb-vllm-diag-") as tmp:
        for i in range(1 if quick else max(1, int(repeats))):   # the command a user runs, in a fresh process
            out = Path(tmp) / f"dx-{i}.json"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "workbench", "diagnose", "--target", str(target), "--draft",
                            str(draft), "--data", str(val), "--engine", "vllm", "--steps", str(k), "--limit",
                            str(limit), "--device", device, "--quiet", "--json", str(out)],
                           check=False, capture_output=True, text=True, timeout=1800)
            offline_s.append(time.perf_counter() - t0)
            if not out.is_file():
                raise WorkbenchError(f"workbench diagnose wrote no {out.name}: run it alone to see why")
            table = pd.DataFrame(json.loads(out.read_text())["table"])
    ranked = table[table["feasible"].astype(bool) & table["decode_path_accept_length"].notna()]
    specs = ranked["spec"].tolist()[: max(1, min(3, int(candidates)))]
    tcfg = load_config(target)
    live = {}
    with tempfile.TemporaryDirectory(prefix="wb-vllm-bench-") as tmp:
        for i, spec in enumerate(specs):
            f = engines.ids_for_taps("vllm", tuple(spec.split(",")), tcfg)
            if not f.feasible:
                continue
            d = draft_for(draft, f.ids, Path(tmp) / f"draft-{i}")
            live[spec] = serve_once(target, d, rows, k=k, log=Path(tmp) / f"vllm-{i}.log")
    if not live:
        raise WorkbenchError("no candidate wiring vLLM can feed: nothing served")
    off = statistics.median(offline_s)
    with_start = sum(v["startup_s"] + v["serve_s"] for v in live.values())
    without = sum(v["serve_s"] for v in live.values())
    dp = dict(zip(table["spec"], table["decode_path_accept_length"]))
    by_spec = {s: {"offline_decode_path_accept_length": float(dp[s]), **live[s]} for s in live}
    note = (f"{len(rows)} requests of {val.name}, K={k}, {len(table)} candidates offline, {len(live)} served "
            f"(one server each, --enforce-eager); live accept length pooled over requests as vLLM reports it")
    served = ",".join(resolve("vllm", tcfg, load_config(draft)).taps)     # what vLLM feeds the draft as exported
    detail = {"offline_s": offline_s, "live": by_spec, "candidates_offline": table["spec"].tolist(),
              "served_as_exported": served}
    return [
        {"key": "vllm_time_to_know_offline", "figure": "time to know: offline, every candidate wiring",
         "target": "demo", "unit": "s", "values": offline_s, "goal": None, "detail": detail, "note": note},
        {"key": "vllm_time_to_know_live", "figure": f"time to know: real vLLM, {len(live)} wirings, with start-up",
         "target": "demo", "unit": "s", "values": [with_start], "ratio": with_start / off, "ratio_unit": "x offline",
         "goal": None, "note": "one run: each wiring is a server restart"},
        {"key": "vllm_time_to_know_live_serving", "figure": f"time to know: real vLLM, {len(live)} wirings, serving only",
         "target": "demo", "unit": "s", "values": [without], "ratio": without / off, "ratio_unit": "x offline",
         "goal": None, "note": "start-up left out: the requests alone"},
    ]


def render(figs: list[dict]) -> str:
    """docs/bench.md's time-to-know tables from the figures of :func:`measure` (``bench/vllm-time-to-know.json``)."""
    by = {f["key"]: f for f in figs}
    off, live, serving = by["vllm_time_to_know_offline"], by["vllm_time_to_know_live"], by["vllm_time_to_know_live_serving"]
    d = off["detail"]
    n, vals = len(d["live"]), off["values"]
    lines = ["| what | wall time |", "|---|---|",
             f"| `workbench diagnose --engine vllm` over all {len(d['candidates_offline'])} candidate wirings, a fresh "
             f"process each time | {statistics.median(vals):.1f} s [{min(vals):.1f}–{max(vals):.1f}] ({len(vals)} runs) |",
             f"| a real vLLM per wiring, {n} wirings (the top {n} offline), start-up included (`--enforce-eager`) | "
             f"{live['values'][0]:.1f} s ({live['ratio']:.1f}× offline) |",
             f"| the same, serving only (start-up left out) | {serving['values'][0]:.1f} s ({serving['ratio']:.1f}× "
             f"offline) |", "",
             "| wiring served (top-level ids in the draft config) | offline decode path | live, pooled over requests | "
             "start | serve |", "|---|---|---|---|---|"]
    for spec, v in d["live"].items():
        note = " (what vLLM reads from the nested ids)" if spec == d.get("served_as_exported") else ""
        lines.append(f"| `{spec}`{note} | {v['offline_decode_path_accept_length']:.3f} | {v['accept_length']:.3f} | "
                     f"{v['startup_s']:.1f} s | {v['serve_s']:.2f} s |")
    gaps = [v["accept_length"] - v["offline_decode_path_accept_length"] for v in d["live"].values()]
    lo, hi = min(gaps), max(gaps)
    lines += ["", f"The pooled live accept length runs {lo:+.3f}" + (f" to {hi:+.3f}" if f"{hi:.3f}" != f"{lo:.3f}" else "")
              + " against the offline decode path."]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo", help="demo folder (default: data/demo when built, else the smoke demo)")
    p.add_argument("--limit", type=int, default=16, help="requests (rows of val.jsonl)")
    p.add_argument("--candidates", type=int, default=3, help="wirings served live (at most 3)")
    p.add_argument("--repeats", type=int, default=3, help="offline repeats")
    p.add_argument("-k", type=int, default=4, help="num_speculative_tokens")
    p.add_argument("--json", help="write the figures here (bench/vllm-time-to-know.json also rewrites docs/bench.md's "
                   "tables)")
    p.add_argument("--docs", action="store_true", help="only rewrite docs/bench.md's tables from --json")
    a = p.parse_args(argv)
    try:
        if a.docs:
            figs = json.loads(Path(a.json or OUT).read_text())
            splice(DOC, BEGIN, END, render(figs))
            print(render(figs))
            return 0
        figs = measure(a.demo, repeats=a.repeats, limit=a.limit, candidates=a.candidates, k=a.k)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for f in figs:
        print(f"{f['figure']}: median {statistics.median(f['values']):.1f} {f['unit']}"
              + (f"  ({f['ratio']:.1f} {f['ratio_unit']})" if f.get("ratio") else ""))
    for spec, v in figs[0]["detail"]["live"].items():
        print(f"  {spec}: offline {v['offline_decode_path_accept_length']:.3f}, live {v['accept_length']:.3f}, "
              f"start {v['startup_s']:.1f} s, serve {v['serve_s']:.2f} s")
    if a.json:
        write_json(a.json, figs)
        if Path(a.json).resolve() == OUT:
            splice(DOC, BEGIN, END, render(figs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
