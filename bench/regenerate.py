"""Regenerate benchmark: tokens per second of ``workbench regenerate``'s HF path against a bare HF ``generate``.

    $ .venv/bin/python -m bench.regenerate                                   # synthetic 8-layer Llama
    $ .venv/bin/python -m bench.regenerate --target data/demo/target --repeats 7 --json regen-bench.json
    $ .venv/bin/python -m bench.regenerate --device cuda --batch-size 32 --prompts 128

Same prompts (lengths spread over ``--prompt-len``), same batch size, greedy, ``--max-new`` tokens each
(EOS ignored on both sides, so both generate exactly the same number of tokens):

(a) ``regenerate.generate_hf`` (left-padded batches by prompt length, KV cache, finished rows leave the
    batch) vs ``model.generate(do_sample=False)`` on left-padded batches of the same rows: tokens/s of
    each and their ratio (reported; no goal: regenerate does the same work, so ~1 is expected);
(b) the cost of measuring the old responses' greedy agreement in the same prefill (ratio of times,
    with vs without; old responses as long as the new ones);
(c) the tokens of both paths agree (``requires``: identical token lists).

Prints the figures; asserts nothing about time. ``measure()`` returns dicts in the schema of
``workbench.report.benchmark``, for ``bench/run.py`` (register it there as a section ``regenerate``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from bench.common import sync as _sync
from workbench.core.devices import resolve_device
from workbench.core.files import write_json


def synthetic_target(device: str, layers: int = 8, hidden: int = 256, vocab: int = 4096, seed: int = 0):
    import transformers

    from workbench.model.capture import target_from_model

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4,
                                   max_position_embeddings=4096, initializer_range=0.1)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    return target_from_model(transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype))


def _prompts(vocab: int, n: int, lo: int, hi: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    return [torch.randint(0, vocab, (k,), generator=g).tolist() for k in lens]


def hf_generate(target, prompts, max_new: int, batch_size: int) -> list[list[int]]:
    """The bare baseline: ``model.generate`` greedy on left-padded batches (sorted by prompt length, like regenerate)."""
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    out: list = [None] * len(prompts)
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        L = max(len(prompts[i]) for i in idx)
        ids = torch.zeros(len(idx), L, dtype=torch.long)
        att = torch.zeros(len(idx), L, dtype=torch.long)
        for b, i in enumerate(idx):
            ids[b, L - len(prompts[i]):] = torch.tensor(prompts[i])
            att[b, L - len(prompts[i]):] = 1
        with torch.no_grad():
            gen = target.model.generate(input_ids=ids.to(target.device), attention_mask=att.to(target.device),
                                        max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False,
                                        pad_token_id=0, eos_token_id=None)
        for b, i in enumerate(idx):
            out[i] = gen[b, L:].tolist()
    return out


def measure(target_path=None, *, label: str | None = None, device: str = "cpu", repeats: int = 5, prompts: int = 32,
            prompt_len: tuple = (16, 64), max_new: int = 32, batch_size: int = 8, layers: int = 8, hidden: int = 256,
            vocab: int = 4096, threads: int | None = None, seed: int = 0) -> list[dict]:
    """Figures (a), (b), (c) as dicts (schema: ``workbench.report.benchmark``), ``repeats`` paired runs each."""
    from workbench.model import capture
    from workbench.live.regenerate import Job, generate_hf

    device = resolve_device(device)
    if threads:
        torch.set_num_threads(int(threads))
    if target_path is not None:
        target = capture.load_target(target_path, device=device, progress=False)
        label = label or f"{os.path.basename(os.path.normpath(target_path))} (N={target.n_layers} H={target.hidden_size})"
    else:
        target = synthetic_target(device, layers, hidden, vocab, seed)
        label = label or f"synthetic Llama N={layers} H={hidden} V={vocab}"
    lo, hi = prompt_len
    hi = min(hi, (target.max_positions or 10 ** 9) - 2 * max_new)
    ps = _prompts(target.vocab_size, prompts, min(lo, hi), hi, seed + 1)
    plain = [Job(i, f"row {i}", "bench", p, [], [], max_new, {}) for i, p in enumerate(ps)]
    olds = [torch.randint(0, target.vocab_size, (max_new,), generator=torch.Generator().manual_seed(i)).tolist()
            for i in range(len(ps))]
    with_old = [Job(i, f"row {i}", "bench", p, o, [1] * len(o), max_new, {}) for i, (p, o) in enumerate(zip(ps, olds))]

    def run_regen(jobs, agreement):
        _sync(device)
        t0 = time.perf_counter()
        res = generate_hf(target, jobs, ignore_eos=True, batch_size=batch_size, agreement=agreement)
        _sync(device)
        return time.perf_counter() - t0, [g.tokens for g in res]

    def run_hf():
        _sync(device)
        t0 = time.perf_counter()
        res = hf_generate(target, ps, max_new, batch_size)
        _sync(device)
        return time.perf_counter() - t0, res

    run_regen(plain[:batch_size], False)                     # warm-up (allocator, kernels)
    run_hf() if len(ps) <= batch_size else hf_generate(target, ps[:batch_size], max_new, batch_size)
    t_reg, t_hf, t_agr, same = [], [], [], True
    for _ in range(int(repeats)):                            # paired, interleaved: load drifts hit both
        a, toks_a = run_regen(plain, False)
        b, toks_b = run_hf()
        c, _ = run_regen(with_old, True)
        t_reg.append(a)
        t_hf.append(b)
        t_agr.append(c)
        same &= toks_a == toks_b
    n_tok = len(ps) * max_new
    tps_reg = [n_tok / t for t in t_reg]
    tps_hf = [n_tok / t for t in t_hf]
    note = (f"{len(ps)} prompts of {min(lo, hi)}-{hi} tokens, {max_new} new tokens each, batch {batch_size}, "
            f"{device}, {target.dtype}")
    return [
        {"key": "regenerate_tokens_per_s", "figure": "regenerate (HF, KV cache) tokens/s", "target": label,
         "unit": "tok/s", "values": tps_reg, "goal": None, "note": note},
        {"key": "hf_generate_tokens_per_s", "figure": "bare HF generate tokens/s", "target": label,
         "unit": "tok/s", "values": tps_hf, "goal": None, "note": note},
        {"key": "regenerate_vs_hf_generate", "figure": "regenerate / HF generate (tokens/s)", "target": label,
         "unit": "x", "values": [b / a for a, b in zip(t_reg, t_hf)], "goal": None,
         "requires": "identical tokens" if same else "identical tokens: NOT MET", "note": note},
        {"key": "regenerate_agreement_cost", "figure": "regenerate with agreement before / without (time)",
         "target": label, "unit": "x", "values": [c / a for a, c in zip(t_reg, t_agr)], "goal": None,
         "note": note + f"; old responses of {max_new} tokens in the prefill"},
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=None, help="HF target folder (default: a synthetic Llama built here)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--prompt-len", type=int, nargs=2, default=(16, 64), metavar=("LO", "HI"))
    p.add_argument("--max-new", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args(argv)
    figs = measure(args.target, device=args.device, repeats=args.repeats, prompts=args.prompts,
                   prompt_len=tuple(args.prompt_len), max_new=args.max_new, batch_size=args.batch_size,
                   threads=args.threads)
    for f in figs:
        v = f["values"]
        print(f"{f['figure']:<52} {f['target']}: median {statistics.median(v):.3g} {f['unit']} "
              f"(min {min(v):.3g}, max {max(v):.3g}, {len(v)} runs){'  ' + f['requires'] if f.get('requires') else ''}")
    print(figs[0]["note"])
    if args.json:
        write_json(args.json, figs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
