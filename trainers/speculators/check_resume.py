"""What ``speculators train`` does with a save path that already holds checkpoints (tiny e2e data).

    OMP_NUM_THREADS=1 .venv-speculators/bin/python trainers/speculators/check_resume.py [WORK_DIR]

1. interrupt: start a long run, SIGTERM it once epoch dir 2 exists -> speculators' graceful
   shutdown saves ``interrupted/`` and exits 0 (train/graceful_shutdown.py).
2. restart with the same args -> resumes after the last numbered epoch dir (``interrupted/`` is
   ignored with a warning), loading model, optimizer and scheduler (train/trainer.py:266-323).
3. rerun when all epochs are done -> nothing to train, exit 0, no new checkpoint.
4. ``--no-resume-from-checkpoint`` with fewer epochs -> starts from scratch and overwrites the
   low epoch dirs; higher stale epoch dirs from the earlier run are left in place.
Prints one PASS/FAIL line per step; exit 0 when all pass.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from check_shims import ensure_data, train_args  # noqa: E402

PY = sys.executable


def env() -> dict:
    return dict(os.environ, _TYPER_STANDARD_TRACEBACK="1", COLUMNS="400",  # no rich line wrapping
                OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))


def epochs_in(save: Path) -> list[int]:
    return sorted(int(p.name) for p in save.iterdir() if p.is_dir() and not p.is_symlink() and p.name.isdigit())


def main() -> int:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/wb-spec-shims")
    ensure_data(work)
    save = work / "ckpt-resume"
    shutil.rmtree(save, ignore_errors=True)
    ok = True

    def check(name: str, cond: bool, detail: str = "") -> None:
        nonlocal ok
        ok &= bool(cond)
        print(f"{'PASS' if cond else 'FAIL'} {name} {detail}".rstrip(), flush=True)

    # 1. interrupt a long run
    cmd = [PY, str(HERE / "run.py"), *train_args(work, save, 400)]
    log1 = work / "resume-1.log"
    with open(log1, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env())
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not (save / "2" / "training_state.json").exists():
            time.sleep(0.2)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    text = log1.read_text()
    done = epochs_in(save)
    check("1. SIGTERM -> interrupted/ saved", rc == 0 and (save / "interrupted" / "model.safetensors").exists(),
          f"rc={rc} epochs={done[-1] if done else None} interrupted={(save / 'interrupted').exists()}")
    last = done[-1]

    # 2. restart with the same args, fewer epochs than the interrupted run asked for
    target_epochs = last + 3
    r = subprocess.run([PY, str(HERE / "run.py"), *train_args(work, save, target_epochs)],
                       capture_output=True, text=True, env=env())
    out = r.stdout + r.stderr
    m = re.search(r"Resuming training on epoch (\d+)", out)
    check("2. restart resumes after the last epoch dir", r.returncode == 0 and m and int(m.group(1)) == last + 1
          and epochs_in(save)[-1] == target_epochs - 1 and "Found interrupted checkpoint" in out,
          f"rc={r.returncode} resumed_at={m.group(1) if m else None} last_epoch={epochs_in(save)[-1]}")

    # 3. all epochs done -> no-op
    before = sorted(p.stat().st_mtime for p in save.rglob("model.safetensors"))
    r = subprocess.run([PY, str(HERE / "run.py"), *train_args(work, save, target_epochs)],
                       capture_output=True, text=True, env=env())
    after = sorted(p.stat().st_mtime for p in save.rglob("model.safetensors"))
    check("3. rerun with all epochs done is a no-op", r.returncode == 0 and before == after, f"rc={r.returncode}")

    # 4. --no-resume-from-checkpoint, 1 epoch
    stale_before = (save / str(target_epochs - 1) / "model.safetensors").stat().st_mtime
    r = subprocess.run([PY, str(HERE / "run.py"), *train_args(work, save, 1), "--no-resume-from-checkpoint"],
                       capture_output=True, text=True, env=env())
    out = r.stdout + r.stderr
    stale_after = (save / str(target_epochs - 1) / "model.safetensors").stat().st_mtime
    check("4. --no-resume-from-checkpoint restarts at epoch 0, leaves stale higher epochs",
          r.returncode == 0 and "starting training from scratch" in out and stale_before == stale_after,
          f"rc={r.returncode} epochs_left={epochs_in(save)[-1]}")
    print("OK" if ok else "SOME STEPS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
