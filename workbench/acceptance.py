"""Acceptance of an EAGLE-3 draft on a target: the fast simulation and the exact speculative-decoding
loop that validates it.

    >>> # from workbench import acceptance
    >>> # res = acceptance.simulate(target, draft, ds, ["embed,L1,L3", "L1,L3,L4"], K=4)
    >>> # res["L1,L3,L4"].accept_length, res["L1,L3,L4"].decode_path["accept_length"]

``simulate`` is the public simulation entry point: ONE target pass per batch, the draft runs every
chain of the batch in parallel (``draft.run_chains``), only the per-chain counts are kept
(:class:`~workbench.statistics.AcceptanceResult`). ``exact_decode``/``exact_simulate`` are the exact
reference: real greedy speculative decoding with the HF target (KV cache), one sample at a time.
``accept`` is everything behind ``workbench accept``. Definitions of the counts and estimators:
:mod:`workbench.statistics`.
"""

from __future__ import annotations

import inspect
import time

import numpy as np

from workbench import capture, distributed, engines, inputs, sampled
from workbench.agreement import Agreement, warn_once
from workbench.chunks import parse_memory
from workbench.cost import CostModel, as_cost_model
from workbench.devices import resolve_device
from workbench.draft import chain_reference, run_chains
from workbench.errors import WorkbenchError
from workbench.setting import Setting, resolve_setting
from workbench.statistics import AcceptanceResult, accepted_counts, coverage_counts
from workbench.tree import draft_trees
from workbench.tree_verify import exact_tree_decode, tree_accepted_counts
from workbench.wiring import apply_engine, as_wirings, choose_wiring


# --------------------------------------------------------------------------------------------------
# The fast simulation: one target pass, the parallel K-step draft for every chain
# --------------------------------------------------------------------------------------------------

def _sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def simulate(target, draft, dataset, wirings, *, K: int | None = None, limit: int | None = None, batch_size: int = 8,
             progress: bool = True, acc_topk: int = 5, cache_dir=None, seed: int = 0, setting: Setting | None = None,
             ctx: distributed.Context | None = None, out_dir=None, name: str | None = None,
             everywhere: bool = False, max_memory=None, engine: str | None = None, eagle_topk: int | None = None,
             num_draft_tokens: int | None = None) -> dict[str, "AcceptanceResult"] | None:
    """Acceptance of ``draft`` on ``target`` for each wiring, from ONE target pass over ``dataset``.

        >>> # res = simulate(target, draft, ds, ["embed,L1,L3", "L1,L3,L4"], K=4, limit=200)
        >>> # res["embed,L1,L3"].accept_length, res["L1,L3,L4"].conditional

    ``capture.extract`` captures the union of the wirings' taps once per batch; for each wiring the
    draft runs every chain of the batch in parallel (``draft.run_chains``, K steps) and only the
    per-chain counts are kept (never features across batches). Also measured: step-1 top-1/top-5
    accuracy (``acc_topk`` > 0: the draft's top ``acc_topk`` ids are kept; not the tree's
    ``eagle_topk``), the draft-vocab coverage ceiling and the draft-step/target-forward time
    ratio used by :meth:`AcceptanceResult.speedup`.

    ``setting`` (:class:`~workbench.setting.Setting`, default chain drafting of depth ``K`` = 4,
    greedy) is what the results carry; ``K`` and ``setting.steps`` must agree when both are given.
    A tree (``Setting(steps=S, eagle_topk=k, num_draft_tokens=N)``, or the keywords ``eagle_topk``
    and ``num_draft_tokens`` with ``K`` = S) runs SGLang's draft tree on the same parallel layout
    (``tree.draft_trees``: one target pass, S draft passes over k lanes per start position) and
    counts the greedy walk's A per start (``tree_verify.tree_accepted_counts``); a "chain" of the
    result is then a tree, A in 0..S. ``eagle_topk`` 1 is exactly the chain.

    One process or many, the same code: the samples (after ``limit``) are cut into the batches one
    process would run and dealt to the ranks of ``ctx`` (:func:`workbench.distributed.init`; default
    a single process); rank 0 returns the exact merge, the other ranks None (every rank gets it with
    ``everywhere``). ``out_dir`` keeps each rank's results for resuming (``name`` tells the files of
    several stages apart). See :func:`workbench.distributed.sharded`. ``max_memory`` (bytes or "2GB")
    sizes the chunks of the target's and the draft's heads and the draft's attention blocks
    (``workbench.chunks``; results do not depend on it, so it is not part of the resume key).

    ``engine`` (a record of :mod:`workbench.engines`): evaluate what that engine computes (its
    Eagle-3.1 options, rotary offset, embedding and lm_head source; :func:`workbench.wiring.apply_engine`,
    which changes ``draft`` in place); ``wirings=None`` then means the taps the engine feeds.
    """
    setting = resolve_setting(K, setting, eagle_topk=eagle_topk, num_draft_tokens=num_draft_tokens)
    setting.check_simulable()
    if engine is not None:
        w0, _ = apply_engine(target, draft, engine, None if wirings is None else as_wirings(wirings, target.n_layers)[0])
        wirings = [w0] if wirings is None else wirings
        setting = setting.replace(engine=engines.get(engine).name)
    wl = as_wirings(wirings, target.n_layers)
    ctx = ctx or distributed.Context()
    rows = distributed.global_rows(dataset, limit)
    if not rows:
        raise WorkbenchError("the dataset has no rows")
    key = None
    if out_dir is not None:
        key = {"target": capture.target_fingerprint(target),
               "draft": distributed.module_fingerprint(draft, draft.config),
               "wirings": [w.spec for w in wl], "K": setting.steps,
               "setting": {k: v for k, v in setting.to_dict().items() if k != "steps"}, "limit": limit,
               "acc_topk": int(acc_topk), "seed": int(seed),
               "device": str(target.device).split(":")[0], "dtype": str(target.dtype)}

    def fn(shard):
        if not shard:                        # a rank without a batch
            return {w.spec: AcceptanceResult(spec=w.spec, taps=tuple(w.taps), steps=setting.steps, seed=seed,
                                             setting=setting) for w in wl}
        return _simulate_rows(target, draft, shard, wl, setting, batch_size=batch_size,
                              progress=progress and ctx.is_main, acc_topk=acc_topk, cache_dir=cache_dir, seed=seed,
                              max_memory=max_memory)

    return distributed.sharded(rows, fn, ctx=ctx, batch_size=batch_size, key=key, out_dir=out_dir, name=name,
                               max_positions=target.max_positions, everywhere=everywhere)


def draft_counts(draft, feats, ids, att, next_token, loss_mask, lengths, setting: Setting, *, acc_topk: int = 0,
                 max_memory=None):
    """(A [B, T] with -1 where not counted, step-1 hits [B, T, 2] or None) of one batch under ``setting``.

        >>> # A, hits = draft_counts(draft, feats, ids, att, batch.next_token, batch.loss_mask, batch.lengths,
        >>> #                        Setting(steps=5, eagle_topk=4, num_draft_tokens=8), acc_topk=5)

    A chain runs ``draft.run_chains`` and ``accepted_counts``; a tree (``setting.shape`` "tree") runs
    ``tree.draft_trees`` and ``tree_verify.tree_accepted_counts`` (the same counting rule with K =
    steps). ``hits[..., 0]``/``[..., 1]``: the target's next greedy token is the draft's depth-1
    top-1 / in its top-5 (``acc_topk`` > 0).
    """
    import torch

    K = setting.steps
    dev = ids.device
    if setting.shape == "tree":
        trees = draft_trees(draft, feats, ids, att, K, setting.eagle_topk, setting.num_draft_tokens,
                            acc_topk=int(acc_topk), max_memory=max_memory)
        A = tree_accepted_counts(trees, next_token.to(dev), loss_mask.to(dev), lengths.to(dev))
        step1 = trees.acc_ids
    else:
        out = run_chains(draft, feats, ids, att, int(K), acc_topk=int(acc_topk), max_memory=max_memory)
        A = accepted_counts(out.tokens, next_token.to(dev), loss_mask.to(dev), lengths.to(dev), K)
        step1 = None if out.topk_ids is None else out.topk_ids[:, :, 0, :]      # [B, T, acc_topk]
    hits = None
    if step1 is not None:
        g1 = torch.cat([next_token[:, 1:], torch.full_like(next_token[:, :1], -1)], 1).to(dev)
        hits = torch.stack([step1[..., 0] == g1, (step1[..., :5] == g1[..., None]).any(-1)], -1).long()
    return A, hits


def _simulate_rows(target, draft, rows, wl, setting: Setting, *, batch_size: int, progress: bool, acc_topk: int,
                   cache_dir, seed: int, max_memory=None) -> dict[str, AcceptanceResult]:
    """:func:`simulate` on one process over ``rows``: one target pass, every wiring's chains."""
    import torch

    K = setting.steps
    width = draft.fc_width
    for w in wl:
        capture.check_width(w.taps, target, width, where="the draft's fc")
    ddev, ddtype = draft.device, draft.dtype
    t2d = draft.emittable
    if len(t2d) < target.vocab_size:
        raise WorkbenchError(f"draft t2d covers {len(t2d)} target ids but the target vocab has {target.vocab_size}: "
                             f"draft and target do not match")
    parts = {w.spec: [] for w in wl}
    t_draft = {w.spec: 0.0 for w in wl}
    t_target = 0.0
    sampling = sampled.as_sampling(setting)                                 # T > 0: workbench.sampled
    sampling = None if sampling.greedy else sampling
    per_depth = {w.spec: [] for w in wl}
    it = capture.extract(target, rows, [w.spec for w in wl], batch_size=batch_size, topk=0, cache_dir=cache_dir,
                         progress=progress, max_memory=max_memory, sampling=sampling)
    any_cached = False
    gens = {int(r.get("_row", i)): r.get("generation") for i, r in enumerate(rows)}
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        _sync(target.device)
        if batch is None:
            break
        any_cached |= batch.from_cache
        t_target += time.perf_counter() - t0
        lengths = batch.lengths
        cov = coverage_counts(batch.next_token if sampling is None else
                              sampled.data_next_tokens(batch.input_ids, batch.attention_mask).clamp(min=0),
                              batch.loss_mask, lengths, t2d)
        agr = Agreement().add(batch, [gens.get(int(r)) for r in batch.rows])    # from this pass's next_token
        ids, att = batch.input_ids.to(ddev), batch.attention_mask.to(ddev)
        for w in wl:
            feats = batch.concat(w.taps).to(device=ddev, dtype=ddtype)
            t0 = time.perf_counter()
            with torch.no_grad():
                if sampling is None:
                    A, hits = draft_counts(draft, feats, ids, att, batch.next_token, batch.loss_mask, lengths,
                                           setting, acc_topk=acc_topk, max_memory=max_memory)
                else:
                    A, hits, pd = sampled.sampled_counts(draft, feats, ids, att, batch, setting,
                                                         capture.split_head(target.model)[1], acc_topk=acc_topk,
                                                         max_memory=max_memory)
                    per_depth[w.spec].append(pd)
            _sync(ddev)
            t_draft[w.spec] += time.perf_counter() - t0
            del feats
            for b, n in zip(batch.rows, batch.n_prompt_tokens):
                if n < 1:
                    raise WorkbenchError(f"sample row {b}: n_prompt_tokens={n}; the decode-path estimator needs a "
                                         f"prompt of at least 1 token (check the data's prompt/response split)")
            parts[w.spec].append(AcceptanceResult.from_counts(
                A, K=K, spec=w.spec, taps=w.taps, rows=batch.rows, n_prompt_tokens=batch.n_prompt_tokens,
                sources=batch.sources, top_hits=hits, coverage=cov, setting=setting, agreement=agr))
        del batch
    results = {}
    # ONE draft/target cost ratio per draft and target: every wiring runs the same draft computation on
    # features of the same shape, so their timings are pooled (per-wiring ratios differed only by noise).
    pooled = (sum(t_draft.values()) / max(len(wl), 1) / K) / t_target if t_target > 0 else None
    for w in wl:
        r = AcceptanceResult.concat(parts[w.spec])
        r.seed = seed
        if per_depth[w.spec]:
            r.per_depth = sampled.PerDepth.concat(per_depth[w.spec])
        if not any_cached and pooled is not None:
            r.cost_ratio = pooled
            r.cost_model = CostModel.fixed(pooled, device=str(target.device).split(":")[0],
                                           source=f"draft/target time ratio of this simulation's batches, pooled "
                                                  f"over its {len(wl)} wiring(s): one ratio per draft and target")
        results[w.spec] = r
    return results


# --------------------------------------------------------------------------------------------------
# The exact loop: real greedy speculative decoding with the HF target
# --------------------------------------------------------------------------------------------------

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
    n_prompt = len(ids)
    ids.append(int(greedy[-1]))
    feat_seq = [feats]                                                       # h_0 .. h_t
    accepts: list[int] = []
    while len(ids) - n_prompt < max_new_tokens:
        t = len(ids) - 2
        h = torch.cat(feat_seq + [feat_seq[0][:1] * 0], 0).to(device=ddev, dtype=ddtype)  # h_0..h_t + unused row
        with torch.no_grad():
            d = chain_reference(draft, h, torch.tensor(ids, device=ddev), t, int(K))
        d = [int(x) for x in d.tolist()]
        greedy, feats, cache = forward([ids[-1]] + d, cache)                 # positions t+1 .. t+K+1
        g = greedy.tolist()                                                  # g_{t+2} .. g_{t+K+2}
        a = 0
        while a < K and d[a] == g[a]:
            a += 1
        accepts.append(a)
        ids.extend(d[:a] + [g[a]])
        feat_seq.append(feats[:a + 1])                                       # h_{t+1} .. h_{t+a+1}
        if a < K:                                   # drop the rejected drafts' keys: keep x_0 .. x_{t+a+1}
            cache.crop(-(K - a))                    # negative = remove that many (all transformers versions)
    return ids[n_prompt:n_prompt + max_new_tokens], accepts


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


def loop_simulate(dataset, wiring, setting: Setting, decode, *, limit: int | None = None, progress: bool = True,
                  desc: str = "loop", who: str = "loop_simulate") -> "AcceptanceResult":
    """Decode-path :class:`AcceptanceResult` of a real speculative loop run on each row's prompt: the counting
    that :func:`exact_simulate` and ``verify_walk.sampled_simulate`` share.

        >>> # r = loop_simulate(ds, w, Setting(steps=4, estimator="decode-path"),
        >>> #                   lambda prompt, row, n: exact_decode(target, draft, prompt, w, 4, n)[1])

    ``decode(prompt_ids, row, max_new_tokens) -> A per verify step`` generates the row's
    ``n_response_tokens``; the verify steps whose drafted positions fit (t + S + 1 <= T - 1) are kept,
    starting at the last prompt position and jumping A + 1 each step.
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
        t, ts, As = n_prompt - 1, [], []
        for a in decode(ids[:n_prompt], r, T - n_prompt):
            if t + S + 1 > T - 1:
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


# --------------------------------------------------------------------------------------------------
# `workbench accept`: load everything, pick the wiring, simulate
# --------------------------------------------------------------------------------------------------

def accept(target, draft, data, *, wiring=None, engine=None, K: int | None = None, setting: Setting | None = None,
           limit=None, device: str | None = "cpu", dtype=None, device_map=None, batch_size: int = 8,
           trust_remote_code: bool = False, progress: bool = True,
           ctx: distributed.Context | None = None, shard_dir=None, cost_ratio: float | None = None,
           max_memory=None, eagle_topk: int | None = None, num_draft_tokens: int | None = None, acc_topk: int = 5,
           cost_model=None):
    """Everything behind ``workbench accept``: returns (AcceptanceResult, wiring note).

        >>> # result, note = accept("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl",
        >>> #                       engine="sglang", K=4, limit=100)

    ``target``/``draft``/``data``: paths or loaded objects (:mod:`workbench.inputs`). Under torchrun
    pass ``ctx`` (:func:`workbench.distributed.init`): the target goes to ``ctx.device`` and only rank 0
    gets the result (None elsewhere); ``device_map`` (e.g. "auto") spreads a large target over the
    visible GPUs; ``shard_dir`` keeps each rank's results for resuming. ``cost_ratio``: a fixed
    draft-step/target-forward ratio for the speed-up projection instead of the measured one.
    ``max_memory``: working memory of the chunked heads and attention (``workbench.chunks``).
    ``eagle_topk``/``num_draft_tokens`` (or a tree ``setting``): simulate SGLang's draft tree.
    ``cost_model``: a :class:`workbench.cost.CostModel` or its JSON path for the projection.
    """
    if max_memory is not None:                   # a bad size fails before any model is loaded
        max_memory = parse_memory(max_memory)
    ctx = ctx or distributed.Context(device=resolve_device(device))
    if cost_ratio is not None and not (isinstance(cost_ratio, (int, float)) and cost_ratio >= 0):
        raise WorkbenchError(f"cost_ratio={cost_ratio!r}: expected a number >= 0 (draft step / target forward)")
    cm = as_cost_model(cost_model, cost_ratio)     # a bad cost-model file fails before any model is loaded
    tgt, d, ds = inputs.load(target, draft, data, device=ctx.device, dtype=dtype, device_map=device_map,
                             trust_remote_code=trust_remote_code, progress=progress and ctx.is_main)
    w, note = choose_wiring(tgt, d, wiring, engine)
    setting = resolve_setting(K, setting, eagle_topk=eagle_topk, num_draft_tokens=num_draft_tokens).replace(
        engine=None if engine is None else engines.get(engine).name)
    res = simulate(tgt, d, ds, [w], limit=limit, batch_size=batch_size, progress=progress, setting=setting, ctx=ctx,
                   out_dir=shard_dir, max_memory=max_memory, acc_topk=acc_topk)
    if res is None:                              # not rank 0: rank 0 reports for everyone
        return None, note
    result = res[w.spec]
    warn_once(result.agreement, result.setting)      # once per run, in plain words (workbench.agreement)
    if cm is not None:
        result.cost_model = cm
        result.cost_ratio = cm.ratio if cm.kind == "fixed" else result.cost_ratio
    return result, note
