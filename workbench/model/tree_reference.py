"""The exact reference for :func:`workbench.tree.draft_trees`: one tree, node by node, KV-cached.

    >>> import torch
    >>> from workbench.model.draft import Eagle3Draft, new_draft_config
    >>> from workbench.model.tree_reference import tree_reference
    >>> _ = torch.manual_seed(0)
    >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
    ...                         "intermediate_size": 64})
    >>> draft = Eagle3Draft.from_config(cfg, torch.randn(50, 32))
    >>> tree = tree_reference(draft, torch.randn(7, 96), torch.randint(0, 50, (7,)), t=3, steps=3,
    ...                       eagle_topk=2, num_draft_tokens=6)
    >>> len(tree.tokens), len(tree.candidates)          # N-1 verified nodes, k + (S-1)k² scored nodes
    (5, 10)

This is SGLang's ``EAGLEWorker.draft_forward`` written out for one request, one slot at a time:
the draft reads h_0..h_t with tokens x_1..x_{t+1} into its KV cache (the prefix), takes the top-k
of its output at t (depth 1, one slot per node), then for each further depth runs every slot on its
own: the slot's token and hidden, rotary position t+i(+rope_shift), attending to the prefix cache
plus **the slot's own cache entries** (SGLang's slot lineage). Candidates, re-ranking, selection and
parents follow ``spec_utils.select_top_k_tokens``, ``eagle_utils.organize_draft_results`` and
``sgl-kernel eagle_utils.cu build_tree_efficient`` with plain Python lists.

With ``gaps=True`` the tree also carries :attr:`Tree.gaps`: per depth d, the smallest relative gap among the
decisions that can change its nodes at depth d (the rules in :mod:`workbench.model.tree`'s docstring), found
here from each decision as it is taken (sorted Python lists of fp32 logits and scores), the exact reference for
``draft_trees(gaps=True)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from workbench.core.errors import WorkbenchError
from workbench.model.draft import check_one_sequence
from workbench.model.tree import TINY, tree_shape


@dataclass
class Node:
    """One scored node: flat index, target token id, flat parent (-1 = root), depth, score."""

    flat: int
    token: int
    parent: int
    depth: int
    score: float


@dataclass
class Tree:
    """One verified tree (root x_{t+1} = node 0, not stored) and every scored node.

    ``tokens``/``parents``/``depths``/``scores``/``flat``: the N-1 verified nodes in ascending flat
    order; ``parents`` are verified indices (0 = root). ``candidates``: all :class:`Node` s, flat order.
    """

    tokens: list
    parents: list
    depths: list
    scores: list
    flat: list
    candidates: list = field(repr=False)
    gaps: list | None = None          # per depth 1..S: the near-tie gap (``tree_reference(gaps=True)``)

    def ancestors(self, v: int) -> list:
        """Verified indices on the path root → v, excluding the root, v included (v >= 1)."""
        path = []
        while v > 0:
            path.append(v)
            v = self.parents[v - 1]
        return path[::-1]


def select_reference(candidates: list, num_draft_tokens: int) -> Tree:
    """Top N-1 by score (ties: lower flat index), sorted ascending; parents as verified indices.

        >>> c = [Node(0, 7, -1, 1, .5), Node(1, 8, -1, 1, .3), Node(2, 9, 0, 2, .4), Node(3, 5, 0, 2, .05)]
        >>> select_reference(c, 4).parents
        [0, 0, 1]
    """
    n = num_draft_tokens - 1
    if not 1 <= n <= len(candidates):
        raise WorkbenchError(f"num_draft_tokens {num_draft_tokens}: expected 2..{len(candidates) + 1}")
    chosen = sorted(sorted(candidates, key=lambda c: (-c.score, c.flat))[:n], key=lambda c: c.flat)
    where = {c.flat: i + 1 for i, c in enumerate(chosen)}
    parents = []
    for c in chosen:
        if c.parent >= 0 and c.parent not in where:
            raise WorkbenchError(f"tree node {c.flat} is selected but its parent {c.parent} is not")
        parents.append(0 if c.parent < 0 else where[c.parent])
    return Tree(tokens=[c.token for c in chosen], parents=parents, depths=[c.depth for c in chosen],
                scores=[c.score for c in chosen], flat=[c.flat for c in chosen], candidates=list(candidates))


def _log(score: float) -> float:
    return math.log(max(float(score), TINY))


def reference_gaps(decisions: list, tree: Tree, steps: int, scale: float) -> list:
    """Per depth 1..S: the smallest gap of ``decisions`` [(first depth it can change, gap, only that depth)] and of
    the selection (a selected and a rejected node within a log-score gap, either at depth d, over ``scale``)."""
    chosen = set(tree.flat)
    sel = [c for c in tree.candidates if c.flat in chosen]
    rej = [c for c in tree.candidates if c.flat not in chosen]
    out = []
    for d in range(1, steps + 1):
        g = min([x for d0, x, only in decisions if (d0 == d if only else d0 <= d)] + [math.inf])
        for a in sel:
            for b in rej:
                if d in (a.depth, b.depth):
                    g = min(g, (_log(a.score) - _log(b.score)) / scale)
        out.append(g)
    return out


def tree_reference(draft, features: torch.Tensor, input_ids: torch.Tensor, t: int, steps: int, eagle_topk: int,
                   num_draft_tokens: int | None = None, *, rope_shift: int | None = None, gaps: bool = False) -> Tree:
    """One SGLang draft tree at start t, sequentially with a KV cache (see the module docstring).

    ``features`` [T, 3·H_target] and ``input_ids`` [T] of one sequence; needs x_{t+1} (t <= T-2). ``gaps``: also
    :attr:`Tree.gaps` (the near-ties per depth).
    """

    check_one_sequence(features, input_ids, t, "tree_reference", "tree start", "root token")
    shape = tree_shape(steps, eagle_topk, num_draft_tokens)
    rope_shift = draft.rotary_offset if rope_shift is None else int(rope_shift)   # default: the engine's
    S, k = shape.steps, shape.topk
    draft.check_ready()
    dev = draft.fc.weight.device
    ids = input_ids.to(dev)
    scale = 1.0 / math.sqrt(draft.spec.head_dim)

    def step(h, token, position, keys, values):
        """One draft position: append its key/value to the given cache lists and attend over them all."""
        q, kk, vv, residual = draft.qkv(h, draft.embed_tokens(torch.as_tensor(token, device=dev).view(1, 1)),
                                         torch.tensor([position], device=dev))
        keys.append(kk)
        values.append(vv)
        p = torch.softmax((q @ torch.cat(keys, 2).transpose(-1, -2)).float() * scale, dim=-1).to(q.dtype)
        return draft.finish(residual, p @ torch.cat(values, 2))

    decisions = []                                              # (first depth it can change, gap, that depth only)
    mags = []                                                   # max(|top logit|, 1) of every row so far
    kth = []                                                    # slot rows: (depth, their k-th child, boundary gap)

    def children(out, depth=None):
        logits = draft.logits(out)[0, 0].float()
        p = torch.softmax(logits, dim=-1)
        probs, ix = p.topk(k)
        boundary = math.inf
        if depth is not None:                                   # the decisions this row takes (module docstring)
            top = sorted(logits.tolist(), reverse=True)[: k + 1]
            mag = max(abs(top[0]), 1.0)
            mags.append(mag)
            if len(top) > k:                                    # the k-th against the (k+1)-th: which tokens enter
                boundary = (top[k - 1] - top[k]) / mag
            if depth == 1 or k == 1:                            # depth-1 nodes are all slots; a chain is its path
                decisions.append((depth, boundary, k == 1))
            if depth == 1:                                      # slot order: whose keys later holders see
                decisions.extend((3, (top[j] - top[j + 1]) / mag, False) for j in range(k - 1))
        return [(a, int(draft.to_target(b))) for a, b in zip(probs, ix)], boundary     # fp32 0-d tensors, ids

    with torch.no_grad():
        hs = draft.project(features[: t + 1].to(dev)[None])
        pk, pv = [], []                                          # the prefix cache, positions 0..t
        for p in range(t + 1):
            out = step(hs[:, p: p + 1], ids[p + 1], p, pk, pv)
        nodes = []
        slots = []                                               # per slot: own keys/values, node, hidden
        for c, (prob, tok) in enumerate(children(out, 1 if gaps else None)[0]):
            nodes.append(Node(flat=c, token=tok, parent=-1, depth=1, score=float(prob)))
            slots.append({"keys": [], "values": [], "node": nodes[-1], "hidden": draft.next_hidden(out)})
        for i in range(1, S):
            base = k + (i - 1) * k * k
            outs, cands = [], []
            for j, s in enumerate(slots):                        # each slot alone: prefix + its own entries
                keys, values = list(pk) + s["keys"], list(pv) + s["values"]
                o = step(s["hidden"], s["node"].token, t + i + rope_shift, keys, values)
                s["keys"].append(keys[-1])
                s["values"].append(values[-1])
                outs.append(o)
                kids, boundary = children(o, i + 1 if gaps else None)
                for c, (prob, tok) in enumerate(kids):
                    score = torch.tensor(s["node"].score, dtype=torch.float32) * prob    # fp32, as SGLang
                    cands.append(Node(flat=base + j * k + c, token=tok, parent=s["node"].flat, depth=i + 1,
                                      score=float(score)))
                if gaps and k > 1:
                    kth.append({"depth": i + 1, "node": cands[-1], "boundary": boundary, "rerank": math.inf})
            nodes.extend(cands)
            if i < S - 1:                                        # re-rank: the k best become the slots
                ranked = sorted(range(len(cands)), key=lambda r: (-cands[r].score, r))
                best = ranked[:k]
                if gaps and k > 1:                               # which get children, and whose keys: depth >= i+2
                    sc = [_log(cands[r].score) for r in ranked[: k + 1]]
                    decisions.extend((i + 2, (sc[j] - sc[j + 1]) / max(mags), False) for j in range(k))
                    for x in kth[-k:]:                           # how far each slot's k-th child is from a slot
                        x["rerank"] = 0.0 if x["node"].flat in {cands[r].flat for r in best} else \
                            (sc[k - 1] - _log(x["node"].score)) / max(mags)
                slots = [{"keys": s["keys"], "values": s["values"], "node": cands[r],
                          "hidden": draft.next_hidden(outs[r // k])} for s, r in zip(slots, best)]
    tree = select_reference(nodes, shape.num_draft_tokens)
    if gaps:
        low = min(_log(x) for x in tree.scores)                  # the lowest selected score
        for x in kth:      # a swap of a slot's k-th child shows only if that child is (nearly) a slot or selected
            sel = 0.0 if x["node"].flat in tree.flat else (low - _log(x["node"].score)) / max(mags)
            decisions.append((x["depth"], max(x["boundary"], min(x["rerank"], sel)), False))
        tree.gaps = reference_gaps(decisions, tree, S, max(mags))
    return tree
