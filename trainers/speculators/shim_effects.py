"""Each CPU shim, at the spot it patches: what fails without it and what it changes. Seconds, not minutes.

    .venv-speculators/bin/python trainers/speculators/shim_effects.py      # one JSON line per shim

For every shim of ``cpu_shims.PATCHES`` this runs the speculators call the shim replaces, first as shipped
(the error it raises on a CPU-only torch, or the value it returns), then with the shim applied (the new
value, and the same call succeeding). ``check_shims.py`` shows the same end to end (the training itself fails
without each one), in about three minutes. Exit 0 when every shim is needed and does what it says.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_shims  # noqa: E402


def _err(fn) -> str | None:
    try:
        fn()
    except Exception as e:          # the error speculators would raise on this CPU
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return None


def device_cpu():
    import speculators.train.trainer as trainer

    before = trainer.get_local_rank()
    err = _err(lambda: torch.nn.Linear(2, 2).to(before))
    cpu_shims.apply(["device_cpu"])
    after = trainer.get_local_rank()
    return {"before": repr(before), "error_without": err, "after": repr(after),
            "works_with": _err(lambda: torch.nn.Linear(2, 2).to(after)) is None}


def step_timer_sync():
    import speculators.train.trainer as trainer

    err = _err(lambda: trainer._StepTimer(enabled=True).mark("queue"))
    cpu_shims.apply(["step_timer_sync"])
    t = trainer._StepTimer(enabled=True)
    return {"error_without": err, "works_with": _err(lambda: (t.mark("queue"), t.now())) is None,
            "after": type(t).__name__}


def resume_device_cpu():
    import speculators.train.checkpointer as checkpointer
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "m.safetensors"
        save_file({"w": torch.ones(2)}, str(f))
        before = checkpointer.get_current_device()
        err = _err(lambda: checkpointer.load_safetensors_state_dict(str(f), before))
        cpu_shims.apply(["resume_device_cpu"])
        after = checkpointer.get_current_device()
        ok = _err(lambda: checkpointer.load_safetensors_state_dict(str(f), after)) is None
    return {"before": before, "error_without": err, "after": after, "works_with": ok}


def autocast_cpu():
    from speculators.train.trainer import Trainer

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with torch.autocast("cuda", dtype=torch.bfloat16):           # what the trainer picks without an accelerator
            off = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
    cpu_shims.apply(["autocast_cpu"])
    with torch.autocast("cpu", dtype=torch.bfloat16):                # what it picks with the shim
        on = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
    return {"error_without": None, "warning_without": next((str(x.message)[:160] for x in w), None),
            "dtype_without": str(off), "dtype_with": str(on),
            "works_with": bool(getattr(Trainer.__init__, "_wb_cpu_shim", False)) and on == torch.bfloat16}


CHECKS = {"device_cpu": device_cpu, "step_timer_sync": step_timer_sync, "resume_device_cpu": resume_device_cpu,
          "autocast_cpu": autocast_cpu}


def main() -> int:
    if set(CHECKS) != set(cpu_shims.PATCHES):
        print(json.dumps({"error": f"shims {sorted(cpu_shims.PATCHES)} but checks {sorted(CHECKS)}"}))
        return 1
    ok = True
    for name, check in CHECKS.items():
        r = dict(shim=name, **check())
        needed = r["error_without"] is not None or r.get("dtype_without") != r.get("dtype_with")
        r["needed"] = needed
        ok &= needed and r["works_with"]
        print(json.dumps(r), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
