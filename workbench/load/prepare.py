"""``workbench prepare``: conversations → canonical tokenised rows in a file (SpecForge's prepare step).

    >>> # res = prepare("data/target", "chats.jsonl", "chats-rows.jsonl", max_length=4096)
    >>> # print(res.summary())

Tokenising is :mod:`workbench.load.chat` (the target's chat template, the generation-tag or per-turn prefix
mask, per-turn or all-turns rows). Safe to interrupt: rows go to ``OUT.part`` (flushed and fsynced every
``flush_every`` records) beside ``OUT.part.json`` naming the settings and the input; a re-run with the same
settings redoes the last record it had started and goes on; at the end ``OUT.part`` becomes ``OUT`` in one
step, so ``OUT`` exists only complete. An ``OUT`` that exists already is left as it is (delete it to redo).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, input_fingerprint, write_json
from workbench.load.chat import ChatTemplate, Tally, chat_rows
from workbench.rows import conversations


@dataclass
class PrepareResult:
    """What a prepare run did, per source."""

    out: str
    settings: dict
    tally: Tally = field(default_factory=Tally)
    n_rows: int = 0
    n_resumed: int = 0
    skipped: dict = field(default_factory=dict)            # reason -> [count, first where]
    complete: bool = False

    def to_dict(self) -> dict:
        return {"out": self.out, "complete": self.complete, "settings": self.settings, "rows": self.n_rows,
                "resumed_rows": self.n_resumed, "by_source": self.tally.sources, "mask_methods": dict(self.tally.methods),
                "long_rows": dict(self.tally.dropped), "first_long_row": self.tally.first,
                "skipped": {k: v[0] for k, v in self.skipped.items()}, "notices": list(self.tally.notices.values())}

    def summary(self) -> str:
        st = self.settings
        lines = [f"prepare: {self.out}: {self.n_rows} rows ({st['layout']}; {st['template']})"
                 + (f", {self.n_resumed} from an interrupted run" if self.n_resumed else "")
                 + ("" if self.complete else " [incomplete: re-run to resume]")]
        lines.append("  mask method: " + (", ".join(f"{k} ({n} rows)" for k, n in self.tally.methods.items()) or "-"))
        lines.append(f"  {'source':<20} {'records':>8} {'replies':>8} {'rows':>8} {'tokens':>10}")
        for src in sorted(self.tally.sources):
            s = self.tally.sources[src]
            lines.append(f"  {src:<20} {s['records']:>8} {s['replies']:>8} {s['rows']:>8} {s['tokens']:>10}")
        for k, n in self.tally.dropped.items():
            lines.append(f"  {n} rows {k} (first: {self.tally.first[k]})")
        for k, (n, first) in self.skipped.items():
            lines.append(f"  skipped {n} records: {k} (first: {first})")
        lines.extend(f"  notice: {n}" for n in self.tally.notices.values())
        return "\n".join(lines)


def _resume(part: str) -> tuple[list[str], int]:
    """Lines of ``part`` whose record is complete, and the record to restart from (the last one begun)."""
    if not os.path.exists(part):
        return [], 0
    with open(part, encoding="utf-8") as f:
        data = f.read()
    lines = [ln for ln in data[:data.rfind("\n") + 1].splitlines() if ln.strip()]
    recs = []
    for n, ln in enumerate(lines, 1):
        try:
            recs.append(int(json.loads(ln)["prepared"]["record"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise WorkbenchError(f"{part}:{n}: not a row of this command; delete {part} to start over") from None
    last = max(recs, default=-1)
    keep = [ln for ln, r in zip(lines, recs) if r < last]
    return keep, max(last, 0)


def prepare(tokenizer, data, out, *, max_length: int | None = None, all_turns: bool = False,
            too_long: str = "drop", chat_template_kwargs: dict | None = None, on_error: str = "raise",
            flush_every: int = 256, limit: int | None = None, chat_template: str | None = None) -> PrepareResult:
    """Tokenise the conversations of ``data`` (path or ``hf:`` name) into ``out`` (JSON Lines); see the module
    docstring. ``on_error="skip"`` counts bad records (first one named) instead of stopping. ``chat_template``: a
    named template of the tokenizer or a ``.jinja`` file instead of its default (``--chat-template``)."""
    if on_error not in ("raise", "skip"):
        raise WorkbenchError(f"on_error={on_error!r}: expected 'raise' or 'skip'")
    if max_length is not None and int(max_length) < 2:
        raise WorkbenchError(f"--max-length {max_length}: expected at least 2 tokens")
    out = os.fspath(out)
    if os.path.abspath(os.fspath(data)) == os.path.abspath(out):
        raise WorkbenchError(f"--out {out}: the same file as --data (expected a new file)")
    tpl = ChatTemplate(tokenizer, dict(chat_template_kwargs or {}), template=chat_template)
    settings = {"template": tpl.describe(), "template_sha256": tpl.sha256, "layout": "all-turns" if all_turns
                else "per-turn", "max_length": max_length, "too_long": too_long, "kwargs": tpl.kwargs,
                "limit": limit}
    res = PrepareResult(out, settings)
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            res.n_rows = sum(1 for ln in f if ln.strip())
        res.complete = True
        return res
    part, state = out + ".part", out + ".part.json"
    ident = {"version": 1, "settings": settings, "data": input_fingerprint(data)}
    if os.path.exists(state):
        with open(state, encoding="utf-8") as f:
            found = json.load(f)
        if found != json.loads(json.dumps(ident)):
            raise WorkbenchError(f"the unfinished run in {part} used other settings or another --data; use the same "
                                 f"ones to resume, or delete {part} and {state} to start over")
    else:
        if os.path.exists(part):                        # a part file without its settings: not ours to trust
            os.remove(part)
        write_json(state, ident)
    keep, start = _resume(part)
    with atomic_write(part) as f:                       # the part file without the last, maybe torn, record
        f.write("".join(ln + "\n" for ln in keep))
    res.n_resumed = res.n_rows = len(keep)
    file = os.path.basename(os.fspath(data).rstrip("/"))

    def records():
        for conv in conversations.read(data, start=start, on_error=on_error, skipped=res.skipped):
            if limit is not None and conv.row >= int(limit):
                return
            yield conv

    with open(part, "a", encoding="utf-8") as f:
        n = 0
        for conv in records():
            try:
                lines = [json.dumps(r, separators=(",", ":")) + "\n" for r in
                         chat_rows([conv], tpl, all_turns=all_turns, max_length=max_length, too_long=too_long,
                                   file=file, tally=res.tally)]
            except WorkbenchError as e:
                if on_error == "raise":
                    raise
                res.skipped.setdefault("bad record", [0, str(e)])[0] += 1
                continue
            f.write("".join(lines))
            res.n_rows += len(lines)
            n += 1
            if n % int(flush_every) == 0:
                f.flush()
                os.fsync(f.fileno())
    os.replace(part, out)
    os.remove(state)
    res.complete = True
    return res


__all__ = ["prepare", "PrepareResult"]
