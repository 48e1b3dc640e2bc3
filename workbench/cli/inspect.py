"""`workbench inspect PATH`: describe, validate and summarise a draft's training data, or name who trained a draft.

    $ workbench inspect data/demo/val.jsonl --tokenizer data/demo/target --preview 0
    $ workbench inspect data/demo-real/draft-modelopt --target data/demo-real/target     # a draft folder

Exit codes: 0 every row valid, 1 some rows invalid (each problem printed as ``file:line: field: ...``),
2 unusable input (missing file, empty file, not JSON Lines, not a dataset).
"""

from __future__ import annotations

import json

NAME = "inspect"
HELP = ("describe, validate and summarise training data (JSONL[.gz], Parquet, save_to_disk folder); for a draft "
        "folder: its trainer, format, id convention and trained taps")


def add_arguments(parser):
    parser.add_argument("path", help="a .jsonl / .jsonl.gz / .json / .parquet file, a datasets.save_to_disk folder or "
                                     "hf:OWNER/NAME[:SPLIT[:N]]: tokenised rows, conversations or prompts")
    parser.add_argument("--target", metavar="DIR", help="a draft folder: the target (its config.json is enough) "
                                                         "for the number of layers behind the trained taps")
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

    if _is_draft(args.path):
        return _draft(args)
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


def _is_draft(path) -> bool:
    from pathlib import Path

    from workbench.engines.taps import load_config
    from workbench.model.checkpoint import draft_architecture

    from workbench.engines.families import family_of

    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    raw = load_config(str(cfg), "draft config")
    return draft_architecture(raw) is not None or family_of(raw, str(cfg)) is not None


def _draft(args) -> int:
    """A draft folder: its trainer, format, id convention and trained taps (read from config.json, no weights)."""
    from pathlib import Path

    from workbench.engines.taps import load_config
    from workbench.engines.trainers import provenance

    from workbench.engines import families

    cfg = load_config(str(Path(args.path) / "config.json"), "draft config")
    fam = families.family_of(cfg, str(Path(args.path) / "config.json"))
    if fam is not None and fam.name not in ("eagle3", "eagle3.1", "p-eagle"):
        # a block drafter or MTP heads: what each engine feeds it (no EAGLE-3 trainer conventions apply)
        doc = {"path": str(args.path), "family": fam.name, "evidence": fam.evidence,
               "feeds": [f.to_dict() for f in families.feeds(cfg, args.target)]}
        pos, lines = _positions(args.path, args.target)
        doc["positions"] = pos
        print(json.dumps(doc, indent=2) if args.json else f"{args.path}\n{families.describe(cfg, args.target)}\n{lines}")
        return 0
    if args.target:
        n, where = args.target, f"target {args.target}"
    else:
        from workbench.engines.records import config_ids
        ids = next((v for v in config_ids(cfg).values() if v), None)
        n, where = ((max(ids) + 4) if ids else None), "no --target: the ids are read as written, their range unchecked"
    if n is None:
        from workbench.engines.trainers import identify
        t, evidence, version = identify(cfg)
        doc = {"trainer": t.name, "label": t.label, "version": version, "format": t.format,
               "convention": t.convention, "evidence": evidence, "ids": None, "trained_taps": None,
               "why_not": "no ids in config.json: the trainer's default depends on the target's layers (give --target)"}
        text = (f"trainer: {t.label}{' ' + version if version else ''} ({evidence})\nformat: {t.format}\n"
                f"ids: (none); {t.convention}\ntrained taps: the trainer's default: give --target for N")
    else:
        p = provenance(cfg, n)
        doc, text = p.to_dict(), p.summary() + f"\n({where})"
    doc["positions"], lines = _positions(args.path, args.target)
    if fam is not None and fam.name != "eagle3":            # EAGLE-3.1 options / P-EAGLE drafting, per engine
        doc["family"] = {"name": fam.name, "evidence": fam.evidence, "feeds": [f.to_dict() for f in families.feeds(
            cfg, args.target)] if args.target else None}
        text += "\n" + (families.describe(cfg, args.target) if args.target else
                        f"family: {fam.label} ({fam.evidence}); give --target for what each engine feeds")
    print(json.dumps({"path": str(args.path), **doc}, indent=2) if args.json else f"{args.path}\n{text}\n{lines}")
    return 0


def _positions(draft, target) -> tuple[dict, str]:
    """The draft's positions and rotary against the target's (docs/context-length.md): (JSON part, text lines)."""
    from workbench.engines.positions import findings, read
    from workbench.engines.taps import load_config

    p = read(load_config(draft, "draft config"))
    found = findings(draft, target)
    doc = {"max_position_embeddings": p["max_position_embeddings"], "max_position_embeddings_key":
           p["max_positions_key"], "rope_theta": p["rope_theta"], "rope_theta_key": p["rope_theta_key"],
           "rope_scaling": p["rope_scaling"], "findings": found}
    lines = [f"positions: max_position_embeddings {p['max_position_embeddings']}"
             f"{'' if p['max_positions_key'] else ' (defaulted)'}, rope_theta {p['rope_theta']:g}"
             f"{'' if p['rope_theta_key'] else ' (defaulted)'}, rope_scaling {p['rope_scaling'] or 'none'}"]
    lines += [f"{f['severity'].upper()} [{f['code']}] {f['message']}" + (f"\n    why: {f['why']}" if f["why"] else "")
              + (f"\n    fix: {f['fix']}" if f["fix"] else "") for f in found]
    if target is None:
        lines.append("(no --target: the rotary and the positions are not compared with the target's)")
    return doc, "\n".join(lines)
