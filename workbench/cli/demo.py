"""`workbench demo`: build the built-in demo (if needed) into data/demo/ and show what it holds.

    $ workbench demo --size smoke --out /tmp/wb-demo --build-only
"""

NAME = "demo"
HELP = "build the built-in demo (tokenizer, target, data, two drafts) offline, then show it"


def add_arguments(parser):
    from workbench.demo import SIZES

    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="smoke: seconds (tests); default: minutes, makes the wiring bug visible")
    parser.add_argument("--out", default="data/demo", help="demo folder (default: data/demo)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default: 0)")
    parser.add_argument("--force", action="store_true", help="rebuild even when a matching demo exists")
    parser.add_argument("--build-only", action="store_true", help="build (or reuse) the demo and stop")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args) -> int:
    from workbench import demo

    out = demo.build_demo(args.out, size=args.size, seed=args.seed, force=args.force,
                          progress=not args.quiet)
    print(demo.summary(demo.read_manifest(out)))
    if not args.build_only:
        print(f"next: workbench inspect {out}/val.jsonl ; the draft folders are {out}/draft-mismatched "
              f"and {out}/draft-aligned (target {out}/target)")
    return 0
