"""Draft attention without the T×T matrix: causal prefix keys plus each query's own extra keys.

    >>> import torch
    >>> from workbench.model.attention import prefix_attention, reference_attention
    >>> _ = torch.manual_seed(0)
    >>> q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    >>> ek, ev = [torch.randn(1, 2, 6, 4)], [torch.randn(1, 2, 6, 4)]     # one extra key per query
    >>> out = prefix_attention(q, k, v, ek, ev)
    >>> torch.allclose(out, reference_attention(q, k, v, ek, ev), atol=1e-6)
    True
    >>> torch.allclose(prefix_attention(q, k, v, ek, ev, kernel="blockwise", max_memory=500), out, atol=1e-6)
    True

Draft step k of the parallel chains (``draft._unroll``, the training-time-test layout of SpecForge
``llama3_eagle.py``) lets the query at position p see the step-0 keys of positions 0..p (causal)
and its own keys of steps 1..k at position p (the "diagonal"). The dense formula builds
[B, heads, T, T + k] scores; here the two parts are computed apart and merged exactly:

- the causal prefix through a fused kernel that also returns the log-sum-exp of the scores
  (CPU: ``aten._scaled_dot_product_flash_attention_for_cpu``; CUDA:
  ``aten._scaled_dot_product_efficient_attention`` with ``compute_log_sumexp``), then
  ``out = (e^{lse - m}·o_prefix + Σ_j e^{s_j - m}·v_j) / (e^{lse - m} + Σ_j e^{s_j - m})``;
- or, when gradients are needed (training: the fused kernels do not differentiate their
  log-sum-exp) or asked with ``kernel="blockwise"``, in query blocks of
  the dense formula (O(T·block) memory, a block sized from the memory budget), where the extra
  scores simply join each block's softmax.

The same function runs on CPU and CUDA; only the fused kernel's name differs. Keys are causal
only: batches are right-padded, so a padded key is seen only by padded queries (computed,
meaningless, never counted). Trees (k lanes per start position, each with its own lineage of
extra keys) fold the lanes into the batch dimension: q [B·L, h, T, d] with k/v expanded and each
lane's extra keys gathered along its slot lineage.
"""

from __future__ import annotations

import math

import torch

from workbench.core.errors import WorkbenchError
from workbench.model.chunks import memory_budget, rows_per_chunk

KERNELS = ("auto", "fused", "blockwise")


def _expand_heads(q, x):
    """Repeat grouped key/value heads (GQA) up to the query's head count."""
    rep = q.shape[1] // x.shape[1]
    return x.repeat_interleave(rep, dim=1) if rep > 1 else x


def _fused_prefix(q, k, v, scale):
    """(out [B,h,T,d], lse [B,h,T] fp32) of causal attention, from the device's fused kernel."""
    if q.device.type == "cuda":
        out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, True, scale=scale)[:2]
        return out, lse[..., : q.shape[2]].float()               # lse is padded to a multiple of 32
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=scale)
    return out, lse.float()


def _has_fused(q) -> bool:
    # CUDA's efficient kernel wants the head dim a multiple of 8 (any draft's is: 64, 128); else blockwise
    return q.device.type == "cpu" or (q.device.type == "cuda" and q.shape[-1] % 8 == 0)


def _merge(out0, lse0, scores, extra_v, dtype):
    """Exact softmax over [prefix keys, extra keys] from the prefix's (out, lse) and the extra scores."""
    m = torch.maximum(lse0, scores.amax(-1))
    w0 = torch.exp(lse0 - m)
    we = torch.exp(scores - m[..., None])
    z = w0 + we.sum(-1)
    out = out0.float() * (w0 / z)[..., None]
    for j, vj in enumerate(extra_v):
        out = out + vj.float() * (we[..., j] / z)[..., None]
    return out.to(dtype)


def _blockwise(q, k, v, extra_s, extra_v, scale, block):
    """The dense formula in query blocks: scores [B,h,block,<=T] per block, extras in the same softmax."""
    T = q.shape[2]
    outs = []
    for s in range(0, T, block):
        e = min(T, s + block)
        sc = (q[:, :, s:e] @ k[:, :, :e].transpose(-1, -2)).float() * scale
        later = torch.arange(e, device=q.device)[None, :] > torch.arange(s, e, device=q.device)[:, None]
        sc = sc.masked_fill(later, float("-inf"))
        if extra_s is not None:
            sc = torch.cat([sc, extra_s[:, :, s:e]], dim=-1)
        p = torch.softmax(sc, dim=-1).to(q.dtype)
        o = p[..., :e] @ v[:, :, :e]
        for j, vj in enumerate(extra_v):
            o = o + p[..., e + j, None] * vj[:, :, s:e]
        outs.append(o)
    return torch.cat(outs, dim=2)


def prefix_attention(q, k, v, extra_k=(), extra_v=(), *, scale: float | None = None, kernel: str = "auto",
                     max_memory=None) -> torch.Tensor:
    """Attention of ``q`` [B, h, T, d] over causal prefix keys ``k``/``v`` [B, h_kv, T, d] (query i sees
    keys 0..i) plus per-query extra keys: ``extra_k[j][:, :, i]`` is query i's j-th own key
    ([B, h or h_kv, T, d] each, with ``extra_v`` alike). Returns [B, h, T, d] in ``q``'s dtype.

        >>> import torch
        >>> q = torch.randn(2, 4, 5, 8); k = v = torch.randn(2, 2, 5, 8)          # GQA: 2 kv heads
        >>> prefix_attention(q, k, v).shape
        torch.Size([2, 4, 5, 8])

    Scores and softmax are fp32 (as the dense formula). ``kernel``: "auto" (fused unless gradients
    are needed), "fused" or "blockwise"; ``max_memory`` sizes the blockwise query blocks
    (:func:`workbench.chunks.memory_budget`).
    """
    if kernel not in KERNELS:
        raise WorkbenchError(f"attention kernel {kernel!r}: expected one of {', '.join(KERNELS)}")
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or k.shape[2] != q.shape[2] or \
            q.shape[1] % k.shape[1] or len(extra_k) != len(extra_v):
        raise WorkbenchError(f"prefix_attention: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}, "
                             f"{len(extra_k)} extra keys and {len(extra_v)} extra values; expected q [B,h,T,d], "
                             "k = v [B,h_kv,T,d] with h a multiple of h_kv, as many extra keys as values")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    k, v = _expand_heads(q, k), _expand_heads(q, v)
    extra_v = [_expand_heads(q, x) for x in extra_v]
    extra_s = (torch.stack([(q * _expand_heads(q, kj)).sum(-1) for kj in extra_k], dim=-1).float() * scale
               if extra_k else None)
    grads = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *extra_k, *extra_v))
    if kernel == "fused" or (kernel == "auto" and not grads and _has_fused(q)):
        out0, lse0 = _fused_prefix(q, k, v, scale)
        if extra_s is None:
            return out0
        return _merge(out0, lse0, extra_s, extra_v, q.dtype)
    B, h, T, _ = q.shape
    per_row = B * h * (T + len(extra_k)) * 4 * 3                  # fp32 scores, exp, probabilities
    block = rows_per_chunk(T, per_row, memory_budget(q.device, max_memory), minimum=16)
    return _blockwise(q, k, v, extra_s, extra_v, scale, block)


def reference_attention(q, k, v, extra_k=(), extra_v=(), *, scale: float | None = None) -> torch.Tensor:
    """The dense formula ([B, h, T, T + n_extra] scores): the exact reference for :func:`prefix_attention`.

        >>> import torch
        >>> q = k = v = torch.randn(1, 1, 3, 2)
        >>> reference_attention(q, k, v).shape
        torch.Size([1, 1, 3, 2])
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    k, v = _expand_heads(q, k), _expand_heads(q, v)
    T = q.shape[2]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    s0 = ((q @ k.transpose(-1, -2)).float() * scale).masked_fill(~causal, float("-inf"))
    extra = [(q * _expand_heads(q, kj)).sum(-1).float()[..., None] * scale for kj in extra_k]
    p = torch.softmax(torch.cat([s0, *extra], dim=-1), dim=-1).to(q.dtype)
    out = p[..., :T] @ v
    for j, vj in enumerate(extra_v):
        out = out + p[..., T + j, None] * _expand_heads(q, vj)
    return out


__all__ = ["prefix_attention", "reference_attention", "KERNELS"]
