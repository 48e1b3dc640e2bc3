"""Acceptance at temperature > 0 from one teacher-forced target pass: the verify distribution, the
decode path on sampled data, the Rao–Blackwellised per-depth estimator and rejection-sampling chains.

    >>> import numpy as np
    >>> from workbench.simulate.sampled import chain_as_tree
    >>> import torch
    >>> tok, par, dep = chain_as_tree(torch.tensor([[[7, 8, 9]]]))      # a chain is a tree with one lane
    >>> par.tolist(), dep.tolist()
    ([[[0, 1, 2]]], [[[1, 2, 3]]])

The verify distribution itself (``verify_probs``, ``served_stats``, ``token_probs``) is
:mod:`workbench.model.served`.

What the servers do at T > 0 (``shared/sampling.md``, read from the engines' source):

- SGLang verifies with ``p = softmax(logits / T)``, then ``top_k_renorm_prob``, then
  ``top_p_renorm_prob`` on the renormalised top-k distribution (``speculative/eagle_info.py``,
  ``EagleVerifyInput.verify``): a **sequential** rule (:func:`verify_probs`). Plain sampling without
  speculation uses flashinfer's *joint* rule (``workbench.sampling.served_probs``); the two differ
  only when top-k and top-p are both set.
- The tree is drafted exactly as at T = 0; the verify walk uses only p (``sgl-kernel
  speculative_sampling.cuh``, ``TreeSpeculativeSamplingTargetOnly``: :mod:`workbench.simulate.verify_walk`).
  With the default thresholds (1, 1) every emitted token is an exact sample of p and a child is
  accepted exactly when the emitted token equals it, so A(t) = the longest prefix of the emitted
  continuation that is a path in the tree. vLLM's default chain (argmax drafts, no q) is the same rule.

Hence, on data sampled from p (``workbench regenerate --temperature``):

- **decode path**: the T = 0 machinery matched against the data's next tokens
  (:func:`data_next_tokens` in place of the target's argmax): exact in distribution, no extra forward;
- **per depth** (Rao–Blackwell): on the matched path v_0 = root, v_1, …, v_M,
  s_k = Σ_{c child of v_k} p_{t+1+k}(token c); E[A_t] ≈ Σ_k s_k and P(A >= k+1) ≈ mean 1{M>=k}·s_k
  (:class:`PerDepth`). p at the tree's children only: the target's head runs once, in chunks, keeping
  per position two numbers (:func:`served_stats`: the log-normaliser of the kept tokens and the
  cutoff logit of top-k/top-p); a child's probability is its logit (one row of the lm_head) against
  them (:func:`token_probs`). :func:`verify_probs` materialises the whole distribution: the reference.
- **rejection-sampling chains** (SGLang ``--speculative-use-rejection-sampling``, vLLM
  ``draft_sample_method="probabilistic"``): :func:`rejection_chain` (the w_j / β_k form).

Wrong data (greedy, foreign, another temperature) is named once by the result's agreement line
(``agreement.data_note`` / ``Agreement.note``: the rows' recorded ``generation`` settings against the
requested ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import jsonable
from workbench.core.sampling import Sampling, as_sampling
from workbench.model.chunks import memory_budget, rows_per_chunk
from workbench.model.draft import run_chains
from workbench.model.served import head_logits, token_probs
from workbench.model.tree import draft_trees
from workbench.simulate.tree_verify import tree_accepted_counts, walk_nodes
from workbench.stats.counts import accepted_counts, batch_reply_starts, bootstrap_ratio, decode_path

# ------------------------------------------------------------------------------------------------
# The verify distribution: reference and the fast per-row statistics
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# The data's next tokens (what the decode path matches against at T > 0)
# ------------------------------------------------------------------------------------------------


def data_next_tokens(input_ids, attention_mask=None):
    """``[B, T]``: x_{p+1} at p (the data's token after position p), -1 after the last real token.

        >>> import torch
        >>> data_next_tokens(torch.tensor([[4, 5, 6, 0]]), torch.tensor([[1, 1, 1, 0]])).tolist()
        [[5, 6, -1, -1]]

    The same layout as ``capture.Batch.next_token`` (the target's argmax g_{p+1} at p): passing it to
    ``accepted_counts`` / ``tree_accepted_counts`` matches the drafts against the data instead.
    """
    import torch

    x = torch.as_tensor(input_ids).long()
    out = torch.full_like(x, -1)
    out[:, :-1] = x[:, 1:]
    if attention_mask is not None:
        m = torch.as_tensor(attention_mask).to(x.device).bool()
        nxt = torch.zeros_like(m)
        nxt[:, :-1] = m[:, 1:]
        out = torch.where(nxt, out, torch.full_like(out, -1))
    return out


# ------------------------------------------------------------------------------------------------
# Trees and chains in one layout
# ------------------------------------------------------------------------------------------------


def chain_as_tree(tokens):
    """A chain ``tokens [B, T, K]`` as a tree: (tokens, parents 0..K-1, depths 1..K), each [B, T, K].

        >>> import torch
        >>> t, p, d = chain_as_tree(torch.tensor([[[7, 8, 9]]]))
        >>> p.tolist(), d.tolist()
        ([[[0, 1, 2]]], [[[1, 2, 3]]])
    """
    import torch

    B, T, K = tokens.shape
    ar = torch.arange(K, device=tokens.device)
    return tokens.long(), ar.expand(B, T, K).clone(), (ar + 1).expand(B, T, K).clone()


def matched_path(tokens, parents, depths, next_token):
    """Bool ``[B, T, n+1]``: node v (0 = root) is on the path the data matches from each start t
    (``tree_verify.walk_nodes`` with the data's tokens)."""

    return walk_nodes(tokens, parents, depths, next_token)


def child_mass(tokens, parents, depths, on, hidden, stats, lm_head, s: Sampling, steps: int, *, block: int = 256):
    """s_k ``[B, T, S]`` (k = 0..S-1): Σ over the children c of the matched node at depth k of
    p_{t+1+k}(token c), p the served (verify) distribution of the teacher-forced pass.

    ``hidden [B, T, H]``: the final hidden states (input of the lm_head); ``stats [B, T, 2]``:
    :func:`served_stats` of every position. The node v of the tree at t takes its probability at
    position t + depth(v) (the root is x_{t+1} at position t+1). Runs in blocks of start positions.
    """
    import torch

    B, T, n = tokens.shape
    dev = tokens.device
    S = int(steps)
    out = torch.zeros(B, T, S, dtype=torch.float32, device=dev)
    hidden, stats = hidden.to(dev), stats.to(dev)
    for a in range(0, T, block):
        b = min(T, a + block)
        tok, par, dep = tokens[:, a:b], parents[:, a:b], depths[:, a:b]
        pos = (torch.arange(a, b, device=dev)[None, :, None] + dep).clamp(max=T - 1)      # [B, n_t, n]
        h = hidden.gather(1, pos.reshape(B, -1, 1).expand(-1, -1, hidden.shape[-1]))     # [B, n_t*n, H]
        lg = head_logits(lm_head, h.to(dev), tok.reshape(B, -1, 1))[..., 0]               # [B, n_t*n]
        st = stats.gather(1, pos.reshape(B, -1, 1).expand(-1, -1, 2))
        pr = token_probs(lg[..., None], st, s)[..., 0].view(B, b - a, n)
        parent_on = on[:, a:b].gather(-1, par)
        pr = torch.where(parent_on, pr, torch.zeros_like(pr))
        out[:, a:b].scatter_add_(-1, (dep - 1).clamp(max=S - 1), pr)
    return out


# ------------------------------------------------------------------------------------------------
# The per-depth (Rao–Blackwellised) result
# ------------------------------------------------------------------------------------------------

PER_DEPTH_COLUMNS = ("sample", "t", "matched", "on_path")


class StartTable:
    """Per counted start: ``sample``, ``expected`` (E[A] there) and ``at_least`` ([n, S], P(A >= k)); the
    accept length E[A] + 1 and its bootstrap interval over samples. (thresholds, rejection)"""

    sample: np.ndarray
    expected: np.ndarray
    at_least: np.ndarray
    steps: int
    seed: int = 0

    @property
    def n(self) -> int:
        return int(len(self.expected))

    @property
    def accept_length(self) -> float:
        return float(self.expected.mean()) + 1 if self.n else math.nan

    @property
    def cumulative(self) -> np.ndarray:
        return self.at_least.mean(0) if self.n else np.full(self.steps, math.nan)

    def interval(self, n_boot: int = 1000) -> list[float]:
        """95% percentile bootstrap over samples of :attr:`accept_length`."""
        return bootstrap_ratio(self.sample, self.expected + 1.0, seed=self.seed, n_boot=n_boot)


@dataclass
class PerDepth:
    """Rao–Blackwellised acceptance at T > 0, per counted start: the matched depth M and s_0..s_{S-1}.

        >>> import numpy as np
        >>> pd_ = PerDepth.from_arrays(2, sample=[0, 0, 1], t=[0, 2, 0], matched=[1, 0, 2],
        ...                            on_path=[True, True, True], s=[[0.6, 0.5], [0.4, 0.3], [0.7, 0.6]])
        >>> [round(float(x), 3) for x in pd_.cumulative]            # P(A >= 1), P(A >= 2)
        [0.567, 0.367]
        >>> round(pd_.accept_length, 3), round(pd_.decode_path_accept_length, 3)
        (1.933, 1.933)

    E[A_t] ≈ Σ_{k <= min(M, S-1)} s_k (unbiased for the expectation given the prefix when the data is
    a sample of the served distribution); P(A >= k+1) ≈ mean of 1{M >= k}·s_k. ``accept_length`` =
    mean over every counted start + 1; ``decode_path_accept_length`` = mean over the decode-path
    starts + 1 (the verify steps a server makes on this data). Intervals: percentile bootstrap over
    samples (:meth:`intervals`).
    """

    steps: int
    chains: dict = field(repr=False)             # PER_DEPTH_COLUMNS (1-D) and "s" [n, S]
    seed: int = 0

    @classmethod
    def from_arrays(cls, steps, *, sample, t, matched, on_path, s, seed: int = 0) -> "PerDepth":
        S = int(steps)
        cols = {"sample": np.asarray(sample, np.int64).reshape(-1), "t": np.asarray(t, np.int64).reshape(-1),
                "matched": np.asarray(matched, np.int64).reshape(-1),
                "on_path": np.asarray(on_path, bool).reshape(-1),
                "s": np.asarray(s, np.float64).reshape(-1, S)}
        n = len(cols["matched"])
        if any(len(v) != n for v in cols.values()):
            raise WorkbenchError(f"per-depth columns have lengths {[len(v) for v in cols.values()]}: expected {n}")
        return cls(steps=S, chains=cols, seed=seed)

    @classmethod
    def empty(cls, steps) -> "PerDepth":
        return cls.from_arrays(steps, sample=[], t=[], matched=[], on_path=[], s=np.zeros((0, int(steps))))

    @classmethod
    def concat(cls, parts: list["PerDepth"]) -> "PerDepth":
        if not parts:
            raise WorkbenchError("nothing to merge: expected at least one PerDepth")
        cols = {k: np.concatenate([p.chains[k] for p in parts]) for k in parts[0].chains}
        return cls(steps=parts[0].steps, chains=cols, seed=parts[0].seed)

    def filter(self, samples) -> "PerDepth":
        keep = np.isin(self.chains["sample"], np.asarray(list(samples), np.int64))
        return PerDepth(steps=self.steps, chains={k: v[keep] for k, v in self.chains.items()}, seed=self.seed)

    @property
    def n(self) -> int:
        return int(len(self.chains["matched"]))

    def _terms(self) -> np.ndarray:
        """[n, S]: 1{M >= k}·s_k."""
        k = np.arange(self.steps)[None, :]
        return np.where(self.chains["matched"][:, None] >= k, self.chains["s"], 0.0)

    @property
    def expected(self) -> np.ndarray:
        """Per start: the Rao–Blackwellised E[A_t] (Σ of its terms)."""
        return self._terms().sum(1)

    @property
    def cumulative(self) -> np.ndarray:
        """P(A >= k), k = 1..S."""
        return self._terms().mean(0) if self.n else np.full(self.steps, math.nan)

    @property
    def conditional(self) -> np.ndarray:
        """α_k = P(A >= k) / P(A >= k-1), k = 1..S (from :attr:`cumulative`)."""
        c = np.concatenate([[1.0], self.cumulative])
        with np.errstate(invalid="ignore", divide="ignore"):
            return c[1:] / c[:-1]

    @property
    def accept_length(self) -> float:
        return float(self.expected.mean()) + 1 if self.n else math.nan

    @property
    def decode_path_accept_length(self) -> float:
        e = self.expected[self.chains["on_path"]]
        return float(e.mean()) + 1 if len(e) else math.nan

    def intervals(self, n_boot: int = 1000) -> dict:
        """95% percentile bootstrap over samples (seeded) of both accept lengths and of P(A >= k)."""
        sm, e, terms = self.chains["sample"], self.expected + 1, self._terms()
        kw = dict(seed=self.seed, n_boot=n_boot)
        return {"accept_length": bootstrap_ratio(sm, e, **kw),
                "decode_path_accept_length": bootstrap_ratio(sm, e, mask=self.chains["on_path"], **kw),
                "cumulative": [bootstrap_ratio(sm, terms[:, k], **kw) for k in range(self.steps)]}

    def to_dict(self) -> dict:
        iv = self.intervals()
        return jsonable({"estimator": "Rao-Blackwellised per depth (s_k = served mass of the matched node's "
                                      "children, teacher-forced pass)",
                         "n_starts": self.n, "n_decode_path_steps": int(self.chains["on_path"].sum()),
                         "accept_length": self.accept_length,
                         "decode_path_accept_length": self.decode_path_accept_length,
                         "cumulative": self.cumulative, "conditional": self.conditional, "intervals": iv})

    def summary_lines(self) -> list[str]:
        iv = self.intervals()
        f = lambda x: "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"  # noqa: E731
        return [f"per depth (Rao–Blackwellised, {self.n} starts): accept length {f(self.accept_length)} "
                f"[95% {f(iv['accept_length'][0])}–{f(iv['accept_length'][1])}]   decode-path "
                f"{f(self.decode_path_accept_length)} [95% {f(iv['decode_path_accept_length'][0])}–"
                f"{f(iv['decode_path_accept_length'][1])}]",
                "per depth P(A>=k): [" + ", ".join(f(x) for x in self.cumulative) + "]"]


def per_depth_batch(tree_tokens, parents, depths, next_data, A, hidden, stats, lm_head, s: Sampling, steps: int,
                    *, rows, n_prompt_tokens, max_memory=None, reply_starts=None):
    """The :class:`PerDepth` rows of one batch: starts where ``A >= 0`` (counted); the decode path
    from ``n_prompt_tokens`` (restarting at each of ``reply_starts``) as ``statistics.decode_path`` walks it."""

    on = matched_path(tree_tokens, parents, depths, next_data)

    B, T, n = tree_tokens.shape
    block = rows_per_chunk(T, 4 * 4 * B * n * int(hidden.shape[-1]), memory_budget(hidden.device, max_memory))
    sk = child_mass(tree_tokens, parents, depths, on, hidden, stats, lm_head, s, steps, block=block)
    A_np = A.detach().cpu().numpy()
    b_idx, t_idx = np.nonzero(A_np >= 0)
    on_path = np.zeros(len(b_idx), bool)
    for b in range(A_np.shape[0]):
        path_t = {t for t, _ in decode_path(A_np[b], int(n_prompt_tokens[b]), int(steps),
                                            None if reply_starts is None else reply_starts[b])}
        sel = np.nonzero(b_idx == b)[0]
        on_path[sel] = np.isin(t_idx[sel], list(path_t))
    sk = sk.detach().cpu().numpy()
    return PerDepth.from_arrays(steps, sample=np.asarray(rows, np.int64)[b_idx], t=t_idx,
                                matched=A_np[b_idx, t_idx], on_path=on_path, s=sk[b_idx, t_idx])


def sampled_counts(draft, feats, ids, att, batch, setting, lm_head, *, acc_topk: int = 0, max_memory=None):
    """(A [B, T] with -1 where not counted, step-1 hits or None, :class:`PerDepth`) of one batch at T > 0.

        >>> # A, hits, pd = sampled_counts(draft, feats, ids, att, batch, setting, capture.split_head(m)[1])

    As ``acceptance.draft_counts`` (the same trees or chains, the same counting rule), but A matches
    the drafts against the data's next tokens (:func:`data_next_tokens`): the decode path is then
    the server's in distribution when the data is a sample of the served distribution. ``batch``
    must come from ``capture.extract(..., sampling=)`` (it carries ``served`` and ``hidden``).
    Step-1 hits stay against the target's argmax (``batch.next_token``), as at T = 0.
    """
    import torch


    if batch.served is None or batch.hidden is None:
        raise WorkbenchError("sampled_counts: the batch has no served statistics; capture it with "
                             "capture.extract(..., sampling=Sampling(temperature=...))")
    K = setting.steps
    dev = ids.device
    nxt = data_next_tokens(batch.input_ids, batch.attention_mask).to(dev)
    lm, lengths = batch.loss_mask.to(dev), batch.lengths.to(dev)
    if setting.shape == "tree":
        trees = draft_trees(draft, feats, ids, att, K, setting.eagle_topk, setting.num_draft_tokens,
                            acc_topk=int(acc_topk), max_memory=max_memory)
        A = tree_accepted_counts(trees, nxt, lm, lengths)
        tok, par, dep = trees.tokens, trees.parents, trees.depths
        step1 = trees.acc_ids
    else:
        out = run_chains(draft, feats, ids, att, int(K), acc_topk=int(acc_topk), max_memory=max_memory)
        A = accepted_counts(out.tokens, nxt, lm, lengths, K)
        tok, par, dep = chain_as_tree(out.tokens[:, :, :K])
        step1 = None if out.topk_ids is None else out.topk_ids[:, :, 0, :]
    hits = None
    if step1 is not None:
        g = batch.next_token.to(dev)
        g1 = torch.cat([g[:, 1:], torch.full_like(g[:, :1], -1)], 1)
        hits = torch.stack([step1[..., 0] == g1, (step1[..., :5] == g1[..., None]).any(-1)], -1).long()
    hdev = batch.hidden.device
    pd = per_depth_batch(tok.to(hdev), par.to(hdev), dep.to(hdev), nxt.to(hdev), A, batch.hidden, batch.served,
                         lm_head, as_sampling(setting), K, rows=batch.rows, n_prompt_tokens=batch.n_prompt_tokens,
                         max_memory=max_memory, reply_starts=batch_reply_starts(batch.loss_mask, batch.lengths))
    return A, hits, pd


# ------------------------------------------------------------------------------------------------
# Rejection-sampling chains (SGLang --speculative-use-rejection-sampling, vLLM probabilistic)
# ------------------------------------------------------------------------------------------------


def rejection_chain(p_rows, q_rows, data_tokens):
    """Per chain: (E[A | y] = Σ_k Π_{j<=k} w_j, the low-variance Σ_k (Π_{j<k} w_j)·β_k), both ``[n]``,
    and P(A >= k | y) ``[n, K]``.

        >>> import torch
        >>> p = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]]); q = torch.tensor([[[1.0, 0.0], [0.25, 0.75]]])
        >>> e, lv, cum = rejection_chain(p, q, torch.tensor([[0, 1]]))
        >>> e.tolist(), lv.tolist(), cum.tolist()      # w = (1, 1): both accepted; β = (0.5, 0.75)
        ([2.0], [1.25], [[1.0, 1.0]])

    ``p_rows``, ``q_rows`` ``[n, K, V]``: the target's served distribution and the draft's (q =
    softmax(draft logits / T), top-k/top-p as p) at the K steps of each chain, the draft fed the
    data tokens ``data_tokens [n, K]`` (y_1..y_K). Standard speculative sampling accepts y_j with
    min(1, p/q); given that the emitted y is a sample of p, P(A >= k | y) = Π_{j<=k} w_j with
    w_j = min(1, q_j(y_j) / p_j(y_j)) (``shared/sampling.md``). β_k = Σ_x min(p_k, q_k)(x) is
    P(step k accepted | reached) averaged over y_k, the low-variance form.
    """
    import torch

    y = data_tokens.long()[..., None]
    py, qy = p_rows.gather(-1, y)[..., 0].double(), q_rows.gather(-1, y)[..., 0].double()
    w = torch.where(py > 0, torch.minimum(torch.ones_like(py), qy / py.clamp_min(1e-300)), torch.zeros_like(py))
    cum = torch.cumprod(w, dim=-1)
    beta = torch.minimum(p_rows.double(), q_rows.double()).sum(-1)
    reach = torch.cat([torch.ones_like(cum[:, :1]), cum[:, :-1]], dim=-1)
    return cum.sum(-1), (reach * beta).sum(-1), cum


# ------------------------------------------------------------------------------------------------
# `workbench accept` with a server mode beyond the lossless rule
# ------------------------------------------------------------------------------------------------


__all__ = ["as_sampling", "apply_sampling", "verify_probs", "served_stats", "token_probs", "head_logits", "data_next_tokens",
           "chain_as_tree", "matched_path", "child_mass", "PerDepth", "per_depth_batch", "rejection_chain",
           "sampled_counts", "accept_served", "bootstrap_ratio", "StartTable",
           "PER_DEPTH_COLUMNS"]
