"""`workbench accept`: offline acceptance of a draft on a target and data, for one wiring.

    $ workbench accept --target data/demo/target --draft data/demo/draft-aligned --data data/demo/val.jsonl \\
        --engine sglang --steps 4 --json acc.json --min-accept-length 1.8
    $ workbench accept ... --engine sglang --steps 5 --eagle-topk 4 --num-draft-tokens 8     # SGLang's tree
    $ workbench accept ... --sglang-args "python -m sglang.launch_server --model-path ... --speculative-num-steps 5 ..."
    $ torchrun --standalone --nproc-per-node 8 -m workbench accept ... --device auto --json acc.json
    $ workbench accept ... --data sampled.jsonl --temperature 0.7 --top-p 0.95    # data from regenerate --temperature
    $ workbench accept ... --temperature 0.7 --speculative-accept-threshold-acc 0.5   # SGLang's lossy thresholds
    $ workbench accept ... --by-position 64 --by-position-figure by-position.png     # accept length by context position

Under torchrun the samples are sharded over the ranks (workbench.simulate.distributed), rank 0 writes the same
JSON as one process, and each rank keeps its shard in <json>.shards/ so a re-run resumes.
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
    with_sampling,
)

NAME = "accept"
HELP = "offline acceptance (accept length, α_k, histogram) of a draft for one wiring"


def add_arguments(parser):
    add_inputs_arguments(parser, chat=True)
    parser.add_argument("--wiring", help="taps fed to the draft, e.g. embed,L1,L3 or hf:0,2,4 (with --engine: "
                                         "overrides only the taps)")
    add_engine_arguments(parser, what="evaluate what this engine feeds and computes (taps, Eagle-3.1 options, "
                                      "rotary offset, embedding and lm_head source)")
    add_shape_arguments(parser)
    parser.add_argument("--drafting", choices=["parallel", "sequential"], default=None,
                        help="parallel: P-EAGLE's one-pass drafting (vLLM \"parallel_drafting\": true); sequential: a "
                             "chain (default: the draft's own: parallel for a P-EAGLE checkpoint; docs/families.md)")
    add_sampling_arguments(parser)
    add_served_mode_arguments(parser)
    parser.add_argument("--acc-topk", type=int, default=5, metavar="n",
                        help="record step-1 top-1/top-5 accuracy from the draft's top n ids (0 = off; "
                             "not --eagle-topk)")
    add_run_arguments(parser, json_help="write the statistics as JSON")
    parser.add_argument("--per-chain", metavar="OUT.jsonl",
                        help="write {sample, t, accepted, ...} for every counted start (a chain or a tree)")
    parser.add_argument("--by-position", type=int, default=None, metavar="N",
                        help="also print the accept length per bin of N chain starts (position in the context), with "
                             "95%% intervals (docs/context-length.md)")
    parser.add_argument("--by-position-figure", metavar="OUT.png",
                        help="with --by-position: also draw it (the dashed line: the draft's max_position_embeddings)")
    parser.add_argument("--min-accept-length", type=float, default=None, metavar="X",
                        help="exit 1 when the decode-path accept length is below X (CI gate)")
    c = parser.add_mutually_exclusive_group()
    c.add_argument("--cost-ratio", type=float, default=None,
                   help="a fixed cost model: draft-step/target-forward cost ratio for the speed-up projection "
                        "(default: the ratio measured during the run)")
    c.add_argument("--cost-model", default=None, metavar="FILE.json",
                   help="a measured cost model (workbench tune --measure-cost-model) for the speed-up projection")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="working memory for the chunked heads and attention blocks, e.g. 2GB "
                             "(default: a quarter of the free device memory, at most 512 MiB; docs/long-rows.md)")
    add_device_arguments(parser)
    add_torchrun_arguments(parser)


def add_served_mode_arguments(parser) -> None:
    """SGLang's verify modes beyond the lossless default (docs/sampling.md)."""
    parser.add_argument("--speculative-accept-threshold-single", type=float, default=1.0, metavar="X",
                        help="SGLang's lossy threshold: accept a child whose target probability >= X (1 = lossless; "
                             "< 1 runs one extra target forward per row over its trees)")
    parser.add_argument("--speculative-accept-threshold-acc", type=float, default=1.0, metavar="X",
                        help="SGLang's lossy threshold: accept when the coin <= running sum / X (1 = lossless)")
    parser.add_argument("--speculative-use-rejection-sampling", action="store_true",
                        help="also estimate SGLang's rejection-sampling chain (= vLLM draft_sample_method="
                             "probabilistic): draft samples from q, accept with min(1, p/q); a chain, T > 0")


def run(args) -> int:
    import functools
    import math

    from workbench.core.devices import parse_dtype
    from workbench.load.agreement import plain_warnings
    from workbench.simulate import distributed
    from workbench.simulate.acceptance import accept, accept_served

    from workbench.core.errors import WorkbenchError

    if args.by_position_figure and args.by_position is None:
        raise WorkbenchError("--by-position-figure needs --by-position N (the bin width in tokens)")
    if args.by_position is not None and args.by_position < 1:
        raise WorkbenchError(f"--by-position {args.by_position}: expected a positive number of tokens per bin")
    engine, shape = engine_and_shape(args)
    setting = with_sampling(shape.setting, args)
    if args.drafting is not None:
        setting = setting.replace(drafting=args.drafting)
    ts, ta = args.speculative_accept_threshold_single, args.speculative_accept_threshold_acc
    modes = ts < 1 or ta < 1 or args.speculative_use_rejection_sampling
    if ts < 1 or ta < 1:
        print(f"notice: thresholds single {ts:g} / acc {ta:g} are lossy: their exact expectation needs one extra "
              "target forward per row over the row and its drafted trees (cost reported below)")
    run_accept = accept if not modes else functools.partial(
        accept_served, threshold_single=ts, threshold_acc=ta, rejection=args.speculative_use_rejection_sampling)
    with distributed.init(args.device, device_map=args.device_map) as ctx, plain_warnings():
        out = run_accept(
            args.target, args.draft, chat_data(args), wiring=args.wiring, engine=engine, setting=setting,
            acc_topk=args.acc_topk,
            limit=args.limit, dtype=parse_dtype(args.dtype, ctx.device), device_map=args.device_map,
            batch_size=args.batch_size, trust_remote_code=args.trust_remote_code,
            progress=not args.quiet, ctx=ctx, cost_ratio=args.cost_ratio, cost_model=args.cost_model,
            max_memory=args.max_memory,
            shard_dir=args.shard_dir or (distributed.default_shard_dir(args.json or args.per_chain)
                                         if ctx.distributed else None))
    result, note, extra = out if modes else (*out, [])
    if result is None:                           # not rank 0: rank 0 reports for everyone
        return 0
    print(f"wiring source: {note}")
    print(result.summary())
    for m in extra:
        print("\n".join(m.summary_lines()))
    if args.json:
        if extra:
            from workbench.core.files import write_json

            js = result.to_json()
            js["served_modes"] = [m.to_dict() for m in extra]
            write_json(args.json, js, indent=2)
        else:
            result.to_json(args.json)
        print(f"wrote {args.json}")
    if args.per_chain:
        n = result.write_chains(args.per_chain)
        print(f"wrote {n} chains to {args.per_chain}")
    if args.by_position is not None:
        _by_position(result, args)
    if args.min_accept_length is not None:
        got = result.decode_path["accept_length"]
        if math.isnan(got) or got < args.min_accept_length:
            print(f"FAIL: decode-path accept length {got:.3f} < {args.min_accept_length}")
            return 1
        print(f"OK: decode-path accept length {got:.3f} >= {args.min_accept_length}")
    return 0


def _by_position(result, args) -> None:
    """Accept length by chain start (``--by-position N``), its figure; into the JSON when ``--json`` is given."""
    from workbench.engines.positions import read
    from workbench.engines.taps import load_config
    from workbench.stats.context_length import by_position

    table = by_position(result, args.by_position)
    pos = read(load_config(args.draft, "draft config")) if isinstance(args.draft, str) else None
    print()
    print(table.summary())
    if pos is not None:
        print(f"  the draft's max_position_embeddings: {pos['max_position_embeddings']}"
              f"{'' if pos['max_positions_key'] else ' (defaulted)'}")
    if args.json:
        import json

        from workbench.core.files import write_json

        with open(args.json, encoding="utf-8") as f:
            js = json.load(f)
        js["by_position"] = table.to_dict()
        write_json(args.json, js, indent=2)
    if args.by_position_figure:
        from workbench.report.context_figure import position_figure
        from workbench.report.plots import save

        save(position_figure({result.spec: table}, max_positions=pos and pos["max_position_embeddings"]),
             args.by_position_figure)
        print(f"wrote {args.by_position_figure}")
