"""``workbench wiring``: which target taps each engine would feed the draft (no weights needed).

    $ workbench wiring --target path/to/target --draft path/to/draft
    $ workbench wiring --target config-only-dir --json
    $ workbench wiring --engines              # every engine record and the version boundary it stands for
"""

from __future__ import annotations

import json
from pathlib import Path

NAME = "wiring"
HELP = "Show the target taps each engine and version (sglang, vllm, specforge, ...) feeds the draft"


def add_arguments(parser):
    parser.add_argument("--target", metavar="PATH",
                        help="target model directory (config.json is enough) or its config.json")
    parser.add_argument("--draft", metavar="PATH", help="draft directory (its config.json is read): EAGLE-3, EAGLE-3.1, "
                                                         "P-EAGLE, DFlash, DSpark or MTP (docs/families.md)")
    parser.add_argument("--trained", metavar="SPEC",
                        help="taps the draft was trained on, e.g. embed,L3,L31 or hf:0,4,32 (adds warnings)")
    parser.add_argument("--engines", action="store_true",
                        help="list every engine record: versions, keys read, id meaning, embed/lm_head, options")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args) -> int:
    from workbench import engines
    from workbench.core.errors import WorkbenchError
    from workbench.engines.wiring import table

    if args.engines or args.target is None:
        if args.target is None and not args.engines:
            raise WorkbenchError("give --target (the taps each engine feeds) or --engines (the engine records)")
        if args.json:
            print(json.dumps(engines.engine_table(), indent=2, ensure_ascii=False))
        else:
            print(engines.format_engine_table())
        return 0
    if args.draft is not None:
        from workbench.engines import families
        from workbench.engines.taps import load_config

        where = Path(args.draft) / "config.json" if Path(args.draft).is_dir() else Path(args.draft)
        fam = families.family_of(load_config(args.draft, "draft config"), str(where))
        if fam is not None and fam.name not in ("eagle3", "eagle3.1"):   # its own rules: docs/families.md
            if args.json:
                print(json.dumps({"family": fam.name, "evidence": fam.evidence,
                                  "feeds": [f.to_dict() for f in families.feeds(args.draft, args.target)]},
                                 indent=2, ensure_ascii=False))
            else:
                print(families.describe(args.draft, args.target))
            return 0
    rows = table(args.target, args.draft, trained=args.trained)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2, ensure_ascii=False))
    else:
        print(rows.summary())
    return 0
