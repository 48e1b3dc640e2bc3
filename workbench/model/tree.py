"""SGLang's EAGLE draft tree (``--speculative-eagle-topk`` > 1), built for every start position at once.

    >>> import torch
    >>> from workbench.model.draft import Eagle3Draft, new_draft_config
    >>> from workbench.model.tree import draft_trees
    >>> _ = torch.manual_seed(0)
    >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
    ...                         "intermediate_size": 64})
    >>> draft = Eagle3Draft.from_config(cfg, torch.randn(50, 32))
    >>> feats, ids = torch.randn(1, 7, 96), torch.randint(0, 50, (1, 7))
    >>> trees = draft_trees(draft, feats, ids, torch.ones(1, 7, dtype=torch.long), steps=3, eagle_topk=2,
    ...                     num_draft_tokens=6)
    >>> trees.tokens.shape, trees.cand_tokens.shape     # [B, T, N-1] verified nodes, [B, T, k+(S-1)k²]
    (torch.Size([1, 7, 5]), torch.Size([1, 7, 10]))
    >>> bool((trees.parents < torch.arange(1, 6)).all())  # a parent always comes before its child
    True

What is simulated (``shared/sglang-tree.md``, read from SGLang's source; docs/trees.md). S = steps,
k = eagle_topk, N = num_draft_tokens (verified tokens including the root). The tree at t grows from
the root x_{t+1}; the draft has seen features h_0..h_t.

- depth 1: top-k of the step-0 output o_t; node score = its probability; these fill k **slots**.
- depth i+1 (i = 1..S-1): one draft forward per slot at rotary position t+i(+rope_shift); slot j
  attends to the prefix keys (step 0, positions <= t) plus **the keys slot j wrote itself** at
  earlier depths (slot lineage: SGLang ``generate_draft_decode_kv_indices`` reads
  ``req_to_token[seq_len + topk_id * num_steps + 0..iters-1]``). Each slot proposes its top-k
  children: k² candidates with score = slot score × child probability, flat order j·k + c. If
  i < S-1 the k best become the new slots (token, score, and as hidden the output of the slot that
  proposed it: SGLang ``spec_utils._select_top_k_tokens_later``), each keeping its own key history.
- selection: the top N-1 of all k + (S-1)k² node scores, then sorted ascending
  (``eagle_utils.organize_draft_results``); parents as in ``build_tree_kernel_efficient``.

Ties (equal scores) are broken by lower flat index (stable sort); SGLang's ``torch.topk`` leaves
them unspecified. This also guarantees that a selected node's parent is selected.

Near-ties (``gaps=True``, :attr:`TreeOutput.gaps` [B, T, S]): per tree and depth d, the smallest relative gap
among the draft's decisions that can change which nodes the verified tree holds at depth d, so that a server
computing at a coarser precision (bfloat16) may build another tree there. A logit gap is relative to the row's
top logit (``(l_a - l_b) / max(|l_top|, 1)``, as ``draft.top2_gap`` for chains); a score gap is the difference of
the two nodes' log-scores (= summed log-probabilities, logit units) over the largest ``max(|l_top|, 1)`` of the
rows that scored them. The decisions, and the depths they can change (SGLang's rules above):

- depth 1: the k-th versus (k+1)-th logit of o_t (which tokens become depth-1 nodes and slots): depths >= 1;
  the order inside its top k (slot j holds the j-th, and slot j's keys are what later holders attend to):
  depths >= 3;
- depth i+1 (i = 1..S-1): each slot's k-th versus (k+1)-th logit (which children it proposes): depths >= i+1,
  but only where that k-th child shows: it is (nearly) a new slot or (nearly) selected, i.e. the gap counted is
  the larger of the logit gap and how far the child's score lies below the k-th re-ranked or the lowest selected
  score (the child it swaps with scores no higher, so an unseen swap changes no slot and no verified node);
  the re-rank of the k² candidates into k slots, adjacent scores among the best k+1 (which nodes get children,
  and which slot's keys each one inherits): depths >= i+2;
- the selection of N-1 nodes: at depth d, the smallest gap between a selected and a rejected node when either
  of the two sits at depth d (a swap there adds or drops a node at depth d and nowhere else).

With eagle_topk 1 (a chain: no node off the path) each depth keeps only its own proposal's top-2 gap, exactly
``draft.run_chains(gaps=True)``.
Within one slot's children the order does not matter (siblings are distinct tokens: the walk takes the one
that matches). :func:`workbench.model.tree_reference.tree_reference` (``gaps=True``) computes the same numbers
node by node (tests/test_tree_ties.py).

On the parallel (training-time-test) layout this is k lanes per start position: step 0 is the usual
pass over all positions, then each lane keeps its own diagonal of keys while its token and hidden
are gathered from the lane that proposed it. The attention is :func:`workbench.attention.prefix_attention`
with the lanes folded into the batch dimension (causal prefix + each lane's own extra keys, merged
exactly; never a k×T×T matrix); :func:`prefix_extra_attention` is its dense query-blocked twin on the
[B, h, L, T, d] lane layout, kept as a reference (tests/test_tree.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from workbench.core.errors import WorkbenchError
from workbench.model.attention import prefix_attention
from workbench.model.chunks import head_chunks
from workbench.model.draft import check_chain_inputs

# ----------------------------------------------------------------------------------------- shape

@dataclass(frozen=True)
class TreeShape:
    """(steps, eagle_topk, num_draft_tokens) after SGLang's own adjustment, plus notices."""

    steps: int
    topk: int
    num_draft_tokens: int
    notes: tuple = ()

    @property
    def n_candidates(self) -> int:
        """All nodes the draft scores: k + (S-1)·k²."""
        return n_candidates(self.steps, self.topk)


def n_candidates(steps: int, topk: int) -> int:
    """k + (S-1)·k², the number of scored nodes a draft of depth S and branching k produces.

        >>> n_candidates(5, 4)
        68
    """
    return topk + (steps - 1) * topk * topk


def _positive(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise WorkbenchError(f"{name} must be a positive integer, got {v!r}")
    return v


def tree_shape(steps: int, eagle_topk: int, num_draft_tokens: int | None = None) -> TreeShape:
    """Check and adjust the tree flags as SGLang does.

        >>> tree_shape(5, 4, 8)
        TreeShape(steps=5, topk=4, num_draft_tokens=8, notes=())
        >>> tree_shape(3, 1, 16).num_draft_tokens, tree_shape(3, 1, 16).notes[0][:44]
        (4, 'eagle_topk 1 forces num_draft_tokens = steps')

    ``eagle_topk`` 1 forces N = S + 1 (SGLang ``server_args``: "speculative_num_draft_tokens is
    adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"); N − 1 must not exceed
    the k + (S−1)·k² scored nodes (SGLang would fail in ``torch.topk``); N is required when k > 1.
    """
    S, k = _positive("steps", steps), _positive("eagle_topk", eagle_topk)
    notes = ()
    if k == 1:
        if num_draft_tokens is not None and num_draft_tokens != S + 1:
            notes = (f"eagle_topk 1 forces num_draft_tokens = steps + 1 = {S + 1} (got {num_draft_tokens}; "
                     "SGLang adjusts it the same way and drafts a chain)",)
        return TreeShape(S, 1, S + 1, notes)
    if num_draft_tokens is None:
        raise WorkbenchError(f"eagle_topk {k} > 1 needs num_draft_tokens (the verified tokens including the root), "
                             f"2..{n_candidates(S, k) + 1} for steps {S}")
    N = _positive("num_draft_tokens", num_draft_tokens)
    if N < 2:
        raise WorkbenchError(f"num_draft_tokens {N}: expected at least 2 (the root and one drafted token)")
    if N - 1 > n_candidates(S, k):
        raise WorkbenchError(f"num_draft_tokens {N} is too large for steps {S}, eagle_topk {k}: N-1 must be <= "
                             f"k + (S-1)*k^2 = {n_candidates(S, k)}")
    return TreeShape(S, k, N, notes)


# ----------------------------------------------------------------------------------------- attention

def _default_block(B, h, L, T, E, budget=2 ** 26) -> int:
    """Query positions per block so one block's score tensor stays near ``budget`` elements."""
    return max(1, min(T, budget // max(1, B * h * L * (T + E))))


def prefix_extra_attention(q, k0, v0, key_mask, extra_k=None, extra_v=None, *, scale: float,
                           block: int | None = None):
    """Exact attention of lane queries over a shared causal prefix plus each query's own extra keys.

        >>> q, k0, v0 = torch.randn(1, 2, 3, 5, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
        >>> ek, ev = torch.randn(1, 2, 3, 5, 2, 4), torch.randn(1, 2, 3, 5, 2, 4)
        >>> out = prefix_extra_attention(q, k0, v0, torch.ones(1, 5, dtype=torch.bool), ek, ev, scale=0.5)
        >>> out.shape
        torch.Size([1, 2, 3, 5, 4])

    Contract (shared with the long-rows attention module):

    - ``q`` [B, h, L, T, d]: L lanes of queries per position (L = 1 for a plain pass);
    - ``k0``, ``v0`` [B, h, T, d]: the shared prefix (step-0) keys/values;
    - ``key_mask`` [B, T] bool: real tokens; query (l, p) sees prefix key s iff s <= p and
      (key_mask[s] or s == p), exactly the chain code's rule;
    - ``extra_k``, ``extra_v`` [B, h, L, T, E, d] or None: query (l, p) also sees its own E extra keys
      ``extra_k[:, :, l, p]`` (a lane's diagonal: the keys it wrote at earlier depths, itself included);
    - returns [B, h, L, T, d] in ``q``'s dtype: one fp32 softmax over the union of both key sets.

    Query-blocked (``block`` positions at a time): memory O(B·h·L·block·T), never L×T×T.
    """
    B, h, L, T, d = q.shape
    E = 0 if extra_k is None else extra_k.shape[-2]
    block = block or _default_block(B, h, L, T, E)
    dev = q.device
    mask = key_mask.to(dev).bool()
    out = torch.empty_like(q)
    for a in range(0, T, block):
        b = min(T, a + block)
        qb = q[:, :, :, a:b]                                                   # [B,h,L,n,d]
        n = b - a
        s = (qb.reshape(B, h, L * n, d) @ k0[:, :, :b].transpose(-1, -2)).view(B, h, L, n, b).float() * scale
        p_idx = torch.arange(a, b, device=dev)[:, None]
        s_idx = torch.arange(b, device=dev)[None, :]
        allowed = (s_idx <= p_idx)[None] & (mask[:, None, :b] | (s_idx == p_idx)[None])   # [B,n,b]
        s = s.masked_fill(~allowed[:, None, None], float("-inf"))
        if E:
            se = (qb[..., None, :] * extra_k[:, :, :, a:b]).sum(-1).float() * scale   # [B,h,L,n,E]
            s = torch.cat([s, se], dim=-1)
        p = torch.softmax(s, dim=-1).to(q.dtype)
        o = (p[..., :b].reshape(B, h, L * n, b) @ v0[:, :, :b]).view(B, h, L, n, d)
        if E:
            o = o + (p[..., b:, None] * extra_v[:, :, :, a:b]).sum(-2)
        out[:, :, :, a:b] = o
    return out


# ----------------------------------------------------------------------------------------- trees

def depth_of(flat: torch.Tensor, topk: int) -> torch.Tensor:
    """Depth (1..S) of a node from its flat index (k nodes at depth 1, then k² per depth).

        >>> depth_of(torch.tensor([0, 1, 2, 5, 6, 7]), topk=2).tolist()
        [1, 1, 2, 2, 3, 3]
    """
    return torch.where(flat < topk, torch.ones_like(flat), 2 + (flat - topk).clamp(min=0) // (topk * topk))


def select_nodes(cand_scores, cand_parents, num_draft_tokens: int):
    """SGLang's selection: top N-1 flat indices by score (ties: lower index), sorted ascending.

        >>> s = torch.tensor([0.5, 0.3, 0.4, 0.05, 0.2, 0.1])      # k=2, S=2: 2 + 4 nodes
        >>> par = torch.tensor([-1, -1, 0, 0, 1, 1])               # flat parent, -1 = root
        >>> flat, parents = select_nodes(s, par, 5)                # N = 5: the root + 4 nodes
        >>> flat.tolist(), parents.tolist()                        # parents as verified indices, 0 = root
        ([0, 1, 2, 4], [0, 0, 1, 2])

    ``cand_scores``, ``cand_parents`` [..., F]; returns (flat [..., N-1], parents [..., N-1]) where
    ``parents`` is the verified index of each node's parent (0 = root, i = the i-th selected node).
    """
    n = num_draft_tokens - 1
    F = cand_scores.shape[-1]
    if not 1 <= n <= F:
        raise WorkbenchError(f"num_draft_tokens {num_draft_tokens}: expected 2..{F + 1} for {F} scored nodes")
    order = torch.sort(cand_scores, dim=-1, descending=True, stable=True).indices[..., :n]
    flat = order.sort(dim=-1).values
    inv = torch.full(cand_scores.shape, -1, dtype=torch.long, device=flat.device)
    inv.scatter_(-1, flat, torch.arange(1, n + 1, device=flat.device).expand_as(flat).contiguous())
    pf = cand_parents.gather(-1, flat)
    parents = torch.where(pf < 0, torch.zeros_like(pf), inv.gather(-1, pf.clamp(min=0)))
    if bool((parents < 0).any()):      # impossible with the stable tie rule; SGLang would drop the node
        raise WorkbenchError("a selected tree node has no selected parent (NaN scores in the draft?)")
    return flat, parents


TINY = float(torch.finfo(torch.float32).tiny)     # scores below this count as equal (a product that underflowed)


def _floor(acc: torch.Tensor, gap: torch.Tensor, depth: int, chain: bool = False) -> None:
    """``acc`` [..., S] := min(acc, gap) at depths >= ``depth`` (1-based): a decision that can change those; with
    ``chain`` (eagle_topk 1: no node off the path) at ``depth`` only, as ``draft.run_chains(gaps=True)``."""
    if depth <= acc.shape[-1]:
        end = depth if chain else acc.shape[-1]
        acc[..., depth - 1:end] = torch.minimum(acc[..., depth - 1:end], gap[..., None].to(acc.dtype))


def selection_gaps(cand_scores: torch.Tensor, flat: torch.Tensor, topk: int, scale: torch.Tensor) -> torch.Tensor:
    """Per depth d (1..S): the smallest log-score gap between a selected and a rejected node where either sits at
    depth d, over ``scale`` (max(|top logit|, 1) of the rows that scored them); inf where no swap touches d.

        >>> s = torch.tensor([0.5, 0.3, 0.4, 0.05, 0.2, 0.1])      # k=2, S=2; N=5 selects flat 0, 1, 2, 4
        >>> [round(x, 3) for x in selection_gaps(s, torch.tensor([0, 1, 2, 4]), 2, torch.ones(())).tolist()]
        [1.099, 0.693]

    ``cand_scores`` [..., F], ``flat`` [..., N-1] (the selected flat indices), ``scale`` [...]: returns [..., S].
    """
    F = cand_scores.shape[-1]
    dev = cand_scores.device
    dep = depth_of(torch.arange(F, device=dev), topk)
    S = int(dep.max())
    lg = torch.log(cand_scores.float().clamp_min(TINY))
    chosen = torch.zeros(cand_scores.shape, dtype=torch.bool, device=dev).scatter_(-1, flat, True)
    inf = torch.tensor(float("inf"), device=dev)
    sel, rej = torch.where(chosen, lg, inf), torch.where(chosen, -inf, lg)
    sel_all, rej_all = sel.amin(-1), rej.amax(-1)
    out = []
    for d in range(1, S + 1):
        at = dep == d
        out.append(torch.minimum(sel[..., at].amin(-1) - rej_all, sel_all - rej[..., at].amax(-1)))
    return torch.stack(out, -1) / scale[..., None]


def _kth_selected(cand_scores, flat, topk: int, scale, kth_gaps) -> torch.Tensor:
    """[..., S]: per depth d, the smallest max(k-th/(k+1)-th logit gap, how far that k-th child's log-score lies below
    the lowest selected one, over ``scale``) of the slots' k-th children at depths <= d (0 below: selected)."""
    F = cand_scores.shape[-1]
    dev = cand_scores.device
    dep = depth_of(torch.arange(F, device=dev), topk)
    lg = torch.log(cand_scores.float().clamp_min(TINY))
    chosen = torch.zeros(cand_scores.shape, dtype=torch.bool, device=dev).scatter_(-1, flat, True)
    low = lg.gather(-1, flat).amin(-1, keepdim=True)
    below = torch.where(chosen, torch.zeros_like(lg), (low - lg) / scale[..., None])
    g = torch.maximum(kth_gaps, below)
    per = torch.stack([g[..., dep == d].amin(-1) for d in range(1, int(dep.max()) + 1)], -1)
    return per.cummin(-1).values


@dataclass
class TreeOutput:
    """Verified draft trees for every start position (B, T), plus every scored node.

    Verified nodes 1..N-1 (the root x_{t+1} is node 0 and not stored), in ascending flat order:
    ``tokens`` [B, T, N-1] target ids, ``parents`` [B, T, N-1] verified index of the parent
    (0 = root), ``depths`` [B, T, N-1] (1..S; node at depth d predicts position t+1+d), ``scores``
    [B, T, N-1] (products of probabilities, fp32), ``flat`` [B, T, N-1] flat indices.
    ``cand_tokens``/``cand_scores``/``cand_parents`` [B, T, k+(S-1)k²]: every scored node in flat
    order (parent = flat index, -1 = root); :meth:`select` re-selects for a smaller S or another N.
    ``gaps`` [B, T, S] (only with ``draft_trees(gaps=True)``): per depth d, the smallest relative gap among the
    draft's decisions that can change the tree's nodes at depth d (module docstring); ``build_gaps`` and
    ``scale`` [B, T, S] are its parts that do not depend on N (drafting; max(|top logit|, 1) up to depth d);
    ``kth_gaps`` [B, T, F]: at each slot's k-th child (depth >= 2), its row's k-th/(k+1)-th logit gap (inf elsewhere),
    counted where that child is (nearly) selected.
    """

    steps: int
    topk: int
    num_draft_tokens: int
    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    scores: torch.Tensor
    flat: torch.Tensor
    cand_tokens: torch.Tensor = field(repr=False)
    cand_scores: torch.Tensor = field(repr=False)
    cand_parents: torch.Tensor = field(repr=False)
    notes: tuple = ()
    acc_ids: torch.Tensor | None = field(default=None, repr=False)   # [B, T, acc_topk] depth-1 top ids, if asked
    gaps: torch.Tensor | None = field(default=None, repr=False)      # [B, T, S] near-tie gap per depth, if asked
    build_gaps: torch.Tensor | None = field(default=None, repr=False)
    scale: torch.Tensor | None = field(default=None, repr=False)

    kth_gaps: torch.Tensor | None = field(default=None, repr=False)

    @classmethod
    def from_candidates(cls, cand_tokens, cand_scores, cand_parents, *, steps, topk, num_draft_tokens,
                        notes=(), build_gaps=None, scale=None, kth_gaps=None) -> "TreeOutput":
        flat, parents = select_nodes(cand_scores, cand_parents, num_draft_tokens)
        gaps = None
        if build_gaps is not None:
            gaps = torch.minimum(build_gaps, selection_gaps(cand_scores, flat, topk, scale[..., -1]))
            if kth_gaps is not None:
                gaps = torch.minimum(gaps, _kth_selected(cand_scores, flat, topk, scale[..., -1], kth_gaps))
        return cls(steps=steps, topk=topk, num_draft_tokens=num_draft_tokens,
                   tokens=cand_tokens.gather(-1, flat), parents=parents, depths=depth_of(flat, topk),
                   scores=cand_scores.gather(-1, flat), flat=flat, cand_tokens=cand_tokens,
                   cand_scores=cand_scores, cand_parents=cand_parents, notes=tuple(notes), gaps=gaps,
                   build_gaps=build_gaps, scale=scale, kth_gaps=kth_gaps)

    def select(self, num_draft_tokens: int, steps: int | None = None) -> "TreeOutput":
        """The tree SGLang would verify with fewer steps and/or another N (same eagle_topk).

        The first k + (S'-1)k² candidates of a depth-S run are exactly those of a depth-S' run:
        slot choices at a depth never depend on S. Its :attr:`gaps` (when drafted with them) are recomputed
        for the new selection; with fewer steps, a depth-S' slot's k-th child also counts as near a re-rank that
        only the deeper run makes (more near-ties, never fewer).
        """
        S = self.steps if steps is None else int(steps)
        if not 1 <= S <= self.steps:
            raise WorkbenchError(f"steps {steps}: expected 1..{self.steps} (the depth these trees were drafted to)")
        shape = tree_shape(S, self.topk, num_draft_tokens)
        F = shape.n_candidates
        cut = (lambda x: None if x is None else x[..., :S])  # noqa: E731  (decisions up to depth S: a depth-S run's)
        out = TreeOutput.from_candidates(self.cand_tokens[..., :F], self.cand_scores[..., :F],
                                         self.cand_parents[..., :F], steps=S, topk=self.topk,
                                         num_draft_tokens=shape.num_draft_tokens, notes=shape.notes,
                                         build_gaps=cut(self.build_gaps), scale=cut(self.scale),
                                         kth_gaps=None if self.kth_gaps is None else self.kth_gaps[..., :F])
        out.acc_ids = self.acc_ids
        return out

    def node(self, b: int, t: int) -> dict:
        """One tree as plain lists (tokens, parents, depths, scores, flat)."""
        return {k: getattr(self, k)[b, t].tolist() for k in ("tokens", "parents", "depths", "scores", "flat")}


def _top_abs(logits: torch.Tensor) -> torch.Tensor:
    """[n, V] fp32 logits -> [n, 1] |top logit| (the scale of a row's near-ties)."""
    return logits.max(-1, keepdim=True).values.abs()


def _head(draft, out, k: int, max_memory=None, gaps_at: int | None = None):
    """Top-k of the draft head over ``out`` [..., H] in memory-budgeted chunks (``chunks.head_chunks``: no
    [.., V] logits kept): (fp32 probabilities, target ids), both [..., k]. With ``gaps_at`` = g also what decides
    the row's top g (relative to max(|top logit|, 1), from the fp32 log-softmax: differences of logits):
    (boundary: g-th minus (g+1)-th, inf when the vocab has only g tokens; order: the smallest adjacent gap inside
    the top g, inf for g = 1; scale: max(|top logit|, 1)), each [...]."""
    V = draft.draft_vocab_size
    if gaps_at is None:
        res = head_chunks(out, draft.logits, topk=k, max_memory=max_memory, vocab=V)
        return res.topk_logprobs.exp(), draft.to_target(res.topk_ids)
    g = int(gaps_at)
    m = min(max(k, g + 1), V)
    res = head_chunks(out, draft.logits, topk=m, max_memory=max_memory, vocab=V, reduce=_top_abs)
    lp = res.topk_logprobs
    scale = res.reduced[..., 0].clamp_min(1.0)
    inf = torch.full_like(scale, float("inf"))
    boundary = (lp[..., g - 1] - lp[..., g]) / scale if m > g else inf
    order = (lp[..., :g - 1] - lp[..., 1:g]).amin(-1) / scale if g > 1 else inf
    return lp[..., :k].exp(), draft.to_target(res.topk_ids[..., :k]), boundary, order, scale


def draft_trees(draft, features: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                steps: int, eagle_topk: int, num_draft_tokens: int | None = None, *, rope_shift: int | None = None,
                acc_topk: int = 0, gaps: bool = False, max_memory=None) -> TreeOutput:
    """SGLang's draft tree at every start position (the parallel layout; see the module docstring).

    ``features`` [B, T, 3·H_target], ``input_ids``/``attention_mask`` [B, T] (right-padded).
    Depth i+1 runs at rotary position t+i+``rope_shift`` (1 = servers before SGLang PR #25015;
    default: the draft's ``rotary_offset``, set from the engine record).
    Trees whose root x_{t+1} is padding or past the end are computed but meaningless (not counted).
    With ``eagle_topk`` 1 this is exactly ``draft.run_chains``: ``tokens[b, t]`` = the chain.
    ``acc_topk`` > 0 also keeps the depth-1 top-``acc_topk`` target ids (``TreeOutput.acc_ids``,
    for step-1 top-1/top-5 accuracy). The lanes fold into the batch dimension of
    :func:`workbench.attention.prefix_attention` (lane j's extra keys: the keys slot j wrote at earlier
    depths); the heads run in chunks sized from ``max_memory`` (no [B, T, k, V] logits). ``gaps``: also each
    tree's near-tie gap per depth (:attr:`TreeOutput.gaps`; the module docstring says which decisions count).
    """

    shape = tree_shape(steps, eagle_topk, num_draft_tokens)
    S, k = shape.steps, shape.topk
    check_chain_inputs(features, input_ids, attention_mask, S)
    draft.check_ready()
    if k > draft.draft_vocab_size:
        raise WorkbenchError(f"eagle_topk {k} exceeds the draft vocab ({draft.draft_vocab_size} tokens)")
    if isinstance(acc_topk, bool) or not isinstance(acc_topk, int) or not 0 <= acc_topk <= draft.draft_vocab_size:
        raise WorkbenchError(f"acc_topk must be in 0..{draft.draft_vocab_size}, got {acc_topk!r}")
    shift = draft.rotary_offset if rope_shift is None else int(rope_shift)
    B, T = input_ids.shape
    dev = draft.fc.weight.device
    mask = attention_mask.to(dev).bool()
    if bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        raise WorkbenchError("attention_mask is not right-padded (a 1 after a 0 in some row); "
                             "expected each row to be 1 on its tokens, then 0 on padding")
    H = draft.spec.hidden_size
    scale = 1.0 / math.sqrt(draft.spec.head_dim)
    ids = input_ids.to(dev)
    pos = torch.arange(T, device=dev)
    with torch.no_grad():
        # step 0: the usual pass over all positions (input at p: h_p with token x_{p+1})
        h = draft.project(features.to(dev))
        tok = torch.zeros_like(ids)
        tok[:, :-1] = ids[:, 1:]
        q, k0, v0, residual = draft.qkv(h, draft.embed_tokens(tok), pos)
        out = draft.finish(residual, prefix_attention(q, k0, v0, scale=scale, max_memory=max_memory))
        del q, residual, h
        build = mag = None
        kth = []                                                               # per depth: [B, T, k*k] or [B, T, k]
        if gaps:
            p1, ids1, b1, o1, s1 = _head(draft, out, max(k, acc_topk), max_memory, gaps_at=k)
            build = torch.full((B, T, S), float("inf"), device=dev)        # gaps of the decisions, per depth
            _floor(build, b1, 1, k == 1)                                   # which tokens are depth-1 nodes
            _floor(build, o1, 3)                                           # slot order: whose keys, from depth 3
            mag = s1[..., None].expand(B, T, S).clone()                    # max(|top logit|, 1) up to depth d
            kth.append(torch.full((B, T, k), float("inf"), device=dev))     # depth 1: counted above, always
        else:
            p1, ids1 = _head(draft, out, max(k, acc_topk), max_memory)       # [B, T, max(k, acc_topk)]
        acc_ids = ids1[..., :acc_topk] if acc_topk else None
        p1, ids1 = p1[..., :k].contiguous(), ids1[..., :k].contiguous()
        c_tok, c_score = [ids1], [p1]
        c_par = [torch.full((B, T, k), -1, dtype=torch.long, device=dev)]
        slot_score, slot_tok = p1, ids1                                        # [B, T, k]
        slot_node = torch.arange(k, device=dev).expand(B, T, k)
        hid = draft.next_hidden(out)[:, None].expand(B, k, T, H).reshape(B * k, T, H)   # lanes folded: [B·k, T, H]
        del out
        lane = lambda x: x[:, None].expand(B, k, *x.shape[1:]).reshape(B * k, *x.shape[1:])   # noqa: E731
        k0, v0 = lane(k0), lane(v0)                                            # the shared prefix, per lane
        ek, ev = [], []                                                        # slot j's own keys, per depth
        for i in range(1, S):
            qi, ki, vi, ri = draft.qkv(hid, draft.embed_tokens(slot_tok.permute(0, 2, 1).reshape(B * k, T)),
                                        pos + i + shift)
            ek.append(ki)
            ev.append(vi)
            att = prefix_attention(qi, k0, v0, ek, ev, scale=scale, max_memory=max_memory)
            o = draft.finish(ri, att)                                          # [B·k, T, H]
            del qi, ri, att
            if gaps:
                pc, ic, bc, _, sc = _head(draft, o, k, max_memory, gaps_at=k)
                mag[..., i:] = torch.maximum(mag[..., i:], sc.view(B, k, T).amax(1)[..., None])
                bc = bc.view(B, k, T).permute(0, 2, 1)                         # [B, T, slot]
                if k == 1:                                                     # a chain: the proposal is the path
                    _floor(build, bc[..., 0], i + 1, True)
                kb = torch.full((B, T, k, k), float("inf"), device=dev)
                kb[..., k - 1] = bc                                            # at each slot's k-th child
                kth.append(kb.flatten(-2))
            else:
                pc, ic = _head(draft, o, k, max_memory)                        # [B·k, T, k]
            pc, ic = pc.view(B, k, T, k).permute(0, 2, 1, 3), ic.view(B, k, T, k).permute(0, 2, 1, 3)
            cand = (slot_score[..., None] * pc).flatten(-2)                    # [B, T, k*k], r = j*k + c
            ctok = ic.flatten(-2)
            c_tok.append(ctok)
            c_score.append(cand)
            c_par.append(slot_node.repeat_interleave(k, dim=-1))
            if i < S - 1:
                ranked = torch.sort(cand, dim=-1, descending=True, stable=True)
                order = ranked.indices[..., :k]                                  # [B, T, k]
                if gaps and k > 1:               # the re-rank: which candidates get children, in which slot
                    lv = torch.log(ranked.values[..., :k + 1].clamp_min(TINY))
                    _floor(build, (lv[..., :-1] - lv[..., 1:]).amin(-1) / mag[..., i], i + 2)
                    # a slot's k-th child shows if it is (nearly) a new slot: its row's gap, or its distance below
                    slot = torch.zeros_like(cand, dtype=torch.bool).scatter_(-1, order, True)
                    below = torch.where(slot, torch.zeros_like(cand),
                                        (lv[..., k - 1:k] - torch.log(cand.clamp_min(TINY))) / mag[..., i:i + 1])
                    _floor(build, torch.maximum(kth[-1], below).amin(-1), i + 1)
                slot_score, slot_tok = cand.gather(-1, order), ctok.gather(-1, order)
                slot_node = k + (i - 1) * k * k + order
                src = (order // k).permute(0, 2, 1)                              # proposing lane [B, L, T]
                nh = draft.next_hidden(o).view(B, k, T, H)
                hid = nh.gather(1, src[..., None].expand(B, k, T, H)).reshape(B * k, T, H)
            del o
        trees = TreeOutput.from_candidates(torch.cat(c_tok, -1), torch.cat(c_score, -1), torch.cat(c_par, -1),
                                           steps=S, topk=k, num_draft_tokens=shape.num_draft_tokens,
                                           notes=shape.notes, build_gaps=build, scale=mag,
                                           kth_gaps=torch.cat(kth, -1) if gaps and k > 1 else None)
        trees.acc_ids = acc_ids
        return trees
