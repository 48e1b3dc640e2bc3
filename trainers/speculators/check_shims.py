"""Show that each CPU shim (and each CPU flag) is needed: run the tiny e2e training without it.

    OMP_NUM_THREADS=1 .venv-speculators/bin/python trainers/speculators/check_shims.py [WORK_DIR]

WORK_DIR (default /tmp/wb-spec-shims) gets the tiny target and data if absent. For each case it
runs run.py in a subprocess and prints one line: the case, the exit code and the last exception
line. Exit 0 when the full run passes and every left-out shim/flag makes the run fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


def sh(cmd: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def ensure_data(work: Path) -> None:
    if (work / "data" / "hidden_states" / "hs_0.safetensors").exists():
        return
    work.mkdir(parents=True, exist_ok=True)
    for cmd in (
        [PY, str(HERE / "make_tiny.py"), str(work)],
        [PY, str(HERE / "write_hidden_states.py"), "--target", str(work / "target"), "--rows",
         str(work / "rows.jsonl"), "--out", str(work / "data"), "--layer-ids", "1", "2", "3",
         "--token-freq", "--overwrite"],
    ):
        r = sh(cmd)
        if r.returncode:
            sys.exit(f"setup failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")


def train_args(work: Path, save: Path, epochs: int) -> list[str]:
    return [
        "--speculator-type", "eagle3", "--verifier-name-or-path", str(work / "target"),
        "--data-path", str(work / "data"), "--save-path", str(save),
        "--target-layer-ids", "1", "2", "3", "--num-layers", "1", "--draft-vocab-size", "128",
        "--mask-token-id", "0", "--total-seq-len", "128", "--num-workers", "0",
        "--epochs", str(epochs), "--lr", "1e-3", "--seed", "0", "--on-missing", "raise",
    ]


def last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pat = re.compile(r"^([A-Za-z_.]*(Error|Exception|Interrupt)\b.*)$")
    errs = [ln for ln in lines if pat.match(ln)]
    return errs[-1][:300] if errs else (lines[-1][:300] if lines else "")


def run(work: Path, save: Path, epochs: int, shims: str, extra: list[str] = ()) -> tuple[int, str]:
    env = dict(os.environ, WB_SPECULATORS_SHIMS=shims, _TYPER_STANDARD_TRACEBACK="1", COLUMNS="400",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    r = sh([PY, str(HERE / "run.py"), *train_args(work, save, epochs), *extra], env=env)
    return r.returncode, last_error(r.stdout + r.stderr)


def main() -> int:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/wb-spec-shims")
    ensure_data(work)
    ok = True

    def case(name: str, expect_ok: bool, rc: int, err: str) -> None:
        nonlocal ok
        good = (rc == 0) == expect_ok
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} {name}: rc={rc} {'' if rc == 0 else err}", flush=True)

    save = work / "ckpt-all"
    shutil.rmtree(save, ignore_errors=True)
    case("all shims, fresh run (2 epochs)", True, *run(work, save, 2, "all"))
    case("all shims, resume from epoch 1 to 3", True, *run(work, save, 3, "all"))

    for name in ("device_cpu", "step_timer_sync"):
        save = work / f"ckpt-no-{name}"
        shutil.rmtree(save, ignore_errors=True)
        case(f"without {name}", False, *run(work, save, 1, f"-{name}"))

    # autocast_cpu: with the eagle3 default --norm-before-fc, input_norm promotes the bf16 hidden
    # states to fp32, so the run passes without it (autocast disabled, fp32 compute, a warning);
    # with --no-norm-before-fc the bf16 states hit the fp32 fc weight.
    save = work / "ckpt-no-autocast-default"
    shutil.rmtree(save, ignore_errors=True)
    case("without autocast_cpu, default --norm-before-fc (runs in fp32)", True, *run(work, save, 1, "-autocast_cpu"))
    save = work / "ckpt-no-autocast"
    shutil.rmtree(save, ignore_errors=True)
    case("without autocast_cpu, --no-norm-before-fc", False,
         *run(work, save, 1, "-autocast_cpu", ["--no-norm-before-fc"]))
    save = work / "ckpt-autocast-nonorm"
    shutil.rmtree(save, ignore_errors=True)
    case("all shims, --no-norm-before-fc", True, *run(work, save, 1, "all", ["--no-norm-before-fc"]))

    save = work / "ckpt-no-resume"
    shutil.rmtree(save, ignore_errors=True)
    rc, err = run(work, save, 1, "all")
    case("resume setup (1 epoch, all shims)", True, rc, err)
    case("without resume_device_cpu, resuming to 2 epochs", False, *run(work, save, 2, "-resume_device_cpu"))

    for flag, value in (("--draft-attn-impl", "simple_flex_attention"), ("--loss-implementation", "fused")):
        save = work / f"ckpt-{value}"
        shutil.rmtree(save, ignore_errors=True)
        case(f"all shims but {flag} {value}", False, *run(work, save, 1, "all", [flag, value]))
    print("OK" if ok else "SOME CASES DID NOT BEHAVE AS EXPECTED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
