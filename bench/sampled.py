"""Benchmark of acceptance at temperature > 0 (issue 21): ``simulate`` with ``--temperature`` against the
greedy run on the same data, and the number of target forwards.

    $ .venv/bin/python -m bench.sampled                         # demo (or synthetic) + 8k + 128k vocabularies
    $ .venv/bin/python -m bench.sampled --quick --json s.json
    $ .venv/bin/python -m bench.run --only sampled               # as a section of the results table

(a) time of ``acceptance.simulate`` at T = 0.7 over the greedy run of the same chains on the same rows,
    paired per repeat, at the demo's and a synthetic 8k vocabulary (goal <= 1.1x); the target forwards of
    both (``requires``: equal, no extra forward); top_p 0.95 beside it (reported: the nucleus search);
(b) the same ratios at a 128k vocabulary, reported separately (no goal): the top-p sort over the whole
    vocabulary is then visible (a random synthetic target is flat: its nucleus needs the full sort).

Prints the figures; asserts nothing about time. ``measure()`` returns dicts in the schema of
``workbench.report.benchmark`` for ``bench/run.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bench.common import sync
from workbench.core.files import write_json

# hidden 512: a vocabulary/hidden ratio of 16 (Llama 3 8B: 128256/4096 = 31); the extra cost at T > 0 is one exp per
# logit, so its share of the run falls as the hidden grows (8k vocabulary: ~1.2x at hidden 128, ~1.04x at 512)
FULL = {"samples": 8, "T": 128, "layers": 4, "hidden": 512, "K": 4, "vocabs": (8192,), "big_vocab": 128256,
        "big_samples": 4, "big_T": 64}
QUICK = {"samples": 2, "T": 24, "layers": 2, "hidden": 32, "K": 2, "vocabs": (512,), "big_vocab": 16384,
         "big_samples": 1, "big_T": 16}


def synthetic(vocab: int, layers: int, hidden: int, samples: int, T: int, device: str, seed: int = 0):
    """A random Llama target of ``vocab`` tokens, an untrained EAGLE-3 draft for it, random rows (cost only)."""
    import transformers

    from workbench.model import capture
    from workbench.core.devices import default_dtype
    from workbench.model.draft import Eagle3Draft, new_draft_config

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                                   max_position_embeddings=max(512, T))
    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=default_dtype(device))
    target = capture.target_from_model(model)
    draft = Eagle3Draft.from_config(new_draft_config(cfg.to_dict(), layer_ids=[0, 1, layers - 1]),
                                    target.embed_weight()).to(device=device, dtype=target.dtype)
    g = torch.Generator().manual_seed(seed + 1)
    rows = [{"input_ids": torch.randint(0, vocab, (T,), generator=g).tolist(), "loss_mask": [0] * 8 + [1] * (T - 8),
             "n_prompt_tokens": 8, "_row": i, "source": "bench"} for i in range(samples)]
    return target, draft, rows, f"L0,L1,L{layers - 1}"


def paired(target, draft, rows, spec, K: int, hot, repeats: int, device: str) -> dict:
    """Median times of greedy and ``hot`` (a Setting at T > 0) simulate runs, paired per repeat, + forwards."""
    from workbench.model import capture
    from workbench.simulate.acceptance import simulate
    from workbench.core.setting import Setting

    def run(setting):
        t0 = time.perf_counter()
        simulate(target, draft, rows, [spec], setting=setting, progress=False, batch_size=8, acc_topk=0)
        sync(device)
        return time.perf_counter() - t0

    greedy = Setting(steps=K)
    run(greedy), run(hot)                                   # warm-up
    tg, th, ratios = [], [], []
    for _ in range(repeats):
        a, b = run(greedy), run(hot)
        tg.append(a)
        th.append(b)
        ratios.append(b / a)
    with capture.count_forwards(target.model) as cg:
        simulate(target, draft, rows, [spec], setting=greedy, progress=False, batch_size=8, acc_topk=0)
    with capture.count_forwards(target.model) as ch:
        simulate(target, draft, rows, [spec], setting=hot, progress=False, batch_size=8, acc_topk=0)
    return {"ratios": ratios, "greedy_s": statistics.median(tg), "hot_s": statistics.median(th),
            "forwards": (cg["calls"], ch["calls"])}


def measure(*, demo=None, device: str = "cpu", repeats: int = 5, quick: bool = False, threads: int = 1) -> list[dict]:
    """The rows of the benchmark table (bench/run.py ``--only sampled``)."""
    from workbench.load import inputs
    from workbench.core.setting import Setting

    size = QUICK if quick else FULL
    K = size["K"]
    top_p = Setting(steps=K, temperature=0.7, top_p=0.95)
    temp = Setting(steps=K, temperature=0.7)
    cases = []
    if demo is not None:
        from workbench.demo.build import read_manifest

        target, draft, ds = inputs.load(str(demo / "target"), str(demo / "draft-aligned"), str(demo / "val.jsonl"))
        man = read_manifest(demo)
        rows = inputs.rows(ds, size["samples"] * 4)
        cases.append((f"demo {man.get('size')} V={target.vocab_size}", target, draft, rows,
                      ",".join(man["taps"]["aligned"])))
    for V in size["vocabs"]:
        t, d, r, spec = synthetic(V, size["layers"], size["hidden"], size["samples"], size["T"], device)
        cases.append((f"synthetic Llama N={size['layers']} H={size['hidden']} V={V}, T={size['T']}", t, d, r, spec))
    figs = []
    for label, target, draft, rows, spec in cases:
        for name, st, goal in (("T=0.7", temp, "<= 1.1"), ("T=0.7 top_p 0.95", top_p, None)):
            m = paired(target, draft, rows, spec, K, st, repeats, device)
            figs.append({"key": "sampled_accept_cost" + ("" if goal else "_top_p"),
                         "figure": f"accept at {name} vs greedy, same data (K={K})", "target": label, "unit": "x",
                         "values": m["ratios"], "goal": goal, "requires": m["forwards"][0] == m["forwards"][1],
                         "detail": {"greedy_s": m["greedy_s"], "sampled_s": m["hot_s"], "forwards": list(m["forwards"]),
                                    "samples": len(rows)},
                         "note": f"paired per repeat; decode path + per-depth from the same pass; target forwards "
                                 f"{m['forwards'][0]} greedy vs {m['forwards'][1]} sampled (must be equal)"
                                 + ("" if goal else "; top-p reported (a partial top-k per position, a sort when "
                                                    "the nucleus is wide)")})
    V = size["big_vocab"]
    t, d, r, spec = synthetic(V, size["layers"], size["hidden"], size["big_samples"], size["big_T"], device)
    label = f"synthetic Llama N={size['layers']} H={size['hidden']} V={V}, T={size['big_T']}"
    for name, st in (("T=0.7 top_p 0.95 (sort)", top_p), ("T=0.7 only (log-sum-exp)", temp)):
        m = paired(t, d, r, spec, K, st, repeats, device)
        figs.append({"key": "sampled_accept_cost_big_vocab", "figure": f"accept at {name} vs greedy, 128k vocabulary",
                     "target": label, "unit": "x", "values": m["ratios"], "goal": None,
                     "detail": {"greedy_s": m["greedy_s"], "sampled_s": m["hot_s"], "forwards": list(m["forwards"])},
                     "note": "reported, no goal: the per-position sort over the vocabulary is visible here"})
    return figs


def main(argv=None) -> int:
    from workbench.report import benchmark
    from workbench.core.devices import resolve_device

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--demo", default=None)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    from bench.common import find_demo
    from pathlib import Path

    demo = find_demo(a.demo) if a.demo else None
    figs = [benchmark.summarize(f, source="bench/sampled.py") for f in
            measure(demo=Path(demo) if demo else None, device=resolve_device(a.device), repeats=a.repeats,
                    quick=a.quick, threads=a.threads)]
    print(benchmark.markdown_table(figs))
    if a.json:
        write_json(a.json, [f.to_dict() for f in figs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
