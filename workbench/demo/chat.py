"""The demo's chat data: a chat template in two variants, ``val-chat.jsonl`` and an MT-bench-style ``questions.jsonl``.

    >>> "{% generation %}" in TAGGED and "{% generation %}" not in PLAIN
    True
    >>> from jinja2 import Template
    >>> print(Template(PLAIN).render(messages=[{"role": "user", "content": "x = 1"}], add_generation_prompt=True))
    ### User:
    x = 1
    <BLANKLINE>
    ### Assistant:
    <BLANKLINE>

The demo tokenizer knows one special token (``<|endoftext|>``), so the roles are plain-text markers
(``### User:`` ...). Each turn after the first starts with a blank line and nothing follows a reply, so a reply
is never merged with the tokens around it: both variants are prefix-stable on the demo's replies (stripped text,
as a chat client stores them). There is no end-of-turn token: the demo target was never taught one, so a reply
ends after ``max_new_tokens`` (or at the target's own EOS).

- ``default`` (:data:`TAGGED`): the reply inside ``{% generation %}`` tags, so the loss mask comes from the
  template (mask method ``generation``);
- ``plain`` (:data:`PLAIN`): the same text without the tags (``additional_chat_templates/plain.jinja``; pass
  ``--chat-template plain``): the mask comes from speculators' per-turn prefix method (``prefix``).

``val-chat.jsonl`` holds one conversation per ``val.jsonl`` prompt (the prompt decoded to text as the user
turn) whose reply is the target's own greedy answer to the chat-rendered prompt, written through
:func:`workbench.live.chat_regen.regenerate_chats` as any user's regeneration (replies stop at EOS or after the
demo's response length). ``questions.jsonl`` is MT-bench's ``question.jsonl`` layout (``question_id``,
``category``, two ``turns``) over other val prompts: ``workbench regenerate`` then ``workbench accept`` measure
on it (docs/data.md).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from workbench.core.files import atomic_write
from workbench.core.sampling import Sampling
from workbench.live.chat_regen import answer_text, regenerate_chats

CHAT = "val-chat.jsonl"
QUESTIONS = "questions.jsonl"

_TURN = ("{%- for m in messages -%}{%- if not loop.first %}{{ '\\n\\n' }}{% endif -%}"
         "{%- if m.role == 'assistant' -%}### Assistant:{{ '\\n' }}REPLY"
         "{%- else -%}### {{ m.role | capitalize }}:{{ '\\n' }}{{ m.content }}{%- endif -%}{%- endfor -%}"
         "{%- if add_generation_prompt %}{{ '\\n\\n' if messages else '' }}### Assistant:{{ '\\n' }}{% endif -%}")
TAGGED = _TURN.replace("REPLY", "{% generation %}{{ m.content }}{% endgeneration %}")
PLAIN = _TURN.replace("REPLY", "{{ m.content }}")
TEMPLATES = {"default": TAGGED, "plain": PLAIN}   # saved: chat_template.jinja, additional_chat_templates/plain.jinja


def chat_prompts(tokenizer, prompts: list[tuple]) -> list[str]:
    """Each ``(source, prompt ids, ...)`` of the demo's prompts as user text (decoded, stripped)."""
    return [tokenizer.decode(p[1], skip_special_tokens=True).strip() for p in prompts]


def write_chat_files(target, out: Path, val_prompts: list[tuple], *, response_len: int, n_questions: int) -> dict:
    """Write ``val-chat.jsonl`` and ``questions.jsonl`` into ``out``; returns what the manifest records.

    The replies come from :func:`regenerate_chats` (HF target, greedy, ``response_len`` new tokens at most,
    EOS stopping, as a chat client asks); a reply that is empty once stripped is left out and counted.
    """
    tok = target.tokenizer
    texts = chat_prompts(tok, val_prompts)
    n_empty = 0
    with tempfile.TemporaryDirectory(dir=out) as work:        # the prompts and the regenerated rows
        prompts, replies = Path(work) / "prompts.jsonl", Path(work) / "replies.jsonl"
        prompts.write_text("".join(json.dumps({"id": f"val-{i}", "prompt": text, "source": source}) + "\n"
                                   for i, ((source, *_), text) in enumerate(zip(val_prompts, texts))), encoding="utf-8")
        regenerate_chats(target, prompts, replies, max_new_tokens=response_len, sampling=Sampling(), progress=False)
        with open(replies, encoding="utf-8") as f, atomic_write(out / CHAT) as g:
            for line in f:
                row = json.loads(line)
                reply, i = answer_text(tok, row), int(row["prepared"]["record"])
                if not reply:
                    n_empty += 1
                    continue
                g.write(json.dumps({"id": f"val-{i}", "source": row["source"], "messages": [
                    {"role": "user", "content": texts[i]}, {"role": "assistant", "content": reply}]}) + "\n")
    n_q = min(n_questions, len(texts) // 2)
    with atomic_write(out / QUESTIONS) as f:
        for q in range(n_q):
            a, b = q, n_q + q                      # sources alternate: code and prose questions, both turns
            f.write(json.dumps({"question_id": 81 + q, "category": val_prompts[a][0], "turns": [texts[a], texts[b]]})
                    + "\n")
    return {"conversations": len(texts) - n_empty, "empty_replies_left_out": n_empty, "questions": n_q,
            "turns_per_question": 2, "templates": {k: f"{'with' if k == 'default' else 'without'} generation tags"
                                                   for k in TEMPLATES},
            "max_new_tokens": response_len}


__all__ = ["TAGGED", "PLAIN", "TEMPLATES", "CHAT", "QUESTIONS", "chat_prompts", "write_chat_files"]
