"""``workbench sglang <sub-command>``: SGLang helpers. ``lint`` checks a server's speculative flags.

    $ workbench sglang lint "python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 ..." \\
          --draft DRAFT --target T
    $ workbench sglang lint server_info.json --draft DRAFT --target T --json
    $ workbench sglang compare --url http://127.0.0.1:30000 --target T --draft DRAFT --data val.jsonl \\
          --limit 64 --json compare.json
    $ workbench sglang compare --url http://127.0.0.1:30000 --target T --draft DRAFT --data val.jsonl \\
          --temperature 0.7 --top-p 0.95 --top-k 20

Sub-commands register in ``SUBCOMMANDS``: ``lint`` (flags) and ``compare`` (live server vs offline).
"""

from __future__ import annotations

import json
import os
import sys

from workbench.cli import (
    add_engine_arguments,
    add_live_arguments,
    add_subcommands,
    engine_of,
    run_subcommand,
)
from workbench.live.precision import REQUESTS_TO_DECIDE

NAME = "sglang"
HELP = ("SGLang helpers: lint the server's speculative-decoding flags; compare a live server's acceptance "
        "with the offline simulation")


def _add_lint(sub):
    p = sub.add_parser("lint", help="lint a launch command or a /get_server_info JSON",
                       description="Lint SGLang speculative-decoding settings. Exit 1 when an error is found.")
    p.add_argument("source", metavar="COMMAND|FILE",
                   help="the launch command as one quoted string, a file holding it, a /get_server_info JSON "
                        "file, or - for stdin")
    p.add_argument("--server-info", action="store_true", help="read SOURCE as /get_server_info JSON")
    p.add_argument("--draft", metavar="DIR", help="the EAGLE-3 draft directory (config.json, weights for d2t)")
    p.add_argument("--target", metavar="DIR", help="the target model directory (config.json is enough)")
    p.add_argument("--trained-state", choices=["pre-norm", "post-norm"], default=None,
                   help="MTP heads: the target's last hidden state they were trained on (the engines feed post-norm; "
                        "docs/families/mtp.md)")
    p.add_argument("--trained-wiring", metavar="SPEC",
                   help="taps the draft was trained on, e.g. embed,L3,L31 or hf:0,4,32")
    add_engine_arguments(p, default="sglang", what="the server's engine and version (sglang = current, "
                                                "sglang-2026.04 = releases before 2026-05)")
    p.add_argument("--engine-version", metavar="X.Y.Z", default=None,
                   help="the SGLang release whose own command-line parser reads the command (stored tables: "
                        f"{', '.join(_parser_releases())}; default the newest)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(sub_run=_run_lint)


def _parser_releases() -> list[str]:
    from workbench.engines.tables import table

    return [v["release"] for k, v in table("flags").items() if k.split("@")[0] == "sglang"]


def _add_compare(sub):
    p = sub.add_parser("compare", help="a live server's acceptance against the offline simulation, per wiring",
                       description="Send the data's prompts to a running SGLang server (POST /generate with explicit "
                                   "sampling parameters, greedy by default), simulate the server's own outputs offline "
                                   "under every candidate wiring and say which one reproduces its per-request "
                                   "speculative counts. Exit 1 unless it matches the trained wiring.")
    add_live_arguments(p, kind="SGLang", url="http://127.0.0.1:30000", timeout=120.0)
    p.add_argument("--steps", type=int, default=None, metavar="K",
                   help="draft steps K (default: the server's speculative_num_steps)")
    p.add_argument("--tolerance", type=float, default=0.25,
                   help="aggregate fallback only (servers without per-request fields): accept-length difference "
                        "that still matches (0.25)")
    p.add_argument("--counting", choices=["auto", "v1", "v2"], default="auto",
                   help="how the server counts its last verify step: v2 raw A (SGLang's EAGLE worker now), v1 "
                        "after the cut at max_new_tokens, auto: the one more requests agree with")
    p.add_argument("--served-dtype", default="infer", metavar="infer|bfloat16|float16|float32",
                   help="the server's dtype, for near-ties. Default infer: its server info's dtype, else "
                        "from the requests (a flip at a bfloat16 near-tie means bfloat16; float32 only when no flip "
                        "in enough requests with a near-tie that a bfloat16 server shows none with probability "
                        f"<= 5%%, {REQUESTS_TO_DECIDE} at the measured rate; else undecided)")
    add_engine_arguments(p, default="sglang", what="the server's engine and version (its id rule, rotary offset, "
                                                "embedding and lm_head source)")
    s = p.add_argument_group("sampling sent with every request (always explicit; default: greedy)")
    s.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="0 = greedy (default); > 0: the server samples and its own outputs are matched offline")
    s.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus cut, (0, 1] (default 1 = off)")
    s.add_argument("--top-k", type=int, default=-1, metavar="K",
                   help="sampling top-k, -1 = off (not the tree's eagle_topk, which the server reports)")
    s.add_argument("--seed", type=int, default=None, metavar="S",
                   help="send each row's sampling_seed (as regenerate --url; SGLang honours it with "
                        "--enable-deterministic-inference)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto for the offline side")
    p.add_argument("--json", metavar="OUT", help="also write the comparison as JSON to OUT")
    p.set_defaults(sub_run=_run_compare)


SUBCOMMANDS = [_add_lint, _add_compare]


def add_arguments(parser):
    add_subcommands(parser, NAME, SUBCOMMANDS)


def run(args) -> int:
    return run_subcommand(args)


def _run_lint(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.engines.sglang_lint import lint, parse_command, server_args_from_info

    src = args.source
    if src == "-":
        text = sys.stdin.read()
    elif os.path.isfile(src):
        try:
            with open(src, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise WorkbenchError(f"cannot read {src}: {e}") from None
    else:
        text = src
    as_info = args.server_info or text.lstrip().startswith("{")
    if as_info:
        try:
            info = json.loads(text)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"server info {src if src != text else '(argument)'}: line {e.lineno}: "
                                 f"invalid JSON ({e.msg})") from None
        if not isinstance(info, dict):
            raise WorkbenchError("server info: expected a JSON object (the /get_server_info reply)")
        server_args, source = server_args_from_info(info), "server"
    else:
        server_args, source = parse_command(text, args.engine_version), "command"
    res = lint(server_args, draft=args.draft, target=args.target, trained_wiring=args.trained_wiring,
               engine=engine_of(args), source=source, trained_state=args.trained_state)
    print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False) if args.json else res.summary())
    return 0 if res.ok else 1


def _run_compare(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.live.sglang_live import compare

    if args.limit is not None and args.limit < 1:
        raise WorkbenchError(f"--limit {args.limit}: expected a positive number of samples")
    res = compare(args.url, args.target, args.draft, args.data, limit=args.limit, K=args.steps,
                  trained=args.trained_wiring, wirings=args.wiring, concurrency=args.concurrency,
                  timeout=args.timeout, retries=args.retries, tolerance=args.tolerance, engine=engine_of(args),
                  counting=args.counting, served_dtype=args.served_dtype, temperature=args.temperature,
                  top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                  device=args.device, progress=sys.stderr.isatty())
    print(res.summary())
    if args.json:
        res.to_json(args.json)
        print(f"wrote {args.json}")
    return 0 if res.verdict_code == "match-trained" else 1
