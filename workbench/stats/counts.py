"""The counting rules and intervals every estimator shares: A per chain, the decode path, Wilson, bootstrap.

    >>> import torch
    >>> g = torch.tensor([[1, 2, 3, 4, 5, 6]])
    >>> d = torch.stack([g.roll(-1, 1), g.roll(-2, 1)], -1)   # both steps right
    >>> accepted_counts(d, g, torch.tensor([[0, 0, 1, 1, 1, 1]]), torch.tensor([6]), K=2).tolist()
    [[2, 2, 2, -1, -1, -1]]
    >>> decode_path([-1, 2, -1, -1, 0, 1, -1, -1], n_prompt_tokens=2, K=2)
    [(1, 2), (4, 0), (5, 1)]
    >>> [round(x, 3) for x in wilson(8, 10)]
    [0.49, 0.943]

A chain at t counts when all K positions it would verify are in the response (``loss_mask``) and in the row;
the decode path is the walk a server takes: after A accepted tokens and the bonus, the next step starts
A+1 positions later (``shared/eagle3-facts.md``), and it restarts at each reply of a row with several (an
all-turns row: a server verifies each reply in its own request). A chain whose window reaches from one reply
into the next prompt is not counted, so every estimator counts an all-turns row exactly as its per-turn rows.
"""

from __future__ import annotations

import math

import numpy as np

from workbench.core.errors import WorkbenchError

Z95 = 1.959963984540054



def accepted_counts(tokens, next_token, loss_mask, lengths, K: int):
    """A(t) for every chain: LongTensor[B, T], -1 where the chain at t is not counted.

        >>> import torch
        >>> g = torch.tensor([[1, 2, 3, 4, 5, 6]])
        >>> d = torch.stack([g.roll(-1, 1), g.roll(-2, 1)], -1)   # both steps right
        >>> accepted_counts(d, g, torch.tensor([[0, 0, 1, 1, 1, 1]]), torch.tensor([6]), K=2).tolist()
        [[2, 2, 2, -1, -1, -1]]

    ``tokens[b, t, k]`` (k = 0..K-1, at least K of them) is the (k+1)-th drafted token of the chain
    at t, in target ids; ``next_token[b, p]`` = g_{p+1}; ``lengths[b]`` = real (unpadded) length.
    """
    import torch

    tokens, next_token, loss_mask, lengths = (torch.as_tensor(x) for x in (tokens, next_token, loss_mask, lengths))
    if K < 1:
        raise WorkbenchError(f"steps K={K}: expected K >= 1")
    if tokens.dim() != 3 or tokens.shape[2] < K:
        raise WorkbenchError(f"draft tokens have shape {tuple(tokens.shape)}: expected [B, T, K>={K}]")
    B, T = tokens.shape[:2]
    for name, x in (("next_token", next_token), ("loss_mask", loss_mask)):
        if tuple(x.shape) != (B, T):
            raise WorkbenchError(f"{name} has shape {tuple(x.shape)}: expected [B, T] = [{B}, {T}]")
    if tuple(lengths.shape) != (B,):
        raise WorkbenchError(f"lengths has shape {tuple(lengths.shape)}: expected [B] = [{B}]")
    if bool((lengths > T).any()) or bool((lengths < 0).any()):
        raise WorkbenchError(f"lengths {lengths.tolist()} must lie in 0..T={T}")
    dev = tokens.device
    next_token, loss_mask, lengths = next_token.to(dev), loss_mask.to(dev), lengths.to(dev)
    tokens = tokens[:, :, :K].long()

    # match[b, t, k] = tokens[b, t, k] == next_token[b, t+k+1]   (g_{t+k+2})
    pad = torch.full((B, K), -1, dtype=torch.long, device=dev)
    g = torch.cat([next_token.long(), pad], dim=1)                          # [B, T+K]
    shifted = torch.stack([g[:, k + 1:k + 1 + T] for k in range(K)], dim=-1)  # [B, T, K]
    match = (tokens == shifted).long()
    A = match.cumprod(dim=-1).sum(dim=-1)                                  # leading matches

    return torch.where(counted_starts(loss_mask, lengths, K), A, torch.full_like(A, -1))



def counted_starts(loss_mask, lengths, K: int):
    """Bool [B, T]: the chains that are counted, whatever they drafted: t+K+1 <= len-1 and
    ``loss_mask[t+2 .. t+K+1]`` all 1 (the rule of :func:`accepted_counts`; the lossy-threshold and
    rejection-sampling estimators count the same starts).

        >>> import torch
        >>> counted_starts(torch.tensor([[0, 0, 1, 1, 1, 1]]), torch.tensor([6]), K=2).tolist()
        [[True, True, True, False, False, False]]
    """
    import torch

    loss_mask, lengths = torch.as_tensor(loss_mask), torch.as_tensor(lengths)
    B, T = loss_mask.shape
    dev = loss_mask.device
    lengths = lengths.to(dev)
    lm = torch.cat([(loss_mask != 0).long(), torch.zeros(B, K + 2, dtype=torch.long, device=dev)], dim=1)
    csum = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=dev), lm.cumsum(dim=1)], dim=1)
    t = torch.arange(T, device=dev)
    window = csum[:, t + K + 2] - csum[:, t + 2]                            # sum of lm[t+2 .. t+K+1]
    return (window == K) & (t[None, :] + K + 1 <= lengths[:, None] - 1)



def bootstrap_ratio(sample, values, *, mask=None, seed: int = 0, n_boot: int = 1000) -> list[float]:
    """95% percentile bootstrap over SAMPLES of the mean of ``values`` (one per start or chain), ``mask``
    selecting starts: the one interval of every accept length (AcceptanceResult, PerDepth, thresholds, rejection).

        >>> bootstrap_ratio([0, 0, 1, 1], [1.0, 1.0, 3.0, 3.0], n_boot=200)
        [1.0, 3.0]

    Why this one bootstrap and no other: starts within one sample share its text and are correlated, so the
    resampled unit is the sample (a cluster bootstrap), and the statistic is the ratio of sums (every start of
    a drawn sample counts, as a server pools over its verify steps), not a mean of per-sample means. Drawing
    multinomial weights per sample is the same resampling as drawing samples with replacement, and one
    matrix product gives all ``n_boot`` ratios.
    """
    sample, values = np.asarray(sample), np.asarray(values, np.float64)
    mask = np.ones(len(values), bool) if mask is None else np.asarray(mask, bool)
    if not mask.any():
        return [math.nan, math.nan]
    ids, inv = np.unique(sample, return_inverse=True)
    w = np.random.default_rng(seed).multinomial(len(ids), np.full(len(ids), 1.0 / len(ids)), size=n_boot)
    sums = np.bincount(inv[mask], weights=values[mask], minlength=len(ids))
    cnts = np.bincount(inv[mask], minlength=len(ids)).astype(float)
    num, den = w @ sums, w @ cnts
    r = num[den > 0] / den[den > 0]
    return [float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))] if len(r) else [math.nan, math.nan]



def decode_path(A_row, n_prompt_tokens: int, K: int, starts=None) -> list[tuple[int, int]]:
    """The verify steps a server would make on a target-greedy sample: list of (t, A(t)).

        >>> decode_path([-1, 2, -1, -1, 0, 1, -1, -1], n_prompt_tokens=2, K=2)
        [(1, 2), (4, 0), (5, 1)]
        >>> decode_path([-1, 1, -1, -1, -1, -1, 0, -1, -1], n_prompt_tokens=2, K=1, starts=[2, 7])
        [(1, 1), (6, 0)]

    Starts at t = n_prompt_tokens - 1 and moves t <- t + A(t) + 1 while the chain at t is counted. ``starts``
    (:func:`reply_starts`): the first position of every reply of a row with several (an all-turns row); the
    walk restarts at s - 1 for each, because a server verifies each reply in its own request after its own
    history. So an all-turns row walks exactly the steps of its per-turn rows together.
    """
    A_row = [int(a) for a in (A_row.tolist() if hasattr(A_row, "tolist") else A_row)]
    if n_prompt_tokens < 1:
        raise WorkbenchError(f"n_prompt_tokens={n_prompt_tokens}: expected >= 1 (the first chain starts at "
                             f"t = n_prompt_tokens - 1)")
    begins = sorted({int(n_prompt_tokens)} | {int(s) for s in (starts or ()) if int(s) > n_prompt_tokens})
    steps = []
    for i, s in enumerate(begins):
        stop = begins[i + 1] - 1 if i + 1 < len(begins) else len(A_row)
        t = s - 1
        while 0 <= t < stop and A_row[t] >= 0:
            a = A_row[t]
            if a > K:
                raise WorkbenchError(f"A({t})={a} exceeds K={K}")
            steps.append((t, a))
            t += a + 1
    return steps



def reply_starts(loss_mask, length: int | None = None) -> list[int]:
    """The first position of every reply: s >= 1 with ``loss_mask[s] == 1`` after a 0 (one row, its first
    ``length`` positions).

        >>> reply_starts([0, 0, 1, 1, 0, 0, 1, 1, 1])
        [2, 6]
    """
    m = [int(x) for x in (loss_mask.tolist() if hasattr(loss_mask, "tolist") else loss_mask)]
    m = m[:length] if length is not None else m
    return [s for s in range(1, len(m)) if m[s] and not m[s - 1]]



def batch_reply_starts(loss_mask, lengths) -> list[list[int]]:
    """:func:`reply_starts` of every row of a batch (``loss_mask`` [B, T], ``lengths`` [B])."""
    lm = loss_mask.cpu() if hasattr(loss_mask, "cpu") else loss_mask
    ln = lengths.tolist() if hasattr(lengths, "tolist") else list(lengths)
    return [reply_starts(lm[b], int(ln[b])) for b in range(len(ln))]



def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval for a proportion; (nan, nan) when n == 0.

        >>> [round(x, 3) for x in wilson(8, 10)]
        [0.49, 0.943]
    """
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo, hi = center - half, center + half
    return (0.0 if successes == 0 else max(0.0, lo), 1.0 if successes == n else min(1.0, hi))



def chain_statistics(A: np.ndarray, K: int) -> dict:
    """conditional, cumulative, histogram, accept lengths of an array of A values (all >= 0).

        >>> chain_statistics([2, 0, 1], K=2)["at_least"].tolist()
        [3, 2, 1]
    """
    A = np.asarray(A, dtype=np.int64)
    n = int(A.size)
    hist = np.bincount(A, minlength=K + 1)[:K + 1] if n else np.zeros(K + 1, dtype=np.int64)
    at_least = np.array([int((A >= k).sum()) for k in range(K + 1)])       # at_least[0] = n
    cumulative = np.array([at_least[k] / n if n else math.nan for k in range(1, K + 1)])
    conditional = np.array([at_least[k] / at_least[k - 1] if at_least[k - 1] else math.nan
                            for k in range(1, K + 1)])
    mean = float(A.mean()) if n else math.nan
    return {"n_chains": n, "conditional": conditional, "cumulative": cumulative, "histogram": hist,
            "accept_length": mean + 1, "accept_length_no_bonus": mean, "at_least": at_least}



def coverage_counts(next_token, loss_mask, lengths, t2d):
    """Per sample: (response tokens, those whose target greedy token the draft vocab can emit).

    Counts positions j (1 <= j < length) with loss_mask[j] == 1; the token that must be drafted
    there is g_j = next_token[j-1].
    """
    import torch

    B, T = next_token.shape
    t2d = t2d.to(next_token.device)
    g = next_token[:, :-1].long().clamp(0, len(t2d) - 1)                   # g_j for j = 1..T-1
    pos = torch.arange(1, T, device=next_token.device)[None, :]
    resp = (loss_mask[:, 1:] != 0) & (pos < lengths.to(next_token.device)[:, None])
    ok = resp & t2d[g]
    return resp.sum(1).cpu().numpy(), ok.sum(1).cpu().numpy()
