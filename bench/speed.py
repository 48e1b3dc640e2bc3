"""Tokens per second on a real vLLM, predicted against measured (issue 36): the bench rows of a speed sweep.

    $ .venv/bin/python -m bench.speed --demo data/demo-real             # writes bench/vllm-speed.json (~20 min here)
    $ .venv/bin/python -m bench.speed --demo data/demo-real --sweep foreign    # bench/vllm-speed-foreign.json
    $ .venv/bin/python -m bench.speed --demo data/demo --sweep demo            # bench/vllm-speed-demo.json (~4 min)
    $ workbench bench --only speed --demo data/demo-real               # the main sweep, as rows of the table
    $ .venv/bin/python -m bench.speed --demo tests/data/smoke-demo --json /tmp/s/vllm-speed.json   # anywhere
    $ .venv/bin/python -m bench.speed --figure docs/img/04-speed-real.png        # redraw docs/vllm.md's figure

Each checked-in sweep is one entry of :data:`SWEEPS` (its drafts, Ks, prompts, repeats, file), so every
``bench/vllm-speed*.json`` the docs cite is rewritten by one command from scratch (drafts that a sweep makes,
like the one-line fix, are made by it too) and resumed by the same command.

One :func:`workbench.live.vllm_speed.sweep` (``workbench vllm speed``) over :data:`SMALL`: a real vLLM without
speculation and with each draft at each K, the same prompts one request at a time, repeats interleaved. The
drafts are the demo's ``draft-mismatched`` as shipped and ``draft-mismatched-fixed``: the same folder with the
one line ``workbench wiring`` prints for vLLM (top-level ``eagle_aux_hidden_state_layer_ids`` for the taps it
was trained on), made by this command beside ``--json`` (:func:`workbench.engines.ids_fix.drafts`); nothing is made by hand. Beside each measured
tokens/s, the prediction from the server's own step cost and the offline accept length (a), and from the
in-process cost model (b). The sweep is written to ``bench/vllm-speed.json``; ``workbench bench`` shows that
last sweep's rows in its table without re-running it (each server start costs 1-2 minutes here).

Figures (judged over every (draft, K) row): the largest |error| of prediction (a), goal <= 0.10; the share of
rows whose predicted speed-up has the measured one's sign (faster or slower than no speculation), goal == 1;
the largest |error| of prediction (b), no goal; the measured speed-ups. Measured and reported, never asserted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.demo.real_recipe import SPEED_SWEEP
from workbench.demo.speed import DRAFTS as DEMO_DRAFTS, SETTINGS as DEMO_SETTINGS
from workbench.report import benchmark

BENCH = Path(__file__).resolve().parent
OUT = BENCH.parent / SPEED_SWEEP            # the real demo's sweep, where its reports find it
SMALL = {"ks": [1, 2], "rows": 4, "max_tokens": 48, "repeats": 4, "concurrency": 1}
QUICK = {"ks": [1], "rows": 2, "max_tokens": 16, "repeats": 1, "concurrency": 1}
# name: (drafts: a demo folder, or "fixed:<folder>" for the one-line fix this command makes; sweep settings; file)
SWEEPS = {
    "main": (["draft-mismatched", "fixed:draft-mismatched"], SMALL, Path(SPEED_SWEEP).name),
    "warmup": (["draft-mismatched", "draft-aligned"],
               {"ks": [1], "rows": 4, "max_tokens": 48, "repeats": 3, "concurrency": 1, "in_process": False},
               "vllm-speed-warmup.json"),
    "16x96": (["draft-mismatched", "fixed:draft-mismatched"],
              {"ks": [1], "rows": 16, "max_tokens": 96, "repeats": 3, "concurrency": 1, "in_process": False,
               "long_rows": 96}, "vllm-speed-16x96.json"),
    "foreign": (["draft-modelopt", "fixed:draft-modelopt", "draft-speculators"],
                {"ks": [1], "rows": 4, "max_tokens": 48, "repeats": 3, "concurrency": 1},
                "vllm-speed-foreign.json"),
    # what `make demo` measures for the default demo's reports (workbench.demo.speed: its drafts, K and settings)
    "demo": (list(DEMO_DRAFTS), {"ks": [4], **DEMO_SETTINGS, "in_process": False}, "vllm-speed-demo.json"),
}


def render(state: dict) -> str:
    """A sweep as the Markdown table the docs show (docs/bench.md: ``--sweep demo``, what ``make demo`` measures for
    the reports; docs/foreign-drafts.md: ``--sweep foreign``): one row per draft and K, tokens/s and speed-up at
    concurrency 1 (median, range of the paired passes), its side by the sweep's own test, the speed-up at the
    sweep's concurrency when it measured one, and the twin's prediction error.

        >>> st = {"settings": {"concurrency": 4}, "rows": [{"draft": "d", "k": 4, "served_wiring": "L0,L6,L11",
        ...       "measured_tokens_per_s": 30.0, "baseline_tokens_per_s": 40.0, "measured_speedup": 0.75,
        ...       "speedup_spread": {"min": 0.7, "max": 0.8}, "too_noisy": False, "predicted_error": 0.05,
        ...       "concurrency_4": {"measured_speedup": 0.5}}]}
        >>> print(render(st).splitlines()[-1])
        | d | 4 | L0,L6,L11 | 30.0 | 40.0 | 0.75x [0.70–0.80] | slower | 0.50x | +5.0% |
        >>> st["settings"]["concurrency"] = 1
        >>> print(render(st).splitlines()[-1])
        | d | 4 | L0,L6,L11 | 30.0 | 40.0 | 0.75x [0.70–0.80] | slower | +5.0% |
    """
    c = state.get("settings", {}).get("concurrency", 1)
    more = c > 1
    out = ["| draft | K | served wiring | tokens/s | no speculation | speed-up (range of passes) | side | "
           + (f"speed-up at {c} in flight | " if more else "") + "twin's prediction error |",
           "|---|---|---|---|---|---|---|" + ("---|" if more else "") + "---|"]
    for r in state["rows"]:
        sp = r["speedup_spread"]
        side = ("too noisy" if r["too_noisy"] else "about the same" if abs(r["measured_speedup"] - 1) < 0.05 else
                "faster" if r["measured_speedup"] > 1 else "slower")
        atc = r.get(f"concurrency_{c}") or {}
        at = atc.get("measured_speedup")
        err = r.get("predicted_error")
        cell = ("–" if at is None else f"{at:.2f}x" + (" (too noisy)" if atc.get("too_noisy") else "")) + " | "
        out.append(f"| {r['draft']} | {r['k']} | {r.get('served_wiring', '?')} | {r['measured_tokens_per_s']:.1f} | "
                   f"{r['baseline_tokens_per_s']:.1f} | {r['measured_speedup']:.2f}x [{sp['min']:.2f}–{sp['max']:.2f}] | "
                   f"{side} | {cell if more else ''}{'–' if err is None else f'{err * 100:+.1f}%'} |")
    return "\n".join(out)


def figures(state: dict, label: str, source: str = "bench/vllm-speed.json") -> list[dict]:
    """Bench-table figures (``workbench.report.benchmark`` schema) of one finished sweep.

        >>> st = {"settings": {"rows": 4, "max_tokens": 48}, "rows": [
        ...     {"draft": "a", "k": 1, "predicted_error": 0.04, "in_process_error": -0.3, "sign_right": True,
        ...      "measured_speedup": 0.8},
        ...     {"draft": "a", "k": 2, "predicted_error": -0.12, "in_process_error": 0.1, "sign_right": True,
        ...      "measured_speedup": 0.7}]}
        >>> [(f["key"], f["ratio"], f["goal"]) for f in figures(st, "demo")]   # doctest: +NORMALIZE_WHITESPACE
        [('speed_predicted_error', 0.12, '<= 0.10'), ('speed_sign_right', 1.0, '== 1'),
         ('speed_in_process_error', 0.3, None), ('speed_measured_speedup', 0.8, None)]
    """
    rows = [r for r in state.get("rows", []) if "predicted_error" in r]
    if not rows:
        raise WorkbenchError("speed sweep: no row with a prediction (was the sweep finished?)")
    s = state.get("settings", {})
    where = (f"{len(rows)} (draft, K) rows, {s.get('rows')} prompts x {s.get('max_tokens')} tokens, concurrency 1; "
             f"{source}")
    err = [abs(r["predicted_error"]) for r in rows]
    clear = [r for r in rows if r.get("sign_right") is not None]        # None: too noisy, or within 5% of 1
    out = [{"key": "speed_predicted_error", "figure": "tokens/s predicted from the server's step cost vs measured "
            "(|error|)", "target": label, "unit": "", "values": err, "ratio": max(err), "ratio_unit": "(worst row)",
            "goal": "<= 0.10", "note": where},
           {"key": "speed_sign_right", "figure": "speed-up predicted on the right side of 1 (faster / slower)",
            "target": label, "unit": "", "values": [float(r["sign_right"]) for r in clear] or [0.0],
            "ratio": sum(r["sign_right"] for r in clear) / len(clear) if clear else 0.0,
            "ratio_unit": f"share of the {len(clear)} rows whose measurement calls a side",
            "goal": "== 1", "requires": bool(clear), "note": where}]
    ip = [abs(r["in_process_error"]) for r in rows if r.get("in_process_error") is not None]
    if ip:
        out.append({"key": "speed_in_process_error", "figure": "tokens/s predicted in process (CostModel) vs measured "
                    "(|error|)", "target": label, "unit": "", "values": ip, "ratio": max(ip),
                    "ratio_unit": "(worst row)", "goal": None, "note": where})
    sp = [r["measured_speedup"] for r in rows]
    out.append({"key": "speed_measured_speedup", "figure": "measured speed-up over no speculation (real vLLM)",
                "target": label, "unit": "x", "values": sp, "ratio": max(sp), "ratio_unit": "x (best row)",
                "goal": None, "note": where})
    return out


def label_of(state: dict) -> str:
    return f"real vLLM, {Path(state.get('settings', {}).get('target', '?')).parent.name or 'demo'}"


def last_figures(path=OUT) -> list:
    """The last sweep's rows (what ``workbench bench`` shows; nothing is re-run)."""
    return benchmark.saved_figures(path, "speed", "tokens/s predicted vs measured (real vLLM)",
                                   "opt-in: workbench bench --only speed (real vLLM servers)",
                                   lambda state: figures(state, label_of(state), _cited(path)))


def long_rows(data, n_tokens: int, folder) -> Path:
    """The rows of ``data`` whose reply holds at least ``n_tokens`` tokens, in order, written into ``folder``
    (a sweep at a reply length the shorter rows cannot give)."""
    import json

    from workbench.core.files import atomic_write

    keep = []
    for line in Path(data).read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            if sum(r.get("loss_mask", [])) >= n_tokens:
                keep.append(line + "\n")
    out = Path(folder) / f"{Path(data).stem}-{n_tokens}.jsonl"
    with atomic_write(out) as f:
        f.writelines(keep)
    return out


def measure(demo=None, *, quick: bool = False, out=None, sweep_name: str = "main", say=None, start=None,
            stop=None) -> list[dict]:
    """Run the sweep :data:`SWEEPS` names on ``demo`` (its settings, or :data:`QUICK`'s), making the drafts it
    makes (:func:`workbench.engines.ids_fix.drafts`) beside ``out``, write it to ``out`` (default its file in ``bench/``; resumable: the
    same key continues), and return its figures. ``start``/``stop``: the tests' stand-in servers."""
    from bench.common import find_demo
    from workbench.live.vllm_server import find_python
    from workbench.engines.ids_fix import drafts
    from workbench.live.vllm_speed import sweep

    if sweep_name not in SWEEPS:
        raise WorkbenchError(f"--sweep {sweep_name}: expected one of {', '.join(SWEEPS)}")
    names, settings, file = SWEEPS[sweep_name]
    out = Path(out) if out else BENCH / file
    if start is None:
        find_python()                                  # a one-line error when .venv-vllm is missing
    demo = find_demo(demo)
    kw = dict(QUICK if quick else settings)
    if quick and settings.get("long_rows"):            # the same path at the quick reply length
        kw["long_rows"] = QUICK["max_tokens"]
    ks = kw.pop("ks")
    work = out.parent / f"{out.stem}-drafts"
    data = demo / "val.jsonl"
    n_long = kw.pop("long_rows", None)
    if n_long:
        data = long_rows(data, n_long, work)
    state = sweep(str(demo / "target"), drafts(demo, names, work), str(data), ks, out=str(out), say=say, start=start,
                  stop=stop, **kw)
    return figures(state, label_of(state), _cited(out))


def _cited(path) -> str:
    """A sweep file as the docs cite it: relative to the repository when it is inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(BENCH.parent)) if p.is_relative_to(BENCH.parent) else str(path)


def draw(sweep: Path, png: Path) -> int:
    """The figure docs/vllm.md shows under the sweep's table, drawn from the file (``--figure``)."""
    import json

    from workbench.report import plots

    try:
        state = json.loads(sweep.read_text())
        plots.save(plots.speed_sweep(state), png)
    except (OSError, ValueError, WorkbenchError) as e:
        print(f"error: {sweep}: {e}", file=sys.stderr)
        return 2
    print(f"{png}: drawn from {sweep}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", help="demo folder (default: data/demo when built, else the smoke demo)")
    p.add_argument("--quick", action="store_true", help="K=1, 2 prompts, one pass (checks the runner)")
    p.add_argument("--sweep", default="main", choices=list(SWEEPS),
                   help="which checked-in sweep (default main: bench/vllm-speed.json)")
    p.add_argument("--json", help="where to write it (default its file in bench/; resumes)")
    p.add_argument("--figure", metavar="PNG", help="measure nothing: draw the sweep's file (tokens/s by K, measured "
                   "and predicted) to PNG, e.g. docs/img/04-speed-real.png from the main sweep")
    args = p.parse_args(argv)
    if args.figure:
        return draw(Path(args.json) if args.json else BENCH / SWEEPS[args.sweep][2], Path(args.figure))
    try:
        figs = measure(args.demo, quick=args.quick, out=args.json, sweep_name=args.sweep,
                       say=lambda m: print(m, flush=True))
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for f in figs:
        if f.get("requires") is False:          # no row to judge it on: the figure decides nothing
            print(f"{f['figure']}: undecided, no row's measurement calls a side (goal {f['goal']}; more --repeats "
                  f"or a quieter machine would decide it)")
        else:
            print(f"{f['figure']}: {f['ratio']} (goal {f['goal'] or '-'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
