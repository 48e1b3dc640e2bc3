"""The target's own replies to conversations and prompt-only evaluation sets (MT-bench, GSM8K, HumanEval, Alpaca).

    >>> # res = regenerate_chats("data/target", "question.jsonl", "mtbench-target.jsonl", max_new_tokens=512)
    >>> # then: workbench accept --target ... --draft ... --data mtbench-target.jsonl

Each record's user turns are asked one after the other, as SpecForge's benchmark asks MT-bench: turn k is
rendered with the target's chat template (``add_generation_prompt``) after the user turns before it and the
target's OWN earlier answers (decoded to text and re-rendered, as a chat client does); the target then writes
turn k's reply, through the HF target (batched, KV cache) or a live SGLang server (``url``). A conversation
file with replies is treated the same way: its assistant turns are replaced by the target's, each after its
own new history (tool turns are kept as they are). Rounds: every record's first turn, then every second turn,
and so on, so the HF path batches across records.

Output: one canonical row per reply (per-turn, what a server request is): the prompt ids exactly as rendered and
sent, the generated ids exactly as generated (mask 1), ``generation`` (who wrote it, the settings, ``finish``,
``turn``) and ``prepared`` (template hash, layout, turn, source file and line). Replies end at EOS or after
``max_new_tokens`` (default :data:`DEFAULT_MAX_NEW_TOKENS`: a prompt has no response length to copy). The
file is written atomically when every round is done (a killed run starts over).
"""

from __future__ import annotations

import json
import os
import time

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, is_path
from workbench.core.sampling import Sampling
from workbench.live.regenerate import (
    Job,
    RegenerateResult,
    generate_jobs,
    settings_of,
    target_info,
)
from workbench.live.sglang_live import Client
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


def regenerate_chats(target, data, out, *, tokenizer=None, max_new_tokens: int | None = None, url: str | None = None,
                     sampling: Sampling | None = None, ignore_eos: bool = False, batch_size: int = 8,
                     limit: int | None = None, device: str = "cpu", dtype=None, trust_remote_code: bool = False,
                     concurrency: int = 4, timeout: float = 120.0, retries: int = 3, progress: bool = True,
                     chat_template_kwargs: dict | None = None, client=None) -> RegenerateResult:
    """The target's replies to every user turn of ``data`` (conversations or prompts), into ``out``; see the
    module docstring. ``tokenizer``: the one whose chat template renders the turns (default: the target's)."""
    sampling = sampling or Sampling()
    m = DEFAULT_MAX_NEW_TOKENS if max_new_tokens is None else int(max_new_tokens)
    if m < 1:
        raise WorkbenchError(f"--max-new-tokens {max_new_tokens}: expected an integer >= 1")
    out = os.fspath(out)
    if os.path.exists(out):
        raise WorkbenchError(f"--out {out}: exists already (a finished run; delete it to regenerate)")
    if url is not None:
        client = client or Client(url, timeout=timeout, retries=retries, concurrency=int(concurrency))
        info = target_info(target)
        tok = tokenizer if tokenizer is not None else (load_tokenizer(target) if is_path(target) else target.tokenizer)
        settings = settings_of("server", info, sampling, m, ignore_eos)
    else:
        target = inputs.target(target, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                               progress=progress)
        info = target_info(target)
        tok = tokenizer if tokenizer is not None else target.tokenizer
        settings = settings_of("target", info, sampling, m, ignore_eos)
    tpl = ChatTemplate(tok, dict(chat_template_kwargs or {}))
    convs = [c for c in conversations.read(data) if limit is None or c.row < int(limit)]
    answers: dict[int, list[str]] = {c.row: [] for c in convs}
    made: dict[int, list[dict]] = {c.row: [] for c in convs}
    result = RegenerateResult(out=out, settings=settings)
    t0 = time.perf_counter()
    file = os.path.basename(os.fspath(data).rstrip("/"))
    for k in range(max((len(asks(c)) for c in convs), default=0)):
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
                jobs.append(Job(c.row * 1000 + k, f"{c.where}: turn {j}", c.source, ids, [], [], cap, {"conv": c, "turn": j}))
        gens = generate_jobs(jobs, target=target, client=client if url is not None else None, info=info,
                             ignore_eos=ignore_eos, sampling=sampling, batch_size=batch_size)
        for job, gen in zip(jobs, gens):
            c, j = job.record["conv"], job.record["turn"]
            answers[c.row].append(tok.decode(gen.tokens, skip_special_tokens=True).strip())
            row = {"input_ids": job.prompt + gen.tokens, "loss_mask": [0] * len(job.prompt) + [1] * len(gen.tokens),
                   "seq_len": len(job.prompt) + len(gen.tokens), "n_prompt_tokens": len(job.prompt),
                   "n_response_tokens": len(gen.tokens), "source": c.source}
            if c.id is not None:
                row["id"] = c.id
            row["generation"] = {**settings, "finish": gen.finish, "input_row": c.row, "turn": k}
            row["prepared"] = {"template": tpl.name, "template_sha256": tpl.sha256, "mask": "generated",
                               "layout": "per-turn", "turn": j, "replies": 1, "file": file, "where": c.where,
                               "record": c.row}
            made[c.row].append(row)
            result.tokens += len(gen.tokens)
            result.n_capped += job.max_new < m
    with atomic_write(out) as f:
        for c in convs:
            for row in made[c.row]:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
                result.add(row)
                result.n_new += 1
    result.seconds = time.perf_counter() - t0
    result.complete = True
    return result


__all__ = ["regenerate_chats", "asks", "history", "DEFAULT_MAX_NEW_TOKENS"]
