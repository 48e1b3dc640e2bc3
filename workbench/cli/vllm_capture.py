"""``workbench vllm capture``: the candidate wirings' taps captured by a real vLLM into the feature cache.

    $ workbench vllm capture --target data/demo/target --data data/demo/val.jsonl \\
          --wiring embed,L1,L3 --wiring L0,L2,L3 --cache-dir .features --limit 64
    vLLM captured ids [0, 1, 2, 3, 4] for 64 rows: 8 batches (0 from an earlier run) in .features

Then ``workbench.simulate.acceptance.simulate(..., cache_dir=".features")`` with the same wirings, rows and
batch size reads the engine's shards (no target forward). Registered from :mod:`workbench.cli.vllm`;
docs/vllm_capture.md.
"""

from __future__ import annotations

import sys


def add_capture(sub):
    p = sub.add_parser("capture", help="capture the wirings' taps through a real vLLM into the workbench's "
                                       "feature cache (resumable)",
                       description="Start a real vLLM (.venv-vllm, 127.0.0.1, --enforce-eager) in hidden-states "
                                   "extraction mode with the union of the wirings' taps, send each data row, and "
                                   "write the same shards and manifest as HF capture (manifest source: vLLM). "
                                   "Resumes at the first missing shard; the engine's files are removed as read.")
    p.add_argument("--target", required=True, metavar="DIR", help="the target model folder")
    p.add_argument("--data", required=True, help="tokenised rows (jsonl, ...; docs/data.md)")
    p.add_argument("--wiring", action="append", required=True, metavar="SPEC",
                   help="a candidate wiring, e.g. embed,L1,L3 (repeat for several)")
    p.add_argument("--cache-dir", required=True, metavar="DIR", help="the feature cache folder")
    p.add_argument("--limit", type=int, help="the first N rows")
    p.add_argument("--batch-size", type=int, default=8, help="rows per shard (use accept's batch size)")
    p.add_argument("--tensor-parallel-size", type=int, default=1, metavar="TP", help="vLLM --tensor-parallel-size")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds to wait for the server (default 400)")
    p.add_argument("--fidelity", metavar="OUT.json",
                   help="then compare the engine's features with HF's for the same rows (per tap, greedy tokens, "
                        "and each wiring's accept length with --draft) and write them here (notebook 02 draws it)")
    p.add_argument("--draft", metavar="DIR", help="the EAGLE-3 draft whose accept lengths --fidelity compares")
    p.add_argument("-K", "--steps", type=int, default=4, help="draft tokens per chain for --fidelity (default 4)")
    p.set_defaults(sub_run=run_capture)


def run_capture(args) -> int:
    from workbench.live.vllm_capture import engine_capture
    from workbench.load import inputs
    from workbench.simulate.distributed import global_rows

    if args.fidelity and not args.draft:
        print("error: --fidelity needs --draft DIR (the draft whose accept lengths it compares)", file=sys.stderr)
        return 2
    ins = inputs.load(args.target, args.draft, args.data, progress=False)
    rows = global_rows(ins.data, args.limit)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    info = engine_capture(ins.target, args.target, rows, args.wiring, args.cache_dir, batch_size=args.batch_size,
                          tensor_parallel=args.tensor_parallel_size, timeout=args.timeout, say=say)
    print(f"vLLM captured ids {info['ids']} for {len(rows)} rows: {info['batches']} batches "
          f"({info['from_cache']} from an earlier run) in {args.cache_dir}")
    if args.fidelity:
        from workbench.live.engine_fidelity import compare

        fid = compare(ins.target, ins.draft, rows, args.wiring, args.cache_dir, K=args.steps,
                      batch_size=args.batch_size, draft_path=args.draft)
        print("\n".join(fid.lines()))
        print(f"wrote {fid.save(args.fidelity)}")
    return 0


__all__ = ["add_capture", "run_capture"]
