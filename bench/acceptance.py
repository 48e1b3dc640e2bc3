"""Benchmarks of workbench.simulate.acceptance (issue 5); every ratio is measured in this one run.

    $ .venv/bin/python -m bench.acceptance                      # CPU, tiny model, ~1-3 min
    $ .venv/bin/python -m bench.acceptance --device cuda --hidden 512 --layers 16 --json bench.json

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
import subprocess
import sys
import tempfile
import time

import torch

from bench.common import ROOT, peak_rss, sync


def build(args, device):
    """Tiny random Llama target, target-greedy rows of length T, a briefly trained draft."""
    import transformers

    from workbench.model import capture, draft as dmod, train

    torch.manual_seed(args.seed)
    cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                                   num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=4,
                                   max_position_embeddings=max(1024, args.T), initializer_range=0.1)
    from workbench.core.devices import default_dtype

    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=default_dtype(device))
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
    draft = dmod.Eagle3Draft.from_config(dmod.new_draft_config(cfg.to_dict()), target.embed_weight()).to(
        device=device, dtype=target.dtype)
    log = train.train_draft(draft, target, rows, taps, K=args.K, epochs=args.train_epochs, lr=3e-3, batch_size=4,
                            progress=False)
    draft.eval()
    print(f"built: target H={args.hidden} N={n} V={args.vocab}, {len(rows)} rows of T={args.T}, draft trained "
          f"on {','.join(taps)} (acc/step {[round(a, 2) for a in log.acc_per_step]}) in {time.perf_counter() - t0:.1f}s")
    return target, draft, rows, ",".join(taps)


def bench_a(args, target, draft, rows, spec):
    out = fast_vs_exact(target, draft, rows[:args.exact_samples], spec, args.K)
    same, n_same, n_steps = out["identical_A"], out["matching_steps"], out["verify_steps"]
    print(f"(a) fast {out['fast_s']:.2f}s vs exact {out['exact_s']:.2f}s on {out['samples']} samples, T={args.T}, "
          f"K={args.K}: {out['speedup']:.1f}x (goal >= 30x); decode-path A identical: {same} ({n_same}/{n_steps} "
          f"verify steps; accept length {out['decode_path_accept_length']:.2f}); fast also scored "
          f"{out['fast_chains_every_position']} every-position chains")
    return out


def greedy_rows(target, sources, T: int, n: int) -> list[dict]:
    """``n`` rows of exactly ``T`` tokens whose responses are the target's own greedy continuation.

        >>> # rows = greedy_rows(target, [val_rows, train_rows], 512, 1)

    The prompts are the longest of ``sources`` (lists of rows) that leave at least half of ``T`` to the
    response; each is continued greedily to ``T`` tokens by ``workbench regenerate``'s HF path (KV cache,
    ``ignore_eos``: a server would stop at EOS, the bench wants the length). The exact loop generates its own
    greedy continuation, so the fast path must score the same tokens for the two to agree: a foreign row (a
    dataset's reference answer) would compare two different texts.
    """
    from workbench.live.regenerate import Job, generate_hf

    every = [r for rows in sources for r in rows if 0 < int(r["n_prompt_tokens"]) <= T // 2]
    if not every:
        raise ValueError(f"no row has a prompt of 1..{T // 2} tokens to continue to T={T}")
    picked = sorted(every, key=lambda r: -int(r["n_prompt_tokens"]))[:n]
    jobs = [Job(i, str(r.get("_where", "bench")), str(r.get("source", "bench")), list(r["input_ids"][:int(r["n_prompt_tokens"])]),
                [], [], T - int(r["n_prompt_tokens"]), {}) for i, r in enumerate(picked)]
    gens = generate_hf(target, jobs, ignore_eos=True, agreement=False, batch_size=1)
    return [{"input_ids": j.prompt + g.tokens, "loss_mask": [0] * len(j.prompt) + [1] * len(g.tokens),
             "n_prompt_tokens": len(j.prompt), "n_response_tokens": len(g.tokens), "_row": i, "source": j.source}
            for i, (j, g) in enumerate(zip(jobs, gens))]


def warm_up_cut(row: dict, K: int, steps: int = 4) -> dict:
    """``row`` cut to its prompt and ``steps`` verify steps of ``K`` drafts: a warm-up that costs seconds, not
    the minutes of a whole T=512 exact loop on a real model.

        >>> r = warm_up_cut({"input_ids": list(range(40)), "loss_mask": [0] * 10 + [1] * 30, "n_prompt_tokens": 10}, 2)
        >>> len(r["input_ids"]), sum(r["loss_mask"]), r["n_prompt_tokens"]
        (24, 14, 10)
    """
    n = min(len(row["input_ids"]), int(row["n_prompt_tokens"]) + steps * (K + 1) + 2)
    return {**row, "input_ids": row["input_ids"][:n], "loss_mask": row["loss_mask"][:n],
            "n_response_tokens": n - int(row["n_prompt_tokens"])}


def fast_vs_exact(target, draft, rows, spec, K: int) -> dict:
    """One run of (a): seconds of ``simulate`` and ``exact_simulate`` on ``rows``, and whether the A values agree."""
    from workbench.simulate.acceptance import simulate
    from workbench.simulate.exact import exact_simulate

    sync(target.device)
    t0 = time.perf_counter()
    fast = simulate(target, draft, rows, [spec], K=K, batch_size=4, progress=False, acc_topk=0)[spec]
    sync(target.device)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact = exact_simulate(target, draft, rows, spec, K=K, progress=False)
    sync(target.device)
    t_exact = time.perf_counter() - t0
    on = fast.chains["on_path"]
    key = lambda s, t, a: sorted(zip(s.tolist(), t.tolist(), a.tolist()))  # noqa: E731
    fast_steps = key(fast.chains["sample"][on], fast.chains["t"][on], fast.chains["accepted"][on])
    exact_steps = key(exact.chains["sample"], exact.chains["t"], exact.chains["accepted"])
    same = fast_steps == exact_steps
    n_same = sum(a == b for a, b in zip(fast_steps, exact_steps))
    return {"samples": len(rows), "T": max(len(r["input_ids"]) for r in rows), "K": K, "fast_s": t_fast,
            "exact_s": t_exact, "speedup": t_exact / t_fast, "identical_A": same, "verify_steps": len(exact_steps),
            "matching_steps": n_same, "fast_chains_every_position": fast.n_chains,
            "decode_path_accept_length": fast.decode_path["accept_length"]}


def bench_b(args, target, draft, rows, spec):
    from workbench.simulate.acceptance import simulate

    simulate(target, draft, rows[:4], [spec], K=args.K, batch_size=4, progress=False)       # warm-up
    out = pipeline_vs_bare(target, draft, rows, spec, args.K)
    print(f"(b) pipeline {out['pipeline_s']:.2f}s vs bare target {out['bare_target_s']:.2f}s + {args.K} bare draft "
          f"forwards {out['bare_draft_Kx_s']:.2f}s: {out['ratio']:.2f}x (goal <= 1.25x)")
    return out


def pipeline_vs_bare(target, draft, rows, spec, K: int, bs: int = 4) -> dict:
    """One run of (b): ``simulate`` vs a bare target forward + K bare one-step draft forwards per batch."""
    from workbench.model import capture
    from workbench.simulate.acceptance import simulate
    from workbench.model.draft import run_chains

    sync(target.device)
    t0 = time.perf_counter()
    simulate(target, draft, rows, [spec], K=K, batch_size=bs, progress=False)
    sync(target.device)
    t_pipe = time.perf_counter() - t0
    batches = list(capture.extract(target, rows, [spec], batch_size=bs, progress=False))     # same padding
    taps = spec.split(",")
    t_target = t_draft = 0.0
    with torch.no_grad():
        for b in batches:
            sync(target.device)
            t0 = time.perf_counter()
            target.model(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=False)
            sync(target.device)
            t_target += time.perf_counter() - t0
            feats = b.concat(taps)
            t0 = time.perf_counter()
            for _ in range(K):                                       # K bare one-step draft forwards
                run_chains(draft, feats, b.input_ids, b.attention_mask, 1)
            sync(target.device)
            t_draft += time.perf_counter() - t0
    bare = t_target + t_draft
    return {"pipeline_s": t_pipe, "bare_target_s": t_target, "bare_draft_Kx_s": t_draft, "ratio": t_pipe / bare}


def _child_mem(args):
    """In a fresh process: load target, draft and rows, simulate on the first N rows --mem-repeats times,
    report the process's peak memory during each run (CPU: RSS incl. the loaded models; CUDA: max allocated)."""
    from workbench import rows as data
    from workbench.model import capture, checkpoint
    from workbench.simulate.acceptance import simulate

    device = args.device
    target = capture.load_target(args.target_path or os.path.join(args.artifacts, "target"), device=device)
    draft = checkpoint.load_draft(args.draft_path or os.path.join(args.artifacts, "draft"), target, device=device,
                            dtype=target.dtype)
    ds = data.load(args.rows_path or os.path.join(args.artifacts, "rows.jsonl"))
    chains = []

    def run():
        r = simulate(target, draft, ds, [args.spec], K=args.K, limit=args.child_mem, batch_size=8, progress=False,
                     eagle_topk=args.eagle_topk, num_draft_tokens=args.num_draft_tokens)
        chains.append(r[args.spec].n_chains)

    peaks, bases = [], []
    for _ in range(max(1, args.mem_repeats)):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            bases.append(torch.cuda.memory_allocated())
            run()
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated())
        else:
            peak, before, _ = peak_rss(run)
            peaks.append(peak)
            bases.append(before)
    print(json.dumps({"n": args.child_mem, "peak_bytes": peaks[0], "after_load_bytes": bases[0], "peaks": peaks,
                      "bases": bases, "chains": chains[0]}))


def write_mem_rows(path, n: int, T: int, vocab: int, seed: int = 1) -> None:
    """``n`` random rows of ``T`` tokens (8 prompt tokens) for the memory runs; content does not matter there."""
    g = torch.Generator().manual_seed(seed)
    with open(path, "w") as f:
        for _ in range(n):
            ids = torch.randint(0, vocab, (T,), generator=g).tolist()
            f.write(json.dumps({"input_ids": ids, "n_prompt_tokens": 8}) + "\n")


def memory_scaling(target_path, draft_path, spec, *, vocab: int, device: str = "cpu", K: int = 7,
                   n_small: int = 8, mem_T: int = 256, repeats: int = 1, threads: int = 1, eagle_topk: int = 1,
                   num_draft_tokens: int | None = None) -> dict:
    """(c): peak memory of ``simulate`` on ``10 * n_small`` vs ``n_small`` rows, one fresh process each
    (a tree with ``eagle_topk`` > 1: steps ``K``, ``num_draft_tokens``; bench/tree.py)."""
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows = os.path.join(tmp, "rows.jsonl")
        write_mem_rows(rows, 10 * n_small, mem_T, vocab)
        for n in (n_small, 10 * n_small):
            cmd = [sys.executable, "-m", "bench.acceptance", "--child-mem", str(n), "--target-path", str(target_path),
                   "--draft-path", str(draft_path), "--rows-path", rows, "--spec", spec, "--device", device,
                   "--K", str(K), "--threads", str(threads), "--mem-repeats", str(repeats),
                   "--eagle-topk", str(eagle_topk)] + ([] if num_draft_tokens is None else
                                                        ["--num-draft-tokens", str(num_draft_tokens)])
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if p.returncode:
                raise RuntimeError(f"(c) memory child failed: "
                                   f"{p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
            res[n] = json.loads(p.stdout.strip().splitlines()[-1])
    small, big = res[n_small], res[10 * n_small]
    inc = lambda r: r["peak_bytes"] - r["after_load_bytes"]  # noqa: E731
    return {"small": small, "big": big, "ratio": big["peak_bytes"] / small["peak_bytes"],
            "ratios": [b / s for b, s in zip(big["peaks"], small["peaks"])],
            "increment_ratio": inc(big) / inc(small) if inc(small) > 0 else None}


def bench_c(args, target, draft, spec):
    from workbench.model.checkpoint import save_draft

    n_small = args.mem_samples
    with tempfile.TemporaryDirectory() as tmp:
        target.model.save_pretrained(os.path.join(tmp, "target"))
        save_draft(draft, os.path.join(tmp, "draft"))
        out = memory_scaling(os.path.join(tmp, "target"), os.path.join(tmp, "draft"), spec, vocab=args.vocab,
                             device=args.device, K=args.K, n_small=n_small, mem_T=args.mem_T,
                             repeats=args.mem_repeats, threads=args.threads)
    small, big, ratio = out["small"], out["big"], out["ratio"]
    inc = lambda r: r["peak_bytes"] - r["after_load_bytes"]  # noqa: E731
    what = "CUDA max allocated" if args.device.startswith("cuda") else "peak RSS"
    print(f"(c) {what}: {n_small} samples {small['peak_bytes'] / 2**20:.1f} MiB, {10 * n_small} samples "
          f"{big['peak_bytes'] / 2**20:.1f} MiB: {ratio:.3f}x (goal <= 1.1x); above the loaded models: "
          f"{inc(small) / 2**20:.1f} vs {inc(big) / 2**20:.1f} MiB")
    return out


def measure(target_path=None, draft_path=None, data_path=None, spec=None, *, label: str | None = None,
            device: str = "cpu", repeats: int = 5, K: int = 7, exact_samples: int = 1, T: int = 512,
            samples: int = 8, hidden: int = 64, layers: int = 4, vocab: int = 256, prompt: int = 16,
            train_epochs: int = 8, mem_samples: int = 8, mem_T: int = 256, threads: int = 1,
            seed: int = 0, exact_data=None) -> list[dict]:
    """Figures (a), (b), (c) as dicts for ``bench.run`` (schema: ``workbench.report.benchmark``), ``repeats`` runs each.

        >>> # figs = measure("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl", "L1,L3,L4")
        >>> # [f["key"] for f in figs]     # ['fast_vs_exact', 'pipeline_vs_bare', 'memory_scaling']

    With ``target_path=None`` a random Llama (``layers`` x ``hidden``, init 0.1) is built here, its greedy
    rows of length ``T`` generated and a draft trained briefly on L1,L{N//2-1},L{N-4}; (c) then saves
    both to a temporary folder for its child processes. With a target folder, (a) runs on rows of ``T`` tokens:
    the longest prompts of ``data_path`` (then ``exact_data``, e.g. the demo's ``train.jsonl``) continued greedily
    by the target to ``T`` (:func:`greedy_rows`).
    """
    import statistics

    from workbench import rows as data
    from workbench.model import capture, checkpoint
    from workbench.simulate.acceptance import simulate
    from workbench.core.devices import resolve_device

    device = resolve_device(device)
    torch.set_num_threads(threads)
    tmp = tempfile.TemporaryDirectory()
    try:
        if target_path is not None:
            target = capture.load_target(target_path, device=device)
            draft = checkpoint.load_draft(draft_path, target, device=device, dtype=target.dtype)
            rows = data.load(data_path).rows()
            vocab = target.vocab_size
            exact_rows = greedy_rows(target, [rows] + ([data.load(exact_data).rows()] if exact_data else []), T,
                                     exact_samples)
        else:
            args = argparse.Namespace(vocab=vocab, hidden=hidden, layers=layers, T=T, samples=samples, prompt=prompt,
                                      K=K, train_epochs=train_epochs, seed=seed)
            target, draft, rows, spec = build(args, device)
            exact_rows = rows[:exact_samples]
            target_path, draft_path = os.path.join(tmp.name, "target"), os.path.join(tmp.name, "draft")
            target.model.save_pretrained(target_path)
            checkpoint.save_draft(draft, draft_path)
        label = label or f"synthetic Llama N={target.n_layers} H={target.hidden_size}"
        T_max = max(len(r["input_ids"]) for r in rows)

        fast_vs_exact(target, draft, [warm_up_cut(exact_rows[0], K)], spec, K)                  # warm-up
        a_runs = [fast_vs_exact(target, draft, exact_rows, spec, K) for _ in range(repeats)]
        same = all(r["identical_A"] for r in a_runs)
        a = {"key": "fast_vs_exact", "figure": "fast simulate vs exact speculative loop (speed-up)", "target": label,
             "unit": "x", "values": [r["speedup"] for r in a_runs], "goal": ">= 30", "requires": same,
             "detail": {"fast_s": statistics.median(r["fast_s"] for r in a_runs),
                        "exact_s": statistics.median(r["exact_s"] for r in a_runs), "identical_A": same,
                        "verify_steps": a_runs[0]["verify_steps"], "samples": len(exact_rows),
                        "T": a_runs[0]["T"], "K": K},
             "note": f"A identical: {'yes' if same else 'NO'} ({a_runs[0]['matching_steps']}/{a_runs[0]['verify_steps']}"
                     f" steps); {len(exact_rows)} sample(s) of the target's greedy text, T={a_runs[0]['T']}, K={K}"}

        simulate(target, draft, rows[:4], [spec], K=K, batch_size=4, progress=False)           # warm-up
        b_runs = [pipeline_vs_bare(target, draft, rows, spec, K) for _ in range(repeats)]
        b = {"key": "pipeline_vs_bare", "figure": "pipeline vs bare target + K draft forwards (time)", "target": label,
             "unit": "x", "values": [r["ratio"] for r in b_runs], "goal": "<= 1.25",
             "detail": {k: statistics.median(r[k] for r in b_runs)
                        for k in ("pipeline_s", "bare_target_s", "bare_draft_Kx_s")},
             "note": f"{len(rows)} samples, T<={T_max}, K={K}"}

        mem = memory_scaling(target_path, draft_path, spec, vocab=vocab, device=device, K=K, n_small=mem_samples,
                             mem_T=mem_T, repeats=repeats, threads=threads)
        what = "CUDA max allocated" if device.startswith("cuda") else "whole-process peak RSS"
        c = {"key": "memory_scaling", "figure": "peak memory, 10x samples vs 1x", "target": label, "unit": "x",
             "values": mem["ratios"], "goal": "<= 1.1",
             "detail": {"small_MiB": statistics.median(mem["small"]["peaks"]) / 2**20,
                        "big_MiB": statistics.median(mem["big"]["peaks"]) / 2**20,
                        "above_models_small_MiB": (mem["small"]["peak_bytes"] - mem["small"]["after_load_bytes"]) / 2**20,
                        "above_models_big_MiB": (mem["big"]["peak_bytes"] - mem["big"]["after_load_bytes"]) / 2**20,
                        "samples": [mem_samples, 10 * mem_samples], "T": mem_T},
             "note": f"{what}; {mem_samples} vs {10 * mem_samples} samples of T={mem_T}"}
        return [a, b, c]
    finally:
        tmp.cleanup()


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
    p.add_argument("--mem-repeats", type=int, default=1, help="(c) runs per sample count, in one process each")
    p.add_argument("--child-mem", type=int, help=argparse.SUPPRESS)
    p.add_argument("--target-path", help=argparse.SUPPRESS)
    p.add_argument("--draft-path", help=argparse.SUPPRESS)
    p.add_argument("--rows-path", help=argparse.SUPPRESS)
    p.add_argument("--artifacts", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    p.add_argument("--eagle-topk", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--num-draft-tokens", type=int, default=None, help=argparse.SUPPRESS)
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
        from workbench.core.files import write_json

        write_json(args.json, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
