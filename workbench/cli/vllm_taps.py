"""``workbench vllm taps``: the taps a real vLLM captures for a draft, read off the tensors (one request).

    $ workbench vllm taps --target data/demo/target --draft data/demo/draft-mismatched --json taps.json
    the engine captures `L0,L2,L3` (max relative difference 3.1e-07; the next best layer differs by 4.1e-01, 1,322,581x more)

Registered from :mod:`workbench.cli.vllm` (``SUBCOMMANDS``); docs/vllm_taps.md.
"""

from __future__ import annotations

import sys


def add_taps(sub):
    p = sub.add_parser("taps", help="which target hidden states a real vLLM captures for the draft (one request, "
                                    "matched against HF's)",
                       description="Start a real vLLM (.venv-vllm, 127.0.0.1, --enforce-eager) in hidden-states "
                                   "extraction mode with exactly the layer-id keys of the draft's config, send one "
                                   "prompt, read the captured states back and match each against every HF hidden "
                                   "state of the same tokens computed here. Exit 0 when every slot names one tap "
                                   "and the taps agree with the vLLM engine record's reading; 1 otherwise.")
    p.add_argument("--target", required=True, metavar="DIR", help="the target model folder")
    p.add_argument("--draft", required=True, metavar="DIR|CONFIG",
                   help="the EAGLE-3 draft folder (or its config.json) as served")
    p.add_argument("--tokens", metavar="IDS", help="prompt token ids, comma-separated (default: 16 fixed ids)")
    p.add_argument("--tensor-parallel-size", type=int, default=1, metavar="TP",
                   help="vLLM --tensor-parallel-size (CPU: see docs/vllm_taps.md)")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds to wait for the server (default 400)")
    p.add_argument("--json", metavar="OUT", help="write the result (taps, per-slot differences) as JSON")
    p.set_defaults(sub_run=run_taps)


def run_taps(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.core.files import write_json
    from workbench.live.vllm_taps import served_taps

    tokens = None
    if args.tokens:
        try:
            tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
        except ValueError:
            raise WorkbenchError(f"--tokens {args.tokens!r}: expected comma-separated token ids") from None
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    res = served_taps(args.target, args.draft, tokens=tokens, tensor_parallel=args.tensor_parallel_size,
                      timeout=args.timeout, say=say)
    print(res.summary())
    if args.json:
        write_json(args.json, res.to_dict())
        print(f"wrote {args.json}")
    return 0 if res.agrees else 1


__all__ = ["add_taps", "run_taps"]
