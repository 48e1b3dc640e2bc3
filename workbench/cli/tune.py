"""`workbench tune`: sweep SGLang's tree flags offline from one target pass and recommend them.

    $ workbench tune --target data/demo/target --draft data/demo/draft-aligned --data data/demo/val.jsonl \\
        --engine sglang --json sweep.json --plot sweep.png
    $ workbench tune --target T --draft D --measure-cost-model cost.json --device cuda    # on the serving GPU
    $ workbench tune --target T --draft D --data F --engine sglang --cost-model cost.json  # -> recommended flags

Grid (default): steps 1..8, eagle_topk 1, 2, 4, 8, num_draft_tokens up to 64 (docs/tune.md). Flags are
recommended only from a cost model measured on a GPU; otherwise the best shapes by accept length.
"""

from workbench.cli import (
    add_chat_template_arguments,
    add_device_arguments,
    add_engine_arguments,
    add_sampling_arguments,
    chat_data,
    engine_of,
)

NAME = "tune"
HELP = "sweep SGLang's --speculative-num-steps/-eagle-topk/-num-draft-tokens offline and recommend them"


def _ints(text):
    from workbench.core.errors import WorkbenchError

    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise WorkbenchError(f"{text!r}: expected comma-separated integers, e.g. 1,2,4,8") from None
    if not out or min(out) < 1:
        raise WorkbenchError(f"{text!r}: expected positive integers")
    return out


def add_arguments(parser):
    parser.add_argument("--target", required=True, help="HF target model folder")
    parser.add_argument("--draft", required=True, help="EAGLE-3 draft folder")
    parser.add_argument("--data", help="data file (jsonl/parquet/...); not needed with --measure-cost-model")
    add_chat_template_arguments(parser)
    parser.add_argument("--wiring", help="taps fed to the draft, e.g. embed,L1,L3 (with --engine: overrides only "
                                         "the taps)")
    add_engine_arguments(parser, what="evaluate what this engine feeds and computes (taps, options, rotary offset)")
    parser.add_argument("--steps", default="1,2,3,4,5,6,7,8", metavar="LIST", help="steps to sweep (default 1..8)")
    parser.add_argument("--eagle-topk", default="1,2,4,8", metavar="LIST", help="eagle_topk values (default 1,2,4,8)")
    parser.add_argument("--max-draft-tokens", type=int, default=64, metavar="N",
                        help="largest num_draft_tokens (default 64)")
    add_sampling_arguments(parser)
    parser.add_argument("--limit", type=int, default=None, help="use the first N samples")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per forward pass")
    c = parser.add_mutually_exclusive_group()
    c.add_argument("--cost-model", metavar="FILE.json", help="a measured cost model (ranks by projected speed-up "
                                                             "when measured on a GPU)")
    c.add_argument("--cost-ratio", type=float, default=None,
                   help="a fixed draft-step/target-forward ratio (indicative speed-ups; ranks by accept length)")
    c.add_argument("--measure-cost-model", metavar="OUT.json",
                   help="measure the cost model of --target/--draft on --device and write it (no sweep)")
    parser.add_argument("--rows", type=int, default=12, help="table rows to print")
    parser.add_argument("--json", metavar="OUT", help="write the sweep as JSON")
    parser.add_argument("--plot", metavar="OUT.png", help="write the heat map (plots.tree_sweep)")
    parser.add_argument("--max-memory", default=None, metavar="SIZE", help="working memory, e.g. 2GB")
    add_device_arguments(parser)


def run(args) -> int:
    from workbench.load.agreement import plain_warnings

    with plain_warnings():                       # the data's low-agreement warning: once, in plain words
        return _run(args)


def _run(args) -> int:
    from workbench.analysis.tune import measure_cost_model, tune
    from workbench.core.devices import parse_dtype, resolve_device
    from workbench.core.errors import WorkbenchError
    from workbench.core.sampling import Sampling

    if args.measure_cost_model:
        dev = resolve_device(args.device)
        cm = measure_cost_model(args.target, args.draft, args.measure_cost_model, device=dev,
                                dtype=parse_dtype(args.dtype, dev), trust_remote_code=args.trust_remote_code,
                                progress=not args.quiet)
        print(cm.summary())
        print(f"wrote {args.measure_cost_model}")
        return 0
    grid = dict(steps=_ints(args.steps), topks=_ints(args.eagle_topk), max_tokens=args.max_draft_tokens)
    if not args.data:
        raise WorkbenchError("--data is required for a sweep (or give --measure-cost-model OUT.json)")
    dev = resolve_device(args.device)
    sw, note = tune(args.target, args.draft, chat_data(args), wiring=args.wiring, engine=engine_of(args), device=dev,
                    dtype=parse_dtype(args.dtype, dev), limit=args.limit, batch_size=args.batch_size,
                    cost_model=args.cost_model, cost_ratio=args.cost_ratio, progress=not args.quiet,
                    trust_remote_code=args.trust_remote_code, max_memory=args.max_memory,
                    sampling=Sampling(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k), **grid)
    print(f"wiring source: {note}")
    print(sw.summary(max_rows=args.rows))
    if args.json:
        sw.to_json(args.json)
        print(f"wrote {args.json}")
    if args.plot:
        from workbench.report import plots

        plots.save(plots.tree_sweep(sw), args.plot)
        print(f"wrote {args.plot}")
    return 0
