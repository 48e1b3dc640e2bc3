"""The skeleton every exact speculative loop shares: verify steps until enough tokens are generated.

    >>> import torch
    >>> def step(ids, h, t):                 # a toy verifier: accept one draft token, bonus = t
    ...     return [7], t, torch.zeros(2, 1)
    >>> decode_loop([1, 2, 3], torch.zeros(3, 1), step, max_new_tokens=5)
    ([3, 7, 1, 7, 3], [1, 1])

``ids`` is the prompt followed by the prefill's first new token x_{t+1}; ``feats`` the taps h_0..h_t of the
prompt. Each step gets the ids so far, h_0..h_t with one unused row appended (the draft's extra position) and
t, and returns (accepted draft tokens, the bonus token, the taps of the root and the accepted nodes); the
loop extends ids and h and moves t <- t + A + 1. The last step may overshoot: the output is cut to
``max_new_tokens``. The chain loop (``exact.exact_decode``: a KV cache, the draft's chain) and the tree loop
(``tree_verify.exact_tree_decode``: the whole sequence re-read with an ancestor mask) differ only in ``step``.
"""

from __future__ import annotations


def decode_loop(ids: list[int], feats, step, max_new_tokens: int, *, device=None, dtype=None):
    """(generated ids cut to ``max_new_tokens``, A per verify step); ``ids`` ends with the prefill's token."""
    import torch

    n_prompt = len(ids) - 1
    feat_seq = [feats]                                                       # h_0 .. h_t
    accepts: list[int] = []
    while len(ids) - n_prompt < max_new_tokens:
        t = len(ids) - 2
        h = torch.cat(feat_seq + [feat_seq[0][:1] * 0], 0).to(device=device, dtype=dtype)  # + unused row
        accepted, bonus, new_feats = step(ids, h, t)
        accepts.append(len(accepted))
        ids.extend([int(x) for x in accepted] + [int(bonus)])
        feat_seq.append(new_feats)                                           # h_{t+1} .. h_{t+A+1}
    return ids[n_prompt:n_prompt + max_new_tokens], accepts
