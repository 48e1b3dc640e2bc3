"""`workbench inspect PATH`: describe, validate and summarise a draft's training data.

    $ workbench inspect data/demo/val.jsonl --tokenizer data/demo/target --preview 0

Exit codes: 0 every row valid, 1 some rows invalid (each problem printed as ``file:line: field: ...``),
2 unusable input (missing file, empty file, not JSON Lines, not a dataset).
"""

from __future__ import annotations

import json

NAME = "inspect"
HELP = "describe, validate and summarise training data (JSONL[.gz], Parquet, save_to_disk folder)"


def add_arguments(parser):
    parser.add_argument("path", help="a .jsonl / .jsonl.gz / .json / .parquet file, a datasets.save_to_disk folder or "
                                     "hf:OWNER/NAME[:SPLIT[:N]]: tokenised rows, conversations or prompts")
    parser.add_argument("--tokenizer", metavar="DIR", help="local tokenizer folder: checks ids < vocab size, decodes "
                                                           "--preview; conversations: tokenised with its chat template "
                                                           "(turns, mask method, template shown)")
    parser.add_argument("--chat-template", default=None, metavar="NAME|FILE",
                        help="conversations: a named template of the tokenizer or a .jinja file instead of its default")
    parser.add_argument("--vocab-size", type=int, metavar="V", help="check ids < V without a tokenizer")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument("--preview", type=int, metavar="ROW", help="also show row ROW (0-based) decoded, prompt vs response")
    parser.add_argument("--html", metavar="FILE", help="with --preview: also write the preview as an HTML page")
    parser.add_argument("--max-problems", type=int, default=20, metavar="N", help="print at most N problems (default 20)")
    parser.add_argument("--first-error", action="store_true", help="stop at the first bad row")
    parser.add_argument("--limit", type=int, metavar="N", help="only look at the first N rows")


def run(args) -> int:
    from workbench import rows as data
    from workbench.core.errors import WorkbenchError

    if args.html and args.preview is None:
        raise WorkbenchError("--html needs --preview ROW (the row to render)")
    from workbench.rows.conversations import sniff

    chat = None
    if sniff(args.path) in ("chat", "prompts"):           # conversations: turns, template, mask method
        from workbench.load.chat import chat_dataset, describe_conversations

        chat = describe_conversations(args.path, args.tokenizer, limit=args.limit,
                                      chat_template=args.chat_template)
        if args.tokenizer is None or sniff(args.path) == "prompts":
            print(json.dumps({"conversations": chat}) if args.json else chat)
            return 0
        if not args.json:
            print(chat + "\n")
        ds = chat_dataset(args.path, args.tokenizer, vocab_size=args.vocab_size, chat_template=args.chat_template)
    else:
        ds = data.load(args.path, tokenizer=args.tokenizer, vocab_size=args.vocab_size)
    ins = ds.inspect(max_problems=max(args.max_problems, 0), first_error=args.first_error, limit=args.limit)
    if args.json:
        doc = ins.to_dict()
        if chat:
            doc["conversations"] = chat
        if args.preview is not None:
            pv = _preview(ds, args)
            doc["preview"] = {"row": pv.row, "where": pv.where, "text": pv.text}
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(ins)
        if args.preview is not None:
            print()
            print(_preview(ds, args).text)
            if args.html:
                print(f"preview written to {args.html}")
    return 0 if ins.validation.ok else 1


def _preview(ds, args):
    from workbench import rows as data

    pv = ds.preview(args.preview)
    if args.html:
        data.write_html(pv, args.html)
    return pv
