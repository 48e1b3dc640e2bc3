"""Issue 57, item 9: a draft whose weights hold a NaN or an infinity (as a diverged training run exports them) is one
line naming the file, the tensor and the first bad index, in every command that loads it: never an accept length."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "tests" / "data" / "smoke-demo"


def _broken(tmp_path, value, where="last") -> Path:
    out = tmp_path / "draft"
    shutil.copytree(DEMO / "draft-mismatched", out)
    sd = load_file(str(out / "model.safetensors"))
    w = sd["fc.weight"].clone()
    flat = w.reshape(-1)
    flat[-1 if where == "last" else 0] = value           # past the first 1024 values: a partial check misses it
    sd["fc.weight"] = flat.reshape(w.shape)
    save_file(sd, str(out / "model.safetensors"))
    return out


@pytest.mark.parametrize("value, said", [(float("nan"), "nan"), (float("inf"), "inf")])
def test_the_loader_names_the_tensor_and_the_index(tmp_path, value, said):
    from workbench.core.errors import WorkbenchError
    from workbench.model.checkpoint import load_draft

    d = _broken(tmp_path, value)
    shape = list(load_file(str(DEMO / "draft-mismatched" / "model.safetensors"))["fc.weight"].shape)
    with pytest.raises(WorkbenchError) as e:
        load_draft(d)
    msg = str(e.value)
    assert f"tensor fc.weight holds {said} at index [{shape[0] - 1}, {shape[1] - 1}]" in msg, msg
    assert str(d / "model.safetensors") in msg and "\n" not in msg


@pytest.mark.parametrize("command", [["accept"], ["diagnose"]])
def test_every_command_that_loads_it_says_one_line(tmp_path, command):
    d = _broken(tmp_path, float("nan"), "first")
    proc = subprocess.run([sys.executable, "-m", "workbench", *command, "--target", str(DEMO / "target"), "--draft",
                           str(d), "--data", str(DEMO / "val.jsonl")], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 2, proc.stdout[-500:] + proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and "tensor fc.weight holds nan at index [0, 0]" in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr


def test_finite_weights_load(tmp_path):
    from workbench.model.checkpoint import load_draft

    d = load_draft(DEMO / "draft-mismatched")
    assert all(bool(torch.isfinite(v).all()) for v in d.state_dict().values() if torch.is_floating_point(v))
