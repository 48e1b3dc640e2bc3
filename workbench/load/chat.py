"""Conversations → canonical rows, tokenised with the target's own chat template (``apply_chat_template``).

    >>> # rows = list(chat_rows(conversations.read("chats.jsonl"), ChatTemplate(tokenizer)))
    >>> # ds = chat_dataset("chats.jsonl", tokenizer)          # what accept/diagnose/tune/inspect read
    >>> has_generation_tags("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}")
    True

Tokenising: ``tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)`` only; the template
already writes BOS where it wants one, and transformers tokenises its text without adding special tokens, so
BOS is never added twice (a row that starts with two BOS ids is refused: the tokenizer's template and its
post-processor both add one).

The loss mask covers the assistant's replies, found in this order (``shared/chat-data.md``):

1. ``generation``: the template's ``{% generation %}`` mask (``return_assistant_tokens_mask=True``), when the
   template has the tags and the mask over the reply is not all zero;
2. ``prefix``: speculators' per-turn method: render ``conv[:j]`` with the generation prompt and ``conv[:j+1]``
   without it; the first must be a token prefix of the second, and the difference is the reply;
3. otherwise a one-line error naming the file, line and turn (a prefix-unstable template).

Layouts: by default one row per assistant turn (``per-turn``: the reply and its history exactly as the server
sees it, ``conv[:j]`` with the generation prompt: speculators' layout, one server request); ``all_turns`` writes
the whole conversation with every reply masked (SpecForge's training layout). The decode path restarts at each
reply of an all-turns row (``stats.counts.decode_path``), so both layouts give the same accept lengths on a
prefix-stable template. Qwen3's template strips earlier reasoning and moves its empty think block, so a whole
conversation is not prefix-stable there: all-turns rows are refused, per-turn rows work.

Every row carries ``prepared``: the template's sha256 (first 16 hex digits), the mask method, the layout, the
turn (index of the reply in the messages), the source file and line. ``generation`` passes through from the
data (who wrote the reply); ``source`` comes from the data or the file name.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from dataclasses import dataclass, field

from workbench import rows as rows_mod
from workbench.core.errors import WorkbenchError
from workbench.core.files import is_path
from workbench.rows import conversations

GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")
EMPTY_THINK = "<think>\n\n</think>"


def has_generation_tags(template: str) -> bool:
    """Does the template wrap assistant turns in ``{% generation %}`` ... ``{% endgeneration %}``?"""
    return bool(GENERATION_TAG.search(template or ""))


def template_name(text: str) -> str:
    """A family guess for summaries: llama3, qwen3, chatml or custom."""
    if "<|start_header_id|>" in text:
        return "llama3"
    if "<|im_start|>" in text:
        return "qwen3" if "<think>" in text else "chatml"
    return "custom"


def named_templates(tokenizer) -> dict:
    """``{name: template text}`` of the tokenizer's chat templates (a single one is named ``default``)."""
    found = getattr(tokenizer, "chat_template", None)
    return dict(found) if isinstance(found, dict) else ({"default": found} if isinstance(found, str) else {})


def pick_template(tokenizer, template: str | None = None, where: str = "tokenizer") -> tuple[str, str]:
    """(template text, its label): the tokenizer's default template, one of its named templates
    (``additional_chat_templates/NAME.jinja``) or a ``.jinja`` file, as SGLang's ``--chat-template`` takes it.

        >>> class Tok: chat_template = {"default": "A", "plain": "B"}
        >>> pick_template(Tok()), pick_template(Tok(), "plain")
        (('A', 'default'), ('B', 'plain'))
    """
    named = named_templates(tokenizer)
    if template is not None and template in named:
        return named[template], template
    if template is not None:
        import os

        if os.path.isfile(template):
            with open(template, encoding="utf-8") as f:
                return f.read(), os.path.basename(template)
        raise WorkbenchError(f"--chat-template {template}: neither a template of {where} (it has: "
                             f"{', '.join(named) or 'none'}) nor a .jinja file")
    t = named.get("default") or next(iter(named.values()), None)
    if not isinstance(t, str) or not t.strip():
        raise WorkbenchError(f"{where}: the tokenizer has no chat template (expected chat_template in "
                             f"tokenizer_config.json or chat_template.jinja; set tokenizer.chat_template to "
                             f"the target's template, or pass --chat-template FILE.jinja)")
    return t, "default"


def template_names(tokenizer) -> list[str]:
    """The names of the tokenizer's chat templates (``default`` first), [] when it has none.

        >>> class Tok: chat_template = {"plain": "B", "default": "A"}
        >>> template_names(Tok())
        ['default', 'plain']
    """
    if is_path(tokenizer):
        tokenizer = rows_mod.load_tokenizer(tokenizer)
    return sorted(named_templates(tokenizer), key=lambda n: (n != "default", n))


@dataclass
class ChatTemplate:
    """The target's tokenizer and its chat template; ``kwargs`` go to the template (``enable_thinking``, ...);
    ``template``: a named template of the tokenizer or a ``.jinja`` file instead of its default
    (:func:`pick_template`)."""

    tokenizer: object
    kwargs: dict = field(default_factory=dict)
    where: str = "tokenizer"
    template: str | None = None

    def __post_init__(self):
        if is_path(self.tokenizer):
            self.where = str(self.tokenizer)
            self.tokenizer = rows_mod.load_tokenizer(self.tokenizer)
        self.text, self.label = pick_template(self.tokenizer, self.template, self.where)
        self.sha256 = hashlib.sha256(self.text.encode()).hexdigest()[:16]
        self.tagged = has_generation_tags(self.text)
        self.name = template_name(self.text)
        self.bos = getattr(self.tokenizer, "bos_token_id", None)

    def render(self, messages, tools, *, gen: bool, mask: bool = False, where: str = "", turn: int = 0):
        """(ids, assistant mask or None) of ``messages`` rendered and tokenised by the template."""
        try:
            out = self.tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=True, return_dict=True, add_generation_prompt=gen,
                return_assistant_tokens_mask=mask, chat_template=self.text, **self.kwargs)
        except Exception as e:               # jinja's raise_exception, TemplateError, TypeError: many types
            why = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            raise WorkbenchError(f"{where}: turn {turn}: the chat template fails on it ({type(e).__name__}: {why})") from None
        ids = [int(x) for x in out["input_ids"]]
        if self.bos is not None and ids[:2] == [self.bos, self.bos]:
            raise WorkbenchError(f"{where}: turn {turn}: the rendered row starts with two BOS tokens (the template "
                                 f"writes one and something adds another: expected one)")
        return ids, ([int(x) for x in out["assistant_masks"]] if mask else None)

    def describe(self) -> str:
        return (f"chat template {self.name}{'' if self.label == 'default' else f' ({self.label})'} sha256 {self.sha256} "
                f"({'with' if self.tagged else 'without'} generation tags"
                + (f"; kwargs {self.kwargs}" if self.kwargs else "") + ")")


def _unstable(conv, j: int, what: str) -> WorkbenchError:
    return WorkbenchError(f"{conv.where}: turn {j}: prefix-unstable chat template: {what} (the prefix method "
                          f"cannot find the reply and the template has no usable generation tags)")


def turn_row(conv, j: int, tpl: ChatTemplate) -> tuple[list[int], list[int], str]:
    """(ids, mask, method) of the per-turn row of reply ``j``: ``conv[:j+1]``, the mask on reply ``j`` only."""
    a, _ = tpl.render(conv.messages[:j], conv.tools, gen=True, where=conv.where, turn=j)
    b, gm = tpl.render(conv.messages[:j + 1], conv.tools, gen=False, mask=tpl.tagged, where=conv.where, turn=j)
    if b[:len(a)] != a:
        raise _unstable(conv, j, f"the history with the generation prompt ({len(a)} tokens) is not a token prefix "
                                 f"of the history with the reply ({len(b)} tokens)")
    if gm is not None and any(gm[len(a):]):
        return b, [0] * len(a) + gm[len(a):], "generation"
    if len(b) == len(a):
        raise _unstable(conv, j, "the reply renders no tokens")
    return b, [0] * len(a) + [1] * (len(b) - len(a)), "prefix"


def all_turns_row(conv, tpl: ChatTemplate) -> tuple[list[int], list[int], str]:
    """(ids, mask, method) of the whole conversation (up to its last reply) with every reply masked."""
    reps = conv.replies
    msgs = conv.messages[:reps[-1] + 1]
    ids, gm = tpl.render(msgs, conv.tools, gen=False, mask=tpl.tagged, where=conv.where, turn=reps[-1])
    if gm is not None and any(gm):
        return ids, gm, "generation"
    mask = [0] * len(ids)
    for j in reps:
        a, _ = tpl.render(conv.messages[:j], conv.tools, gen=True, where=conv.where, turn=j)
        b, _ = tpl.render(conv.messages[:j + 1], conv.tools, gen=False, where=conv.where, turn=j)
        if b[:len(a)] != a or ids[:len(b)] != b:
            raise _unstable(conv, j, "the turn renders differently inside the whole conversation (Qwen3-style "
                                     "templates rewrite earlier turns; use per-turn rows, the default)")
        mask[len(a):len(b)] = [1] * (len(b) - len(a))
    return ids, mask, "prefix"


@dataclass
class Tally:
    """What tokenising a file did, per source: records, rows, tokens, mask methods, long rows, notices."""

    sources: dict = field(default_factory=dict)
    methods: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)        # reason -> rows
    first: dict = field(default_factory=dict)                # reason -> first where
    notices: dict = field(default_factory=dict)

    def add(self, src: str, n_rows: int, tokens: int, replies: int) -> None:
        s = self.sources.setdefault(src, {"records": 0, "rows": 0, "tokens": 0, "replies": 0})
        s["records"] += 1
        s["rows"] += n_rows
        s["tokens"] += tokens
        s["replies"] += replies

    def drop(self, reason: str, where: str, n: int = 1) -> None:
        self.dropped[reason] += n
        self.first.setdefault(reason, where)


def chat_rows(convs, tpl: ChatTemplate, *, all_turns: bool = False, max_length: int | None = None,
              too_long: str = "drop", file: str | None = None, tally: Tally | None = None):
    """Canonical row dicts of ``convs`` (an iterable of :class:`~workbench.rows.conversations.Conversation`).

    ``max_length``: a longer row is dropped (``too_long="drop"``, the default) or cut to ``max_length`` tokens
    (``"truncate"``; a row whose prompt alone is that long is dropped); both are counted in ``tally``.
    Prompt-only records (no reply) raise: they need the target's replies first (``workbench regenerate``).
    """
    if too_long not in ("drop", "truncate"):
        raise WorkbenchError(f"too_long={too_long!r}: expected 'drop' or 'truncate'")
    tally = tally if tally is not None else Tally()
    for conv in convs:
        if conv.prompt_only:
            raise WorkbenchError(f"{conv.where}: prompt only (no assistant reply to measure; expected a "
                                 f"conversation with replies: write the target's own with workbench regenerate "
                                 f"--data {file or 'FILE'} first)")
        made = []
        if all_turns:
            ids, mask, method = all_turns_row(conv, tpl)
            made.append((ids, mask, method, None, len(conv.replies)))
        else:
            for j in conv.replies:
                made.append((*turn_row(conv, j, tpl), j, 1))
        n_rows = tokens = 0
        for ids, mask, method, turn, n_rep in made:
            if max_length is not None and len(ids) > max_length:
                lead = mask.index(1)
                if too_long == "drop" or lead >= max_length - 1:
                    tally.drop(f"longer than --max-length {max_length}: dropped", f"{conv.where}: turn {turn}")
                    continue
                ids, mask = ids[:max_length], mask[:max_length]
                tally.drop(f"longer than --max-length {max_length}: truncated", f"{conv.where}: turn {turn}")
            s = mask.index(1)
            if EMPTY_THINK in tpl.tokenizer.decode(ids[s:s + 40]):
                tally.notices.setdefault(
                    "empty_think", f"{conv.where}: turn {turn}: the reply starts with an empty think block "
                    f"({EMPTY_THINK!r}) that the template inserted, and it is masked as reply; a server run with "
                    f"enable_thinking=False has it in the prompt instead: --chat-template-kwargs "
                    f"'{{\"enable_thinking\": false}}' renders it so")
            tally.methods[method] += 1
            row = {"input_ids": ids, "loss_mask": mask, "source": conv.source}
            if conv.id is not None:
                row["id"] = conv.id
            row.update(conv.extra)
            row["prepared"] = {"template": tpl.name, "template_sha256": tpl.sha256, "mask": method,
                               "layout": "all-turns" if all_turns else "per-turn", "turn": turn, "replies": n_rep,
                               "file": file, "where": conv.where, "record": conv.row}
            n_rows += 1
            tokens += len(ids)
            yield row
        tally.add(conv.source, n_rows, tokens, len(conv.replies))


def chat_dataset(data, tokenizer, *, vocab_size: int | None = None, all_turns: bool = False,
                 max_length: int | None = None, chat_template_kwargs: dict | None = None,
                 chat_template: str | None = None):
    """A conversation file (or ``hf:`` name) tokenised on the fly: a :class:`workbench.rows.Dataset` of its rows
    (in memory; ``workbench prepare`` writes them to a file). Prompt-only files raise (regenerate them first).
    ``chat_template``: a named template of the tokenizer or a ``.jinja`` file (default: its default template)."""
    tpl = ChatTemplate(tokenizer, dict(chat_template_kwargs or {}), template=chat_template)
    tally = Tally()
    rows = list(chat_rows(conversations.read(data), tpl, all_turns=all_turns, max_length=max_length,
                          file=str(data), tally=tally))
    if not rows:
        raise WorkbenchError(f"{data}: no rows (every conversation was dropped: {dict(tally.dropped)})")
    ds = rows_mod.load(rows, tokenizer=tpl.tokenizer, vocab_size=vocab_size)
    ds.name, ds.default_source = f"{data} (tokenised with the {tpl.name} chat template)", str(data)
    ds.chat = {"template": tpl.describe(), "generation_tags": tpl.tagged, "methods": dict(tally.methods),
               "notices": list(tally.notices.values()),
               "dropped": dict(tally.dropped), "layout": "all-turns" if all_turns else "per-turn"}
    return ds


@dataclass(frozen=True)
class ChatFile:
    """A conversation file to read with a chosen chat template: what ``accept``/``diagnose``/``tune`` get for
    ``--data F --chat-template NAME|FILE [--chat-template-kwargs JSON]`` (:func:`workbench.load.inputs.dataset`
    tokenises it with the target's tokenizer). ``str()`` is the path, as results name their data.

        >>> str(ChatFile("chats.jsonl", template="plain"))
        'chats.jsonl'
    """

    path: str
    template: str | None = None
    kwargs: dict | None = None

    def __str__(self) -> str:
        return str(self.path)


@dataclass
class TemplateComparison:
    """One conversation file tokenised under several chat templates (:func:`compare_templates`): the datasets, and
    a table of what each template made of it (mask method, rows, masked tokens, the same rows as the first?)."""

    data: str
    datasets: dict                     # template name -> Dataset (its .chat says template, methods, notices)

    def rows_of(self, name: str) -> list:
        return [(list(r["input_ids"]), list(r["loss_mask"])) for r in self.datasets[name].rows()]

    def to_records(self) -> list[dict]:
        first = next(iter(self.datasets))
        base = self.rows_of(first)
        out = []
        for name, ds in self.datasets.items():
            rows = self.rows_of(name)
            out.append({"template": name, "generation tags": ds.chat["generation_tags"],
                        "mask method": ", ".join(f"{k} ({n} rows)" for k, n in ds.chat["methods"].items()),
                        "rows": len(rows), "masked tokens": sum(sum(m) for _, m in rows),
                        f"same rows as {first}": rows == base})
        return out

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.to_records())

    @property
    def agree(self) -> bool:
        """Do all templates give the same ids and masks?"""
        base = self.rows_of(next(iter(self.datasets)))
        return all(self.rows_of(n) == base for n in self.datasets)


def compare_templates(data, tokenizer, names=None, *, all_turns: bool = False) -> TemplateComparison:
    """``data`` (a conversation file) tokenised under each of ``names`` (default: every template of the tokenizer,
    :func:`template_names`): does a template without generation tags (prefix method) mask what one with them does?"""
    tok = rows_mod.load_tokenizer(tokenizer) if is_path(tokenizer) else tokenizer
    names = list(names) if names else template_names(tok)
    if not names:
        raise WorkbenchError(f"{tokenizer}: the tokenizer has no chat template (expected chat_template in "
                             "tokenizer_config.json or chat_template.jinja)")
    return TemplateComparison(str(data), {n: chat_dataset(data, tok, all_turns=all_turns, chat_template=n)
                                          for n in names})


def describe_conversations(data, tokenizer=None, *, all_turns: bool = False, limit: int | None = None,
                           chat_template: str | None = None, example: bool = True) -> str:
    """``workbench inspect`` of a conversation or prompt file: records, turns, roles; with the target's
    ``tokenizer``: the template used, the mask method per row and (``example``) the first row with its masked spans
    in [[ ]] (a report page shows that row as coloured tokens instead)."""
    convs = list(itertools.islice(conversations.read(data), limit))
    roles, turns = Counter(), Counter()
    for c in convs:
        roles.update(m["role"] for m in c.messages)
        turns[len(c.replies)] += 1
    n_prompt = sum(c.prompt_only for c in convs)
    lines = [f"{data}: {len(convs)} records: {len(convs) - n_prompt} conversations, {n_prompt} prompt-only"
             + (" (run workbench regenerate to get the target's replies)" if n_prompt else ""),
             "  roles: " + ", ".join(f"{k} {n}" for k, n in roles.most_common()),
             "  replies per record: " + ", ".join(f"{k}: {n}" for k, n in sorted(turns.items()))]
    if tokenizer is None:
        lines.append("  (give --tokenizer T to tokenise with the target's chat template and see the masks)")
        return "\n".join(lines)
    tpl = ChatTemplate(tokenizer, template=chat_template)
    lines.append(f"  {tpl.describe()}")
    chats = [c for c in convs if not c.prompt_only]
    if not chats:
        return "\n".join(lines)
    tally = Tally()
    rows = list(chat_rows(chats, tpl, all_turns=all_turns, file=str(data), tally=tally))
    lines.append(f"  {len(rows)} rows ({'all-turns' if all_turns else 'per-turn: one per reply'}); mask method: "
                 + ", ".join(f"{k} ({n} rows)" for k, n in tally.methods.items()))
    lines.extend(f"  notice: {n}" for n in tally.notices.values())
    if not example:
        return "\n".join(lines)
    r = rows[0]
    ids, mask = r["input_ids"], r["loss_mask"]
    text, s = [], 0
    for p in range(1, len(ids) + 1):
        if p == len(ids) or mask[p] != mask[s]:
            piece = tpl.tokenizer.decode(ids[s:p])
            text.append(f"[[{piece}]]" if mask[s] else piece)
            s = p
    lines.append(f"  row 0 ({r['prepared']['where']}, turn {r['prepared']['turn']}; [[masked]]):")
    lines.extend("    " + ln for ln in "".join(text).splitlines())
    return "\n".join(lines)


__all__ = ["describe_conversations", "ChatTemplate", "ChatFile", "named_templates", "pick_template", "template_names", "compare_templates",
           "TemplateComparison", "chat_rows", "chat_dataset", "turn_row", "all_turns_row", "Tally",
           "has_generation_tags", "template_name", "GENERATION_TAG", "EMPTY_THINK"]
