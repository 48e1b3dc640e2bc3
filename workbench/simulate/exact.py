"""The exact speculative loop: a real decode, one verify step at a time (the reference of every fast path).

    >>> # tokens, accepted = exact_decode(target, draft, prompt_ids, wiring, K=4, max_new_tokens=64)
    >>> # result = exact_simulate(target, draft, dataset, wiring, K=4)

:func:`exact_decode` drafts a chain from the draft's own KV and verifies it against the target's greedy
continuation; :func:`loop_simulate` is the decode-path counting every real loop shares (chains here, trees
in ``tree_verify.exact_tree_decode``, sampled walks in ``verify_walk.sampled_simulate``).
"""

from __future__ import annotations

import inspect

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.setting import Setting, resolve_setting
from workbench.engines.wiring import as_wirings
from workbench.load import inputs
from workbench.model import capture
from workbench.model.draft import chain_reference
from workbench.simulate.loop import decode_loop
from workbench.simulate.tree_verify import exact_tree_decode
from workbench.stats.counts import reply_starts
from workbench.stats.statistics import AcceptanceResult


def exact_decode(target, draft, prompt_ids, wiring, K: int, max_new_tokens: int) -> tuple[list[int], list[int]]:
    """Greedy chain speculative decoding; returns (generated ids, A per verify step).

        >>> # gen, A = exact_decode(target, draft, [1, 5, 9], "embed,L1,L3", K=4, max_new_tokens=32)

    Prefill the prompt (target forward with tap hooks; its argmax is the first new token x_{t+1}).
    Then repeat: the draft drafts K tokens with ``draft.chain_reference`` from the features
    h_0..h_t and the bonus token x_{t+1}; ONE target forward (KV cache) over x_{t+1}, d_1..d_K
    verifies them; the leading matches are accepted, the target's token after them is the new
    bonus, t <- t + A + 1. The last step may overshoot; output is cut to ``max_new_tokens``.
    """
    import torch

    taps, ids = capture.loop_inputs(target, wiring, draft.fc_width, prompt_ids, "exact_decode")
    if int(K) < 1 or int(max_new_tokens) < 1:
        raise WorkbenchError(f"exact_decode: expected K >= 1 and max_new_tokens >= 1 (got K={K}, "
                             f"max_new_tokens={max_new_tokens})")
    ddev, ddtype = draft.device, draft.dtype
    model, dev = target.model, target.device

    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def forward(new_ids, cache):
        with torch.no_grad(), capture.tap_hooks(model, taps, device=dev) as f:
            out = model(input_ids=torch.tensor([new_ids], device=dev), use_cache=True, **{cache_kw: cache})
            feats = torch.cat([f[t] for t in taps], dim=-1)[0]                 # [n_new, W]
        new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[0].argmax(-1), feats, new_cache

    greedy, feats, cache = forward(ids, None)
    state = {"cache": cache}
    ids.append(int(greedy[-1]))

    def step(ids, h, t):
        with torch.no_grad():
            d = [int(x) for x in chain_reference(draft, h, torch.tensor(ids, device=ddev), t, int(K)).tolist()]
        greedy, feats, state["cache"] = forward([ids[-1]] + d, state["cache"])   # positions t+1 .. t+K+1
        g = greedy.tolist()                                                      # g_{t+2} .. g_{t+K+2}
        a = 0
        while a < K and d[a] == g[a]:
            a += 1
        if a < K:                                   # drop the rejected drafts' keys: keep x_0 .. x_{t+a+1}
            state["cache"].crop(-(K - a))           # negative = remove that many (all transformers versions)
        return d[:a], g[a], feats[:a + 1]

    return decode_loop(ids, feats, step, max_new_tokens, device=ddev, dtype=ddtype)



def exact_simulate(target, draft, dataset, wiring, *, K: int | None = None, limit: int | None = None,
                   progress: bool = True, setting: Setting | None = None) -> "AcceptanceResult":
    """Decode-path acceptance from the exact loop, one sample at a time, on each sample's prompt.

        >>> # exact = exact_simulate(target, draft, ds, "embed,L1,L3", K=4, limit=20)
        >>> # tree = exact_simulate(target, draft, ds, "embed,L1,L3",
        >>> #                       setting=Setting(steps=5, eagle_topk=4, num_draft_tokens=8))
        >>> # exact.decode_path["accept_length"]

    Generates ``n_response_tokens`` greedily per sample and keeps the verify steps whose K drafted
    positions fit (t+K+1 <= T-1), which is exactly the fast decode path when the data is the target's
    greedy output; for other data it is what a server would really do on those prompts. A tree
    ``setting`` (``shape`` "tree") decodes with :func:`workbench.tree_verify.exact_tree_decode`
    (the node-by-node reference tree, one target forward over the tree with an ancestor mask, the
    greedy walk); A then counts accepted tree nodes, 0..steps.
    """
    w = as_wirings(wiring, target.n_layers)[0]
    setting = resolve_setting(K, setting).replace(estimator="decode-path")
    setting.check_simulable()

    def decode(prompt_ids, row, max_new_tokens):
        if setting.shape == "tree":
            return exact_tree_decode(target, draft, prompt_ids, w, setting.steps, setting.eagle_topk,
                                     setting.num_draft_tokens, max_new_tokens)[1]
        return exact_decode(target, draft, prompt_ids, w, setting.steps, max_new_tokens)[1]

    return loop_simulate(dataset, w, setting, decode, limit=limit, progress=progress, desc="exact",
                         who="exact_simulate")



def reply_spans(loss_mask, n_prompt: int, T: int) -> list[tuple[int, int]]:
    """[start, end) of every reply: the response after ``n_prompt`` when the mask has no later prompt, else
    each run of ones (the decode path's restarts, ``counts.reply_starts``).

        >>> reply_spans([0, 0, 1, 1, 0, 1, 1, 1], 2, 8), reply_spans(None, 2, 5)
        ([(2, 4), (5, 8)], [(2, 5)])
    """
    starts = [s for s in reply_starts([] if loss_mask is None else loss_mask, T) if s > n_prompt]
    if not starts:
        return [(n_prompt, T)]
    m = [int(x) for x in (loss_mask.tolist() if hasattr(loss_mask, "tolist") else loss_mask)]
    spans, begins = [], [n_prompt] + starts
    for s in begins:
        e = s
        while e < T and m[e]:
            e += 1
        spans.append((s, e))
    return spans



def loop_simulate(dataset, wiring, setting: Setting, decode, *, limit: int | None = None, progress: bool = True,
                  desc: str = "loop", who: str = "loop_simulate") -> "AcceptanceResult":
    """Decode-path :class:`AcceptanceResult` of a real speculative loop run on each row's prompt: the counting
    that :func:`exact_simulate` and ``verify_walk.sampled_simulate`` share.

        >>> # r = loop_simulate(ds, w, Setting(steps=4, estimator="decode-path"),
        >>> #                   lambda prompt, row, n: exact_decode(target, draft, prompt, w, 4, n)[1])

    ``decode(prompt_ids, row, max_new_tokens) -> A per verify step`` generates the row's
    ``n_response_tokens``; the verify steps whose drafted positions fit (t + S + 1 <= T - 1) are kept,
    starting at the last prompt position and jumping A + 1 each step. A row with several replies (an
    all-turns row: the loss mask falls back to 0 and rises again) decodes each reply after its own history,
    as a server does one request per reply (:func:`reply_spans`).
    """
    from tqdm.auto import tqdm

    w, S = wiring, setting.steps
    parts = []
    for i, row in enumerate(tqdm(inputs.rows(dataset, limit or None), desc=desc, unit="sample",
                                 disable=not progress)):
        ids = list(row["input_ids"])
        n_prompt = int(row.get("n_prompt_tokens", 0) or 0)
        where = row.get("_where", f"row {row.get('_row', i)}")
        if not 1 <= n_prompt < len(ids):
            raise WorkbenchError(f"{where}: n_prompt_tokens={n_prompt}: expected 1..{len(ids) - 1} (a prompt and a response)")
        T, r = len(ids), int(row.get("_row", i))
        ts, As = [], []
        for s, e in reply_spans(row.get("loss_mask"), n_prompt, T):     # each reply after its own history
            t = s - 1
            for a in decode(ids[:s], r, e - s):
                if t + S + 1 > e - 1:
                    break
                ts.append(t)
                As.append(a)
                t += a + 1
        src = str(row.get("source", "") or "")
        res = AcceptanceResult.from_arrays(w.spec, S, sample=[r] * len(ts), t=ts, accepted=As,
                                           source=[src] * len(ts), on_path=[True] * len(ts), taps=w.taps,
                                           setting=setting)
        res.samples.update(sample=np.asarray([r]), source=np.asarray([src], dtype=object),
                           n_prompt_tokens=np.asarray([n_prompt]), n_response_tokens=np.asarray([-1]),
                           n_coverable=np.asarray([-1]))
        parts.append(res)
    if not parts:
        raise WorkbenchError(f"{who}: the dataset has no rows")
    return AcceptanceResult.concat(parts)
