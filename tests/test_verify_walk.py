"""SGLang's verify walk (workbench.simulate.verify_walk) by Monte Carlo on hand-made trees: the exact expectation
(reach probabilities), losslessness at thresholds 1, and the data-based estimators (decode path, per depth)
agree within 3 standard errors. Fixed seeds; a few thousand walks per case."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.simulate.sampled import PerDepth
from workbench.simulate.verify_walk import expected_accept, monte_carlo, reach_probabilities, sglang_walk

V = 6
# root -> 0, 1, 2 ; 1 -> 3, 0 ; 2 -> 4 ; (1 -> 3) -> 5 ; (1 -> 0) -> 1      (node ids 1..8, parents first)
TOKENS = [0, 1, 2, 3, 0, 4, 5, 1]
PARENTS = [0, 0, 0, 2, 2, 3, 4, 5]
STEPS = 3


def probs_for(seed):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(V) * 0.7, size=len(TOKENS) + 1)


CASES = [(1.0, 1.0), (0.3, 0.5), (1.0, 0.7), (0.05, 1.0)]


@pytest.mark.parametrize("thr", CASES, ids=lambda t: f"single{t[0]}-acc{t[1]}")
def test_exact_expectation_agrees_with_monte_carlo_walks(thr):
    probs = probs_for(1)
    exact = expected_accept(TOKENS, PARENTS, probs, steps=STEPS, threshold_single=thr[0], threshold_acc=thr[1])
    mc = monte_carlo(TOKENS, PARENTS, probs, steps=STEPS, runs=4000, seed=2, threshold_single=thr[0],
                     threshold_acc=thr[1])
    assert abs(mc["mean"] - exact[0]) < 3 * mc["se"] + 1e-12, (mc["mean"], exact[0])
    for k in range(1, STEPS + 1):
        hit = (mc["A"] >= k).astype(float)
        se = max(hit.std() / np.sqrt(len(hit)), 1e-3)
        assert abs(hit.mean() - exact[k]) < 3 * se, (k, hit.mean(), exact[k])


def test_lossy_thresholds_accept_more_than_lossless():
    probs = probs_for(1)
    lossless = expected_accept(TOKENS, PARENTS, probs, steps=STEPS)[0]
    assert expected_accept(TOKENS, PARENTS, probs, steps=STEPS, threshold_acc=0.5)[0] > lossless
    # a tiny threshold_single takes the first child whatever its mass: here node 1, a leaf, so A = 1 always
    assert expected_accept(TOKENS, PARENTS, probs, steps=STEPS, threshold_single=0.01) == [1.0, 1.0, 0.0, 0.0]


def test_lossless_walk_emits_samples_of_p():
    """Thresholds 1: the first emitted token is distributed as p after the root, whether accepted or drawn
    from the residual; child c is accepted with probability p(c)."""
    probs = probs_for(3)
    mc = monte_carlo(TOKENS, PARENTS, probs, steps=STEPS, runs=6000, seed=4)
    freq = np.bincount(mc["first"], minlength=V) / len(mc["first"])
    se = np.sqrt(probs[0] * (1 - probs[0]) / len(mc["first"]))
    assert np.all(np.abs(freq - probs[0]) < 3 * se + 1e-3), (freq, probs[0])
    reach = reach_probabilities(TOKENS, PARENTS, probs, steps=STEPS)
    assert reach[:3] == pytest.approx([probs[0][t] for t in TOKENS[:3]])


def test_lossless_walk_accepts_the_longest_prefix_of_its_output_on_a_tree_path():
    """Thresholds 1: in every walk A is the longest prefix of the emitted tokens that is a path in the
    tree (the decode path's premise); a lossy threshold_single accepts a child whatever the coin.
    (Moved from the stand-in server's own walk, now removed: fake_sglang verifies with sglang_walk.)"""
    probs = probs_for(5)
    rng = np.random.default_rng(6)
    kids = {}
    for v, p in enumerate(PARENTS, start=1):
        kids.setdefault(p, []).append(v)
    for _ in range(3000):
        u = rng.random(len(TOKENS) + 2)
        a, path, emitted = sglang_walk(TOKENS, PARENTS, probs, u[:-1], u[-1], steps=STEPS)
        cur, m = 0, 0
        for tok in emitted[:STEPS]:
            child = next((v for v in kids.get(cur, []) if TOKENS[v - 1] == tok), None)
            if child is None:
                break
            cur, m = child, m + 1
        assert a == m == len(path), (emitted, path)
    hi = [0.99] * (len(TOKENS) + 1)
    assert sglang_walk(TOKENS, PARENTS, probs, hi, 0.0, steps=STEPS, threshold_single=0.0)[1] == [1]


def test_walk_follows_the_kernel_order_and_residual():
    probs = np.full((len(TOKENS) + 1, V), 1.0 / V)
    # coin 0.3: cumulative 1/6 (token 0) then 2/6 (token 1) -> node 2 accepted, its coin 0.99 rejects 3 and 0
    a, path, emitted = sglang_walk(TOKENS, PARENTS, probs, coins=[0.3, 0, 0.99] + [0] * 6, final_coin=0.0,
                                   steps=STEPS)
    assert (a, path) == (1, [2])
    assert emitted[-1] not in (3, 0)                          # drawn from p minus the rejected children
    assert emitted == [1, 1]                                  # the first remaining token at coin 0
    # threshold_single: a child with p >= it is taken whatever the coin
    a, path, _ = sglang_walk(TOKENS, PARENTS, probs, coins=[0.99] * 9, final_coin=0.5, steps=STEPS,
                             threshold_single=0.1)
    assert path == [1]                                        # node 1 (token 0), p = 1/6 >= 0.1


def sample_data(probs, rng):
    """A continuation y_1, y_2, ... sampled from p along the tree (off the tree it no longer matters)."""
    kids = {}
    for v, p in enumerate(PARENTS, start=1):
        kids.setdefault(p, []).append(v)
    cur, matched, s = 0, 0, []
    for _ in range(STEPS):
        ch = kids.get(cur, [])
        s.append(sum(probs[cur][TOKENS[c - 1]] for c in ch))
        y = rng.choice(V, p=probs[cur])
        nxt = next((c for c in ch if TOKENS[c - 1] == y), None)
        if nxt is None:
            break
        cur, matched = nxt, matched + 1
    return matched, s + [0.0] * (STEPS - len(s))


def test_decode_path_and_per_depth_estimators_agree_with_the_walk():
    """On data sampled from p: A = matched depth (decode path) and the Rao–Blackwellised Σ s_k both estimate
    the walk's E[A]; the latter with a smaller variance."""
    probs = probs_for(5)
    exact = expected_accept(TOKENS, PARENTS, probs, steps=STEPS)
    rng = np.random.default_rng(6)
    n = 4000
    M, S = zip(*(sample_data(probs, rng) for _ in range(n)))
    M = np.asarray(M)
    pd = PerDepth.from_arrays(STEPS, sample=np.arange(n), t=np.zeros(n), matched=M, on_path=np.ones(n, bool), s=S)
    se_m = M.std() / np.sqrt(n)
    se_rb = pd.expected.std() / np.sqrt(n)
    assert abs(M.mean() - exact[0]) < 3 * se_m
    assert abs(pd.accept_length - 1 - exact[0]) < 3 * se_rb
    assert se_rb < se_m
    terms = np.where(M[:, None] >= np.arange(STEPS)[None, :], np.asarray(S), 0.0)
    for k in range(1, STEPS + 1):
        assert abs(pd.cumulative[k - 1] - exact[k]) < 3 * terms[:, k - 1].std() / np.sqrt(n) + 1e-9
    lo, hi = pd.intervals(n_boot=300)["accept_length"]
    assert lo <= exact[0] + 1 <= hi
