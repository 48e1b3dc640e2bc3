"""Every benchmark in ``bench/`` in one run: one markdown table, and ``bench/results.json``.

    $ .venv/bin/python -m bench.run                       # full run (CPU: ~5-10 min on 2 cores)
    $ workbench bench --quick --out /tmp/results.json     # the same code at tiny sizes (seconds)
    $ workbench bench --device cuda                       # bf16 on a GPU

Runs ``measure(...)`` of ``bench.capture`` and ``bench.acceptance`` on the demo target and draft
(``data/demo`` when built, else the smoke demo built into ``data/demo-smoke``) and on a deeper
synthetic target (>= 16 layers, built in memory); adds the tokens per second of the whole pipeline
(``workbench accept`` end to end) on the demo; calls ``bench.distributed``, ``bench.rewire`` and
``bench.regenerate`` (regenerate's tokens/s against a bare HF ``generate``, on a small synthetic
target) when they exist and expose ``measure`` (else their rows say "not run" and why). Each figure: median, min and max
over ``--repeats`` runs (>= 5), the ratio it is judged by and the goal. Numbers are measured here and
never asserted; a benchmark that fails becomes a "failed" row and the exit code is 1.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import statistics
import sys
import time
from pathlib import Path

from bench.common import ROOT, find_demo
from workbench.report import benchmark
from workbench.core.errors import WorkbenchError

PACKAGE = __package__ or "bench"        # where the benchmark modules are found (tests point it elsewhere)
BENCH = ROOT / "bench"

# Sizes, (full run, --quick) per setting: the full run fits ~10 minutes on 2 busy CPU cores; --quick is
# the same code in seconds.
SIZES = {"capture": {"batch": (4, 2), "seq": (64, 16), "mem_batch": (8, 2), "mem_seq": (512, 32)},
         "capture_synthetic": {"layers": (16, 16), "hidden": (256, 32), "vocab": (4096, 128)},
         "acceptance": {"K": (7, 3), "exact_samples": (4, 1), "mem_samples": (8, 2), "mem_T": (128, 32)},
         "acceptance_synthetic": {"layers": (16, 16), "hidden": (64, 32), "vocab": (256, 128), "T": (256, 32),
                                  "samples": (8, 4), "exact_samples": (1, 1), "train_epochs": (6, 1),
                                  "mem_T": (256, 32)},
         "pipeline": {"K": (4, 3), "batch_size": (8, 8)},
         "regenerate": {"prompts": (16, 4), "prompt_len": ((16, 48), (8, 16)), "max_new": (16, 4),
                        "batch_size": (8, 4), "layers": (8, 2), "hidden": (256, 32), "vocab": (4096, 128)}}
REPEATS = 5


def sizes(quick: bool) -> dict:
    """The settings of a full run (``quick=False``) or a --quick one, with ``repeats``.

        >>> sizes(True)["capture"], sizes(False)["pipeline"], sizes(False)["repeats"]
        ({'batch': 2, 'seq': 16, 'mem_batch': 2, 'mem_seq': 32}, {'K': 4, 'batch_size': 8}, 5)
    """
    return {"repeats": REPEATS, **{sec: {k: v[int(quick)] for k, v in kv.items()} for sec, kv in SIZES.items()}}


FULL, QUICK = sizes(False), sizes(True)
SECTIONS, TARGETS = benchmark.SECTIONS, benchmark.TARGETS
add_arguments = benchmark.add_arguments


def _pick(text: str | None, allowed: tuple, flag: str) -> list[str]:
    if text is None:
        return list(allowed)
    got = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in got if t not in allowed]
    if bad or not got:
        raise WorkbenchError(f"{flag} {text!r}: expected a comma list of {', '.join(allowed)}")
    return got


def load_bench(name: str):
    """The benchmark module ``bench.<name>``, or None when there is no such module."""
    full = f"{PACKAGE}.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name in (full, PACKAGE):
            return None
        raise


def _tokens(rows) -> int:
    return sum(len(r["input_ids"]) for r in rows)


def pipeline_throughput(demo: Path, *, device: str, repeats: int, K: int = 4, batch_size: int = 8) -> list[dict]:
    """Tokens per second of ``workbench accept`` end to end (load target, draft, data; capture; chains;
    statistics) on the demo's val.jsonl, judged as a share of a bare target forward's tokens per second."""
    import torch

    from workbench import rows as data
    from workbench.model import capture
    from workbench.simulate.acceptance import accept
    from workbench.demo.build import read_manifest

    spec = ",".join(read_manifest(demo)["taps"]["aligned"])
    val = demo / "val.jsonl"
    target = capture.load_target(demo / "target", device=device)
    rows = data.load(val).rows()
    n_tok = _tokens(rows)
    batches = list(capture.extract(target, rows, "embed", batch_size=batch_size, progress=False))

    def bare():
        with torch.no_grad():
            for b in batches:
                target.model(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=False)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def whole():
        accept(demo / "target", demo / "draft-aligned", val, wiring=spec, K=K, device=device,
               batch_size=batch_size, progress=False)

    bare(), whole()                                                   # warm-up
    t_bare, t_whole = [], []
    for _ in range(repeats):
        for fn, acc in ((bare, t_bare), (whole, t_whole)):
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    tps = [n_tok / t for t in t_whole]
    bare_tps = n_tok / statistics.median(t_bare)
    return [{"key": "pipeline_tokens_per_second", "figure": "tokens/s, whole pipeline (`workbench accept`)",
             "target": "demo", "unit": "tok/s", "values": tps, "ratio": statistics.median(tps) / bare_tps,
             "ratio_unit": "of bare fwd", "goal": None,
             "detail": {"tokens": n_tok, "samples": len(rows), "K": K, "bare_forward_tok_s": bare_tps,
                        "whole_s": statistics.median(t_whole)},
             "note": f"{len(rows)} samples, {n_tok} tokens, K={K}; load+capture+chains+stats"}]


def _train_file(demo: Path):
    """The demo's ``train.jsonl`` (long rows for the exact loop at T=512), or None."""
    return str(demo / "train.jsonl") if (demo / "train.jsonl").is_file() else None


def measurer(section: str, figure: str, figures: list):
    """``bench.<section>`` when it exposes ``measure``; else None, after adding its "not run" row to ``figures``."""
    mod = load_bench(section)
    if mod is not None and hasattr(mod, "measure"):
        return mod
    why = (f"bench/{section}.py does not exist yet" if mod is None
           else f"bench/{section}.py has no measure() yet (run it alone: .venv/bin/python -m bench.{section})")
    figures.append(benchmark.not_run(section, figure, why))
    return None


def _call_measure(mod, name: str, **offered):
    """Call ``mod.measure`` with the keyword arguments it accepts (distributed/rewire: written elsewhere)."""
    sig = inspect.signature(mod.measure)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return mod.measure(**offered)
    return mod.measure(**{k: v for k, v in offered.items() if k in sig.parameters})


def run(args) -> int:
    import torch

    from workbench.core.devices import resolve_device

    device = resolve_device(args.device)
    cfg = QUICK if args.quick else FULL
    repeats = cfg["repeats"] if args.repeats is None else int(args.repeats)
    if repeats < 5 and not args.quick:
        raise WorkbenchError(f"--repeats {repeats}: expected >= 5 (each figure is a median over at least 5 runs)")
    if repeats < 1:
        raise WorkbenchError(f"--repeats {repeats}: expected >= 1")
    sections = _pick(args.only, SECTIONS, "--only")
    if args.only is None:                        # the long-row section is opt-in (--only long)
        sections = [s for s in sections if s not in benchmark.OPT_IN]
    targets = _pick(args.targets, TARGETS, "--targets")
    if args.threads and device == "cpu":
        torch.set_num_threads(args.threads)
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
    except Exception:  # noqa: BLE001 (an older transformers without the switch: bars stay)
        pass
    needs_demo = "demo" in targets or any(s in sections for s in ("pipeline", "distributed", "rewire", "tree",
                                                                   "sampled"))
    demo = find_demo(args.demo) if needs_demo else None
    figures: list[benchmark.Figure] = []
    failed = []
    t_start = time.perf_counter()
    machine = benchmark.machine(device)
    out = args.out or str(BENCH / "results.json")
    settings = {"quick": bool(args.quick), "repeats": repeats, "threads": args.threads, "demo": str(demo) if demo else None,
                "sections": sections, "targets": targets, "sizes": cfg,
                "note": "shared, noisy machine: other jobs ran during the measurement" if device == "cpu" else ""}

    def save(done: bool):
        """Write what is measured so far (atomic), so that an interrupted long run keeps its finished sections."""
        settings.update(seconds=round(time.perf_counter() - t_start, 1), complete=done)
        doc = benchmark.results(machine, figures, settings)
        benchmark.write_results(out, doc)
        return doc

    def add(section: str, label: str, thunk):
        t0 = time.perf_counter()
        print(f"[bench] {section} on {label} ...", flush=True)
        try:
            raw = thunk()
            figs = [benchmark.summarize(r, source=f"bench/{section}.py measure()") for r in raw]
        except WorkbenchError:
            raise
        except Exception as e:  # noqa: BLE001 (the row says what failed; the run goes on; exit code 1)
            msg = (str(e).strip().splitlines() or [type(e).__name__])[-1]
            failed.append(section)
            figures.append(benchmark.not_run(section, section, f"failed: {type(e).__name__}: {msg}", label))
            figures[-1].status = "failed"
            print(f"[bench] {section} on {label} FAILED: {msg}", flush=True)
            save(False)
            return
        figures.extend(figs)
        save(False)
        print(f"[bench] {section} on {label}: {len(figs)} figure(s) in {time.perf_counter() - t0:.1f} s; "
              f"so far in {out}", flush=True)

    demo_label = None
    if demo is not None:
        from workbench.demo.build import read_manifest

        man = read_manifest(demo)
        t = man.get("target", {})
        demo_label = f"demo {man.get('size')} (N={t.get('n_layers')} H={t.get('hidden_size')})"
        demo_spec = ",".join(man["taps"]["aligned"])

    for section in ("capture", "acceptance"):
        if section not in sections:
            continue
        mod = measurer(section, section, figures)
        if mod is None:
            continue
        common = dict(device=device, repeats=repeats, threads=args.threads, **cfg[section])
        if "demo" in targets:
            if section == "capture":
                add(section, demo_label, lambda: mod.measure(str(demo / "target"), label=demo_label, **common))
            else:
                add(section, demo_label, lambda: mod.measure(str(demo / "target"), str(demo / "draft-aligned"),
                                                             str(demo / "val.jsonl"), demo_spec, label=demo_label,
                                                             exact_data=_train_file(demo), **common))
        if "synthetic" in targets:
            syn = {**common, **cfg[f"{section}_synthetic"]}
            label = f"synthetic Llama N={syn['layers']} H={syn['hidden']}"
            add(section, label, lambda: mod.measure(None, label=label, **syn))

    if "pipeline" in sections:
        add("pipeline", "demo", lambda: pipeline_throughput(demo, device=device, repeats=repeats, **cfg["pipeline"]))

    for section, figure in (("distributed", "torchrun 2 processes vs 1 (time)"),
                            ("rewire", "accept-length gap recovered by rewire")):
        if section not in sections:
            continue
        mod = measurer(section, figure, figures)
        if mod is None:
            continue
        add(section, demo_label or "demo", lambda: _call_measure(mod, section, demo=demo, device=device,
                                                                 repeats=repeats, quick=args.quick))

    if "long" in sections and load_bench("long") is not None:           # issue 17: one process per length
        try:
            lengths = [int(x) for x in args.long_lengths.split(",")] if args.long_lengths else None
        except ValueError:
            raise WorkbenchError(f"--long-lengths {args.long_lengths!r}: expected a comma list of integers") from None
        add("long", "synthetic long rows", lambda: load_bench("long").measure(
            device=device, repeats=repeats, quick=args.quick, threads=args.threads, lengths=lengths))

    story = load_bench("demo_story") if args.only is None else None   # opt-in (5 demo builds): its last
    if story is not None:                                               # summary, from bench/demo_story.json
        figures.extend(story.last_figures(BENCH / "demo_story.json"))
    if "regenerate" in sections:                                        # issue 20: regenerate vs bare generate
        mod = measurer("regenerate", "regenerate (HF, KV cache) tokens/s", figures)
        if mod is not None:
            reg = dict(device=device, repeats=repeats, threads=args.threads, **cfg["regenerate"])
            add("regenerate", "synthetic Llama", lambda: mod.measure(None, **reg))
    if "tree" in sections and load_bench("tree") is not None:           # issue 18: trees and the flag advisor
        add("tree", "synthetic + demo", lambda: load_bench("tree").measure(
            demo=demo, device=device, repeats=repeats, quick=args.quick, threads=args.threads))

    if "sampled" in sections and load_bench("sampled") is not None:     # issue 21: accept at temperature > 0
        add("sampled", "demo + synthetic 8k/128k", lambda: load_bench("sampled").measure(
            demo=demo, device=device, repeats=repeats, quick=args.quick, threads=args.threads))

    if "vllm" in sections:                                              # issue 27: time to know, real vLLM
        mod = measurer("vllm", "time to know: offline vs a real vLLM per wiring", figures)
        if mod is not None:
            add("vllm", demo_label or "demo", lambda: mod.measure(demo, repeats=min(repeats, 3), quick=args.quick,
                                                                  device=device))

    speed = load_bench("speed")                                          # issue 36: tokens/s on a real vLLM
    if speed is not None and "speed" in sections:
        add("speed", demo_label or "demo", lambda: speed.measure(demo, quick=args.quick,
                                                                out=speed.OUT if not args.quick else None))
    elif speed is not None and args.only is None:                       # the last sweep, from bench/vllm-speed.json
        figures.extend(speed.last_figures(BENCH / "vllm-speed.json"))

    doc = save(True)
    gpu = f", {machine['gpu']}" if "gpu" in machine else ""
    print(f"\n{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, transformers "
          f"{machine['transformers']}, {device} {machine['dtype']}{gpu}; {settings['seconds']} s; load average "
          f"{machine.get('load_average')}")
    print(doc["markdown"])
    print(f"\nwrote {out}")
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
