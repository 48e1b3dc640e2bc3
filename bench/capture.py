"""Capture benchmark: prints measured numbers, asserts nothing about time.

    $ .venv/bin/python -m bench.capture                      # tiny 16-layer Llama built locally
    $ .venv/bin/python -m bench.capture --target data/demo/target --repeats 11

(a) capture of 4 wirings in one pass vs a bare forward: time ratio, median of --repeats runs (goal <= 1.10);
(b) target forwards per sample when comparing W wirings (must be 1);
(c) peak memory of hook capture vs ``output_hidden_states=True`` on a >= 16-layer model (CUDA: allocator
    peak; CPU: peak RSS above the pre-forward RSS in a fresh child process, sampled every 0.2 ms with
    glibc's mmap threshold lowered so freed blocks go back to the OS).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from bench.common import ROOT, peak_rss, sync
from workbench.model.capture import count_forwards, extract, load_target, target_from_model, union_taps
from workbench.core.devices import resolve_device


def tiny_target(device: str, layers: int = 16, hidden: int = 256, vocab: int = 4096):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4,
                                   max_position_embeddings=2048)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    return target_from_model(transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype))


def four_wirings(n: int) -> list[str]:
    """The served default, its HF off-by-one, and two neighbours: the usual diagnose candidates."""
    return [f"L1,L{n // 2 - 1},L{n - 4}", f"embed,L1,L{n // 2 - 1}", f"L2,L{n // 2},L{n - 3}", f"L1,L{n // 2 - 1},L{n - 1}"]


def make_rows(target, batch: int, seq: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, target.vocab_size, (seq,), generator=g).tolist(), "_row": i}
            for i in range(batch)]


def time_ratio(target, rows, wirings, repeats: int):
    t_bare, t_cap = paired_runs(target, rows, wirings, repeats)
    paired = statistics.median(c / b for b, c in zip(t_bare, t_cap))
    return statistics.median(t_bare), statistics.median(t_cap), paired, min(t_cap) / min(t_bare)


def paired_runs(target, rows, wirings, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of a bare forward and of a 4-wiring capture, ``repeats`` interleaved pairs after a warm-up."""
    ids = torch.tensor([r["input_ids"] for r in rows], device=target.device)
    att = torch.ones_like(ids)

    def bare():
        with torch.no_grad():
            out = target.model(input_ids=ids, attention_mask=att, use_cache=False)
        return out.logits

    def capture():
        return list(extract(target, rows, wirings, batch_size=len(rows), progress=False))

    bare(), capture()                                       # warm-up
    t_bare, t_cap = [], []
    for _ in range(repeats):                                # interleaved, so drift hits both alike
        for fn, acc in ((bare, t_bare), (capture, t_cap)):
            sync(target.device)
            t0 = time.perf_counter()
            fn()
            sync(target.device)
            acc.append(time.perf_counter() - t0)
    return t_bare, t_cap


def mem_child(mode: str, args) -> dict:
    """One forward in this (fresh) process; returns the peak bytes above the pre-forward level."""
    device = resolve_device(args.device)
    target = (load_target(args.target, device=device) if args.target
              else tiny_target(device, layers=args.layers, hidden=args.hidden, vocab=args.vocab))
    rows = make_rows(target, args.mem_batch, args.mem_seq)
    wirings = four_wirings(target.n_layers)
    ids = torch.tensor([r["input_ids"] for r in rows], device=target.device)

    def run():
        if mode == "hooks":
            batch = next(extract(target, rows, wirings, batch_size=len(rows), progress=False))
            return batch.features, batch.next_token
        with torch.no_grad():
            out = target.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False,
                               output_hidden_states=True)
        return out.hidden_states, out.logits.argmax(-1)

    peaks = []
    for _ in range(max(1, args.mem_repeats)):           # each run: release everything, new baseline, one forward
        kept = None
        peak, kept = _peak_of(run, device)
        peaks.append(int(peak))
        n_states = len(kept[0])
        del kept
    return {"mode": mode, "peak_bytes": peaks[0], "peaks": peaks, "states_kept": n_states,
            "n_layers": target.n_layers}


def _peak_of(run, device: str):
    """(peak bytes above the level before ``run()``, what it returned)."""
    if device.startswith("cuda"):
        import gc

        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        kept = run()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before, kept
    peak, before, kept = peak_rss(run)
    return peak - before, kept


def measure_memory(args) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = {}
    for mode in ("hooks", "ohs"):
        cmd = [sys.executable, "-m", "bench.capture", "--mem-child", mode, "--device", args.device,
               "--layers", str(args.layers), "--hidden", str(args.hidden), "--vocab", str(args.vocab),
               "--threads", str(args.threads), "--mem-batch", str(args.mem_batch), "--mem-seq", str(args.mem_seq),
               "--mem-repeats", str(getattr(args, "mem_repeats", 1))]
        if args.target:
            cmd += ["--target", args.target]
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"capture memory child ({mode}) failed: "
                               f"{(res.stderr.strip().splitlines() or ['exit %d' % res.returncode])[-1]}")
        out[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def measure(target_path=None, *, label: str | None = None, device: str = "cpu", repeats: int = 5,
            layers: int = 16, hidden: int = 256, vocab: int = 4096, batch: int = 4, seq: int = 64,
            mem_batch: int = 8, mem_seq: int = 512, threads: int = 1) -> list[dict]:
    """Figures (a), (b), (c) as dicts for ``bench.run`` (schema: ``workbench.report.benchmark``), ``repeats`` runs each.

        >>> # figs = measure("data/demo/target", label="demo", repeats=5)
        >>> # figs[0]["key"], figs[0]["values"]          # 'capture_overhead', [1.04, 1.07, ...]

    ``target_path=None`` builds a random Llama (``layers`` x ``hidden``) here and in the memory child
    processes. Every timing is per run; the memory runs happen in one fresh child per mode.
    """
    device = resolve_device(device)
    if device == "cpu" and threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    target = (load_target(target_path, device=device) if target_path
              else tiny_target(device, layers, hidden, vocab))
    n = target.n_layers
    label = label or f"synthetic Llama N={n} H={target.hidden_size}"
    wirings = four_wirings(n)
    rows = make_rows(target, batch, seq)
    t_bare, t_cap = paired_runs(target, rows, wirings, repeats)
    a = {"key": "capture_overhead", "figure": "capture of 4 wirings vs bare forward (time)", "target": label,
         "unit": "x", "values": [c / b for b, c in zip(t_bare, t_cap)], "goal": "<= 1.10",
         "detail": {"bare_ms": statistics.median(t_bare) * 1e3, "capture_ms": statistics.median(t_cap) * 1e3,
                    "batch": batch, "seq": seq, "wirings": wirings},
         "note": f"batch {batch}x{seq}; paired runs"}

    many = make_rows(target, 3 * batch, 16, seed=1)
    per_sample = []
    for _ in range(repeats):
        with count_forwards(target.model) as c:
            sum(1 for _ in extract(target, many, wirings, batch_size=batch, progress=False))
        per_sample.append(c["samples"] / len(many))
    b = {"key": "forwards_per_sample", "figure": "target forwards per sample, W=4 wirings", "target": label,
         "unit": "", "values": per_sample, "goal": "== 1", "detail": {"samples": len(many)}}

    args = argparse.Namespace(device=device, layers=layers, hidden=hidden, vocab=vocab, threads=threads,
                              mem_batch=mem_batch, mem_seq=mem_seq, mem_repeats=repeats, target=target_path)
    mem = measure_memory(args)
    h, o = mem["hooks"], mem["ohs"]
    what = "CUDA allocator peak" if device.startswith("cuda") else "peak RSS above baseline"
    c_ = {"key": "capture_memory", "figure": "hook capture vs output_hidden_states (peak memory)", "target": label,
          "unit": "x", "values": [x / max(y, 1) for x, y in zip(h["peaks"], o["peaks"])], "goal": "<= 1.00",
          "detail": {"hooks_MiB": statistics.median(h["peaks"]) / 2**20, "ohs_MiB": statistics.median(o["peaks"]) / 2**20,
                     "taps_kept": h["states_kept"], "states_kept_ohs": o["states_kept"], "batch": mem_batch,
                     "seq": mem_seq},
          "note": f"{what}, batch {mem_batch}x{mem_seq}; {h['states_kept']} taps vs {o['states_kept']} states"}
    return [a, b, c_]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", help="HF model folder (default: a tiny random 16-layer Llama built here)")
    p.add_argument("--device", default="auto")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 = least sensitive to a busy machine)")
    p.add_argument("--mem-batch", type=int, default=8)
    p.add_argument("--mem-seq", type=int, default=512)
    p.add_argument("--mem-repeats", type=int, default=1, help="memory runs per mode (each after a full release)")
    p.add_argument("--mem-child", choices=["hooks", "ohs"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.device = resolve_device(args.device)
    if args.device == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    if args.mem_child:
        print(json.dumps(mem_child(args.mem_child, args)))
        return 0
    if args.repeats < 5:
        p.error("--repeats must be >= 5 (the ratio is a median)")
    torch.manual_seed(0)
    target = (load_target(args.target, device=args.device) if args.target
              else tiny_target(args.device, args.layers, args.hidden, args.vocab))
    wirings = four_wirings(target.n_layers)
    taps = union_taps(wirings, target.n_layers)
    print(f"target: {type(target.model).__name__} N={target.n_layers} H={target.hidden_size} V={target.vocab_size} "
          f"{target.device} {target.dtype}; batch {args.batch}x{args.seq} tokens")
    print(f"wirings: {' | '.join(wirings)}  → union of {len(taps)} taps: {','.join(taps)}")

    rows = make_rows(target, args.batch, args.seq)
    t_bare, t_cap, paired, best = time_ratio(target, rows, wirings, args.repeats)
    print(f"(a) bare forward {t_bare * 1e3:.1f} ms, capture of {len(wirings)} wirings {t_cap * 1e3:.1f} ms "
          f"(medians of {args.repeats}): ratio {t_cap / t_bare:.3f}  (goal <= 1.10; median of paired ratios "
          f"{paired:.3f}, best-vs-best {best:.3f})")

    many = make_rows(target, 3 * args.batch, 16, seed=1)
    with count_forwards(target.model) as c:
        n_batches = sum(1 for _ in extract(target, many, wirings, batch_size=args.batch, progress=False))
    print(f"(b) W={len(wirings)} wirings, {len(many)} samples, {n_batches} batches: {c['calls']} target forwards, "
          f"{c['samples'] / len(many):.2f} forward(s) per sample  (must be 1)")

    mem = measure_memory(args)
    h, o = mem["hooks"], mem["ohs"]
    print(f"(c) peak memory above baseline, batch {args.mem_batch}x{args.mem_seq}, N={h['n_layers']}: "
          f"hooks {h['peak_bytes'] / 2**20:.1f} MiB ({h['states_kept']} taps kept) vs output_hidden_states "
          f"{o['peak_bytes'] / 2**20:.1f} MiB ({o['states_kept']} states kept): ratio "
          f"{h['peak_bytes'] / max(o['peak_bytes'], 1):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
