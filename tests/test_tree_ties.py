"""Issue 47: near-ties in SGLang trees (eagle_topk > 1) are the draft's, as for chains.

Inside the server's output the comparison runs against the server's own tokens, so the target's near-ties cannot
move a tree's accept count there; the draft's can: a server computing at bfloat16 may put another token into the
tree where the draft's k-th and (k+1)-th logits (or two nodes' scores at a re-rank or at the selection of N-1
nodes) lie within bfloat16's resolution. ``draft_trees(gaps=True)`` records, per tree and depth, the smallest
such gap; ``tree_reference(gaps=True)`` is its exact node-by-node reference; ``ServerSteps.tie_at`` uses them.
"""

from __future__ import annotations

import math

import pytest
import torch

from workbench.live import precision as prec
from workbench.live.fingerprint import ServerSteps, status
from workbench.model.draft import run_chains
from workbench.model.tree import draft_trees
from workbench.model.tree_reference import tree_reference

from test_tree import VARIANTS, batch, make_draft

pytestmark = pytest.mark.usefixtures("one_thread")
BF16, FP32 = prec.eps("bfloat16"), prec.eps("float32")


def _same(fast: list, ref: list, atol: float = 1e-5) -> bool:
    return all((math.isinf(a) and a == b) or abs(a - b) <= atol for a, b in zip(fast, ref))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("S,k,N", [(3, 2, 6), (4, 3, 12), (5, 4, 8), (2, 4, 21)])
def test_tree_gaps_equal_the_node_by_node_reference(variant, S, k, N):
    d = make_draft(**VARIANTS[variant])
    feats, ids, mask = batch(d)
    out = draft_trees(d, feats, ids, mask, S, k, N, gaps=True)
    plain = draft_trees(d, feats, ids, mask, S, k, N)
    assert torch.equal(out.cand_tokens, plain.cand_tokens) and torch.equal(out.flat, plain.flat)   # same trees
    assert out.gaps.shape == (3, 9, S) and plain.gaps is None
    for b, n in enumerate(mask.sum(1).tolist()):
        for t in range(n - 1):
            ref = tree_reference(d, feats[b, :n], ids[b, :n], t, S, k, N, gaps=True)
            assert ref.flat == out.node(b, t)["flat"]
            assert _same(out.gaps[b, t].tolist(), ref.gaps), (b, t, out.gaps[b, t].tolist(), ref.gaps)
    # a re-selection (another N) recomputes the selection part; the drafting part is kept
    other = out.select(N - 1 if N > 2 else N)
    again = draft_trees(d, feats, ids, mask, S, k, other.num_draft_tokens, gaps=True)
    assert torch.allclose(other.gaps, again.gaps)


def test_eagle_topk_1_gaps_are_the_chains():
    d = make_draft()
    feats, ids, mask = batch(d)
    chain = run_chains(d, feats, ids, mask, 4, gaps=True)
    tree = draft_trees(d, feats, ids, mask, 4, 1, 5, gaps=True)
    assert torch.allclose(tree.gaps, chain.gaps, atol=1e-6)


def _draft_with_a_kth_near_tie(S=3, k=2, N=5, t=3):
    """A draft whose k-th and (k+1)-th logits at depth 1 of the tree at t differ by 1e-4 of the k-th (bfloat16's
    step is 2^-7 = 0.0078; float32's 1.2e-7): the (k+1)-th token's lm_head row is the k-th's, scaled."""
    d = make_draft()
    feats, ids, mask = batch(d, B=1, T=9, lengths=(9,))
    before = draft_trees(d, feats, ids, mask, S, k, N, gaps=True)
    with torch.no_grad():
        out = d.finish(*_first(d, feats, ids))
        logits = d.logits(out)[0, t].float()
        rank = logits.argsort(descending=True)
        a, far = int(rank[k - 1]), int(rank[-1])             # the k-th token, and one far below (draft ids)
        la = float(logits[a])
        d.lm_head.weight[far] = d.lm_head.weight[a] * (1 - 1e-4 if la > 0 else 1 + 1e-4)
    after = draft_trees(d, feats, ids, mask, S, k, N, gaps=True)
    want = 1e-4 * abs(la) / max(float(logits.max().abs()), 1.0)
    return d, feats, ids, before, after, want


def _first(d, feats, ids):
    """The draft's step-0 pass (residual and attention) over the row, as ``draft_trees`` runs it."""
    import math as m

    from workbench.model.attention import prefix_attention

    h = d.project(feats)
    tok = torch.zeros_like(ids)
    tok[:, :-1] = ids[:, 1:]
    q, k0, v0, residual = d.qkv(h, d.embed_tokens(tok), torch.arange(ids.shape[1]))
    return residual, prefix_attention(q, k0, v0, scale=1.0 / m.sqrt(d.spec.head_dim))


def test_a_kth_logit_near_tie_in_the_tree_is_a_near_tie_at_bfloat16_only():
    d, feats, ids, before, after, want = _draft_with_a_kth_near_tie()
    t = 3
    assert torch.equal(after.tokens[0, t], before.tokens[0, t])          # the same tree at t ...
    g = float(after.gaps[0, t, 0])
    assert g <= want * 1.01 and FP32 < g <= BF16, (g, want)               # ... one bfloat16 step from another one
    assert float(before.gaps[0, t, 0]) > want * 10
    assert after.gaps[0, t].max() <= g                                    # it can change every depth below it
    ref = tree_reference(d, feats[0], ids[0], t, 3, 2, 5, gaps=True)
    assert _same(after.gaps[0, t].tolist(), ref.gaps)


def _tree_steps(draft_gap=1.0, target_tie_at=(), n_output=8, depth=3):
    """A tree request with prompt 4 (start t=3), S=3: A at every t of its row; the server's walk from t=3."""
    row = [-1, -1, -1, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    gaps = [(1.0, False)] * (len(row) + depth + 2)
    for p in target_tie_at:
        gaps[p] = (1e-3, False)
    dg = [[1.0] * depth for _ in row]
    dg[3] = [draft_gap] * depth                     # the tree at t=3: its drafting gap (depths 1..S)
    path, t, emitted = [], 3, 1
    while emitted < n_output:
        path.append(row[t])
        emitted += row[t] + 1
        t += row[t] + 1
    return ServerSteps(path, n_output, [False] * len(path), row=row, gaps=gaps, start=3, depth=depth,
                       draft_gaps=dg)


def test_a_server_step_that_parts_at_a_tree_near_tie_is_a_near_tie_and_only_there():
    """What a user sees: the server accepted 1 at the first step where the offline tree accepted 0. Where the
    draft's k-th and (k+1)-th logits at that tree's depth 1 are a bfloat16 near-tie (the gap measured on a real
    draft above), the request is a near-tie at bfloat16 and differs at float32; a near-tie of the target there
    (inside the output) excuses nothing, as for chains; past the output it still does."""
    *_, after, _ = _draft_with_a_kth_near_tie()
    g = float(after.gaps[0, 3, 0])
    st = _tree_steps(draft_gap=g)
    assert st.accepts == [0, 2, 2]
    live = {"per_step_accepted": [1, 2, 2]}                       # the server had the target's token in its tree
    assert status(live, st, "v2", BF16) == "tie"
    assert status(live, st, "v2", FP32) == "differs"
    target_only = _tree_steps(target_tie_at=[4])                  # p = t + 1: the target's near-tie, inside the output
    assert status(live, target_only, "v2", BF16) == "differs"
    legacy = _tree_steps(target_tie_at=[4])
    legacy.draft_gaps = None                                      # the older rule (no draft gaps): any target tie
    assert status(live, legacy, "v2", BF16) == "tie"
    # the last step (t=7) accepted 3 where the offline tree accepted 2: depth 3 looks past the output (p = 10)
    past = _tree_steps(target_tie_at=[10], n_output=7)
    assert status({"per_step_accepted": [0, 2, 3]}, past, "v2", BF16) == "tie"
    assert status({"per_step_accepted": [0, 2, 3]}, _tree_steps(n_output=7), "v2", BF16) == "differs"


def test_the_tree_stand_in_still_names_the_served_wiring_with_draft_gaps(tmp_path_factory):
    """The loopback SGLang stand-in drafting trees (topk 2, 5 draft tokens): every request carries the tree's draft
    gaps, near-ties inside the output come from them only, and the verdict names the wiring the server feeds."""
    from test_sglang_live import K, SERVED, _build

    from workbench.live.sglang_live import compare
    from workbench.testing.fake_sglang import serve

    world = _build(tmp_path_factory)
    target, draft = world["target"], world["drafts"]["mismatched"]
    with serve(target, draft, K=K, variant="newest", topk=2, num_draft_tokens=5) as url:
        cmp = compare(url, target, draft, world["rows"], progress=False)
    assert cmp.setting.shape == "tree" and cmp.verdict_code == "match-other" and cmp.matched == SERVED, cmp.verdict
    for spec, per in cmp.requests.items():
        for st in per:
            assert st.draft_gaps is not None and all(len(g) == K for g in st.draft_gaps), spec
            inside = {p for p in st.ties(BF16) if p < st.start + st.n_output}
            by_draft = {t + d for t in range(len(st.draft_gaps)) for d in range(1, K + 1)
                        if st.draft_gaps[t][d - 1] <= BF16}
            assert inside <= by_draft, spec
