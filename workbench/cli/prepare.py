"""`workbench prepare`: conversations (or an hf: dataset) → tokenised rows with the target's chat template.

    $ workbench prepare --tokenizer data/target --data chats.jsonl --out chats-rows.jsonl --max-length 4096
    $ workbench prepare --tokenizer T --data hf:HuggingFaceH4/ultrachat_200k:test_sft:200 --out uc.jsonl
    $ workbench prepare --tokenizer T --data chats.jsonl --out all.jsonl --all-turns   # SpecForge's layout

Interrupt it at any time: re-running the same command resumes. Exit codes: 0 done, 1 done but some records
were skipped (--on-error skip), 2 bad input (one line naming the file, line and turn). docs/data.md.
"""

from workbench.cli import add_chat_template_arguments, chat_template_kwargs

NAME = "prepare"
HELP = "tokenise conversations with the target's chat template into rows (one per reply, or --all-turns)"


def add_arguments(parser):
    parser.add_argument("--tokenizer", required=True, metavar="DIR",
                        help="the target's tokenizer folder (its chat template is used; a target folder works)")
    parser.add_argument("--data", required=True, metavar="IN",
                        help="conversations: .jsonl/.json/.parquet/save_to_disk folder, or hf:OWNER/NAME[:SPLIT[:N]]")
    parser.add_argument("--out", required=True, metavar="OUT.jsonl", help="output JSON Lines (appears when complete)")
    parser.add_argument("--max-length", type=int, default=None, metavar="L",
                        help="rows longer than L tokens are dropped and counted (see --truncate)")
    parser.add_argument("--truncate", action="store_true",
                        help="with --max-length: cut long rows to L tokens instead of dropping them (a row whose "
                             "prompt alone fills L is still dropped); counted either way")
    parser.add_argument("--all-turns", action="store_true",
                        help="one row per conversation with every reply masked: SpecForge's training layout "
                             "(default: one row per reply with its history as the server sees it, speculators' "
                             "layout = one server request). Accept lengths are the same on a prefix-stable template")
    add_chat_template_arguments(parser)
    parser.add_argument("--on-error", choices=["raise", "skip"], default="raise",
                        help="a bad record: stop with one line (default) or skip and count it")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="the first N records only")
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")


def run(args) -> int:
    from workbench.core.files import write_json
    from workbench.load.prepare import prepare

    kwargs = chat_template_kwargs(args.chat_template_kwargs)
    res = prepare(args.tokenizer, args.data, args.out, max_length=args.max_length, all_turns=args.all_turns,
                  too_long="truncate" if args.truncate else "drop", chat_template_kwargs=kwargs,
                  chat_template=args.chat_template, on_error=args.on_error, limit=args.limit)
    print(res.summary())
    if args.json:
        write_json(args.json, res.to_dict())
    return 1 if res.skipped else 0
