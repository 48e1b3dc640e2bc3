"""Long rows (issue 17): ``workbench accept``'s computation against a bare target forward with argmax,
per row length, each measured in a fresh process (peak memory = the child's ``ru_maxrss``).

    $ python bench/long.py                                 # T = 1024, 4096 (CPU: ~3-5 min on 2 busy cores)
    $ python bench/long.py --lengths 1024,4096,16384       # 16384 is opt-in (minutes per forward on CPU)
    $ python bench/long.py --compare /work/main            # also the same children on another checkout ("before")
    $ python -m bench.run --only long                      # as part of the benchmark table

The setup of the issue: a synthetic Llama (H=512, 8 layers, 8 heads, vocab 8,000, intermediate 2,048)
and a SpecForge-shaped random EAGLE-3 draft (draft vocab 2,000, taps L1,L3,L4), saved once to a
temporary folder and loaded by every child the way ``workbench accept`` loads them; batch 1, K=4.
Per length, three kinds of child process:

- ``accept``: load target and draft, run ``acceptance.simulate`` (capture + K-step chains + statistics,
  what ``workbench accept`` runs after loading) on each row, timed per row; then ``ru_maxrss`` is read
  (the peak), and only after that a bare forward + argmax of each row is timed in the same process, so
  the time ratio is paired per row;
- ``bare``: load the target only, run the bare HF forward + argmax on each row (its peak);
- ``startup`` (once): the accept child on short rows (T=32): the start-up baseline the increments
  are measured from.

Every child runs with glibc's ``MALLOC_MMAP_THRESHOLD_=65536`` (as bench/capture.py), so freed blocks
go back to the OS and ``ru_maxrss`` is the memory in use, not heap glibc keeps for reuse;
``--malloc-default`` measures with the default allocator settings instead.

Figures: the time ratio accept / bare (goal at T=4096: <= 1.5), the peak ratio accept / bare (goal at
T=4096: <= 1.3), the growth of the peak above the start-up baseline from T=1024 to T=4096 (linear
growth is 4x; goal <= 4.5) and tokens per second of accept at each length. Issue 18's tree goal: the
peak of the same accept child drafting SGLang's tree (steps K=4, eagle_topk 4, 8 draft tokens) at the
longest length <= 4096 over the chain's peak (goal at T=4096: <= 2).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FULL = {"hidden": 512, "layers": 8, "heads": 8, "vocab": 8000, "intermediate": 2048, "draft_vocab": 2000,
        "lengths": (1024, 4096), "K": 4, "startup_T": 32}
QUICK = {"hidden": 64, "layers": 8, "heads": 8, "vocab": 500, "intermediate": 128, "draft_vocab": 100,
         "lengths": (64, 256), "K": 4, "startup_T": 16}
WIRING = "L1,L3,L4"                       # SpecForge's default aux layers for 8 layers: [1, N/2-1, N-4]
TREE = (4, 8)                             # issue 18's tree goal: eagle_topk 4, 8 draft tokens, steps K


def build(folder: Path, size: dict) -> None:
    """The synthetic target (HF folder) and a random SpecForge-shaped draft, saved under ``folder``."""
    import torch
    import transformers

    from workbench.model.checkpoint import save_draft
    from workbench.model.draft import Eagle3Draft, new_draft_config

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=size["vocab"], hidden_size=size["hidden"],
                                   intermediate_size=size["intermediate"], num_hidden_layers=size["layers"],
                                   num_attention_heads=size["heads"], num_key_value_heads=size["heads"],
                                   max_position_embeddings=32768, tie_word_embeddings=False)
    target = transformers.LlamaForCausalLM(cfg)
    target.save_pretrained(folder / "target")
    dcfg = new_draft_config(cfg, draft_vocab_size=size["draft_vocab"], layer_ids=[1, 3, 4])
    draft = Eagle3Draft.from_config(dcfg, target.get_input_embeddings().weight)
    used = torch.randperm(size["vocab"])[: size["draft_vocab"]].sort().values
    draft.set_vocab_map(used - torch.arange(size["draft_vocab"]))
    save_draft(draft, folder / "draft")


def _rows(T: int, n: int, vocab: int, seed: int = 1) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, vocab, (T,), generator=g).tolist(), "loss_mask": [0] + [1] * (T - 1),
             "n_prompt_tokens": 1, "_row": i} for i in range(n)]


def child(args) -> dict:
    """One measurement process (``--child accept|bare``): JSON with per-row seconds and the peak RSS."""
    import inspect

    import torch

    from workbench.simulate import acceptance
    from workbench.model import capture
    from workbench.model import checkpoint as dmod

    torch.set_num_threads(args.threads)
    folder = Path(args.folder)
    target = capture.load_target(folder / "target", device=args.device, progress=False)
    rows = _rows(args.T, args.rows, target.vocab_size)

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    def bare(row):
        ids = torch.tensor([row["input_ids"]], device=target.device)
        with torch.no_grad():
            target.model(input_ids=ids, use_cache=False).logits.argmax(-1)
        sync()

    out = {"code": acceptance.__file__, "accept_s": [], "bare_s": []}
    if args.child == "accept":
        draft = dmod.load_draft(folder / "draft", target, device=args.device)
        extra = ({"max_memory": args.max_memory}
                 if args.max_memory and "max_memory" in inspect.signature(acceptance.simulate).parameters else {})
        if args.eagle_topk > 1:                                   # issue 18: SGLang's tree, steps K
            extra.update(eagle_topk=args.eagle_topk, num_draft_tokens=args.num_draft_tokens)
        acceptance.simulate(target, draft, _rows(16, 1, target.vocab_size, seed=9), [WIRING], K=args.K,
                            batch_size=1, progress=False, **extra)          # warm-up on a short row
        for row in rows:
            t0 = time.perf_counter()
            acceptance.simulate(target, draft, [row], [WIRING], K=args.K, batch_size=1, progress=False, **extra)
            sync()
            out["accept_s"].append(time.perf_counter() - t0)
    def peak():
        return (torch.cuda.max_memory_allocated() if args.device.startswith("cuda")
                else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    if args.child == "accept":
        out["peak_bytes"] = peak()                            # before the paired bare forwards below
    bare(_rows(16, 1, target.vocab_size, seed=9)[0])
    for row in rows:
        t0 = time.perf_counter()
        bare(row)
        out["bare_s"].append(time.perf_counter() - t0)
    if args.child == "bare":
        out["peak_bytes"] = peak()
    return out


def _run_child(kind: str, T: int, n_rows: int, folder: Path, code: Path, *, device: str, threads: int, K: int,
               max_memory, malloc_default: bool = False, tree: tuple | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--folder", str(folder), "--T", str(T),
           "--rows", str(n_rows), "--device", device, "--threads", str(threads), "--K", str(K)]
    if tree:
        cmd += ["--eagle-topk", str(tree[0]), "--num-draft-tokens", str(tree[1])]
    if max_memory:
        cmd += ["--max-memory", str(max_memory)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), str(ROOT)]))
    if malloc_default:
        env.pop("MALLOC_MMAP_THRESHOLD_", None)
    else:      # as bench/capture.py: freed blocks go back to the OS, so the peak is memory in use, not heap kept
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{kind} child T={T} ({code}) failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def measure(*, device: str = "cpu", repeats: int = 5, quick: bool = False, threads: int = 1, lengths=None,
            compare=None, max_memory=None, label: str | None = None, log=print,
            malloc_default: bool = False) -> list[dict]:
    """The figures of the long-row benchmark (see the module docstring); ``compare``: another checkout
    whose ``workbench`` the same children also run (its figures are labelled "before")."""
    size = dict(QUICK if quick else FULL)
    lengths = tuple(int(t) for t in (lengths or size["lengths"]))
    n_rows = max(1, int(repeats) if quick else max(1, int(repeats) // 2 + 1))
    codes = [("after", ROOT)] + ([("before", Path(compare).resolve())] if compare else [])
    name = label or (f"synthetic Llama H={size['hidden']} N={size['layers']} V={size['vocab']}, draft V="
                     f"{size['draft_vocab']}, B=1, K={size['K']}")
    figs = []
    with tempfile.TemporaryDirectory(prefix="wb-long-") as tmp:
        folder = Path(tmp)
        build(folder, size)
        kw = dict(device=device, threads=threads, K=size["K"], max_memory=max_memory, malloc_default=malloc_default)
        bare = {}
        for T in lengths:
            bare[T] = _run_child("bare", T, n_rows, folder, ROOT, **kw)
            log(f"[long] bare T={T}: peak {bare[T]['peak_bytes'] / 2**30:.2f} GiB, "
                f"{statistics.median(bare[T]['bare_s']):.2f} s/row")
        for tag, code in codes:
            start = _run_child("accept", size["startup_T"], 1, folder, code, **kw)
            base = start["peak_bytes"]
            log(f"[long] {tag} start-up peak {base / 2**30:.2f} GiB")
            acc = {}
            for T in lengths:
                a = acc[T] = _run_child("accept", T, n_rows, folder, code, **kw)
                log(f"[long] {tag} accept T={T}: peak {a['peak_bytes'] / 2**30:.2f} GiB, "
                    f"{statistics.median(a['accept_s']):.2f} s/row (bare in the same process "
                    f"{statistics.median(a['bare_s']):.2f} s/row)")
                target = f"{name}, T={T}" + (f" ({tag}: {code})" if compare else "")
                at4096 = T == 4096
                ratios = [x / y for x, y in zip(a["accept_s"], a["bare_s"])]
                figs.append({"key": f"long_time_T{T}" + ("_before" if tag == "before" else ""),
                             "figure": "accept vs bare forward+argmax (time)", "target": target, "unit": "x",
                             "values": ratios, "goal": "<= 1.5" if at4096 and tag == "after" else None,
                             "detail": {"accept_s": statistics.median(a["accept_s"]),
                                        "bare_s": statistics.median(a["bare_s"]), "rows": n_rows, "T": T},
                             "note": f"paired per row in one process; {n_rows} rows"})
                figs.append({"key": f"long_peak_T{T}" + ("_before" if tag == "before" else ""),
                             "figure": "accept vs bare forward+argmax (peak memory)", "target": target,
                             "unit": "x", "values": [a["peak_bytes"] / bare[T]["peak_bytes"]],
                             "goal": "<= 1.3" if at4096 and tag == "after" else None,
                             "detail": {"accept_GiB": a["peak_bytes"] / 2**30, "bare_GiB": bare[T]["peak_bytes"] / 2**30,
                                        "startup_GiB": base / 2**30,
                                        "accept_above_startup_GiB": (a["peak_bytes"] - base) / 2**30},
                             "note": f"whole-process peak (ru_maxrss of each child"
                                     f"{'' if malloc_default else ', MALLOC_MMAP_THRESHOLD_=65536'})" if device == "cpu"
                             else "torch.cuda.max_memory_allocated of each child"})
                figs.append({"key": f"long_tokens_per_second_T{T}" + ("_before" if tag == "before" else ""),
                             "figure": "accept tokens per second", "target": target, "unit": "tok/s",
                             "values": [T / s for s in a["accept_s"]], "goal": None,
                             "detail": {"bare_tok_s": T / statistics.median(a["bare_s"])}})
            lo, hi = min(lengths), max(x for x in lengths if x <= 4096) if any(x <= 4096 for x in lengths) else None
            if hi and hi != lo:
                inc_lo, inc_hi = acc[lo]["peak_bytes"] - base, acc[hi]["peak_bytes"] - base
                figs.append({"key": "long_memory_growth" + ("_before" if tag == "before" else ""),
                             "figure": f"peak above start-up, T={hi} / T={lo}", "target": name + (f" ({tag})" if compare else ""),
                             "unit": "x", "values": [inc_hi / max(inc_lo, 1)],
                             "goal": f"<= {1.125 * hi / lo:g}" if tag == "after" else None,
                             "detail": {"increment_lo_GiB": inc_lo / 2**30, "increment_hi_GiB": inc_hi / 2**30},
                             "note": f"linear growth is {hi / lo:g}x"})
            if tag == "after" and hi:                         # issue 18: the tree's peak vs the chain's
                tr = _run_child("accept", hi, 1, folder, code, tree=TREE, **kw)
                log(f"[long] tree (steps {size['K']}, topk {TREE[0]}, N {TREE[1]}) T={hi}: peak "
                    f"{tr['peak_bytes'] / 2**30:.2f} GiB vs chain {acc[hi]['peak_bytes'] / 2**30:.2f} GiB, "
                    f"{statistics.median(tr['accept_s']):.2f} s/row")
                figs.append({"key": f"long_tree_peak_T{hi}", "figure": f"tree (topk {TREE[0]}) vs chain peak memory",
                             "target": f"{name}, T={hi}", "unit": "x",
                             "values": [tr["peak_bytes"] / acc[hi]["peak_bytes"]],
                             "goal": "<= 2" if hi == 4096 else None,
                             "detail": {"tree_GiB": tr["peak_bytes"] / 2**30, "chain_GiB": acc[hi]["peak_bytes"] / 2**30,
                                        "tree_above_startup_GiB": (tr["peak_bytes"] - base) / 2**30,
                                        "chain_above_startup_GiB": (acc[hi]["peak_bytes"] - base) / 2**30,
                                        "tree_s": statistics.median(tr["accept_s"])},
                             "note": "whole-process peaks, one row each"})
    return figs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--lengths", help="comma list of row lengths (default 1024,4096; 16384 is opt-in)")
    p.add_argument("--repeats", type=int, default=5, help="rows per length: repeats // 2 + 1 (time ratios are paired per row)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (checks the runner)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compare", metavar="CHECKOUT", help="also run the children on this checkout's workbench (before)")
    p.add_argument("--max-memory", default=None, help="passed to simulate (when that checkout supports it)")
    p.add_argument("--malloc-default", action="store_true",
                   help="leave glibc's mmap threshold alone (peaks then include heap glibc keeps after frees)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--child", choices=["accept", "bare"], help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--T", type=int, help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--K", type=int, default=4, help=argparse.SUPPRESS)
    p.add_argument("--eagle-topk", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--num-draft-tokens", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else None
    figs = measure(device=args.device, repeats=args.repeats, quick=args.quick, threads=args.threads, lengths=lengths,
                   compare=args.compare, max_memory=args.max_memory, malloc_default=args.malloc_default)
    for f in figs:
        vals = f["values"]
        print(f"{f['key']:32s} {f['target'][-60:]:60s} median {statistics.median(vals):10.3f} {f['unit']:6s} "
              f"goal {f.get('goal')}  {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in f.get('detail', {}).items()})}")
    if args.json:
        from workbench.core.files import write_json

        write_json(args.json, figs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
