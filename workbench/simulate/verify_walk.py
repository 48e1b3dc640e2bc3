"""SGLang's verify walk at T > 0, step by step; the exact per-start expectation (any thresholds); the
tree forward that gives p at every node; an offline speculative-sampling loop.

    >>> import torch
    >>> from workbench.simulate.verify_walk import sglang_walk, expected_accept
    >>> tokens, parents = [1, 2, 0], [0, 0, 1]        # root -> 1 -> 0, root -> 2
    >>> probs = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.2, 0.2], [1/3, 1/3, 1/3], [1/3, 1/3, 1/3]])
    >>> sglang_walk(tokens, parents, probs, coins=[0.4, 0.5, 0.0, 0.0], final_coin=0.1, steps=2)
    (2, [1, 3], [1, 0, 0])
    >>> [round(x, 3) for x in expected_accept(tokens, parents, probs, steps=2)]   # E[A], P(A>=1), P(A>=2)
    [1.1, 0.8, 0.3]

The walk is ``TreeSpeculativeSamplingTargetOnly`` (sgl-project/sglang
``sgl-kernel/csrc/speculative/speculative_sampling.cuh``), called from ``speculative/eagle_info.py``
(``EagleVerifyInput.verify``) with ``draft_probs`` zero and coins ``torch.rand``:

- one coin u per parent node (``uniform_samples[bx * num_draft_tokens + cur_index]``; the root's first);
- the current node's children are walked in tree order (``retrieve_next_token`` then
  ``retrieve_next_sibling``: ascending verified index, ``tree_verify``) while ``prob_acc`` sums their
  target probabilities; child c is accepted when ``u <= prob_acc / threshold_acc`` or
  ``p(c) >= threshold_single``; then ``prob_acc`` is reset, the walk descends and takes c's coin;
  a rejected child's probability is written into ``draft_probs`` at the current node;
- at most ``num_speculative_tokens - 1`` = steps levels; the final token is drawn with a separate
  coin from relu(p - draft_probs) at the last accepted node (p minus its rejected children's mass;
  at full depth p itself), by inverting the cumulative sum.

``threshold_acc`` is capped below at 1e-9 (``fmaxf(threshold_acc, 1e-9f)``). With both thresholds
1 the walk is lossless: every emitted token is a sample of p, and child c is accepted with
probability p(c) (``tests/test_verify_walk.py`` checks it by Monte Carlo against :func:`expected_accept`).
"""

from __future__ import annotations

import math

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.sampling import as_sampling, draw, row_seed
from workbench.engines.wiring import as_wirings
from workbench.model.served import verify_probs
from workbench.model.tree import tree_shape
from workbench.simulate.exact import loop_simulate
from workbench.simulate.tree_verify import exact_tree_decode

TINY_ACC = 1e-9     # sgl-kernel: capped_threshold_acc = fmaxf(threshold_acc, 1e-9f)


def _children(parents) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for v, p in enumerate(parents, start=1):
        if not 0 <= int(p) < v:
            raise WorkbenchError(f"tree node {v}: parent {p} must be an earlier node (0 = root)")
        kids.setdefault(int(p), []).append(v)              # ascending verified index = SGLang's sibling order
    return kids


def _check_thresholds(threshold_single, threshold_acc) -> tuple[float, float]:
    ts, ta = float(threshold_single), float(threshold_acc)
    if not (0 <= ts <= 1 and 0 <= ta <= 1):
        raise WorkbenchError(f"thresholds single={threshold_single!r}, acc={threshold_acc!r}: expected numbers in "
                             f"[0, 1] (SGLang --speculative-accept-threshold-single/-acc, default 1.0)")
    return ts, max(ta, TINY_ACC)


def sglang_walk(tokens, parents, probs, coins, final_coin, *, steps: int, threshold_single: float = 1.0,
                threshold_acc: float = 1.0) -> tuple[int, list[int], list[int]]:
    """One verify step, exactly as the kernel: (A, accepted node indices, emitted tokens).

    ``tokens``/``parents``: the N-1 verified nodes (parents as verified indices, 0 = root);
    ``probs [N, V]``: the target's served distribution after node v (row 0: after the root);
    ``coins``: N uniforms, one per node (used when the node is a parent); ``final_coin``: the coin of
    the final draw. Emitted tokens: the accepted nodes' tokens, then the final token.
    """
    ts, ta = _check_thresholds(threshold_single, threshold_acc)
    tokens = [int(x) for x in tokens]
    kids = _children(parents)
    cur, coin, path = 0, float(coins[0]), []
    rejected: list[int] = []
    for _ in range(int(steps)):
        acc, found, rejected = 0.0, None, []
        for c in kids.get(cur, []):
            pc = float(probs[cur][tokens[c - 1]])
            acc += pc
            if coin <= acc / ta or pc >= ts:
                found = c
                break
            rejected.append(c)
        if found is None:
            break
        path.append(found)
        cur, coin = found, float(coins[found])
        rejected = []
    p = np.asarray(probs[cur].tolist() if hasattr(probs[cur], "tolist") else probs[cur], dtype=np.float64).copy()
    if len(path) != int(steps):
        for c in rejected:
            p[tokens[c - 1]] = 0.0                           # relu(p - draft_probs): rejected children removed
    cdf = np.cumsum(p)
    total = cdf[-1]
    if total <= 0:
        final = len(p) - 1                                   # the kernel's fallback (no valid id)
    else:
        final = int(np.searchsorted(cdf, float(final_coin) * total, side="right"))
        final = min(final, int(np.nonzero(p > 0)[0][-1]))
    return len(path), path, [tokens[v - 1] for v in path] + [final]


def reach_probabilities(tokens, parents, probs, *, steps: int, threshold_single: float = 1.0,
                        threshold_acc: float = 1.0) -> np.ndarray:
    """P(the walk accepts node v), v = 1..N-1 (``[N-1]``): the product along v's path of the per-child factors.

    At a node u with children c_1..c_m in tree order, π_i = p_u(token c_i), S_i = π_1 + … + π_i, the
    walk accepts c_i when it is the first child with ``u <= S_i / thr_acc`` or ``π_i >= thr_single``:
    P = min(1, S_i/thr) − min(1, S_{i−1}/thr) before the first child that passes by ``thr_single``,
    1 − min(1, S_{i−1}/thr) for that child, 0 after it. Thresholds 1: P = π_i.
    """
    ts, ta = _check_thresholds(threshold_single, threshold_acc)
    tokens = [int(x) for x in tokens]
    kids = _children(parents)
    depth = [0] * (len(tokens) + 1)
    reach = np.zeros(len(tokens) + 1)
    reach[0] = 1.0
    for u in range(len(tokens) + 1):                         # parents precede children
        if reach[u] == 0 or depth[u] >= int(steps):
            continue
        S_prev = 0.0
        for c in kids.get(u, []):
            pc = float(probs[u][tokens[c - 1]])
            S = S_prev + pc
            depth[c] = depth[u] + 1
            if pc >= ts:
                reach[c] = reach[u] * (1.0 - min(1.0, S_prev / ta))
                break
            reach[c] = reach[u] * (min(1.0, S / ta) - min(1.0, S_prev / ta))
            S_prev = S
    for v in range(1, len(tokens) + 1):                      # depth of nodes under unreached parents
        depth[v] = depth[int(parents[v - 1])] + 1
    reach[1:][np.asarray(depth[1:]) > int(steps)] = 0.0
    return reach[1:]


def expected_accept(tokens, parents, probs, *, steps: int, threshold_single: float = 1.0,
                    threshold_acc: float = 1.0) -> list[float]:
    """[E[A], P(A >= 1), …, P(A >= steps)] of one tree: sums of :func:`reach_probabilities` by depth."""
    reach = reach_probabilities(tokens, parents, probs, steps=steps, threshold_single=threshold_single,
                                threshold_acc=threshold_acc)
    depth = [0] * (len(tokens) + 1)
    for v in range(1, len(tokens) + 1):
        depth[v] = depth[int(parents[v - 1])] + 1
    at_least = [float(sum(r for r, d in zip(reach, depth[1:]) if d == k)) for k in range(1, int(steps) + 1)]
    return [float(sum(at_least))] + at_least


def monte_carlo(tokens, parents, probs, *, steps: int, runs: int, seed: int = 0, threshold_single: float = 1.0,
                threshold_acc: float = 1.0) -> dict:
    """``runs`` independent walks (coins from ``numpy`` seeded ``seed``): {A: [runs], first: [runs] (the
    first emitted token), mean, se}."""
    rng = np.random.default_rng(seed)
    n = len(tokens) + 1
    A = np.zeros(int(runs), np.int64)
    first = np.zeros(int(runs), np.int64)
    for i in range(int(runs)):
        u = rng.random(n + 1)
        a, _, emitted = sglang_walk(tokens, parents, probs, u[:n], u[n], steps=steps,
                                    threshold_single=threshold_single, threshold_acc=threshold_acc)
        A[i], first[i] = a, emitted[0]
    return {"A": A, "first": first, "mean": float(A.mean()), "se": float(A.std(ddof=1) / math.sqrt(max(1, runs)))}


# ------------------------------------------------------------------------------------------------
# The offline speculative-sampling loop: HF target + draft tree + the walk
# ------------------------------------------------------------------------------------------------


def sampled_tree_decode(target, draft, prompt_ids, wiring, setting, max_new_tokens: int, *, seed: int = 0,
                        row: int = 0, threshold_single: float = 1.0, threshold_acc: float = 1.0,
                        rope_shift: int | None = None) -> tuple[list[int], list[int]]:
    """Speculative sampling as an SGLang server does it at T > 0; returns (generated ids, A per verify step).

        >>> # gen, A = sampled_tree_decode(target, draft, [1, 5, 9], "L1,L3,L4",
        >>> #                              Setting(steps=3, eagle_topk=2, num_draft_tokens=5, temperature=0.7), 32)

    ``tree_verify.exact_tree_decode`` (the same trees as at T = 0, ``eagle_topk`` 1 = the chain; ONE
    ancestor-masked target forward over prefix + tree per step) with this module's walk: the prefill's
    token from the plain sampler (``sampling.draw``); then :func:`workbench.sampled.verify_probs`
    (SGLang's verify distribution) after the root and every node, and :func:`sglang_walk` with fresh
    coins (numpy, seeded from ``(seed, row)``): A accepted nodes, then the final token. No target KV
    cache (exact, slow: for validation and small checks).
    """
    import torch


    shape = tree_shape(setting.steps, setting.eagle_topk, setting.num_draft_tokens)
    s = as_sampling(setting)
    rng = np.random.default_rng(row_seed(int(seed), int(row)))

    def walk(tokens, parents, logits):
        if not tokens:                                   # the prefill's token: the plain (joint) sampler, as SGLang
            # eagle_worker.py forward_target_extend samples it with the target worker's Sampler
            return [], int(draw(logits[-1:].float().cpu(), s, torch.tensor([rng.random()]))[0])
        probs = verify_probs(logits.float(), s).double().cpu().numpy()    # after the root, node 1, ...
        u = rng.random(len(tokens) + 2)
        _, path, emitted = sglang_walk(tokens, parents, probs, u[:-1], u[-1], steps=shape.steps,
                                       threshold_single=threshold_single, threshold_acc=threshold_acc)
        return path, emitted[-1]

    return exact_tree_decode(target, draft, prompt_ids, wiring, shape.steps, shape.topk, shape.num_draft_tokens,
                             max_new_tokens, rope_shift=rope_shift, walk=walk)


def sampled_simulate(target, draft, dataset, wiring, setting, *, limit: int | None = None, seed: int = 0,
                     threshold_single: float = 1.0, threshold_acc: float = 1.0, progress: bool = True):
    """Tokens per verify step of the offline speculative-sampling loop on each row's prompt: an
    :class:`~workbench.statistics.AcceptanceResult` (estimator decode-path; bootstrap intervals over samples).

        >>> # loop = sampled_simulate(target, draft, ds, "L1,L3,L4", Setting(steps=4, temperature=0.7))
        >>> # loop.decode_path["accept_length"], loop.intervals()["decode_path_accept_length"]

    Each row generates ``n_response_tokens`` with :func:`sampled_tree_decode` (row seed from ``seed``
    and the row) and keeps the verify steps whose drafted positions fit (t + S + 1 <= T - 1), the
    counting of ``acceptance.exact_simulate``. The server's accept length on these prompts, measured;
    compare it with ``acceptance.simulate`` on data sampled at the same settings (tests/test_sampled_loop.py).
    """

    w = as_wirings(wiring, target.n_layers)[0]
    setting = setting.replace(estimator="decode-path")

    def decode(prompt_ids, row, max_new_tokens):
        return sampled_tree_decode(target, draft, prompt_ids, w, setting, max_new_tokens, seed=seed, row=row,
                                   threshold_single=threshold_single, threshold_acc=threshold_acc)[1]

    return loop_simulate(dataset, w, setting, decode, limit=limit, progress=progress, desc="sampled loop",
                         who="sampled_simulate")


__all__ = ["sglang_walk", "reach_probabilities", "expected_accept", "monte_carlo", "sampled_tree_decode",
           "sampled_simulate", "TINY_ACC"]
