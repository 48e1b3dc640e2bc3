"""The draft's rotary embedding: its parameters read from a config, the inverse frequencies, and the rotation.

    >>> import torch
    >>> from workbench.model.rotary import inv_freq, read_rope, rotate
    >>> theta, scaling = read_rope({"rope_theta": 10000.0}, "config.json")
    >>> rotate(torch.ones(1, 1, 2, 4), torch.arange(2), inv_freq(4, theta, scaling)).shape
    torch.Size([1, 1, 2, 4])

Scalings: ``linear``; ``llama3`` (as transformers, SGLang and newer SpecForge compute it); ``yarn`` (NVIDIA
ModelOpt's default export): NTK-by-parts frequencies (``beta_fast`` 32, ``beta_slow`` 1, ``truncate``) and cos/sin
multiplied by the attention factor (:func:`workbench.engines.positions.yarn_attention_factor`), as transformers'
``_compute_yarn_parameters`` and vLLM 0.32's ``YaRNScalingRotaryEmbedding`` compute them (``tests/test_yarn.py``).
"""

from __future__ import annotations

import math

import torch

from workbench.core.errors import WorkbenchError


def read_rope(cfg: dict, where: str) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) of a config: top level, else ``rope_parameters`` (transformers 5); the scaling
    checked (``default``/None, ``linear``, ``llama3``, ``yarn``), a one-line error for any other.

        >>> read_rope({"rope_parameters": {"rope_theta": 5e5, "rope_type": "yarn", "factor": 32.0,
        ...                                "original_max_position_embeddings": 2048}}, "c")[1]["factor"]
        32.0
    """
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else None
    theta = cfg.get("rope_theta", (params or {}).get("rope_theta", 10000.0))
    scaling = cfg.get("rope_scaling")
    if scaling is None and params is not None and params.get("rope_type", "default") != "default":
        scaling = params
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise WorkbenchError(f"{where}: rope_scaling is {scaling!r} (expected an object or null)")
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind not in ("default", "llama3", "linear", "yarn"):
            raise WorkbenchError(f"{where}: rope_scaling type {kind!r} is not supported "
                                 "(supported: default, linear, llama3, yarn)")
        if kind == "yarn":
            for key in ("factor", "original_max_position_embeddings"):
                v = scaling.get(key)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                    raise WorkbenchError(f"{where}: rope_scaling yarn needs a positive {key} (got {v!r})")
        scaling = None if kind == "default" else dict(scaling, rope_type=kind)
    if float(cfg.get("partial_rotary_factor", 1.0)) != 1.0:
        raise WorkbenchError(f"{where}: partial_rotary_factor {cfg['partial_rotary_factor']} is not supported")
    return float(theta), scaling


def inv_freq(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """The rotary's inverse frequencies [head_dim / 2] (fp32, computed in fp64) for a checked ``scaling``
    (:func:`read_rope`).

        >>> inv_freq(4, 10000.0, None).tolist()
        [1.0, 0.009999999776482582]
    """
    d = head_dim
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    sc = scaling
    if sc and sc["rope_type"] == "yarn":      # NTK-by-parts: interpolate the low frequencies, keep the high ones
        factor, old = float(sc["factor"]), float(sc["original_max_position_embeddings"])
        fast, slow = float(sc.get("beta_fast") or 32), float(sc.get("beta_slow") or 1)

        def dim_of(rotations):
            return d * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = dim_of(fast), dim_of(slow)
        if sc.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp                       # 1: extrapolate (the original frequency), 0: interpolate (/ factor)
        inv = inv / factor * (1 - keep) + inv * keep
    elif sc and sc["rope_type"] == "linear":
        inv = inv / float(sc["factor"])
    elif sc and sc["rope_type"] == "llama3":   # as transformers / SGLang / SpecForge (newer) compute it
        factor, lo, hi = float(sc["factor"]), float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
        old = float(sc["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo) if hi != lo else torch.zeros_like(inv)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen < old / hi, inv, torch.where(wavelen > old / lo, inv / factor, mid))
    return inv.float()


def rotate(x, pos, inv_freq, scale: float = 1.0):
    """Rotary embedding of ``x`` [B, heads, T, d] at positions ``pos`` [T] (or [B, T]); ``scale`` multiplies cos
    and sin (YaRN's attention factor)."""
    ang = pos.to(torch.float32)[..., None] * inv_freq.to(device=pos.device, dtype=torch.float32)
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos() * scale, emb.sin() * scale
    if cos.dim() == 3:            # [B, T, d] -> [B, 1, T, d]
        cos, sin = cos[:, None], sin[:, None]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


__all__ = ["inv_freq", "read_rope", "rotate"]
