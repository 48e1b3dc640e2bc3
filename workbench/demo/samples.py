"""The demo's rows: prompts cut from the corpus and the target's own greedy (or sampled) continuations.

    >>> demo_row("code", [1, 2], [3], {"by": "target"})["loss_mask"]
    [0, 0, 1]

``val-foreign.jsonl`` keeps the corpus's own continuation (data the target did not write), and the
``val-T*.jsonl`` files are sampled through ``workbench.live.regenerate`` at the demo's seed.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write
from workbench.core.sampling import Sampling, sampled_name
from workbench.demo.recipe import SOURCES, encode
from workbench.live.regenerate import regenerate


def cut_prompts(texts_by_source: dict, tokenizer, n_rows: int, prompt_len: int, seed: int,
                response_len: int = 0) -> list[tuple]:
    """``n_rows`` prompts of ``prompt_len`` tokens, alternating sources: ``[(source, prompt ids,
    continuation ids), ...]``; the continuation is the next ``response_len`` tokens of the same text
    (what the text itself says after the prompt: ``val-foreign.jsonl``'s responses)."""
    rng = random.Random(seed)
    pools = {}
    span = prompt_len + response_len
    for source in SOURCES:
        windows = []
        for text in texts_by_source[source]:
            ids = encode(tokenizer, text)
            windows.extend(ids[i:i + span] for i in range(0, len(ids) - span + 1, prompt_len))
        if not windows:
            raise WorkbenchError(f"no {source} text long enough for {prompt_len}-token prompts and "
                                 f"{response_len}-token continuations in the held-out files")
        rng.shuffle(windows)
        pools[source] = windows
    rows = []
    for i in range(n_rows):
        source = SOURCES[i % len(SOURCES)]
        pool = pools[source]
        w = pool[(i // len(SOURCES)) % len(pool)]
        rows.append((source, w[:prompt_len], w[prompt_len:]))
    return rows



def greedy_continue(model, prompts, n_new: int, batch_size: int = 32):
    """The target's greedy continuation (``n_new`` tokens) of equal-length prompts.

    A full forward per new token (no KV cache): the same computation ``capture.extract`` does, so
    the responses are exactly the target's argmax at every position, as a server would produce them.
    """
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            ids = torch.tensor(prompts[i:i + batch_size], dtype=torch.long)
            start = ids.shape[1]
            for _ in range(n_new):
                nxt = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
                ids = torch.cat([ids, nxt], dim=1)
            out.extend(ids[:, start:].tolist())
    return out



def make_rows(model, prompts: list[tuple], response_len: int, generation: dict | None = None) -> list[dict]:
    """Rows in the seed schema: prompt + greedy response, loss_mask 0 on the prompt and 1 on the
    response; ``generation`` (how the responses were made, ``data.GENERATION_FIELDS``) is added to each."""
    responses = greedy_continue(model, [p[1] for p in prompts], response_len)
    return [demo_row(source, prompt, resp, generation) for (source, prompt, *_), resp in zip(prompts, responses)]



def foreign_rows(prompts: list[tuple]) -> list[dict]:
    """The same prompts with the text's own continuation as the response (``val-foreign.jsonl``): data
    the target did not write, marked ``generation: {"by": "corpus", ...}``.

        >>> foreign_rows([("code", [5, 6], [7, 8, 9])])[0]["input_ids"]
        [5, 6, 7, 8, 9]
    """
    gen = {"by": "corpus", "model": "python standard library text (the source's own continuation)"}
    return [demo_row(source, prompt, cont, gen) for source, prompt, cont in prompts]



def demo_row(source, prompt, resp, generation) -> dict:
    ids = list(prompt) + list(resp)
    row = {"input_ids": ids, "loss_mask": [0] * len(prompt) + [1] * len(resp), "seq_len": len(ids),
           "n_prompt_tokens": len(prompt), "n_response_tokens": len(resp), "source": source}
    if generation is not None:
        row["generation"] = dict(generation)
    return row



def sampled_files(target, out: Path, temperatures, seed: int) -> dict:
    """``val-T{t}.jsonl`` for each temperature: val.jsonl's prompts, responses sampled from the target
    (top_p 1, top_k -1, ``seed``) through :func:`workbench.regenerate.regenerate` (HF path, KV cache), so
    each row's ``generation`` records the settings. Returns ``{file name: seconds}``."""

    out_s = {}
    for t in temperatures:
        name = sampled_name(t)
        t0 = time.perf_counter()
        regenerate(target, out / "val.jsonl", out / name, sampling=Sampling(float(t), top_p=1.0, top_k=-1, seed=seed),
                   batch_size=32, progress=False)
        out_s[name] = round(time.perf_counter() - t0, 2)
    return out_s



def lively_rows(model, candidates: list[tuple], n_rows: int, response_len: int,
                generation: dict | None = None) -> tuple[list[tuple], list[dict], int]:
    """(prompts, rows, left out): :func:`make_rows` on the first ``n_rows`` candidates, where each row whose
    greedy response is one repeated token is replaced by the next spare candidate of the same source.

    A small target trained for minutes loops on a few prompts (``13 13 13 ...``), and which prompts depends
    on the CPU's kernels: the weights a seed trains to differ between AVX2 and AVX-512 builds. Replacing
    those rows makes the data free of them on every CPU kind; when no row is degenerate the prompts and rows
    are exactly those of :func:`make_rows`. ``left out``: how many candidates were replaced (manifest).
    """
    prompts = list(candidates[:n_rows])
    rows = make_rows(model, prompts, response_len, generation)
    spare = {}
    for c in candidates[n_rows:]:
        spare.setdefault(c[0], []).append(c)
    left_out = 0
    while True:
        bad = [i for i, r in enumerate(rows) if _one_token(r) and spare.get(prompts[i][0])]
        if not bad:
            return prompts, rows, left_out
        for i in bad:
            prompts[i] = spare[prompts[i][0]].pop(0)
        left_out += len(bad)
        for i, row in zip(bad, make_rows(model, [prompts[i] for i in bad], response_len, generation)):
            rows[i] = row


def _one_token(row) -> bool:
    return len(set(row["input_ids"][row["n_prompt_tokens"]:])) == 1


def write_jsonl(rows: list[dict], path) -> None:
    with atomic_write(path) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")



def response_counts(rows) -> dict:
    """``{target id: count}`` over the loss-masked (response) positions of ``rows``: what SpecForge counts to
    pick a reduced draft vocabulary.

        >>> response_counts([{"input_ids": [5, 7, 7, 9], "loss_mask": [0, 1, 1, 0]}])
        {7: 2}
    """
    from collections import Counter

    counts = Counter()
    for row in rows:
        counts.update(t for t, m in zip(row["input_ids"], row["loss_mask"]) if m)
    return dict(counts)
