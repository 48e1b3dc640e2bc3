"""`workbench foreign-drafts`: train the real demo's drafts with real trainers (ModelOpt, speculators) and measure
what each engine feeds them (docs/foreign-drafts.md).

    $ workbench foreign-drafts                                  # data/demo-real: train what is missing, then measure
    $ workbench foreign-drafts --trainer modelopt --no-measure  # one trainer only
    $ workbench foreign-drafts --measure-only                   # the table from the drafts already there

Each trainer runs from its own venv (`make trainers`); a trainer that cannot install or run prints one `note:`
line and the others go on (exit 0). Interrupt at any time: the same command resumes.
Exit codes: 0 done (notes included), 2 bad input (no real demo).
"""

NAME = "foreign-drafts"
HELP = "train the real demo's drafts with NVIDIA ModelOpt and speculators, and measure what each engine feeds them"


def add_arguments(parser):
    from workbench.demo.foreign import TRAINERS

    parser.add_argument("--root", default="data/demo-real", metavar="DIR",
                        help="the real demo folder (target/, train.jsonl, val.jsonl; default data/demo-real)")
    parser.add_argument("--trainer", action="append", choices=list(TRAINERS), default=None,
                        help="train only this one (repeatable; default: all)")
    parser.add_argument("--measure-only", action="store_true", help="train nothing: measure the drafts already there")
    parser.add_argument("--no-measure", action="store_true", help="train only: no trainer × engine table")
    parser.add_argument("--epochs", type=int, default=None, metavar="E", help="epochs over train.jsonl (default 3)")


def run(args) -> int:
    from dataclasses import replace
    from pathlib import Path

    from workbench.core.errors import WorkbenchError
    from workbench.demo.foreign import TRAINERS, Recipe, train_foreign

    root = Path(args.root)
    for need in ("target/config.json", "train.jsonl", "val.jsonl"):
        if not (root / need).is_file():
            raise WorkbenchError(f"{root / need}: missing (build the real demo first: workbench demo --size real "
                                 f"--out {root} --build-only)")
    recipe = Recipe() if args.epochs is None else replace(Recipe(), epochs=args.epochs)
    if not args.measure_only:
        train_foreign(root, tuple(args.trainer or TRAINERS), recipe)
    if not args.no_measure:
        from workbench.demo.foreign_table import RESULT, measure_foreign, quality
        from workbench.report.foreign import markdown

        result = measure_foreign(root)
        print(f"\n{result['metric']} on {result['data']} ({result['n_rows']} rows), written to {root / RESULT}:\n")
        print(quality(result))
        print()
        print(markdown(result))
    return 0
