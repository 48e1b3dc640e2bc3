"""``workbench sglang <sub-command>``: SGLang helpers. ``lint`` checks a server's speculative flags.

    $ workbench sglang lint "python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 ..." \\
          --draft DRAFT --target T
    $ workbench sglang lint server_info.json --draft DRAFT --target T --json

Sub-commands register in ``SUBCOMMANDS`` (``compare`` is added beside ``lint``).
"""

from __future__ import annotations

import json
import os
import sys

NAME = "sglang"
HELP = "SGLang helpers: lint the server's speculative-decoding flags against the draft and target"


def _add_lint(sub):
    p = sub.add_parser("lint", help="lint a launch command or a /get_server_info JSON",
                       description="Lint SGLang speculative-decoding settings. Exit 1 when an error is found.")
    p.add_argument("source", metavar="COMMAND|FILE",
                   help="the launch command as one quoted string, a file holding it, a /get_server_info JSON "
                        "file, or - for stdin")
    p.add_argument("--server-info", action="store_true", help="read SOURCE as /get_server_info JSON")
    p.add_argument("--draft", metavar="DIR", help="the EAGLE-3 draft directory (config.json, weights for d2t)")
    p.add_argument("--target", metavar="DIR", help="the target model directory (config.json is enough)")
    p.add_argument("--trained-wiring", metavar="SPEC",
                   help="taps the draft was trained on, e.g. embed,L3,L31 or hf:0,4,32")
    p.add_argument("--sglang-rule", choices=["classic", "first-id-1"], default="classic",
                   help="SGLang id rule: classic (+1 always) or first-id-1 (PR #25454)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(_sglang_run=_run_lint)


SUBCOMMANDS = [_add_lint]


def add_arguments(parser):
    sub = parser.add_subparsers(dest="sglang_command", metavar="SUBCOMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    parser.set_defaults(_sglang_parser=parser)


def run(args) -> int:
    fn = getattr(args, "_sglang_run", None)
    if fn is None:
        args._sglang_parser.print_help()
        return 2
    return fn(args)


def _run_lint(args) -> int:
    from workbench.errors import WorkbenchError
    from workbench.sglang import lint, parse_command, server_args_from_info

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
        server_args, source = parse_command(text), "command"
    res = lint(server_args, draft=args.draft, target=args.target, trained_wiring=args.trained_wiring,
               sglang_rule=args.sglang_rule, source=source)
    print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False) if args.json else res.to_text())
    return 0 if res.ok else 1
