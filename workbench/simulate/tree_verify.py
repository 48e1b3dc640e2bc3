"""Greedy verification of SGLang draft trees: the walk, per-start accepted counts, and the exact
speculative-decoding loop with a target forward over the tree.

    >>> import torch
    >>> from workbench.simulate.tree_verify import greedy_walk
    >>> tokens, parents = [7, 8, 9, 4], [0, 0, 1, 2]       # root -> 7 -> 9, root -> 8 -> 4
    >>> greedy_walk(tokens, parents, predictions=[8, 0, 4, 0, 1], steps=3)   # target says 8, then 4, then 1
    (2, [2, 4])

SGLang ``sgl-kernel eagle_utils.cu VerifyTreeGreedy``: from the root, among the current node's children
in ascending verified index (``build_tree_efficient`` prepends children while walking i = N-1..1),
take the first whose token equals the target's argmax after the current node; stop when none does,
at most ``steps`` levels. A = accepted nodes (0..S); the server emits A + 1 tokens.

Offline, when the data is the target's greedy output, the target's prediction after an accepted
node is the data's next greedy token, so A(t) = the longest prefix of g_{t+2}, g_{t+3}, … that the
walk finds (:func:`tree_accepted_counts`). Counting and the decode path are those of chains
(``acceptance.accepted_counts`` / ``acceptance.decode_path`` with K = steps).
"""

from __future__ import annotations

import torch

from workbench.core.errors import WorkbenchError
from workbench.model import capture
from workbench.model.tree import tree_shape
from workbench.model.tree_reference import tree_reference
from workbench.simulate.loop import decode_loop
from workbench.stats.counts import accepted_counts


def greedy_walk(tokens, parents, predictions, steps: int) -> tuple[int, list[int]]:
    """(A, accepted verified indices) of one tree; ``predictions[v]`` = target argmax after node v (0 = root).

    ``tokens``/``parents`` list the N-1 verified nodes (``parents`` as verified indices, 0 = root).
    """
    tokens, parents, predictions = (list(map(int, x.tolist() if hasattr(x, "tolist") else x))
                                    for x in (tokens, parents, predictions))
    if len(parents) != len(tokens) or len(predictions) != len(tokens) + 1:
        raise WorkbenchError(f"greedy_walk: {len(tokens)} tokens, {len(parents)} parents and {len(predictions)} "
                             f"predictions; expected N-1, N-1 and N")
    children: dict[int, list[int]] = {}
    for v, p in enumerate(parents, start=1):
        children.setdefault(p, []).append(v)                 # ascending verified index
    cur, path = 0, []
    for _ in range(int(steps)):
        nxt = next((c for c in children.get(cur, []) if tokens[c - 1] == predictions[cur]), None)
        if nxt is None:
            break
        path.append(nxt)
        cur = nxt
    return len(path), path


def tree_walk_lengths(tokens, parents, depths, next_token) -> torch.Tensor:
    """The greedy walk at every start position at once, on target-greedy data: A [B, T] (uncounted too).

        >>> g = torch.tensor([[1, 2, 3, 4, 5, 6]])                      # g_{p+1} at p
        >>> tok = torch.tensor([[[9, 3, 4]]]).expand(1, 6, 3).clone()  # root -> 9, root -> 3 -> 4
        >>> par, dep = torch.tensor([0, 0, 2]).expand(1, 6, 3), torch.tensor([1, 1, 2]).expand(1, 6, 3)
        >>> tree_walk_lengths(tok, par, dep, g).tolist()                  # at t=1: g_3=3, g_4=4 -> A=2
        [[0, 2, 0, 0, 0, 0]]

    Node v at depth d of the tree at t matches when its token equals g_{t+d+1} = next_token[t+d];
    it is accepted when it matches, its parent is accepted (the root always is) and no earlier
    sibling matched (the walk takes the first). Parents precede children in verified order.
    """
    on = walk_nodes(tokens, parents, depths, next_token)
    return torch.where(on[..., 1:], depths, torch.zeros_like(depths)).amax(-1).clamp(min=0)


def walk_nodes(tokens, parents, depths, next_token) -> torch.Tensor:
    """Bool ``[B, T, n+1]``: node v (0 = the root, always) is accepted by the walk of the tree at t
    against ``next_token`` (the target's argmax, or at T > 0 the data's tokens: ``sampled.data_next_tokens``).

        >>> g = torch.tensor([[1, 2, 3, 4, 5, 6]])
        >>> tok = torch.tensor([[[9, 3, 4]]]).expand(1, 6, 3).clone()
        >>> par, dep = torch.tensor([0, 0, 2]).expand(1, 6, 3), torch.tensor([1, 1, 2]).expand(1, 6, 3)
        >>> walk_nodes(tok, par, dep, g)[0, 1].tolist()            # root, then node 2 (token 3), node 3 (token 4)
        [True, False, True, True]
    """
    B, T, n = tokens.shape
    dev = tokens.device
    g = torch.cat([next_token.to(dev).long(), torch.full((B, int(depths.max()) + 1), -1, device=dev)], dim=1)
    t = torch.arange(T, device=dev)[None, :, None]
    want = g.gather(1, (t + depths).reshape(B, -1)).view(B, T, n)
    match = tokens == want
    on = torch.zeros(B, T, n + 1, dtype=torch.bool, device=dev)
    taken = torch.zeros_like(on)
    on[..., 0] = True
    for v in range(1, n + 1):
        par = parents[..., v - 1: v]
        ok = match[..., v - 1: v] & on.gather(-1, par) & ~taken.gather(-1, par)
        on[..., v: v + 1] = ok
        taken.scatter_(-1, par, taken.gather(-1, par) | ok)
    return on


def tree_accepted_counts(trees, next_token, loss_mask, lengths) -> torch.Tensor:
    """A(t) of every tree: LongTensor [B, T], -1 where the tree at t is not counted.

        >>> # A = tree_accepted_counts(draft_trees(...), batch.next_token, batch.loss_mask, batch.lengths)

    Counted exactly as a chain of K = ``trees.steps`` (t + S + 1 <= length - 1 and loss_mask at
    t+2..t+S+1 all 1): the walk's A is turned into a chain of A right tokens followed by misses
    and handed to ``acceptance.accepted_counts``, so both use one counting rule.
    """

    S = int(trees.steps)
    A = tree_walk_lengths(trees.tokens, trees.parents, trees.depths, next_token)
    B, T = A.shape
    dev = A.device
    g = torch.cat([next_token.to(dev).long(), torch.full((B, S + 1), -1, device=dev)], dim=1)
    ks = torch.arange(S, device=dev)
    rows = (torch.arange(T, device=dev)[:, None] + ks + 1)                    # [T, S]: g_{t+k+2}
    right = g[:, rows]                                                       # [B, T, S]
    chain = torch.where(ks < A[..., None], right, torch.full_like(right, -2))   # -2 never matches
    return accepted_counts(chain, next_token.to(dev), loss_mask.to(dev), lengths.to(dev), S)


def ancestor_mask(parents, prefix_len: int) -> torch.Tensor:
    """Bool [L, L] attention mask of a verify forward over prefix + tree (True = may attend).

        >>> ancestor_mask([0, 0, 1], prefix_len=2).int().tolist()   # x0, root, then nodes 1..3
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 1, 0, 1]]

    Rows/columns 0..prefix_len-1 are the sequence (causal; its last one is the root); row
    prefix_len-1+v is tree node v: it sees the whole prefix, its ancestors and itself (as SGLang's
    ``build_tree_efficient`` tree mask).
    """
    parents = [int(p) for p in parents]
    n = len(parents)
    L = prefix_len + n
    m = torch.zeros(L, L, dtype=torch.bool)
    m[:prefix_len, :prefix_len] = torch.tril(torch.ones(prefix_len, prefix_len, dtype=torch.bool))
    root = prefix_len - 1
    for v in range(1, n + 1):
        m[root + v, :prefix_len] = True
        a = v
        while a > 0:
            m[root + v, root + a] = True
            a = parents[a - 1]
    return m


def tree_forward(target, taps, seq, allowed=None, positions=None):
    """ONE target forward over ``seq`` (a list of ids): (logits [L, V], taps concatenated [L, W]).

        >>> # logits, feats = tree_forward(target, ["L1", "L3", "L4"], ids + tree.tokens,
        >>> #                              ancestor_mask(tree.parents, t + 2), positions)

    ``allowed`` (bool [L, L], :func:`ancestor_mask`) becomes a 4D additive mask and ``positions`` the
    position ids: the verify forward of SGLang over prefix + tree. Without them: a causal forward.
    """

    model, dev = target.model, target.device
    kw = {}
    if allowed is not None:
        dt = next(model.parameters()).dtype
        add = torch.zeros(allowed.shape, dtype=dt).masked_fill(~allowed, torch.finfo(dt).min)
        kw = {"attention_mask": add[None, None].to(dev), "position_ids": torch.tensor([positions], device=dev)}
    with torch.no_grad(), capture.tap_hooks(model, taps, device=dev) as f:
        out = model(input_ids=torch.tensor([seq], device=dev), use_cache=False, **kw)
        feats = torch.cat([f[tp] for tp in taps], dim=-1)[0] if taps else None
    return out.logits[0], feats


def exact_tree_decode(target, draft, prompt_ids, wiring, steps: int, eagle_topk: int, num_draft_tokens: int | None,
                      max_new_tokens: int, *, rope_shift: int | None = None, walk=None) -> tuple[list[int], list[int]]:
    """Greedy tree speculative decoding; returns (generated ids, A per verify step).

        >>> # gen, A = exact_tree_decode(target, draft, [1, 5, 9], "embed,L1,L3", 5, 4, 8, max_new_tokens=32)

    Prefill the prompt (target forward with tap hooks; its argmax is x_{t+1}). Then repeat: the
    draft builds the tree at t with :func:`workbench.tree_reference.tree_reference` from h_0..h_t;
    ONE target forward over x_0..x_{t+1} followed by the N-1 tree nodes, with an ancestor mask
    (:func:`ancestor_mask`, a 4D additive mask) and node v at position t+1+depth(v), gives the
    target's argmax after every node; :func:`greedy_walk` accepts A nodes; the target's argmax after
    the last accepted node is the bonus; the taps of the root and the accepted nodes (from that same
    forward, as SGLang keeps the verify pass's hidden states) extend h; t <- t + A + 1. No target
    KV cache: the sequence is re-read every step (exact, slow; for tests and small checks).

    ``walk``: another verification rule (sampling), ``walk(tokens, parents, logits) -> (accepted path,
    next token)`` with ``logits [n+1, V]`` the target's after the root and each node; the prefill's
    token is ``walk([], [], logits[-1:])[1]``. Default (None): the greedy walk above.
    """

    taps, ids = capture.loop_inputs(target, wiring, draft.fc_width, prompt_ids, "exact_tree_decode")
    shape = tree_shape(steps, eagle_topk, num_draft_tokens)
    if int(max_new_tokens) < 1:
        raise WorkbenchError(f"exact_tree_decode: expected max_new_tokens >= 1, got {max_new_tokens}")
    ddev, ddtype = draft.device, draft.dtype

    def forward(seq, allowed=None, positions=None):
        return tree_forward(target, taps, seq, allowed, positions)

    logits, feats = forward(ids)
    ids.append(int(logits[-1].argmax()) if walk is None else int(walk([], [], logits[-1:])[1]))

    def step(ids, h, t):
        tree = tree_reference(draft, h, torch.tensor(ids, device=ddev), t, shape.steps, shape.topk,
                              shape.num_draft_tokens, rope_shift=rope_shift)
        positions = list(range(t + 2)) + [t + 1 + d for d in tree.depths]
        logits, feats = forward(ids + tree.tokens, ancestor_mask(tree.parents, t + 2), positions)
        if walk is None:
            predictions = logits[t + 1:].argmax(-1).tolist()                  # after the root, node 1, ...
            _, path = greedy_walk(tree.tokens, tree.parents, predictions, shape.steps)
            nxt = predictions[path[-1] if path else 0]
        else:
            path, nxt = walk(tree.tokens, tree.parents, logits[t + 1:])
        return [tree.tokens[v - 1] for v in path], nxt, feats[[t + 1 + v for v in [0] + path]]

    return decode_loop(ids, feats, step, max_new_tokens, device=ddev, dtype=ddtype)
