"""Conversations and prompts as people hold them: layouts, roles, and one normalised :class:`Conversation`.

    >>> c = conversation({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]},
    ...                  0, "chats.jsonl:1", "chats")
    >>> [m["role"] for m in c.messages], c.replies, c.prompt_only
    (['user', 'assistant'], [1], False)
    >>> conversation({"question_id": 81, "category": "writing", "turns": ["Write", "Shorter"]}, 0, "q.jsonl:1",
    ...              "q").messages[1]
    {'role': 'user', 'content': 'Shorter'}
    >>> layout_of({"input_ids": [1]}), layout_of({"messages": []}), layout_of({"instruction": "x", "input": ""})
    ('tokenised', 'chat', 'prompts')

Layouts (``docs/data.md`` shows a row of each):

- chat: SpecForge raw ``conversations: [{role, content}]``, ShareGPT ``conversations: [{from, value}]``
  (human → user; gpt, chatgpt, bing, bard → assistant), OpenAI / UltraChat ``messages: [{role, content}]``;
  an optional leading ``system`` message, any number of turns, ``reasoning_content``, ``tool_calls`` and
  ``tool`` turns are kept as they are (the chat template renders them), and ``tools`` beside the messages;
- prompts (prompt-only evaluation sets): MT-bench ``turns`` (user turns asked one after the other), GSM8K
  ``question``, HumanEval / plain ``prompt``, Alpaca ``instruction`` + ``input``;
- tokenised: ``input_ids`` or an alias (:mod:`workbench.rows.dataset` reads those).

Bad input is one line naming the file, line and turn: an unknown role, an assistant turn first, an empty reply.
Tokenising with the target's chat template needs the tokenizer: :mod:`workbench.load.chat`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.rows.dataset import open_records
from workbench.rows.schema import ALIASES, ID_KEYS, Problem, short, type_name

ROLES = {"system": "system", "user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant",
         "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "model": "assistant", "tool": "tool",
         "function": "tool", "ipython": "tool", "observation": "tool"}
KEEP = ("reasoning_content", "tool_calls", "name", "tool_call_id")      # message keys passed to the template
CHAT_KEYS = ("conversations", "messages")
PROMPT_KEYS = ("turns", "instruction", "question", "prompt")


@dataclass
class Conversation:
    """One record, normalised: ``messages`` ([{role, content, ...}]) the chat template renders."""

    row: int
    where: str                          # file:line (or file:row N)
    messages: list[dict]
    source: str
    id: object = None
    tools: list | None = None
    prompt_only: bool = False           # no replies (a prompt-only evaluation set, or a chat ending in a user turn)
    extra: dict = field(default_factory=dict)    # generation and other keys carried to the rows

    @property
    def replies(self) -> list[int]:
        """Indices of the assistant messages."""
        return [j for j, m in enumerate(self.messages) if m["role"] == "assistant"]


def layout_of(rec) -> str | None:
    """"tokenised", "chat", "prompts" or None for one raw record."""
    if not isinstance(rec, dict):
        return None
    if any(rec.get(k) is not None for k in ID_KEYS):
        return "tokenised"
    if any(isinstance(rec.get(k), list) for k in CHAT_KEYS):
        return "chat"
    if any(rec.get(k) is not None for k in PROMPT_KEYS):
        return "prompts"
    return None


def sniff(source) -> str | None:
    """The layout of the first record of ``source`` (a path or a list of dicts), None when not recognised."""
    try:
        first = next(open_records(source).records(), None)
    except WorkbenchError:
        return None
    return None if first is None or isinstance(first[2], Problem) else layout_of(first[2])


def _text(v, where: str, j: int, key: str) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(p, dict) for p in v):        # OpenAI content parts: the text ones
        return "".join(str(p.get("text", "")) for p in v if p.get("type", "text") == "text")
    raise WorkbenchError(f"{where}: turn {j}: {key}: got {type_name(v)} {short(v)} (expected a string)")


def _source(rec: dict, default: str) -> str:
    for k in ("source", *ALIASES["source"], "category"):
        if isinstance(rec.get(k), str) and rec[k]:
            return rec[k]
    return default


def _prompts(rec: dict, where: str) -> list[str]:
    if rec.get("turns") is not None:
        turns = rec["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise WorkbenchError(f"{where}: turns: got {type_name(turns)} {short(turns)} (expected a list of "
                                 f"non-empty strings, MT-bench's user turns)")
        return list(turns)
    if rec.get("instruction") is not None:
        ins, inp = _text(rec["instruction"], where, 0, "instruction"), _text(rec.get("input"), where, 0, "input")
        return [ins + ("\n\n" + inp if inp.strip() else "")]
    for k in ("question", "prompt"):
        if rec.get(k) is not None:
            return [_text(rec[k], where, 0, k)]
    raise WorkbenchError(f"{where}: no prompt (expected turns, instruction, question or prompt)")


def conversation(rec, row: int, where: str, default_source: str) -> Conversation:
    """Normalise one raw record; bad input raises a one-line :class:`WorkbenchError` naming file, line, turn."""
    if isinstance(rec, Problem):
        raise WorkbenchError(str(rec))
    kind = layout_of(rec)
    extra = {k: rec[k] for k in ("generation",) if rec.get(k) is not None}
    rid = next((rec[k] for k in ("id", "question_id", "prompt_id", "task_id") if rec.get(k) is not None), None)
    src = _source(rec, default_source)
    if kind == "prompts":
        msgs = [{"role": "user", "content": t} for t in _prompts(rec, where)]
        if isinstance(rec.get("system"), str) and rec["system"]:
            msgs.insert(0, {"role": "system", "content": rec["system"]})
        return Conversation(row, where, msgs, src, rid, None, True, extra)
    if kind != "chat":
        keys = ", ".join(map(str, rec)) if isinstance(rec, dict) else type_name(rec)
        raise WorkbenchError(f"{where}: neither a conversation nor a prompt nor a tokenised row (keys: {keys}; "
                             f"expected conversations/messages, turns/question/prompt/instruction, or input_ids)")
    key = next(k for k in CHAT_KEYS if isinstance(rec.get(k), list))
    msgs = []
    for j, m in enumerate(rec[key]):
        if not isinstance(m, dict):
            raise WorkbenchError(f"{where}: turn {j}: got {type_name(m)} (expected an object with role and content)")
        role = m.get("role", m.get("from"))
        if not isinstance(role, str) or role.lower() not in ROLES:
            raise WorkbenchError(f"{where}: turn {j}: unknown role {role!r} (expected system, user, assistant or "
                                 f"tool; ShareGPT: human, gpt)")
        out = {"role": ROLES[role.lower()], "content": _text(m.get("content", m.get("value")), where, j, "content")}
        for k in KEEP:
            if m.get(k) is not None:
                out[k] = m[k]
        msgs.append(out)
    first = next((j for j, m in enumerate(msgs) if m["role"] != "system"), None)
    if first is None:
        raise WorkbenchError(f"{where}: {key}: no user or assistant turn (expected at least one user turn)")
    if msgs[first]["role"] == "assistant":
        raise WorkbenchError(f"{where}: turn {first}: an assistant turn first (expected a user turn before the "
                             f"first reply)")
    for j, m in enumerate(msgs):
        if m["role"] == "assistant" and not m["content"].strip() and not m.get("tool_calls") \
                and not str(m.get("reasoning_content") or "").strip():
            raise WorkbenchError(f"{where}: turn {j}: an empty reply (expected the assistant's text, "
                                 f"reasoning_content or tool_calls)")
    tools = rec.get("tools") if isinstance(rec.get("tools"), list) else None
    return Conversation(row, where, msgs, src, rid, tools, not any(m["role"] == "assistant" for m in msgs), extra)


def read(source, *, start: int = 0, on_error: str = "raise", skipped: dict | None = None):
    """Every record of ``source`` (a path, ``hf:`` name, list of dicts) as a :class:`Conversation`, streamed from
    record ``start``; with ``on_error="skip"`` a bad record is counted in ``skipped`` ({reason: [n, first]})."""
    ds = open_records(source)
    for row, where, rec in ds.records(start):
        try:
            yield conversation(rec, row, where, getattr(ds, "default_source", "memory"))
        except WorkbenchError as e:
            if on_error == "raise":
                raise
            if skipped is not None:
                skipped.setdefault("bad record", [0, str(e)])[0] += 1


__all__ = ["Conversation", "conversation", "layout_of", "sniff", "read", "ROLES", "CHAT_KEYS", "PROMPT_KEYS"]
