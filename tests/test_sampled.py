"""Acceptance at T > 0 (workbench.simulate.sampled): the fast served probabilities against the full-vocabulary
reference, the decode path on the data's tokens, the Rao–Blackwellised per-depth table against a reference
from full logits, no extra target forward, the wrong-data note, rejection-sampling chains."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_draft, tiny_target

from workbench.model import capture
from workbench.model import served
from workbench.simulate import sampled
from workbench.simulate.acceptance import simulate
from workbench.core.sampling import Sampling, draw, row_generator, served_probs
from workbench.core.setting import Setting

SETTINGS = [Sampling(temperature=0.7), Sampling(temperature=1.0, top_k=5), Sampling(temperature=0.6, top_p=0.9),
            Sampling(temperature=1.3, top_k=7, top_p=0.8), Sampling(temperature=0.0)]


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: f"T{s.temperature}-k{s.top_k}-p{s.top_p}")
def test_fast_served_probabilities_equal_the_full_reference(s):
    torch.manual_seed(0)
    logits = torch.randn(40, 300) * 3
    ref = served.verify_probs(logits, s)
    assert torch.allclose(ref.sum(-1), torch.ones(40), atol=1e-5)
    fast = served.token_probs(logits, served.served_stats(logits, s), s)
    assert torch.allclose(fast, ref, atol=1e-6)


def test_top_p_partial_path_and_full_sort_fallback_agree_with_the_reference():
    """Rows whose nucleus closes within the best PARTIAL tokens (peaked) and rows that need the full sort
    (flat) in one call, at a vocabulary above PARTIAL."""
    torch.manual_seed(5)
    V = served.PARTIAL * 3
    peaked = torch.randn(6, V) * 8
    flat = torch.randn(6, V) * 0.1
    logits = torch.cat([peaked, flat])
    for s in (Sampling(temperature=0.7, top_p=0.95), Sampling(temperature=1.0, top_p=0.5),
              Sampling(temperature=0.9, top_p=0.9, top_k=2000)):
        ref = served.verify_probs(logits, s)
        fast = served.token_probs(logits, served.served_stats(logits, s), s)
        assert torch.allclose(fast, ref, atol=1e-6)


def test_sequential_verify_rule_equals_the_joint_sampler_with_one_cut_only():
    torch.manual_seed(1)
    logits = torch.randn(20, 100) * 2
    for s in (Sampling(temperature=0.8, top_k=9), Sampling(temperature=0.8, top_p=0.7), Sampling(temperature=1.1)):
        assert torch.allclose(served.verify_probs(logits, s), served_probs(logits, s), atol=1e-6)
    both = Sampling(temperature=1.0, top_k=10, top_p=0.5)      # SGLang's verify (sequential) differs from joint
    assert not torch.allclose(served.verify_probs(logits, both), served_probs(logits, both), atol=1e-3)


def test_head_logits_of_a_linear_head_equal_the_full_head():
    torch.manual_seed(2)
    head = torch.nn.Linear(16, 50, bias=True)
    h, tok = torch.randn(3, 4, 16), torch.randint(0, 50, (3, 4, 5))
    want = head(h).gather(-1, tok)
    assert torch.allclose(served.head_logits(head, h, tok), want, atol=1e-5)


# ---------------------------------------------------------------------------------------------- the tiny world

def sampled_rows(target, n_rows, n_resp, s: Sampling, seed=0):
    """Rows whose responses are samples of the target at ``s`` (full forward per token; the joint rule =
    the sequential one with a single cut)."""
    g = torch.Generator().manual_seed(100 + seed)
    rows = []
    for i in range(n_rows):
        ids = torch.randint(0, target.vocab_size, (2 + i % 3,), generator=g).tolist()
        n_prompt, gen = len(ids), row_generator(seed, i)
        with torch.no_grad():
            for _ in range(n_resp):
                logits = target.model(torch.tensor([ids])).logits[:, -1]
                ids.append(int(draw(logits, s, torch.rand(1, generator=gen))[0]))
        rows.append({"input_ids": ids, "loss_mask": [0] * n_prompt + [1] * n_resp, "n_prompt_tokens": n_prompt,
                     "_row": i, "source": "ab"[i % 2],
                     "generation": {"by": "target", "temperature": s.temperature, "top_p": s.top_p,
                                    "top_k": s.top_k, "seed": seed}})
    return rows


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def world():
    target = tiny_target(0)
    draft = tiny_draft(target, (0, 1, 2), seed=3)
    return target, draft


def reference_per_depth(target, draft, rows, setting):
    """Per counted start, from the FULL logits (verify_probs) and the same trees: {(row, t): (M, s)}."""
    from workbench.model.draft import run_chains
    from workbench.model.tree import draft_trees

    s = sampled.as_sampling(setting)
    out = {}
    batch = next(capture.extract(target, rows, ["L0,L1,L2"], batch_size=len(rows), progress=False))
    with torch.no_grad():
        logits = target.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    probs = served.verify_probs(logits.reshape(-1, logits.shape[-1]), s).view(*logits.shape)
    feats = batch.concat(["L0", "L1", "L2"])
    K = setting.steps
    if setting.shape == "tree":
        tr = draft_trees(draft, feats, batch.input_ids, batch.attention_mask, K, setting.eagle_topk,
                         setting.num_draft_tokens)
        tok, par, dep = tr.tokens, tr.parents, tr.depths
    else:
        tok, par, dep = sampled.chain_as_tree(run_chains(draft, feats, batch.input_ids, batch.attention_mask,
                                                         K).tokens)
    for b, row in enumerate(batch.rows):
        L = int(batch.lengths[b])
        x = batch.input_ids[b].tolist()
        lm = batch.loss_mask[b].tolist()
        for t in range(L):
            if not (t + K + 1 <= L - 1 and all(lm[t + 2: t + K + 2])):
                continue
            kids = {}
            for v in range(tok.shape[-1]):
                kids.setdefault(int(par[b, t, v]), []).append(v + 1)
            cur, M, sk = 0, 0, []
            for k in range(K):
                ch = kids.get(cur, [])
                sk.append(sum(float(probs[b, t + 1 + k, int(tok[b, t, c - 1])]) for c in ch))
                nxt = next((c for c in ch if int(tok[b, t, c - 1]) == x[t + 2 + k]), None)
                if nxt is None:
                    break
                cur, M = nxt, M + 1
            out[(row, t)] = (M, sk + [0.0] * (K - len(sk)))
    return out


@pytest.mark.parametrize("setting", [Setting(steps=3, temperature=0.8),
                                     Setting(steps=3, eagle_topk=2, num_draft_tokens=5, temperature=0.8, top_p=0.9),
                                     Setting(steps=2, temperature=1.0, top_k=6)], ids=["chain", "tree-top_p", "top_k"])
def test_decode_path_and_per_depth_equal_the_full_logit_reference(world, setting):
    target, draft = world
    rows = sampled_rows(target, 4, 12, sampled.as_sampling(setting))
    res = simulate(target, draft, rows, ["L0,L1,L2"], setting=setting, progress=False, batch_size=2)["L0,L1,L2"]
    ref = reference_per_depth(target, draft, rows, setting)
    pd = res.per_depth
    assert pd is not None and pd.n == res.n_chains == len(ref)
    for i in range(pd.n):
        key = (int(pd.chains["sample"][i]), int(pd.chains["t"][i]))
        M, sk = ref[key]
        assert int(pd.chains["matched"][i]) == M
        got = np.where(np.arange(setting.steps) <= M, pd.chains["s"][i], 0.0)
        want = np.where(np.arange(setting.steps) <= M, sk, 0.0)
        assert np.allclose(got, want, atol=1e-5), (key, got, want)
    # the chain table's A is the matched depth, and the decode path walks it
    a = dict(zip(zip(res.chains["sample"].tolist(), res.chains["t"].tolist()), res.chains["accepted"].tolist()))
    assert all(a[k] == v[0] for k, v in ref.items())
    assert np.array_equal(pd.chains["on_path"], res.chains["on_path"])
    assert "per depth" in res.summary() and f"temperature {setting.temperature:g}" in res.summary()
    js = res.to_json()
    assert js["per_depth"]["n_starts"] == pd.n and js["setting"]["temperature"] == setting.temperature


def test_sampled_simulation_makes_no_extra_target_forward(world):
    target, draft = world
    rows = sampled_rows(target, 4, 10, Sampling(temperature=0.7))
    with capture.count_forwards(target.model) as greedy:
        simulate(target, draft, rows, ["L0,L1,L2"], K=3, progress=False, batch_size=2)
    with capture.count_forwards(target.model) as hot:
        simulate(target, draft, rows, ["L0,L1,L2"], setting=Setting(steps=3, temperature=0.7), progress=False,
                 batch_size=2)
    assert hot == greedy == {"calls": 2, "samples": 4}


def test_per_depth_survives_shards_and_filters(world, tmp_path):
    from workbench.simulate import distributed

    target, draft = world
    rows = sampled_rows(target, 4, 10, Sampling(temperature=0.7))
    st = Setting(steps=2, temperature=0.7)
    res = simulate(target, draft, rows, ["L0,L1,L2"], setting=st, progress=False, batch_size=2)["L0,L1,L2"]
    back, _ = distributed.decode_results(distributed.encode_results({"w": res}))
    assert back["w"].per_depth.n == res.per_depth.n
    assert back["w"].per_depth.accept_length == pytest.approx(res.per_depth.accept_length)
    part = res.filter(source="a")
    assert part.per_depth.n == part.n_chains


def test_rejection_chain_estimators_agree_with_monte_carlo_rejection_sampling():
    """Standard speculative sampling on a hand-made chain (p, q fixed per step): the two forms, averaged over
    y ~ p, equal the Monte-Carlo acceptance (within 3 standard errors)."""
    rng = np.random.default_rng(0)
    K, V = 3, 6
    p = torch.tensor(rng.dirichlet(np.ones(V), size=K))
    q = torch.tensor(rng.dirichlet(np.ones(V) * 0.5, size=K))
    n = 20000
    # Monte Carlo: draft x ~ q, accept with min(1, p/q), stop at the first rejection
    A = np.zeros(n)
    for i in range(n):
        a = 0
        for k in range(K):
            x = rng.choice(V, p=q[k].numpy())
            if rng.random() < min(1.0, float(p[k, x] / q[k, x])):
                a += 1
            else:
                break
        A[i] = a
    # the estimators, on y ~ p (the emitted stream of a lossless server)
    y = torch.stack([torch.multinomial(p[k], n, replacement=True, generator=torch.Generator().manual_seed(k))
                     for k in range(K)], 1)
    e, lv, cum = sampled.rejection_chain(p.expand(n, K, V), q.expand(n, K, V), y)
    exact_beta = torch.minimum(p, q).sum(-1).double()
    exact = float(sum(torch.prod(exact_beta[: k + 1]) for k in range(K)))
    se = A.std() / np.sqrt(n)
    assert abs(A.mean() - exact) < 3 * se
    assert abs(float(e.mean()) - exact) < 3 * float(e.std()) / np.sqrt(n)
    assert abs(float(lv.mean()) - exact) < 3 * float(lv.std()) / np.sqrt(n) + 1e-9
    assert float(lv.std()) < float(e.std())                     # the low-variance form


# ---------------------------------------------------------------------------------------------- lossy, rejection

def test_threshold_expectation_matches_one_tree_forwards_and_the_per_depth_root_mass(world):
    """The batched forward over a row and all its trees gives the same p as one ancestor-masked forward per
    tree; with thresholds 1, P(A >= 1) at each start equals the per-depth s_0 (both: the root's children's
    mass under the teacher-forced p); lossy thresholds change the expectation."""
    from workbench.simulate.thresholds import threshold_expectation
    from workbench.model.tree import draft_trees
    from workbench.simulate.tree_verify import ancestor_mask, tree_forward
    from workbench.simulate.verify_walk import expected_accept

    target, draft = world
    st = Setting(steps=3, eagle_topk=2, num_draft_tokens=5, temperature=0.8)
    rows = sampled_rows(target, 3, 10, sampled.as_sampling(st))
    with capture.count_forwards(target.model) as c:
        res = threshold_expectation(target, draft, rows, "L0,L1,L2", st, threshold_single=0.5, threshold_acc=0.6,
                                    max_tree_tokens=12, progress=False)
    assert c["calls"] == 1 + res.cost["target_forwards"] and res.cost["target_forwards"] > 3   # chunks of 3 trees
    loss1 = threshold_expectation(target, draft, rows, "L0,L1,L2", st, progress=False)
    assert np.allclose(loss1.expected, res.lossless) and not np.allclose(res.expected, res.lossless)
    pd = simulate(target, draft, rows, ["L0,L1,L2"], setting=st, progress=False)["L0,L1,L2"].per_depth
    assert np.allclose(loss1.at_least[:, 0], pd.chains["s"][:, 0], atol=1e-5)
    # one start by hand: a single ancestor-masked forward over prefix + tree
    batch = next(capture.extract(target, rows[:1], ["L0,L1,L2"], progress=False))
    tr = draft_trees(draft, batch.concat(["L0", "L1", "L2"]), batch.input_ids, batch.attention_mask, 3, 2, 5)
    t = int(pd.chains["t"][0])
    node = tr.node(0, t)
    x = rows[0]["input_ids"][: t + 2]
    logits, _ = tree_forward(target, [], x + node["tokens"], ancestor_mask(node["parents"], t + 2),
                             list(range(t + 2)) + [t + 1 + d for d in node["depths"]])
    probs = served.verify_probs(logits[t + 1:], sampled.as_sampling(st)).double().numpy()
    want = expected_accept(node["tokens"], node["parents"], probs, steps=3, threshold_single=0.5, threshold_acc=0.6)
    assert res.expected[0] == pytest.approx(want[0], abs=1e-5)


def test_rejection_chains_match_a_full_reference(world):
    """w_j and β_j of the fast path against q from a per-chain draft reference fed the data and p from the full
    logits."""
    from workbench.model.draft import unroll
    from workbench.simulate.rejection import rejection_batch, rejection_chains

    target, draft = world
    st = Setting(steps=2, temperature=0.9, top_k=10)
    s = sampled.as_sampling(st)
    rows = sampled_rows(target, 2, 8, s)
    batch = next(capture.extract(target, rows, ["L0,L1,L2"], progress=False, sampling=s))
    feats = batch.concat(["L0", "L1", "L2"])
    w, beta = rejection_batch(draft, feats, batch, capture.split_head(target.model)[1], s, 2)
    with torch.no_grad():
        logits = target.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        x = batch.input_ids
        teacher = torch.stack([torch.cat([x[:, 1 + k:], torch.zeros(x.shape[0], 1 + k, dtype=x.dtype)], 1)
                               for k in range(2)], -1)
        steps = list(unroll(draft, feats, x, batch.attention_mask, 2, teacher=teacher))
    b, t = 0, 1
    for k in range(2):
        q = torch.zeros(target.vocab_size)
        q[draft.to_target(torch.arange(draft.draft_vocab_size))] = served.verify_probs(steps[k][b, t][None], s)[0]
        p = served.verify_probs(logits[b, t + 1 + k][None], s)[0]
        y = int(x[b, t + 2 + k])
        assert float(w[b, t, k]) == pytest.approx(min(1.0, float(q[y] / p[y])) if p[y] > 0 else 0.0, abs=1e-5)
        assert float(beta[b, t, k]) == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-5)
    res = rejection_chains(target, draft, rows, "L0,L1,L2", st, progress=False)
    assert res.n == simulate(target, draft, rows, ["L0,L1,L2"], setting=st, progress=False)["L0,L1,L2"].n_chains
    assert 1.0 <= res.accept_length <= 3.0 and "rejection-sampling" in res.summary_lines()[0]
    with pytest.raises(Exception, match="chain"):
        rejection_chains(target, draft, rows, "L0,L1,L2", Setting(steps=2, eagle_topk=2, num_draft_tokens=3,
                                                                  temperature=0.9), progress=False)


def test_the_feature_cache_keeps_the_served_statistics(world, tmp_path):
    target, _ = world
    s = Sampling(temperature=0.7, top_p=0.9)
    rows = sampled_rows(target, 2, 6, s)
    first = next(capture.extract(target, rows, ["L0,L1,L2"], progress=False, sampling=s, cache_dir=tmp_path))
    again = next(capture.extract(target, rows, ["L0,L1,L2"], progress=False, sampling=s, cache_dir=tmp_path))
    assert again.from_cache and torch.equal(first.served, again.served) and torch.equal(first.hidden, again.hidden)
    greedy = next(capture.extract(target, rows, ["L0,L1,L2"], progress=False, cache_dir=tmp_path))
    assert not greedy.from_cache and greedy.served is None          # another cache key: sampling is part of it
