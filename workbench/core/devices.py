"""Devices and dtypes: one ``device=`` argument everywhere; fp32 on CPU, bf16 on CUDA.

    >>> from workbench.core.devices import resolve_device, default_dtype
    >>> resolve_device("cpu"), str(default_dtype("cpu"))
    ('cpu', 'torch.float32')
"""

from __future__ import annotations

import platform

from workbench.core.errors import WorkbenchError


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else ``platform.processor()``, else the machine type."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        name = ""
    return name or platform.processor() or platform.machine()


def resolve_device(device: str | None = None) -> str:
    """``None``/"auto" → "cuda" when available, else "cpu". Anything else is checked and returned."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise WorkbenchError(f"device {device!r} requested but CUDA is not available (use --device cpu)")
    if not (str(device) == "cpu" or str(device).startswith("cuda")):
        raise WorkbenchError(f"unknown device {device!r} (expected cpu, cuda or cuda:N)")
    return str(device)


def default_dtype(device: str):
    """fp32 on CPU, bf16 on CUDA."""
    import torch

    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


def parse_dtype(name: str | None, device: str):
    """"auto"/None → :func:`default_dtype`; else one of fp32/bf16/fp16 (or torch names)."""
    import torch

    if name in (None, "auto"):
        return default_dtype(device)
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
             "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
    if name not in table:
        raise WorkbenchError(f"unknown dtype {name!r} (expected one of auto, fp32, bf16, fp16)")
    return table[name]
