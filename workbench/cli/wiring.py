"""``workbench wiring``: which target taps each engine would feed the draft (no weights needed).

    $ workbench wiring --target path/to/target --draft path/to/draft
    $ workbench wiring --target config-only-dir --json
"""

from __future__ import annotations

import json

NAME = "wiring"
HELP = "Show the target taps each engine (sglang, vllm, eagle, specforge, modelopt, hf) feeds the draft"


def add_arguments(parser):
    parser.add_argument("--target", required=True, metavar="PATH",
                        help="target model directory (config.json is enough) or its config.json")
    parser.add_argument("--draft", metavar="PATH", help="EAGLE-3 draft directory (its config.json is read)")
    parser.add_argument("--trained", metavar="SPEC",
                        help="taps the draft was trained on, e.g. embed,L3,L31 or hf:0,4,32 (adds warnings)")
    parser.add_argument("--sglang-rule", choices=["classic", "first-id-1"], default="classic",
                        help="SGLang id rule: classic (+1 always) or first-id-1 (PR #25454, +1 only when "
                             "the first id is 1)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args) -> int:
    from workbench.wiring import table

    rows = table(args.target, args.draft, sglang_rule=args.sglang_rule, trained=args.trained)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2, ensure_ascii=False))
    else:
        print(rows.summary())
    return 0
