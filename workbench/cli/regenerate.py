"""`workbench regenerate`: replace each response with the target's own continuation (greedy or sampled).

    $ workbench regenerate --target data/demo/target --data val-foreign.jsonl --out val-regen.jsonl
    $ workbench regenerate --target T --data in.jsonl --out out.jsonl --url http://127.0.0.1:30000
    $ workbench regenerate --target T --data in.jsonl --out out.jsonl --server vllm --url http://127.0.0.1:8000
    $ workbench regenerate --target T --data in.jsonl --out out.jsonl --temperature 0.7 --top-p 0.95 --seed 1
    $ workbench regenerate --target T --data question.jsonl --out mtbench.jsonl --max-new-tokens 512   # prompts

Conversation and prompt-only files (MT-bench turns, GSM8K question, HumanEval/plain prompt, Alpaca
instruction + input, conversations) are chat-templated with the target's tokenizer (or --chat-template); each
user turn is asked after the target's own earlier answers (SpecForge's MT-bench), one output row per reply
(docs/data.md).

Interrupt it at any time: re-running the same command resumes (rows, or whole rounds of turns, already in
OUT.part are kept).
Exit codes: 0 done, 1 done but some rows were skipped, 2 bad input.
"""

from workbench.cli import (
    add_chat_template_arguments,
    add_device_arguments,
    chat_template_kwargs,
)

NAME = "regenerate"
HELP = "replace the data's responses with the target's own greedy (or sampled) continuation"


def add_arguments(parser):
    parser.add_argument("--target", required=True, metavar="DIR",
                        help="HF target folder (with --url: only its config and tokenizer are read)")
    parser.add_argument("--data", required=True, metavar="PATH", help="input data (jsonl/parquet/save_to_disk folder)")
    parser.add_argument("--out", required=True, metavar="OUT.jsonl", help="output JSON Lines (written when complete)")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="M",
                        help="response length cap (default: each row's original response length; conversation and "
                             "prompt-only files: 512)")
    parser.add_argument("--ignore-eos", action="store_true", help="do not stop at EOS: always generate M tokens")
    parser.add_argument("--url", default=None, metavar="URL",
                        help="generate with a live server (see --server) instead of the HF target")
    parser.add_argument("--server", choices=["sglang", "vllm"], default="sglang",
                        help="the server behind --url: sglang (POST /generate) or vllm (POST /v1/completions with "
                             "token ids; the model id from /v1/models; docs/regenerate.md)")
    add_chat_template_arguments(parser)
    s = parser.add_argument_group("sampling (default: greedy)")
    s.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (default)")
    s.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus cut, (0, 1] (default 1 = off)")
    s.add_argument("--top-k", type=int, default=-1, metavar="K",
                   help="sampling top-k, -1 = off (not the tree's --eagle-topk)")
    s.add_argument("--seed", type=int, default=None, metavar="S", help="makes sampled responses reproducible")
    parser.add_argument("--batch-size", type=int, default=8, help="HF: prompts per batch (default 8)")
    parser.add_argument("--flush-every", type=int, default=64, metavar="N",
                        help="rows per write to OUT.part (what a kill can lose at most; default 64)")
    parser.add_argument("--no-agreement", action="store_true",
                        help="HF: skip the old responses' greedy agreement (a shorter prefill)")
    parser.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                        help="rows without a prompt, too long, or invalid: stop (default) or skip and count")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="the first N rows only")
    parser.add_argument("--concurrency", type=int, default=4, metavar="C", help="--url: requests in flight (default 4)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S", help="--url: seconds per request")
    parser.add_argument("--retries", type=int, default=3, help="--url: retries on errors/timeouts/5xx (default 3)")
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    add_device_arguments(parser)


def run(args) -> int:
    from workbench.core.devices import parse_dtype, resolve_device
    from workbench.core.errors import WorkbenchError
    from workbench.core.files import write_json
    from workbench.core.sampling import Sampling
    from workbench.live.regenerate import regenerate
    from workbench.rows.conversations import sniff

    kwargs = chat_template_kwargs(args.chat_template_kwargs)
    sampling = Sampling(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    device = resolve_device(args.device) if args.url is None else "cpu"
    if sniff(args.data) in ("chat", "prompts"):
        from workbench.live.chat_regen import regenerate_chats

        res = regenerate_chats(args.target, args.data, args.out, max_new_tokens=args.max_new_tokens, url=args.url,
                               sampling=sampling, ignore_eos=args.ignore_eos, batch_size=args.batch_size,
                               limit=args.limit, device=device, dtype=parse_dtype(args.dtype, device),
                               trust_remote_code=args.trust_remote_code, concurrency=args.concurrency,
                               timeout=args.timeout, retries=args.retries, progress=not args.quiet,
                               server=args.server, chat_template=args.chat_template, chat_template_kwargs=kwargs)
        print(res.summary())
        if args.json:
            write_json(args.json, res.to_dict())
        return 0
    if args.chat_template or kwargs:
        raise WorkbenchError(f"--chat-template/--chat-template-kwargs: {args.data} holds tokenised rows (their prompts "
                             "are kept as they are); the options apply to conversation and prompt-only files")
    res = regenerate(args.target, args.data, args.out, max_new_tokens=args.max_new_tokens, url=args.url,
                     sampling=sampling, ignore_eos=args.ignore_eos, batch_size=args.batch_size,
                     flush_every=args.flush_every, agreement=not args.no_agreement, on_error=args.on_error,
                     limit=args.limit, device=device, dtype=parse_dtype(args.dtype, device),
                     trust_remote_code=args.trust_remote_code, concurrency=args.concurrency, timeout=args.timeout,
                     retries=args.retries, progress=not args.quiet, server=args.server)
    print(res.summary())
    if args.json:
        write_json(args.json, res.to_dict())
    return 1 if sum(res.skipped.values()) else 0
