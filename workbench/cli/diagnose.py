"""`workbench diagnose`: rank candidate wirings of a draft and say whether the engine feeds the right taps.

    $ workbench diagnose --target data/demo/target --draft data/demo/draft-mismatched \\
        --data data/demo/val.jsonl --engine sglang --steps 4 --json diagnosis.json
    $ torchrun --standalone --nproc-per-node 8 -m workbench diagnose ... --device auto --json diagnosis.json

Exit 0 when the engine's wiring is (within the 95% intervals) the best, 1 when it is clearly worse
than the best candidate (a CI gate), 2 on bad input. Under torchrun both stages are sharded over the
ranks (workbench.simulate.distributed), rank 0 prints and writes the same diagnosis as one process, and each
rank keeps its shards in <json>.shards/ so a re-run resumes.
"""

from workbench.cli import (
    add_device_arguments,
    add_engine_arguments,
    add_inputs_arguments,
    add_run_arguments,
    add_sampling_arguments,
    add_shape_arguments,
    add_torchrun_arguments,
    chat_data,
    engine_and_shape,
)

NAME = "diagnose"
HELP = "rank candidate wirings (α1 screen, then full curves) and give a verdict on the engine's wiring"


def add_arguments(parser):
    add_inputs_arguments(parser, chat=True)
    add_engine_arguments(parser, default="sglang", what="the engine (and version) whose wiring is judged")
    add_shape_arguments(parser, "draft depth of the full curves")
    add_sampling_arguments(parser)
    add_run_arguments(parser, json_help="write the diagnosis as JSON")
    parser.add_argument("--screen-chains", type=int, default=300, help="chains for the α1 screen (stage 1)")
    parser.add_argument("--top", type=int, default=4, help="candidates that get full curves (stage 2)")
    parser.add_argument("--rows", type=int, default=12, help="table rows to print")
    parser.add_argument("--cost-ratio", type=float, default=None, metavar="R",
                        help="draft-step/target-forward cost ratio for the speed-up projection (default: measured); "
                             "a fixed ratio makes the JSON reproducible")
    add_device_arguments(parser)
    add_torchrun_arguments(parser)


def run(args) -> int:
    from workbench.analysis.diagnose import diagnose_files
    from workbench.core.devices import parse_dtype
    from workbench.core.sampling import Sampling
    from workbench.load.agreement import plain_warnings
    from workbench.simulate import distributed as wd

    engine, shape = engine_and_shape(args)
    sampling = Sampling(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    shape = shape.setting
    with wd.init(args.device, device_map=args.device_map) as ctx, plain_warnings():
        dx = diagnose_files(args.target, args.draft, chat_data(args), engine=engine, K=shape.steps,
                            eagle_topk=shape.eagle_topk, num_draft_tokens=shape.num_draft_tokens, limit=args.limit,
                            dtype=parse_dtype(args.dtype, ctx.device), batch_size=args.batch_size,
                            screen_chains=args.screen_chains, top=args.top,
                            trust_remote_code=args.trust_remote_code, progress=not args.quiet, ctx=ctx,
                            device_map=args.device_map, cost_ratio=args.cost_ratio, sampling=sampling,
                            shard_dir=args.shard_dir or (wd.default_shard_dir(args.json) if ctx.distributed
                                                         else None))
    if dx is None:                               # not rank 0: rank 0 reports for everyone
        return 0
    print(dx.summary(max_rows=args.rows))
    if args.json:
        dx.to_json(args.json)
        print(f"wrote {args.json}")
    return dx.exit_code
