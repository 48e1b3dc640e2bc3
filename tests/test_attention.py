"""workbench.model.attention: the causal prefix + per-query extra keys, fused (LSE merge) and blockwise,
against the dense T×T formula (values and gradients)."""

from __future__ import annotations

import pytest
import torch

from workbench.model.attention import prefix_attention, reference_attention
from workbench.core.errors import WorkbenchError


def qkv(B=2, h=4, hkv=4, T=9, d=8, n_extra=2, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, h, T, d, generator=g).to(dtype)
    k, v = (torch.randn(B, hkv, T, d, generator=g).to(dtype) for _ in range(2))
    ek = [torch.randn(B, hkv, T, d, generator=g).to(dtype) for _ in range(n_extra)]
    ev = [torch.randn(B, hkv, T, d, generator=g).to(dtype) for _ in range(n_extra)]
    return q, k, v, ek, ev


@pytest.mark.parametrize("kernel", ["fused", "blockwise"])
@pytest.mark.parametrize("shape", [dict(), dict(n_extra=0), dict(n_extra=3), dict(hkv=2), dict(hkv=1, n_extra=1),
                                   dict(T=1), dict(B=1, T=300, n_extra=3)],
                         ids=["2extra", "K=1", "3extra", "gqa", "mqa", "T=1", "long"])
def test_equals_the_dense_formula(kernel, shape):
    q, k, v, ek, ev = qkv(**shape)
    ref = reference_attention(q, k, v, ek, ev)
    for budget in (None, 3000):              # 3000 bytes: blocks of the 16-row minimum
        out = prefix_attention(q, k, v, ek, ev, kernel=kernel, max_memory=budget)
        assert out.shape == q.shape and out.dtype == q.dtype
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_queries_see_only_earlier_prefix_keys():
    q, k, v, ek, ev = qkv(T=6)
    out = prefix_attention(q, k, v, ek, ev)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:], v2[:, :, 4:] = 100.0, -100.0             # later keys change: earlier queries must not
    out2 = prefix_attention(q, k2, v2, ek, ev)
    torch.testing.assert_close(out2[:, :, :4], out[:, :, :4], rtol=0, atol=1e-6)
    assert not torch.allclose(out2[:, :, 4:], out[:, :, 4:])


def test_bf16_stays_close_to_the_fp32_formula():
    q, k, v, ek, ev = qkv(T=64, dtype=torch.bfloat16)
    ref = reference_attention(*(x.float() for x in (q, k, v)), [x.float() for x in ek], [x.float() for x in ev])
    for kernel in ("fused", "blockwise"):
        out = prefix_attention(q, k, v, ek, ev, kernel=kernel)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), ref, rtol=0.03, atol=0.03)


def test_gradients_equal_the_dense_formula_and_auto_uses_blockwise_for_them():
    q, k, v, ek, ev = qkv(T=40)
    leaves = [q, k, v, *ek, *ev]
    for x in leaves:
        x.requires_grad_(True)
    w = torch.randn_like(q)
    grads = []
    for fn in (lambda: prefix_attention(q, k, v, ek, ev, max_memory=3000), lambda: reference_attention(q, k, v, ek, ev)):
        (fn() * w).sum().backward()
        grads.append([x.grad.clone() for x in leaves])
        for x in leaves:
            x.grad = None
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_bad_shapes_and_kernel_are_one_line_errors():
    q, k, v, ek, ev = qkv()
    with pytest.raises(WorkbenchError, match="prefix_attention"):
        prefix_attention(q, k[:, :, :5], v[:, :, :5])
    with pytest.raises(WorkbenchError, match="extra"):
        prefix_attention(q, k, v, ek, ev[:1])
    with pytest.raises(WorkbenchError, match="kernel"):
        prefix_attention(q, k, v, kernel="flash")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the fused kernel there is the efficient one)")
def test_cuda_fused_kernel_matches_blockwise():
    q, k, v, ek, ev = (x.cuda() if torch.is_tensor(x) else [y.cuda() for y in x] for x in qkv(T=100))
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 0.03)):
        args = [q.to(dtype), k.to(dtype), v.to(dtype), [x.to(dtype) for x in ek], [x.to(dtype) for x in ev]]
        a = prefix_attention(*args, kernel="fused")
        b = prefix_attention(*args, kernel="blockwise")
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)
