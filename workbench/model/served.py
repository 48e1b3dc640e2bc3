"""The served verify distribution: SGLang's temperature / top-k / top-p applied to the target's logits.

    >>> import torch
    >>> from workbench.core.sampling import Sampling
    >>> from workbench.model.served import verify_probs, served_stats, token_probs
    >>> logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    >>> s = Sampling(temperature=1.0, top_k=3, top_p=0.8)
    >>> [round(x, 3) for x in verify_probs(logits, s)[0].tolist()]      # top-3, then top-p 0.8 of that
    [0.731, 0.269, 0.0, 0.0]
    >>> [round(x, 3) for x in token_probs(logits, served_stats(logits, s), s).tolist()[0]]  # the fast path
    [0.731, 0.269, 0.0, 0.0]

:func:`verify_probs` materialises the whole distribution (the exact reference); :func:`served_stats` keeps two
numbers per row (the log-normaliser of the kept tokens and the top-k/top-p cutoff logit) and :func:`token_probs`
reads any token's probability from them (the fast path, tested against the reference). It sits on the model
floor because the target's one capture pass (``capture.extract(..., sampling=)``) reduces its head with it.
"""

from __future__ import annotations

import math

from workbench.core.sampling import Sampling


def verify_probs(logits, s: Sampling):
    """SGLang's verify distribution ``[B, V]`` (rows sum to 1): the exact reference, whole vocabulary.

    ``softmax(logits / T)``; top-k renormalisation (keep the k most likely); top-p renormalisation of
    *that*: keep tokens in descending order while the mass before them is < top_p (flashinfer
    ``top_p_renorm_prob``); renormalise. Greedy settings give a one-hot of the argmax.
    """
    import torch

    x = logits.float()
    if s.greedy:
        return torch.zeros_like(x).scatter_(-1, x.argmax(-1, keepdim=True), 1.0)
    p = torch.softmax(x / s.temperature, dim=-1)
    p_sort, idx = p.sort(dim=-1, descending=True)
    keep = torch.ones_like(p_sort, dtype=torch.bool)
    if s.top_k != -1:
        keep &= torch.arange(p_sort.shape[-1], device=x.device) < s.top_k
    p_sort = p_sort * keep
    p_sort = p_sort / p_sort.sum(-1, keepdim=True)
    if s.top_p < 1.0:
        before = torch.cumsum(p_sort, dim=-1) - p_sort
        p_sort = p_sort * (before < s.top_p)
        p_sort = p_sort / p_sort.sum(-1, keepdim=True)
    return torch.zeros_like(p).scatter_(-1, idx, p_sort)



PARTIAL = 1024   # served_stats: top-p looks at the best PARTIAL tokens first, a full sort only for rows that need it



def served_stats(logits, s: Sampling):
    """Per row of ``logits [n, V]``: ``[n, 2]`` fp32 = (log-normaliser of the kept tokens, cutoff) in units
    of logits / T; a token is kept when ``logit / T >= cutoff`` and then has probability
    ``exp(logit / T - log_normaliser)`` (:func:`token_probs`). This is the reduction the chunked head
    keeps instead of ``[n, V]`` (``chunks.head_chunks(..., reduce=)``).

    Temperature only: a log-sum-exp. Top-k: ``topk(k + 1)``. Top-p without top-k: the best
    :data:`PARTIAL` tokens by ``topk``, and one full descending sort of only the rows whose nucleus is
    wider (flat distributions; the cost visible at a 128k vocabulary). Greedy: the cutoff lies below the
    argmax. The cutoff lies halfway between the last kept and the first cut value, so that a logit
    recomputed from the lm_head's row (:func:`head_logits`, which may round differently from the chunked
    matmul) falls on the same side; exact ties at the boundary (SGLang's order among them is
    unspecified) are all kept.
    """
    import torch

    x = logits.float()
    V = x.shape[-1]
    if s.greedy:
        top2 = x.topk(min(2, V), dim=-1).values
        return torch.stack([top2[:, 0], _midway(top2, torch.ones_like(top2[:, 0], dtype=torch.long))], -1)
    m = x.max(-1, keepdim=True).values
    lse = m[:, 0] / s.temperature + torch.sub(x, m).mul_(1.0 / s.temperature).exp_().sum(-1).log()
    if s.top_k == -1 and s.top_p >= 1.0:              # temperature only: one exp per logit, in place
        return torch.stack([lse, torch.full_like(lse, -math.inf)], -1)
    x = x / s.temperature
    kk = min(s.top_k, V) if s.top_k != -1 else min(PARTIAL, V)
    out = _cut(x, lse, s, kk, partial=s.top_k == -1 and kk < V)
    wide = torch.isnan(out[:, 0])                      # the nucleus is wider than the PARTIAL best tokens
    if bool(wide.any()):
        out[wide] = _cut(x[wide], lse[wide], s, V, partial=False)
    return out



def _cut(x, lse, s: Sampling, kk: int, *, partial: bool):
    """served_stats over the ``kk`` best tokens of each row (all top-k ones); NaN rows when ``partial`` and
    the nucleus does not close within them."""
    import torch

    V = x.shape[-1]
    xs = x.topk(min(kk + 1, V), dim=-1).values if kk < V else x.sort(dim=-1, descending=True).values
    p = torch.exp(xs[:, :kk] - lse[:, None])
    zk = p.sum(-1, keepdim=True) if s.top_k != -1 else torch.ones_like(p[:, :1])
    if s.top_p >= 1.0:
        n_kept = torch.full_like(lse, kk, dtype=torch.long)
        return torch.stack([lse + torch.log(zk[:, 0]), _midway(xs, n_kept)], -1)
    pr = p / zk
    cum = torch.cumsum(pr, dim=-1)
    keep = (cum - pr) < s.top_p
    n_kept = keep.sum(-1).clamp(min=1)
    mass = (p * keep).sum(-1)
    out = torch.stack([lse + torch.log(mass), _midway(xs, n_kept)], -1)
    if partial:                                        # every one of the kk kept: the nucleus may go on
        out[n_kept >= kk] = math.nan
    return out



def _midway(xs, n_kept):
    """The cutoff between the last kept and the first cut value of descending rows ``xs`` (-inf when all are
    kept): halfway, so a token's logit recomputed from its lm_head row (rounding apart) lands on its side."""
    import torch

    last = xs.gather(-1, (n_kept - 1).clamp(min=0)[:, None])[:, 0]
    nxt = xs.gather(-1, n_kept.clamp(max=xs.shape[-1] - 1)[:, None])[:, 0]
    mid = torch.where(n_kept >= xs.shape[-1], torch.full_like(last, -math.inf), (last + nxt) / 2)
    return torch.where(nxt < last, mid, torch.where(n_kept >= xs.shape[-1], mid, last))



def token_probs(logits_at, stats, s: Sampling):
    """Served probability of tokens whose logits are ``logits_at [..., m]`` at rows with ``stats [..., 2]``."""
    import torch

    x = logits_at.float()
    if not s.greedy:
        x = x / s.temperature
    ln, cut = stats[..., 0:1].float(), stats[..., 1:2].float()
    if s.greedy:
        return (x >= cut).float()          # a one-hot up to exact ties at the argmax
    return torch.where(x >= cut, torch.exp(x - ln), torch.zeros_like(x))



def head_logits(lm_head, hidden, tokens):
    """Logits of ``tokens [..., m]`` from final hidden states ``hidden [..., H]`` through ``lm_head``
    (an ``nn.Linear``: the token rows of its weight, rounded to the head's dtype as its matmul is; else
    the head on these rows): ``[..., m]`` fp32. No ``[.., V]`` tensor for a linear head."""
    import torch

    w = getattr(lm_head, "weight", None)
    if isinstance(lm_head, torch.nn.Linear) and w is not None:
        rows = w[tokens.clamp(0, w.shape[0] - 1)]                         # [..., m, H]
        out = (hidden.to(w.dtype)[..., None, :].float() * rows.float()).sum(-1)
        if lm_head.bias is not None:
            out = out + lm_head.bias.float()[tokens.clamp(0, w.shape[0] - 1)]
        return out.to(w.dtype).float()
    full = lm_head(hidden).float()
    return full.gather(-1, tokens.clamp(0, full.shape[-1] - 1))
