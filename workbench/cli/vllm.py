"""``workbench vllm <sub-command>``: vLLM helpers. ``lint`` checks a server's ``--speculative-config``.

    $ workbench vllm lint "vllm serve T --speculative-config '{\\"method\\": \\"eagle3\\", \\"model\\": \\"D\\", \\
          \\"num_speculative_tokens\\": 4}'" --target T --draft D
    $ workbench vllm lint spec.json --target T --draft D --device cpu --json

Sub-commands register in ``SUBCOMMANDS`` (``lint`` now; ``compare`` and ``serve`` to come).
"""

from __future__ import annotations

import json
import sys

NAME = "vllm"
HELP = "vLLM helpers: lint the server's --speculative-config against the draft and target"


def _add_lint(sub):
    p = sub.add_parser("lint", help="lint a launch command or a --speculative-config JSON",
                       description="Lint vLLM speculative-decoding settings (rules checked against vLLM 0.32's "
                                   "source). Exit 1 when an error is found.")
    p.add_argument("source", metavar="COMMAND|JSON|FILE",
                   help="the launch command as one quoted string (vllm serve ... or python -m "
                        "vllm.entrypoints.openai.api_server ...), the --speculative-config JSON, a file holding "
                        "either, or - for stdin")
    p.add_argument("--draft", metavar="DIR", help="the EAGLE-3 draft directory (config.json; weights for d2t, "
                                                  "input_norm, mask_hidden); default: the config's \"model\" if here")
    p.add_argument("--target", metavar="DIR", help="the target model directory (config.json is enough); "
                                                   "default: the command's model if here")
    p.add_argument("--trained-wiring", metavar="SPEC",
                   help="taps the draft was trained on, e.g. embed,L3,L31 or hf:0,4,32 "
                        "(default: workbench.trained_taps, else the SpecForge reading of eagle_config ids)")
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto",
                   help="where the server runs: cpu checks the CPU attention head sizes and reads ids as the V1 "
                        "runner; gpu as the V2 runner (0.32's GPU default, no eagle_config ids); auto = cpu unless "
                        "the command has a GPU hint (CUDA_VISIBLE_DEVICES, --gpu-memory-utilization)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(_vllm_run=_run_lint)


SUBCOMMANDS = [_add_lint]


def add_arguments(parser):
    sub = parser.add_subparsers(dest="vllm_command", metavar="SUBCOMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    parser.set_defaults(_vllm_parser=parser)


def run(args) -> int:
    fn = getattr(args, "_vllm_run", None)
    if fn is None:
        args._vllm_parser.print_help()
        return 2
    return fn(args)


def _run_lint(args) -> int:
    from workbench.engines.vllm_lint import lint_command

    text = sys.stdin.read() if args.source == "-" else args.source
    res = lint_command(text, draft=args.draft, target=args.target, trained_wiring=args.trained_wiring,
                       device=args.device)
    print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False) if args.json else res.summary())
    return 0 if res.ok else 1
