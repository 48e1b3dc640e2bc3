"""`workbench rewire`: refit a mis-wired draft's fc for the taps the server feeds, export, measure.

    $ workbench rewire --target data/demo/target --draft data/demo/draft-mismatched \\
        --data data/demo/train.jsonl --eval-data data/demo/val.jsonl --engine sglang \\
        --out out/draft-rewired --finetune-steps 200 --json rewire.json
"""

from workbench.cli import (
    add_device_arguments,
    add_engine_arguments,
    add_inputs_arguments,
    engine_of,
)

NAME = "rewire"
HELP = "make a mis-wired draft work with the engine's taps (closed-form fc refit, optional fine-tune)"


def add_arguments(parser):
    add_inputs_arguments(parser, draft="EAGLE-3 draft folder trained on other taps",
                         data="training data (jsonl/parquet/...): the refit's positions")
    parser.add_argument("--eval-data", required=True, help="held-out data for before/after/reference acceptance")
    add_engine_arguments(parser, what="engine serving the draft: rewire to what it feeds (the export "
                                      "carries ids for both vLLM and SGLang)")
    parser.add_argument("--taps", help="taps to rewire to, e.g. L1,L3,L4 (default: what --engine feeds today)")
    parser.add_argument("--from-taps", help="taps the draft was trained on (default: its config's "
                                            "workbench.trained_taps)")
    parser.add_argument("--out", required=True, help="folder for the rewired checkpoint")
    parser.add_argument("--finetune-steps", type=int, default=0, metavar="N",
                        help="then N training-time-test steps on the new taps (default 0: closed form only)")
    parser.add_argument("--finetune", choices=["fc", "all"], default="fc", help="what the fine-tune trains")
    parser.add_argument("--finetune-seconds", type=float, default=None, help="stop the fine-tune after S seconds")
    parser.add_argument("--lr", type=float, default=1e-3, help="fine-tune learning rate")
    parser.add_argument("--steps", "-K", type=int, default=4, help="draft depth K (acceptance and fine-tune)")
    parser.add_argument("--holdout", type=float, default=0.2, help="share of samples used to choose the ridge λ")
    parser.add_argument("--limit", type=int, default=None, help="use the first N training samples")
    parser.add_argument("--eval-limit", type=int, default=None, help="use the first N eval samples")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per forward pass")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the fine-tune and of sampled acceptance")
    parser.add_argument("--json", metavar="OUT", help="write the result as JSON")
    add_device_arguments(parser)


def run(args) -> int:
    from workbench.analysis.rewire import rewire
    from workbench.core.devices import parse_dtype, resolve_device

    device = resolve_device(args.device)
    result = rewire(args.target, args.draft, args.data, taps=args.taps, engine=engine_of(args),
                    from_taps=args.from_taps, eval_data=args.eval_data, out=args.out, K=args.steps,
                    finetune_steps=args.finetune_steps, finetune_part=args.finetune,
                    finetune_seconds=args.finetune_seconds, lr=args.lr, holdout=args.holdout,
                    batch_size=args.batch_size, limit=args.limit, eval_limit=args.eval_limit, seed=args.seed,
                    device=device, dtype=parse_dtype(args.dtype, device),
                    trust_remote_code=args.trust_remote_code, progress=not args.quiet)
    print(result.summary())
    if result.before is not None:
        print("\n" + result.table())
    if args.json:
        result.to_json(args.json)
        print(f"wrote {args.json}")
    return 0
