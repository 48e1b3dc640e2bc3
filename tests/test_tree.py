"""SGLang draft trees (eagle_topk > 1): flag arithmetic, a hand-made tree, the parallel trees equal the
node-by-node KV-cached reference at every start, eagle_topk 1 is the chain, and the fast decode path
equals the exact speculative loop with tree verification on a tiny Llama target."""

from __future__ import annotations

import doctest
import pytest
import torch
import transformers

from workbench.model import capture, draft as dmod, train
from workbench.simulate.exact import exact_decode
from workbench.stats.counts import accepted_counts, decode_path
from workbench.demo.samples import greedy_continue
from workbench.model.draft import run_chains
from workbench.core.errors import WorkbenchError
from workbench.model.tree import (TreeOutput, depth_of, draft_trees, n_candidates, prefix_extra_attention, select_nodes,
                            tree_shape)
from workbench.model.tree_reference import Node, select_reference, tree_reference
from workbench.simulate.tree_verify import (ancestor_mask, exact_tree_decode, greedy_walk, tree_accepted_counts,
                                   tree_walk_lengths)

from test_acceptance_sim import one_thread  # noqa: F401  (autouse: single-threaded tiny ops)
from test_draft import V, batch as _batch, make_draft as _make_draft


def make_draft(seed=0, *, sharp=3.0, **variant):
    """test_draft's random draft with a sharper lm_head: scores far from ties."""
    d = _make_draft(seed, **variant)
    with torch.no_grad():
        d.lm_head.weight.mul_(sharp)
    return d.eval()


def batch(draft, B=3, T=9, lengths=(9, 6, 3), seed=1):
    return _batch(draft, B=B, T=T, lengths=lengths, seed=seed)


# ------------------------------------------------------------------------------------------------ flags

def test_flag_arithmetic():
    assert tree_shape(5, 4, 8).num_draft_tokens == 8 and tree_shape(5, 4, 8).notes == ()
    assert n_candidates(5, 4) == 4 + 4 * 16 and tree_shape(5, 4, 69).num_draft_tokens == 69
    with pytest.raises(WorkbenchError, match=r"num_draft_tokens 70 is too large for steps 5, eagle_topk 4: "
                                             r"N-1 must be <= k \+ \(S-1\)\*k\^2 = 68") as e:
        tree_shape(5, 4, 70)
    assert "\n" not in str(e.value)
    s = tree_shape(1, 1, 16)                                  # SGLang drafts 1 token, whatever N says
    assert s.num_draft_tokens == 2 and "forces num_draft_tokens = steps + 1 = 2" in s.notes[0]
    assert tree_shape(4, 1).num_draft_tokens == 5 and tree_shape(4, 1, 5).notes == ()
    for bad in [(0, 2, 3), (2, 0, 3), (2, 2, 1), (2, 2, None), (2.0, 2, 3), (True, 2, 3)]:
        with pytest.raises(WorkbenchError):
            tree_shape(*bad)


# ------------------------------------------------------------------------------------------------ by hand

def test_hand_made_tree_selection_walk_and_counts():
    # k = 2, S = 3: flat 0,1 depth 1; 2..5 depth 2 (slot 0 -> 2,3; slot 1 -> 4,5);
    # depth-3 candidates 6..9 come from the two best depth-2 nodes (4 and 2, in that slot order)
    k = 2
    tok = torch.tensor([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
    score = torch.tensor([.6, .4, .3, .2, .35, .05, .30, .04, .10, .09])
    par = torch.tensor([-1, -1, 0, 0, 1, 1, 4, 4, 2, 2])
    flat, parents = select_nodes(score, par, 6)               # top 5: 0 (.6), 1 (.4), 4 (.35), 2 (.3), 6 (.3)
    assert flat.tolist() == [0, 1, 2, 4, 6]
    assert select_nodes(score, par, 5)[0].tolist() == [0, 1, 2, 4]     # the .30 tie: lower flat index (2) wins
    assert parents.tolist() == [0, 0, 1, 2, 4]                 # 2 <- node 0 (v1); 4 <- node 1 (v2); 6 <- node 4 (v4)
    assert depth_of(flat, k).tolist() == [1, 1, 2, 2, 3]
    ref = select_reference([Node(int(f), int(tok[f]), int(par[f]), int(depth_of(torch.tensor(f), k)), float(score[f]))
                            for f in range(10)], 6)
    assert ref.flat == flat.tolist() and ref.parents == parents.tolist() and ref.tokens == [10, 11, 12, 14, 16]
    assert ref.ancestors(5) == [2, 4, 5]
    # the walk: tokens by verified index 1..5 = 10, 11, 12, 14, 16
    assert greedy_walk(ref.tokens, ref.parents, [11, 0, 14, 0, 16, 0], steps=3) == (3, [2, 4, 5])
    assert greedy_walk(ref.tokens, ref.parents, [11, 0, 14, 0, 16, 0], steps=2) == (2, [2, 4])
    assert greedy_walk(ref.tokens, ref.parents, [10, 12, 0, 0, 0, 0], steps=3) == (2, [1, 3])
    assert greedy_walk(ref.tokens, ref.parents, [13, 0, 0, 0, 0, 0], steps=3) == (0, [])
    # the same tree at every start of a target-greedy sample, counted like chains of K = 3
    T = 10
    g = torch.tensor([[5, 11, 14, 16, 10, 12, 7, 11, 14, 3]])  # g_{p+1} = next_token[p]
    out = TreeOutput.from_candidates(tok.expand(1, T, 10), score.expand(1, T, 10), par.expand(1, T, 10),
                                     steps=3, topk=2, num_draft_tokens=6)
    # t=0: g_2..g_4 = 11,14,16 -> 3; t=3: g_5 = 10, g_6 = 12 -> 2; t=6: 11, 14, then g_10 = 3 -> 2
    assert tree_walk_lengths(out.tokens, out.parents, out.depths, g).tolist() == [[3, 0, 0, 2, 0, 0, 2, 0, 0, 0]]
    loss = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    A = tree_accepted_counts(out, g, loss, torch.tensor([T]))
    assert A.tolist() == [[3, 0, 0, 2, 0, 0, -1, -1, -1, -1]]   # counted: t + 4 <= 9 and t+2.. in the response
    assert decode_path(A[0], n_prompt_tokens=1, K=3) == [(0, 3), (4, 0), (5, 0)]
    # a smaller N from the same candidates, and a smaller depth
    assert out.select(3).flat[0, 0].tolist() == [0, 1]
    assert out.select(4, steps=2).flat[0, 0].tolist() == [0, 1, 4]


def test_the_walk_takes_the_first_matching_child_only():
    # two children of the root carry the same token (possible when d2t maps two draft ids to one
    # target id): the walk follows the first one; its subtree decides A, not the deeper sibling's
    tokens, parents = [7, 7, 8], [0, 0, 2]
    assert greedy_walk(tokens, parents, [7, 8, 8, 0], steps=3) == (1, [1])
    T = 4
    out = TreeOutput.from_candidates(torch.tensor([7, 7, 8]).expand(1, T, 3), torch.tensor([.5, .4, .3]).expand(1, T, 3),
                                     torch.tensor([-1, -1, 1]).expand(1, T, 3), steps=2, topk=2, num_draft_tokens=4)
    g = torch.tensor([[0, 7, 8, 0]])
    assert out.parents[0, 0].tolist() == [0, 0, 2]
    assert tree_walk_lengths(out.tokens, out.parents, out.depths, g)[0, 0] == 1


def test_ancestor_mask():
    m = ancestor_mask([0, 1, 1, 0], prefix_len=3)
    assert m.shape == (7, 7)
    assert m[:3, :3].equal(torch.tril(torch.ones(3, 3, dtype=torch.bool)))
    assert m[5].tolist() == [True, True, True, True, False, True, False]    # node 3: root, node 1, itself
    assert m[6].tolist() == [True, True, True, False, False, False, True]   # node 4: root child


# ------------------------------------------------------------------------------------------------ attention

def _dense_lane_attention(q, k0, v0, key_mask, ek, ev, scale):
    B, h, L, T, d = q.shape
    out = torch.zeros_like(q)
    for b in range(B):
        for p in range(T):
            ok = [s for s in range(p + 1) if key_mask[b, s] or s == p]
            for l in range(L):
                keys = torch.cat([k0[b, :, ok], ek[b, :, l, p]], 1) if ek is not None else k0[b, :, ok]
                vals = torch.cat([v0[b, :, ok], ev[b, :, l, p]], 1) if ev is not None else v0[b, :, ok]
                w = torch.softmax((q[b, :, l, p, None] * keys).sum(-1) * scale, -1)
                out[b, :, l, p] = (w[..., None] * vals).sum(1)
    return out


@pytest.mark.parametrize("E", [0, 3])
def test_lane_attention_equals_dense(E):
    torch.manual_seed(0)
    B, h, L, T, d = 2, 3, 4, 7, 8
    q, k0, v0 = torch.randn(B, h, L, T, d), torch.randn(B, h, T, d), torch.randn(B, h, T, d)
    ek, ev = (torch.randn(B, h, L, T, E, d), torch.randn(B, h, L, T, E, d)) if E else (None, None)
    key_mask = torch.ones(B, T, dtype=torch.bool)
    key_mask[1, 4:] = False
    want = _dense_lane_attention(q, k0, v0, key_mask, ek, ev, 0.3)
    for block in (1, 3, None):
        got = prefix_extra_attention(q, k0, v0, key_mask, ek, ev, scale=0.3, block=block)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------ parallel == reference

VARIANTS = {"plain": {}, "gqa-reduced-vocab-wide-target": dict(kv=2, draft_vocab=40, target_hidden=48)}
SHAPES = [(3, 2, 6), (4, 3, 12), (2, 4, 21), (5, 4, 8)]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("S,k,N", SHAPES)
def test_parallel_trees_equal_the_sequential_reference_at_every_start(variant, S, k, N):
    d = make_draft(**VARIANTS[variant])
    feats, ids, mask = batch(d)
    out = draft_trees(d, feats, ids, mask, S, k, N)
    F = n_candidates(S, k)
    assert out.tokens.shape == (3, 9, N - 1) and out.cand_scores.shape == (3, 9, F)
    torch.manual_seed(5)
    g = torch.randint(0, V, (3, 9))
    g[:, 1:] = torch.where(torch.rand(3, 8) < 0.5, out.tokens[:, :-1, 0], g[:, 1:])   # some depth-1 matches
    A_fast = tree_walk_lengths(out.tokens, out.parents, out.depths, g)
    checked, walked = 0, 0
    for b, n in enumerate(mask.sum(1).tolist()):
        for t in range(n - 1):
            ref = tree_reference(d, feats[b, :n], ids[b, :n], t, S, k, N)
            assert [c.token for c in ref.candidates] == out.cand_tokens[b, t].tolist(), (b, t)
            assert [c.parent for c in ref.candidates] == out.cand_parents[b, t].tolist(), (b, t)
            torch.testing.assert_close(out.cand_scores[b, t], torch.tensor([c.score for c in ref.candidates]),
                                       rtol=0, atol=1e-5)
            got = out.node(b, t)
            assert (got["flat"], got["tokens"], got["parents"], got["depths"]) == \
                (ref.flat, ref.tokens, ref.parents, ref.depths), (b, t)
            assert max(abs(x - y) for x, y in zip(got["scores"], ref.scores)) < 1e-5
            # target-greedy data: the target's argmax after node v (depth d) is g_{t+d+2} = next_token[t+d+1]
            preds = [int(g[b, t + 1 + dep]) if t + 1 + dep < 9 else -1 for dep in [0] + ref.depths]
            a, _ = greedy_walk(ref.tokens, ref.parents, preds, S)
            assert a == int(A_fast[b, t]), (b, t, a, int(A_fast[b, t]))
            walked += a > 0
            checked += 1
    assert checked == 8 + 5 + 2 and walked > 0


def test_slot_lineage_is_not_true_ancestry():
    """After re-ranking, a slot may hold a node whose parent lived in another slot; it keeps its own keys."""
    d = make_draft(sharp=1.0)
    feats, ids, mask = batch(d, B=1, T=9, lengths=(9,))
    S, k = 4, 3
    out = draft_trees(d, feats, ids, mask, S, k, n_candidates(S, k) + 1)
    # slot j's depth-3 candidates are flat k + k² + j*k + c; their parent is the node slot j held at depth 2,
    # which was proposed by slot (parent - k) // k: different from j somewhere
    par = out.cand_parents[0, :, k + k * k:k + 2 * k * k]                     # [T, k*k]
    lane = torch.arange(k).repeat_interleave(k)
    assert ((par - k) // k != lane).any()


@pytest.mark.parametrize("shift", [0, 1])
def test_rope_shift_matches_the_reference(shift):
    d = make_draft(seed=3)
    feats, ids, mask = batch(d, B=1, T=8, lengths=(8,))
    out = draft_trees(d, feats, ids, mask, 3, 3, 9, rope_shift=shift)
    other = draft_trees(d, feats, ids, mask, 3, 3, 9, rope_shift=1 - shift)
    assert not torch.equal(out.cand_scores, other.cand_scores)
    for t in range(7):
        ref = tree_reference(d, feats[0], ids[0], t, 3, 3, 9, rope_shift=shift)
        assert out.node(0, t)["flat"] == ref.flat and out.node(0, t)["tokens"] == ref.tokens


# ------------------------------------------------------------------------------------------------ topk 1 == chain

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_eagle_topk_1_is_exactly_the_chain(variant):
    d = make_draft(**VARIANTS[variant])
    feats, ids, mask = batch(d)
    K = 5
    chain = run_chains(d, feats, ids, mask, K)
    out = draft_trees(d, feats, ids, mask, K, 1, 99)
    assert out.num_draft_tokens == K + 1 and "forces" in out.notes[0]
    assert torch.equal(out.tokens, chain.tokens)
    assert out.depths[0, 0].tolist() == list(range(1, K + 1)) and out.parents[0, 0].tolist() == list(range(K))
    # the same counts, every start, on data where chains accept various lengths
    torch.manual_seed(2)
    g = torch.randint(0, V, (3, 9))
    for t in range(9):                     # make the chain at t right for a random number of steps
        a = int(torch.randint(0, K + 1, ()))
        for j in range(a):
            if t + j + 1 < 9:
                g[:, t + j + 1] = chain.tokens[:, t, j]
    loss = mask.clone()
    loss[:, :2] = 0
    lengths = mask.sum(1)
    want = accepted_counts(chain.tokens, g, loss, lengths, K)
    got = tree_accepted_counts(out, g, loss, lengths)
    assert torch.equal(got, want) and len(set(want[want >= 0].tolist())) >= 2


def test_bad_inputs_are_one_line_errors():
    d = make_draft()
    feats, ids, mask = batch(d)
    with pytest.raises(WorkbenchError, match="width"):
        draft_trees(d, feats[..., :-1], ids, mask, 3, 2, 5)
    with pytest.raises(WorkbenchError, match="eagle_topk 61 exceeds the draft vocab"):
        draft_trees(d, feats, ids, mask, 2, 61, 5)
    with pytest.raises(WorkbenchError, match="needs the root token"):
        tree_reference(d, feats[0], ids[0], 8, 2, 2, 4)
    with pytest.raises(WorkbenchError, match="expected 1..3"):
        draft_trees(d, feats, ids, mask, 3, 2, 5).select(4, steps=4)


# ------------------------------------------------------------------------------------------------ exact loop

TRAINED = "L0,L1,L2"
N_RESP = 24


@pytest.fixture(scope="module")
def setup(one_thread):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   initializer_range=0.3)
    target = capture.target_from_model(transformers.LlamaForCausalLM(cfg).eval())
    g = torch.Generator().manual_seed(1)
    rows = []
    for i in range(4):
        prompt = torch.randint(0, 32, (2 + i % 3,), generator=g).tolist()
        ids = prompt + greedy_continue(target.model, [prompt], N_RESP)[0]
        rows.append({"input_ids": ids, "loss_mask": [0] * len(prompt) + [1] * N_RESP,
                     "n_prompt_tokens": len(prompt), "_row": i})
    draft = dmod.Eagle3Draft.from_config(dmod.new_draft_config(cfg.to_dict(), layer_ids=[0, 1, 2]),
                                         target.embed_weight())
    train.train_draft(draft, target, rows, TRAINED.split(","), K=3, epochs=8, lr=1e-2, batch_size=4,
                      progress=False)
    return target, draft.eval(), rows


@pytest.mark.parametrize("S,k,N", [(3, 2, 5), (4, 4, 10), (3, 1, 4)])
def test_fast_tree_decode_path_equals_the_exact_tree_loop(setup, S, k, N):
    target, draft, rows = setup
    batch_ = next(capture.extract(target, rows, [TRAINED], batch_size=len(rows), progress=False))
    feats = batch_.concat(TRAINED.split(","))
    out = draft_trees(draft, feats, batch_.input_ids, batch_.attention_mask, S, k, N)
    A = tree_accepted_counts(out, batch_.next_token, batch_.loss_mask, batch_.lengths)
    seen = set()
    for b, r in enumerate(batch_.rows):                       # batches are grouped by length
        row = rows[r]
        n = row["n_prompt_tokens"]
        T = len(row["input_ids"])
        gen, accepts = exact_tree_decode(target, draft, row["input_ids"][:n], TRAINED, S, k, N, N_RESP)
        assert gen == row["input_ids"][n:]                   # greedy speculative decoding = greedy decoding
        path = decode_path(A[b, :T], n_prompt_tokens=n, K=S)
        t, exact = n - 1, []
        for a in accepts:                                     # the verify steps whose S positions fit
            if t + S + 1 > T - 1:
                break
            exact.append((t, a))
            t += a + 1
        assert path == exact, (b, path, exact)
        if k == 1:                                            # the tree loop with topk 1 is the chain loop
            assert accepts == exact_decode(target, draft, row["input_ids"][:n], TRAINED, S, N_RESP)[1]
        seen |= {a for _, a in path}
    assert len(seen) >= 2, f"degenerate: every verify step accepted {seen}"


def test_docstring_examples_run():
    import workbench.model.tree
    import workbench.model.tree_reference
    import workbench.simulate.tree_verify

    for mod in (workbench.model.tree, workbench.model.tree_reference, workbench.simulate.tree_verify):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


def test_a_smaller_tree_is_a_selection_from_a_deeper_run():
    """What the flag sweep reuses: one depth-S run per eagle_topk serves every S' <= S and every N."""
    d = make_draft(seed=4)
    feats, ids, mask = batch(d)
    deep = draft_trees(d, feats, ids, mask, 5, 3, 20)
    for S, N in [(5, 8), (3, 13), (2, 4), (1, 3)]:
        fresh = draft_trees(d, feats, ids, mask, S, 3, N)
        got = deep.select(N, steps=S)
        assert torch.equal(got.cand_tokens, fresh.cand_tokens) and torch.equal(got.flat, fresh.flat)
        assert torch.equal(got.parents, fresh.parents) and torch.equal(got.tokens, fresh.tokens)
        torch.testing.assert_close(got.scores, fresh.scores, rtol=0, atol=1e-6)
