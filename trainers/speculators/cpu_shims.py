"""Minimal CPU shims that let ``speculators train`` (speculators 0.9.0, torch 2.13 CPU) run and save.

Each shim is a small monkeypatch of one speculators name; none touches torch or transformers
globally. They are applied only where no accelerator is present (``torch.accelerator`` reports
none), so on a GPU host ``apply()`` changes nothing. Two CPU blockers are NOT shims because
speculators has its own flags for them (``run.py`` adds them when absent):

* ``--draft-attn-impl sdpa``: the default ``simple_flex_attention`` trains through FlexAttention,
  which has no backward on torch 2.13 CPU: "NotImplementedError: FlexAttention does not support
  backward on CPU. Please set the input requires_grad to False or use another device."
* ``--loss-implementation eager``: the default ``fused`` loss needs triton, absent on CPU
  (losses/utils.py:121): "RuntimeError: Fused losses require Triton; use --loss-implementation
  eager for compatibility testing."

Use ``apply()`` for all, ``apply(["device_cpu"])`` for some, ``apply(skip=["autocast_cpu"])``
to leave one out (``check_shims.py`` runs the e2e training once per left-out shim and flag to
show what each fixes). ``PATCHES`` maps each name to (function, what fails without it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


def _has_accelerator() -> bool:
    return torch.accelerator.current_accelerator(check_available=True) is not None


def _device_cpu() -> None:
    """Trainer moves the model and every batch to ``get_local_rank()``, an int (0).

    Without it: trainer.py:348 ``self.model.to(self.local_rank)`` (local_rank = 0) ->
    torch/nn/modules/module.py:1340 -> ``RuntimeError: Cannot access accelerator device when none
    is available.`` (the same int moves the batches, trainer.py:533 and :643).
    Change: the trainer module's ``get_local_rank`` returns "cpu", so model and batches go to CPU.
    Only the trainer's binding is replaced; speculators.train.distributed keeps the int.
    """
    import speculators.train.trainer as trainer

    trainer.get_local_rank = lambda: "cpu"


def _autocast_cpu() -> None:
    """Trainer picks the autocast device from the accelerator and falls back to "cuda".

    trainer.py:227-228 sets ``device_type = "cuda"``; ``torch.autocast("cuda", ...)`` on CPU-only
    torch warns "CUDA is not available or torch_xla is imported. Disabling autocast." and the
    step runs without autocast:
    * with the eagle3 default ``--norm-before-fc`` it still trains, in fp32 (``input_norm``
      promotes the bf16 hidden states to fp32 before ``fc``), i.e. not what the flags say;
    * with ``--no-norm-before-fc`` the bf16 states reach the fp32 fc weight
      (models/eagle3/core.py:244): ``RuntimeError: expected m1 and m2 to have the same dtype,
      but got: c10::BFloat16 != float``.
    Change: after ``Trainer.__init__`` the trainer's ``device_type`` is "cpu", so autocast runs on
    CPU in ``--hidden-states-dtype`` (bf16 by default), as it does on a GPU.
    """
    from speculators.train.trainer import Trainer

    if getattr(Trainer.__init__, "_wb_cpu_shim", False):
        return
    original = Trainer.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.device_type = "cpu"

    __init__._wb_cpu_shim = True  # type: ignore[attr-defined]
    Trainer.__init__ = __init__  # type: ignore[method-assign]


def _step_timer_sync() -> None:
    """The step profiler synchronises the accelerator on every logged step.

    Without it: trainer.py:522 ``timer.mark("queue")`` -> trainer.py:80
    ``torch.accelerator.synchronize()`` -> ``RuntimeError: Cannot access accelerator device when
    none is available.`` (step 0 is always a logged step; ``--log-freq`` defaults to 1).
    Change: the trainer module's ``_StepTimer`` is a subclass whose ``mark``/``now`` take the time
    without synchronising (CPU work is synchronous; there is nothing to wait for).
    """
    import time

    import speculators.train.trainer as trainer

    base = trainer._StepTimer
    if getattr(base, "_wb_cpu_shim", False):
        return

    class _CpuStepTimer(base):  # type: ignore[misc, valid-type]
        _wb_cpu_shim = True

        def mark(self, name: str) -> None:
            if self.enabled:
                self._marks[name] = time.perf_counter()

        def now(self) -> float | None:
            return time.perf_counter() if self.enabled else None

    trainer._StepTimer = _CpuStepTimer


def _resume_device_cpu() -> None:
    """Resuming loads the checkpoint onto ``get_current_device()``, which says "cuda:0" without
    an accelerator (speculators/utils/util.py:16-17).

    Without it (any run whose --save-path already holds an epoch dir, resume on by default):
    trainer.py:350 -> checkpointer.py:307 ``load_safetensors_state_dict(path, "cuda:0")`` ->
    checkpointer.py:278 ``f.get_tensor`` -> ``RuntimeError: pin_memory=True requires a CUDA or
    other accelerator backend; no pinned memory allocator is available on this system.``
    (the optimizer state would follow with ``map_location="cuda:0"``, checkpointer.py:323-328).
    Change: the checkpointer module's ``get_current_device`` returns "cpu".
    """
    import speculators.train.checkpointer as checkpointer

    checkpointer.get_current_device = lambda: "cpu"


PATCHES: dict[str, tuple[Callable[[], None], str]] = {
    "device_cpu": (_device_cpu, "trainer.py:348 .to(int local_rank): Cannot access accelerator device"),
    "autocast_cpu": (_autocast_cpu, "trainer.py:228 autocast('cuda') disabled: fp32 compute, or "
                     "BFloat16 != float in fc with --no-norm-before-fc"),
    "step_timer_sync": (_step_timer_sync, "trainer.py:80 torch.accelerator.synchronize(): no accelerator"),
    "resume_device_cpu": (_resume_device_cpu, "checkpointer.py:306 resume loads onto 'cuda:0': pin_memory "
                          "requires a CUDA or other accelerator backend"),
}


def apply(names: Iterable[str] | None = None, skip: Iterable[str] = (), force: bool = False) -> list[str]:
    """Apply the named shims (all by default) less ``skip``; return the names applied.

    Does nothing where an accelerator is present, unless ``force``.
    """
    chosen = list(PATCHES) if names is None else list(names)
    skip = set(skip)
    unknown = (set(chosen) | skip) - set(PATCHES)
    if unknown:
        raise KeyError(f"unknown shim(s) {sorted(unknown)}; known: {sorted(PATCHES)}")
    if _has_accelerator() and not force:
        return []
    applied = []
    for name in chosen:
        if name in skip:
            continue
        PATCHES[name][0]()
        applied.append(name)
    return applied
