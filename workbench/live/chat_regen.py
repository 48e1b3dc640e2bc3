"""The target's own replies to conversations and prompt-only evaluation sets (MT-bench, GSM8K, HumanEval, Alpaca).

    >>> # res = regenerate_chats("data/target", "question.jsonl", "mtbench-target.jsonl", max_new_tokens=512)
    >>> # then: workbench accept --target ... --draft ... --data mtbench-target.jsonl

Each record's user turns are asked one after the other, as SpecForge's benchmark asks MT-bench: turn k is
rendered with the target's chat template (``add_generation_prompt``) after the user turns before it and the
target's OWN earlier answers (decoded to text and re-rendered, as a chat client does); the target then writes
turn k's reply, through the HF target (batched, KV cache) or a live server at ``url`` (SGLang ``/generate``, or
vLLM ``/v1/completions`` with ``server="vllm"``). A conversation
file with replies is treated the same way: its assistant turns are replaced by the target's, each after its
own new history (tool turns are kept as they are). Rounds: every record's first turn, then every second turn,
and so on, so the HF path batches across records.

Output: one canonical row per reply (per-turn, what a server request is): the prompt ids exactly as rendered and
sent, the generated ids exactly as generated (mask 1), ``generation`` (who wrote it, the settings, ``finish``,
``turn``) and ``prepared`` (template hash, layout, turn, source file and line). Replies end at EOS or after
``max_new_tokens`` (default :data:`DEFAULT_MAX_NEW_TOKENS`: a prompt has no response length to copy).

Safe to interrupt: each finished round's rows are appended to ``OUT.part`` (flushed and fsynced) next to
``OUT.part.json`` (the settings, the chat template and the input's fingerprint); a re-run with the same
settings resumes after the last complete round (the earlier answers are read back from ``OUT.part``), other
settings stop with one line naming what differs. ``OUT`` is written atomically when every round is done (one
record's rows together, in turn order); an existing ``OUT`` is reported as done.
"""

from __future__ import annotations

import json
import os
import time

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, input_fingerprint, is_path
from workbench.core.sampling import Sampling
from workbench.live.regenerate import (
    Job,
    RegenerateResult,
    check_same,
    claim_part,
    generate_jobs,
    read_part,
    server_client,
    settings_of,
    target_info,
)
from workbench.load import inputs
from workbench.load.chat import ChatTemplate
from workbench.rows import conversations, load_tokenizer

DEFAULT_MAX_NEW_TOKENS = 512


def asks(conv) -> list[int]:
    """Where the target answers: before each assistant message of a conversation, after each user message of
    a prompt-only record (message indices; the reply goes at that index)."""
    if conv.prompt_only:
        return [j + 1 for j, m in enumerate(conv.messages) if m["role"] == "user"]
    return conv.replies


def history(conv, upto: int, answers: list[str]) -> list[dict]:
    """``conv.messages[:upto]`` with its assistant turns (or, prompt-only, the slots after its user turns)
    replaced by the target's ``answers`` so far."""
    out, k = [], 0
    slots = set(asks(conv))
    for j, m in enumerate(conv.messages[:upto]):
        if conv.prompt_only:
            out.append(m)
            if j + 1 in slots and j + 1 < upto and k < len(answers):
                out.append({"role": "assistant", "content": answers[k]})
                k += 1
        elif m["role"] == "assistant":
            out.append({"role": "assistant", "content": answers[k]})
            k += 1
        else:
            out.append(m)
    return out


def answer_text(tok, row: dict) -> str:
    """The text a chat client keeps of a reply: its generated ids decoded, special tokens skipped."""
    return tok.decode(row["input_ids"][row["n_prompt_tokens"]:], skip_special_tokens=True).strip()


def _resumed(part: str, convs, tok) -> tuple[list[dict], int]:
    """The rows of the complete rounds already in ``part`` (a round: every record's turn k) and how many rounds;
    rows of an unfinished round are cut off the file."""
    rows = read_part(part)
    by_round: dict[int, list[dict]] = {}
    for r in rows:
        by_round.setdefault(int(r["generation"]["turn"]), []).append(r)
    keep, k = [], 0
    while by_round.get(k) is not None and len(by_round[k]) == sum(k < len(asks(c)) for c in convs):
        keep += by_round[k]
        k += 1
    if len(keep) < len(rows):                            # a kill mid-round: that round starts over
        with atomic_write(part) as f:
            for r in keep:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
    return keep, k


def regenerate_chats(target, data, out, *, tokenizer=None, max_new_tokens: int | None = None, url: str | None = None,
                     sampling: Sampling | None = None, ignore_eos: bool = False, batch_size: int = 8,
                     limit: int | None = None, device: str = "cpu", dtype=None, trust_remote_code: bool = False,
                     concurrency: int = 4, timeout: float = 120.0, retries: int = 3, progress: bool = True,
                     chat_template_kwargs: dict | None = None, chat_template: str | None = None, client=None,
                     server: str = "sglang") -> RegenerateResult:
    """The target's replies to every user turn of ``data`` (conversations or prompts), into ``out``; see the
    module docstring. ``tokenizer``: the one whose chat template renders the turns (default: the target's);
    ``chat_template``: a named template of it or a ``.jinja`` file instead of its default, ``chat_template_kwargs``
    its extra variables (:class:`~workbench.load.chat.ChatTemplate`); ``server``: what runs at ``url``, "sglang"
    or "vllm" (:func:`~workbench.live.regenerate.server_client`)."""
    sampling = sampling or Sampling()
    m = DEFAULT_MAX_NEW_TOKENS if max_new_tokens is None else int(max_new_tokens)
    if m < 1:
        raise WorkbenchError(f"--max-new-tokens {max_new_tokens}: expected an integer >= 1")
    out = os.fspath(out)
    if inputs.same_path(data, out):
        raise WorkbenchError(f"--out {out}: the same file as --data (expected a new file)")
    if url is not None:
        client = client or server_client(url, server, timeout=timeout, retries=retries, concurrency=concurrency)
        info = target_info(target)
        tok = tokenizer if tokenizer is not None else (load_tokenizer(target) if is_path(target) else target.tokenizer)
        settings = settings_of("server", info, sampling, m, ignore_eos, model=client.served_model() or info.name,
                               server=client.KIND.lower())
    else:
        target = inputs.target(target, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                               progress=progress)
        info = target_info(target)
        tok = tokenizer if tokenizer is not None else target.tokenizer
        settings = settings_of("target", info, sampling, m, ignore_eos)
    tpl = ChatTemplate(tok, dict(chat_template_kwargs or {}), template=chat_template)
    result = RegenerateResult(out=out, settings=settings)
    if os.path.exists(out):                              # a finished run: reported, as regenerate reports one
        rows = read_part(out, repair=False)
        if rows:
            check_same(rows[0].get("generation") or {}, settings, out, "choose another --out, or delete it to regenerate")
        for r in rows:
            result.add(r)
        result.n_resumed, result.complete = len(rows), True
        return result
    convs = [c for c in conversations.read(data) if limit is None or c.row < int(limit)]
    ident = {"version": 1, "settings": settings, "data": input_fingerprint(data),
             "chat_template": {"sha256": tpl.sha256, "kwargs": tpl.kwargs}, "limit": limit}
    part, _ = claim_part(out, ident)
    done, k0 = _resumed(part, convs, tok)
    answers: dict[int, list[str]] = {c.row: [] for c in convs}
    for r in done:                                       # in round order: each record's answers so far
        answers[int(r["generation"]["input_row"])].append(answer_text(tok, r))
    result.n_resumed = len(done)
    t0 = time.perf_counter()
    file = os.path.basename(os.fspath(data).rstrip("/"))
    with open(part, "a", encoding="utf-8") as f:
        for k in range(k0, max((len(asks(c)) for c in convs), default=0)):
            jobs = []
            for c in convs:
                if k < len(asks(c)):
                    j = asks(c)[k]
                    hist = history(c, j, answers[c.row])
                    j = len(hist)                            # the reply's index in the conversation as asked
                    ids, _ = tpl.render(hist, c.tools, gen=True, where=c.where, turn=j)
                    cap = m if not info.max_positions else min(m, info.max_positions - len(ids))
                    if cap < 1:
                        raise WorkbenchError(f"{c.where}: turn {j}: the prompt ({len(ids)} tokens) fills the target's "
                                             f"{info.max_positions} positions")
                    jobs.append(Job(c.row * 1000 + k, f"{c.where}: turn {j}", c.source, ids, [], [], cap,
                                    {"conv": c, "turn": j}))
            gens = generate_jobs(jobs, target=target, client=client if url is not None else None, info=info,
                                 ignore_eos=ignore_eos, sampling=sampling, batch_size=batch_size)
            for job, gen in zip(jobs, gens):
                c, j = job.record["conv"], job.record["turn"]
                row = {"input_ids": job.prompt + gen.tokens, "loss_mask": [0] * len(job.prompt) + [1] * len(gen.tokens),
                       "seq_len": len(job.prompt) + len(gen.tokens), "n_prompt_tokens": len(job.prompt),
                       "n_response_tokens": len(gen.tokens), "source": c.source}
                if c.id is not None:
                    row["id"] = c.id
                row["generation"] = {**settings, "finish": gen.finish, "input_row": c.row, "turn": k}
                row["prepared"] = {"template": tpl.name, "template_sha256": tpl.sha256, "mask": "generated",
                                   "layout": "per-turn", "turn": j, "replies": 1, "file": file, "where": c.where,
                                   "record": c.row}
                answers[c.row].append(answer_text(tok, row))
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
                result.n_new += 1
                result.tokens += len(gen.tokens)
                result.n_capped += job.max_new < m
            f.flush()                                        # a round is written whole: a re-run resumes after it
            os.fsync(f.fileno())
            result.seconds = time.perf_counter() - t0
    rows = read_part(part)
    order = {c.row: i for i, c in enumerate(convs)}
    rows.sort(key=lambda r: (order[int(r["generation"]["input_row"])], int(r["generation"]["turn"])))
    with atomic_write(out) as f:                         # OUT appears only complete, one record's rows together
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
            result.add(row)
    os.remove(part)
    os.remove(part + ".json")
    result.seconds = time.perf_counter() - t0
    result.complete = True
    return result


__all__ = ["regenerate_chats", "answer_text", "asks", "history", "DEFAULT_MAX_NEW_TOKENS"]
