"""Benchmarks of workbench.acceptance (issue 5); every ratio is measured in this one run.

    $ .venv/bin/python bench/acceptance.py                      # CPU, tiny model, ~1-3 min
    $ .venv/bin/python bench/acceptance.py --device cuda --hidden 512 --layers 16 --json bench.json

(a) fast vs exact on the same chains (T=512, K=7): speed-up of ``simulate`` over the real
    speculative-decoding loop ``exact_simulate``, with identical decode-path A values (goal >= 30x).
(b) the whole fast pipeline (``simulate``: capture + K-step draft + statistics) vs the sum of a bare
    target forward and K bare draft forwards over the same tokens (goal <= 1.25x).
(c) peak memory of ``simulate`` on 10x more samples vs the smaller run, each in a fresh process
    (goal <= 1.1x). CPU: peak RSS (ru_maxrss); CUDA: torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def build(args, device):
    """Tiny random Llama target, target-greedy rows of length T, a briefly trained draft."""
    import transformers

    from workbench import capture, draft as dmod, train

    torch.manual_seed(args.seed)
    cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                                   num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=4,
                                   max_position_embeddings=max(1024, args.T), initializer_range=0.1)
    model = transformers.LlamaForCausalLM(cfg).to(device)
    target = capture.target_from_model(model)
    g = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, args.vocab, (args.samples, args.prompt), generator=g)
    t0 = time.perf_counter()
    ids = prompts.to(device)
    with torch.no_grad():            # full forwards (no KV cache): exactly what capture.extract computes
        for _ in range(args.T - args.prompt):
            ids = torch.cat([ids, model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
    prompts, resp = prompts.tolist(), ids[:, args.prompt:].cpu().tolist()
    rows = [{"input_ids": p + r, "loss_mask": [0] * len(p) + [1] * len(r), "n_prompt_tokens": len(p), "_row": i,
             "source": "bench"} for i, (p, r) in enumerate(zip(prompts, resp))]
    n = args.layers
    taps = ["L1", f"L{n // 2 - 1}", f"L{n - 4}"] if n >= 6 else ["L0", "L1", "L2"]
    draft = dmod.Eagle3Draft.from_config(dmod.new_draft_config(cfg.to_dict()), target.embed_weight()).to(device)
    log = train.train_draft(draft, target, rows, taps, K=args.K, epochs=args.train_epochs, lr=3e-3, batch_size=4,
                            progress=False)
    draft.eval()
    print(f"built: target H={args.hidden} N={n} V={args.vocab}, {len(rows)} rows of T={args.T}, draft trained "
          f"on {','.join(taps)} (acc/step {[round(a, 2) for a in log.acc_per_step]}) in {time.perf_counter() - t0:.1f}s")
    return target, draft, rows, ",".join(taps)


def bench_a(args, target, draft, rows, spec):
    from workbench.acceptance import exact_simulate, simulate

    rows = rows[:args.exact_samples]
    _sync(target.device)
    t0 = time.perf_counter()
    fast = simulate(target, draft, rows, [spec], K=args.K, batch_size=4, progress=False, topk=0)[spec]
    _sync(target.device)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact = exact_simulate(target, draft, rows, spec, K=args.K, progress=False)
    _sync(target.device)
    t_exact = time.perf_counter() - t0
    on = fast.chains["on_path"]
    key = lambda s, t, a: sorted(zip(s.tolist(), t.tolist(), a.tolist()))  # noqa: E731
    fast_steps = key(fast.chains["sample"][on], fast.chains["t"][on], fast.chains["accepted"][on])
    exact_steps = key(exact.chains["sample"], exact.chains["t"], exact.chains["accepted"])
    same = fast_steps == exact_steps
    n_same = sum(a == b for a, b in zip(fast_steps, exact_steps))
    out = {"samples": len(rows), "T": args.T, "K": args.K, "fast_s": t_fast, "exact_s": t_exact,
           "speedup": t_exact / t_fast, "identical_A": same, "verify_steps": len(exact_steps),
           "matching_steps": n_same, "fast_chains_every_position": fast.n_chains,
           "decode_path_accept_length": fast.decode_path["accept_length"]}
    print(f"(a) fast {t_fast:.2f}s vs exact {t_exact:.2f}s on {len(rows)} samples, T={args.T}, K={args.K}: "
          f"{out['speedup']:.1f}x (goal >= 30x); decode-path A identical: {same} ({n_same}/{len(exact_steps)} verify "
          f"steps; accept length {out['decode_path_accept_length']:.2f}); fast also scored {fast.n_chains} "
          f"every-position chains")
    return out


def bench_b(args, target, draft, rows, spec):
    from workbench import capture
    from workbench.acceptance import simulate
    from workbench.draft import run_chains

    bs = 4
    simulate(target, draft, rows[:bs], [spec], K=args.K, batch_size=bs, progress=False)       # warm-up
    _sync(target.device)
    t0 = time.perf_counter()
    simulate(target, draft, rows, [spec], K=args.K, batch_size=bs, progress=False)
    _sync(target.device)
    t_pipe = time.perf_counter() - t0
    batches = list(capture.extract(target, rows, [spec], batch_size=bs, progress=False))     # same padding
    taps = spec.split(",")
    t_target = t_draft = 0.0
    with torch.no_grad():
        for b in batches:
            _sync(target.device)
            t0 = time.perf_counter()
            target.model(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=False)
            _sync(target.device)
            t_target += time.perf_counter() - t0
            feats = b.concat(taps)
            t0 = time.perf_counter()
            for _ in range(args.K):                                  # K bare one-step draft forwards
                run_chains(draft, feats, b.input_ids, b.attention_mask, 1)
            _sync(target.device)
            t_draft += time.perf_counter() - t0
    bare = t_target + t_draft
    out = {"pipeline_s": t_pipe, "bare_target_s": t_target, "bare_draft_Kx_s": t_draft, "ratio": t_pipe / bare}
    print(f"(b) pipeline {t_pipe:.2f}s vs bare target {t_target:.2f}s + {args.K} bare draft forwards {t_draft:.2f}s: "
          f"{out['ratio']:.2f}x (goal <= 1.25x)")
    return out


def _child_mem(args):
    """In a fresh process: load the saved artifacts, simulate on the first N rows, report peak memory."""
    from workbench import capture, data, draft as dmod
    from workbench.acceptance import simulate

    device = args.device
    target = capture.load_target(os.path.join(args.artifacts, "target"), device=device, dtype=torch.float32)
    draft = dmod.load_draft(os.path.join(args.artifacts, "draft"), target, device=device, dtype=torch.float32)
    ds = data.load(os.path.join(args.artifacts, "rows.jsonl"))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.max_memory_allocated()
    r = simulate(target, draft, ds, [args.spec], K=args.K, limit=args.child_mem, batch_size=8, progress=False)
    peak = (torch.cuda.max_memory_allocated() if device.startswith("cuda")
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    base = base if device.startswith("cuda") else base * 1024
    print(json.dumps({"n": args.child_mem, "peak_bytes": peak, "after_load_bytes": base,
                      "chains": r[args.spec].n_chains}))


def bench_c(args, target, draft, spec):
    from workbench.draft import save_draft

    n_small = args.mem_samples
    with tempfile.TemporaryDirectory() as tmp:
        target.model.save_pretrained(os.path.join(tmp, "target"))
        save_draft(draft, os.path.join(tmp, "draft"))
        g = torch.Generator().manual_seed(1)
        with open(os.path.join(tmp, "rows.jsonl"), "w") as f:
            for i in range(10 * n_small):
                ids = torch.randint(0, args.vocab, (args.mem_T,), generator=g).tolist()
                f.write(json.dumps({"input_ids": ids, "n_prompt_tokens": 8}) + "\n")
        res = {}
        for n in (n_small, 10 * n_small):
            cmd = [sys.executable, os.path.abspath(__file__), "--child-mem", str(n), "--artifacts", tmp, "--spec", spec,
                   "--device", args.device, "--K", str(args.K), "--threads", str(args.threads)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                raise SystemExit(f"(c) child failed: {p.stderr.strip().splitlines()[-1] if p.stderr else p.returncode}")
            res[n] = json.loads(p.stdout.strip().splitlines()[-1])
    small, big = res[n_small], res[10 * n_small]
    ratio = big["peak_bytes"] / small["peak_bytes"]
    inc = lambda r: r["peak_bytes"] - r["after_load_bytes"]  # noqa: E731
    out = {"small": small, "big": big, "ratio": ratio,
           "increment_ratio": inc(big) / inc(small) if inc(small) > 0 else None}
    what = "CUDA max allocated" if args.device.startswith("cuda") else "peak RSS"
    print(f"(c) {what}: {n_small} samples {small['peak_bytes'] / 2**20:.1f} MiB, {10 * n_small} samples "
          f"{big['peak_bytes'] / 2**20:.1f} MiB: {ratio:.3f}x (goal <= 1.1x); above the loaded models: "
          f"{inc(small) / 2**20:.1f} vs {inc(big) / 2**20:.1f} MiB")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--T", type=int, default=512)
    p.add_argument("--K", type=int, default=7)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--samples", type=int, default=8, help="rows for (b); (a) uses the first --exact-samples")
    p.add_argument("--exact-samples", type=int, default=1)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--train-epochs", type=int, default=8)
    p.add_argument("--mem-samples", type=int, default=8)
    p.add_argument("--mem-T", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 avoids OpenMP spinning on tiny ops)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="abc", help="subset of benchmarks to run, e.g. 'ab'")
    p.add_argument("--json", help="write the measurements here")
    p.add_argument("--child-mem", type=int, help=argparse.SUPPRESS)
    p.add_argument("--artifacts", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.child_mem:
        return _child_mem(args)
    target, draft, rows, spec = build(args, args.device)
    out = {"device": args.device, "torch": torch.__version__, "args": vars(args)}
    if "a" in args.only:
        out["a"] = bench_a(args, target, draft, rows, spec)
    if "b" in args.only:
        out["b"] = bench_b(args, target, draft, rows, spec)
    if "c" in args.only:
        out["c"] = bench_c(args, target, draft, spec)
    if args.json:
        from workbench.errors import atomic_write

        with atomic_write(args.json) as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
