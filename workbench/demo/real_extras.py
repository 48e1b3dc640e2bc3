"""The real demo's two extra data files: ``val-foreign.jsonl`` (text the target did not write) and
``val-chat.jsonl`` (the held-out rows as conversations), written from what the build already has.

    >>> # info = write_extras("data/demo-real", humaneval_gz)     # seconds: tokenising only, no model

- ``val-foreign.jsonl``: the held-out HumanEval problems (``HumanEval/0``, ``/10``, ...) with their canonical
  solutions as the assistant's reply, tokenised through the target's chat template by
  :func:`workbench.load.prepare.prepare` (``workbench prepare``): the same prompts as ``val.jsonl``'s code rows,
  replies the target did not write (notebook 01's "Data the target did not write").
- ``val-chat.jsonl``: every held-out record of ``prompts-val.jsonl`` as a conversation (OpenAI ``messages``):
  its user turns, and as replies the target's own greedy answers from ``val.jsonl`` decoded to text
  (:func:`workbench.live.chat_regen.answer_text`, what a chat client keeps). ``workbench prepare`` on it gives
  ``val.jsonl``'s rows back, up to re-tokenisation of the decoded text (notebook 01's conversations section).

An older build without them gets them on its next ``workbench demo --size real`` (no retraining: the files do
not change the drafts or the story).
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write
from workbench.live.chat_regen import answer_text
from workbench.load.prepare import prepare
from workbench.rows.dataset import load, load_tokenizer

FOREIGN = "val-foreign.jsonl"
CHAT = "val-chat.jsonl"
EXTRAS = (FOREIGN, CHAT)


def solution_records(humaneval_gz, ids) -> list[dict]:
    """HumanEval problems ``ids`` as conversations whose reply is the canonical solution in a code block."""
    want, out = set(ids), []
    with gzip.open(humaneval_gz, "rt", encoding="utf-8") as f:
        for line in f:
            p = json.loads(line) if line.strip() else None
            if p and p["task_id"] in want:
                out.append({"id": p["task_id"], "source": "code", "messages": [
                    {"role": "user", "content": p["prompt"]},
                    {"role": "assistant", "content": f"```python\n{p['prompt']}{p['canonical_solution']}```"}]})
    return out


def conversations(prompt_records: list[dict], rows: list[dict], tokenizer) -> list[dict]:
    """``prompt_records`` (``prompt`` or ``turns``) as conversations whose replies are ``rows``' responses, matched by
    ``prepared.record`` and ``generation.turn``; a record missing a reply is cut before that turn."""
    replies = {}
    for r in rows:
        prep, gen = r.get("prepared") or {}, r.get("generation") or {}
        if "record" in prep:
            replies[(int(prep["record"]), int(gen.get("turn", 0)))] = answer_text(tokenizer, r)
    out = []
    for i, rec in enumerate(prompt_records):
        asks = rec.get("turns") or [rec.get("prompt")]
        messages = []
        for t, ask in enumerate(asks):
            reply = replies.get((i, t))
            if not ask or not reply:
                break
            messages += [{"role": "user", "content": ask}, {"role": "assistant", "content": reply}]
        if messages:
            out.append({"id": str(rec.get("id", rec.get("question_id", i))), "source": rec.get("source", "code"),
                        "messages": messages})
    return out


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def write_extras(folder, humaneval_gz, tokenizer=None) -> dict:
    """Write whichever of :data:`EXTRAS` ``folder`` lacks (atomically); returns what the manifest records."""
    folder = Path(folder)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(folder / "tokenizer")
    val_prompts = _jsonl(folder / "prompts-val.jsonl")
    info = {}
    if not (folder / FOREIGN).is_file():
        recs = solution_records(humaneval_gz, [r["id"] for r in val_prompts if r.get("source") == "code"])
        if not recs:
            raise WorkbenchError(f"{humaneval_gz}: none of prompts-val.jsonl's HumanEval ids are in it")
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src = Path(tmp) / "solutions-val.jsonl"
            src.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
            prepare(tokenizer, src, folder / FOREIGN)
    info[FOREIGN] = {"rows": sum(1 for _ in open(folder / FOREIGN, encoding="utf-8")),
                     "what": "held-out HumanEval problems, canonical solutions as replies (text the target did not "
                             "write), tokenised by `workbench prepare`"}
    if not (folder / CHAT).is_file():
        convs = conversations(val_prompts, list(load(folder / "val.jsonl").rows()), tokenizer)
        with atomic_write(folder / CHAT) as f:
            f.write("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs))
    info[CHAT] = {"conversations": sum(1 for _ in open(folder / CHAT, encoding="utf-8")),
                  "what": "prompts-val.jsonl's records as conversations, the target's greedy replies from val.jsonl "
                          "as text"}
    return info


__all__ = ["FOREIGN", "CHAT", "EXTRAS", "solution_records", "conversations", "write_extras"]
