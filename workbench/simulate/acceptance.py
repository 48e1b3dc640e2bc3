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
:mod:`workbench.stats.statistics`.
"""

from __future__ import annotations

import time

from workbench import engines
from workbench.core.devices import resolve_device
from workbench.core.errors import WorkbenchError
from workbench.core.sampling import as_sampling
from workbench.core.setting import Setting, resolve_setting
from workbench.engines.wiring import apply_drafting, apply_engine, as_wirings, choose_wiring
from workbench.load import inputs
from workbench.load.agreement import Agreement, warn_once
from workbench.model import capture
from workbench.model.chunks import parse_memory
from workbench.model.draft import run_chains
from workbench.model.tree import draft_trees
from workbench.simulate import acceptance, distributed, sampled
from workbench.simulate.rejection import rejection_chains
from workbench.simulate.thresholds import threshold_expectation
from workbench.simulate.tree_verify import tree_accepted_counts
from workbench.stats.cost import CostModel, as_cost_model
from workbench.stats.counts import accepted_counts, batch_reply_starts, coverage_counts
from workbench.stats.statistics import AcceptanceResult

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
             num_draft_tokens: int | None = None, cost_model=None) -> dict[str, "AcceptanceResult"] | None:
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
    (``workbench.model.chunks``; results do not depend on it, so it is not part of the resume key).

    ``engine`` (a record of :mod:`workbench.engines.records`): evaluate what that engine computes (its
    Eagle-3.1 options, rotary offset, embedding and lm_head source; :func:`workbench.wiring.apply_engine`,
    which changes ``draft`` in place); ``wirings=None`` then means the taps the engine feeds.

    ``cost_model`` (a :class:`workbench.stats.cost.CostModel`, its JSON path): the one cost model of this
    draft and target that every result's speed-up projection uses, instead of the time ratio of this
    run's batches (which differs from run to run, and for a tree is not one draft step's cost). Pass the
    same model to every run whose speed-ups are compared (notebook 03 measures it once).
    """
    cm = as_cost_model(cost_model)
    setting = resolve_setting(K, setting, eagle_topk=eagle_topk, num_draft_tokens=num_draft_tokens)
    setting.check_simulable()
    if engine is not None:
        w0, _ = apply_engine(target, draft, engine, None if wirings is None else as_wirings(wirings, target.n_layers)[0])
        wirings = [w0] if wirings is None else wirings
        setting = setting.replace(engine=engines.get(engine).name)
    before = draft.drafting                  # put back when the run ends: the draft object outlives this run
    setting, _ = apply_drafting(draft, setting, engine or setting.engine)
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

    try:
        out = distributed.sharded(rows, fn, ctx=ctx, batch_size=batch_size, key=key, out_dir=out_dir, name=name,
                                  max_positions=target.max_positions, everywhere=everywhere)
    finally:
        draft.drafting = before
    if cm is not None:
        attach_cost_model((out or {}).values(), cm)
    return out


def attach_cost_model(results, cm) -> None:
    """Give each result the one cost model its speed-ups are projected with (a fixed model's ratio too)."""
    for r in results:
        r.cost_model = cm
        r.cost_ratio = cm.ratio if cm.kind == "fixed" else r.cost_ratio


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
    sampling = sampled.as_sampling(setting)                                 # T > 0: workbench.simulate.sampled
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
        starts = batch_reply_starts(batch.loss_mask, lengths)           # the decode path restarts at each reply
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
                sources=batch.sources, top_hits=hits, coverage=cov, setting=setting, agreement=agr,
                reply_starts=starts))
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

# --------------------------------------------------------------------------------------------------
# `workbench accept`: load everything, pick the wiring, simulate
# --------------------------------------------------------------------------------------------------

def accept(target, draft, data, *, wiring=None, engine=None, K: int | None = None, setting: Setting | None = None,
           limit=None, device: str | None = "cpu", dtype=None, device_map=None, batch_size: int = 8,
           trust_remote_code: bool = False, progress: bool = True,
           ctx: distributed.Context | None = None, shard_dir=None, cost_ratio: float | None = None,
           max_memory=None, eagle_topk: int | None = None, num_draft_tokens: int | None = None, acc_topk: int = 5,
           cost_model=None, cache_dir=None):
    """Everything behind ``workbench accept``: returns (AcceptanceResult, wiring note).

        >>> # result, note = accept("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl",
        >>> #                       engine="sglang", K=4, limit=100)

    ``target``/``draft``/``data``: paths or loaded objects (:mod:`workbench.load.inputs`). Under torchrun
    pass ``ctx`` (:func:`workbench.distributed.init`): the target goes to ``ctx.device`` and only rank 0
    gets the result (None elsewhere); ``device_map`` (e.g. "auto") spreads a large target over the
    visible GPUs; ``shard_dir`` keeps each rank's results for resuming. ``cost_ratio``: a fixed
    draft-step/target-forward ratio for the speed-up projection instead of the measured one.
    ``max_memory``: working memory of the chunked heads and attention (``workbench.model.chunks``).
    ``eagle_topk``/``num_draft_tokens`` (or a tree ``setting``): simulate SGLang's draft tree.
    ``cost_model``: a :class:`workbench.cost.CostModel` or its JSON path for the projection. ``cache_dir``: the
    target's captured features are kept there (:func:`simulate`), so calls on the same rows and taps (other Ks,
    other drafts) skip the target pass.
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
    setting, why = apply_drafting(d, setting, engine)
    note = note if why is None else f"{note}; {why}"
    res = simulate(tgt, d, ds, [w], limit=limit, batch_size=batch_size, progress=progress, setting=setting, ctx=ctx,
                   out_dir=shard_dir, max_memory=max_memory, acc_topk=acc_topk, cost_model=cm, cache_dir=cache_dir)
    if res is None:                              # not rank 0: rank 0 reports for everyone
        return None, note
    result = res[w.spec]
    warn_once(result.agreement, result.setting)      # once per run, in plain words (workbench.load.agreement)
    return result, note


def accept_served(target, draft, data, *, threshold_single: float = 1.0, threshold_acc: float = 1.0,
                  rejection: bool = False, **accept_kw):
    """``acceptance.accept`` plus the estimates of SGLang's lossy thresholds and/or rejection-sampling chains:
    (AcceptanceResult, wiring note, [ThresholdResult | RejectionResult]).

        >>> # res, note, modes = accept_served("data/demo/target", "data/demo/draft-aligned", "sampled.jsonl",
        >>> #                                  setting=Setting(steps=4, temperature=0.7), threshold_acc=0.5)

    Models and data are loaded once (``inputs.load``) and shared. The lossy thresholds cost one extra
    target forward per row over the row and its trees (``workbench.simulate.thresholds``); rejection sampling
    costs a teacher-forced draft run and K more passes of the target's head (``workbench.simulate.rejection``).
    One process only (not under torchrun).
    """

    ctx = accept_kw.get("ctx")
    if ctx is not None and ctx.distributed:
        raise WorkbenchError("lossy thresholds and rejection sampling run in one process (not under torchrun)")
    setting = resolve_setting(accept_kw.get("K"), accept_kw.get("setting"))
    if rejection and setting.shape != "chain":
        raise WorkbenchError(f"--speculative-use-rejection-sampling drafts a chain (SGLang: eagle_topk 1); got "
                             f"{setting.label}")
    if rejection and as_sampling(setting).greedy:
        raise WorkbenchError("--speculative-use-rejection-sampling needs --temperature > 0 (at T = 0 the server "
                             "verifies greedily)")
    device = ctx.device if ctx is not None else resolve_device(accept_kw.get("device", "cpu"))
    tgt, d, ds = inputs.load(target, draft, data, device=device, dtype=accept_kw.get("dtype"),
                             device_map=accept_kw.get("device_map"),
                             trust_remote_code=accept_kw.get("trust_remote_code", False),
                             progress=accept_kw.get("progress", True))
    result, note = acceptance.accept(tgt, d, ds, **accept_kw)
    modes = []
    kw = dict(limit=accept_kw.get("limit"), batch_size=accept_kw.get("batch_size", 8),
              progress=accept_kw.get("progress", True), max_memory=accept_kw.get("max_memory"))
    if float(threshold_single) < 1 or float(threshold_acc) < 1:

        modes.append(threshold_expectation(tgt, d, ds, result.spec, result.setting, threshold_single=threshold_single,
                                           threshold_acc=threshold_acc, **kw))
    if rejection:

        modes.append(rejection_chains(tgt, d, ds, result.spec, result.setting, **kw))
    return result, note, modes
