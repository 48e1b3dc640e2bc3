"""Drafts that real trainers made (issue 46), smoke-sized: NVIDIA ModelOpt 0.47.0 and speculators 0.9.0 train a few
optimizer steps on the smoke demo's target (N=8) in their own venvs (``make trainers``), through the same
orchestrator as ``make foreign-drafts``; the exports are then read unmodified by the loader users use.

Skipped, with the cause, where a trainer's venv is missing; ``WORKBENCH_REQUIRE_TRAINERS=1`` (``.ci/run``) fails
instead, so CI never passes by skipping them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

from workbench.core.errors import WorkbenchError
from workbench.demo import foreign
from workbench.demo.foreign import SMOKE, TRAINERS, installed, train_one, venv_python
from workbench.model import capture, checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def _need(name):
    version, why = installed(TRAINERS[name])
    if version is None:
        if os.environ.get("WORKBENCH_REQUIRE_TRAINERS") == "1":
            pytest.fail(f"trainer {name} is not usable: {why} (WORKBENCH_REQUIRE_TRAINERS=1)")
        pytest.skip(f"trainer {name} is not usable: {why}")


@pytest.fixture(scope="module")
def root(smoke_demo, tmp_path_factory):
    """A real-demo-shaped folder (target, train.jsonl, val.jsonl) around the smoke demo's target."""
    r = tmp_path_factory.mktemp("foreign") / "demo"
    r.mkdir()
    for name in ("target", "train.jsonl", "val.jsonl"):
        src = smoke_demo / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, r / name)
    return r


@pytest.fixture(scope="module")
def trained(root):
    """name → (manifest, lines said) for each trainer that is installed, trained once per module."""
    out = {}
    for name in TRAINERS:
        if installed(TRAINERS[name])[0] is None:
            continue
        said = []
        out[name] = (train_one(name, root, SMOKE, say=said.append), said)
    return out


def _export(name, trained):
    _need(name)
    assert name in trained
    return trained[name][0]


# the smoke target has N=8: ModelOpt's default_eagle_aux_layer_ids = sorted({1, N//2-1, N-4}) = [1, 3, 4] (output of
# layer k → L1,L3,L4); speculators' [2, N//2, N-3] = [2, 4, 5] (vLLM ids, input of layer k → L1,L3,L4)
EXPECTED = {"modelopt": {"ids": [1, 3, 4], "nested": True, "taps": "L1,L3,L4", "vllm": "L0,L2,L3"},
            "speculators": {"ids": [2, 4, 5], "nested": False, "taps": "L1,L3,L4", "vllm": "L1,L3,L4"}}


@pytest.mark.parametrize("name", list(TRAINERS))
def test_a_real_trainer_exports_a_draft_with_its_manifest(name, root, trained):
    m = _export(name, trained)
    out = root / f"draft-{name}"
    cfg = json.loads((out / "config.json").read_text())
    want = EXPECTED[name]
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] if want["nested"] else \
        cfg["eagle_aux_hidden_state_layer_ids"]
    assert ids == want["ids"]                                   # the trainer's own default taps, as it wrote them
    assert "workbench" not in cfg                               # not rewritten by the workbench
    assert cfg["draft_vocab_size"] == SMOKE.draft_vocab
    assert m["trainer"] == name and m["version"] == TRAINERS[name].version and m["seed"] == SMOKE.seed
    assert m["wall_s"] > 0 and m["commands"] and m["trained_taps"] == want["taps"]
    assert m["export"]["files"] == foreign.export_files(out)
    assert not any(f.endswith("_state_dict.pt") for f in m["export"]["files"])
    said = trained[name][1]
    assert any("train" in s for s in said) and len(said) > 3       # progress was shown


@pytest.mark.parametrize("name", list(TRAINERS))
def test_a_rerun_keeps_the_export(name, root, trained):
    _export(name, trained)
    said = []
    train_one(name, root, SMOKE, say=said.append)
    assert len(said) == 1 and "up to date" in said[0]


@pytest.mark.parametrize("name", list(TRAINERS))
def test_the_loader_users_use_reads_the_export_unmodified(name, root, trained):
    _export(name, trained)
    target = capture.load_target(root / "target")
    d = checkpoint.load_draft(root / f"draft-{name}", target)
    assert d.draft_vocab_size == SMOKE.draft_vocab
    assert d.source_format == ("speculators" if name == "speculators" else "eagle3")
    # the draft runs: its step-1 logits over the draft vocabulary for a few positions
    from workbench.cli import main

    assert main(["inspect", str(root / f"draft-{name}"), "--target", str(root / "target"), "--json"]) == 0


@pytest.mark.parametrize("name", list(TRAINERS))
def test_inspect_names_the_trainer_and_the_trained_taps(name, root, trained, capsys):
    _export(name, trained)
    from workbench.cli import main

    capsys.readouterr()
    assert main(["inspect", str(root / f"draft-{name}"), "--target", str(root / "target"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["trainer"] == name
    assert info["trained_taps"] == EXPECTED[name]["taps"]


@pytest.mark.parametrize("name", list(TRAINERS))
def test_wiring_and_accept_run_on_the_export(name, root, trained, capsys):
    _export(name, trained)
    from workbench.cli import main
    from workbench.engines.wiring import resolve

    cfg = json.loads((root / f"draft-{name}" / "config.json").read_text())
    assert ",".join(resolve("vllm", 8, cfg).taps) == EXPECTED[name]["vllm"]      # ModelOpt on vLLM: one layer early
    assert ",".join(resolve("sglang", 8, cfg).taps) == "L1,L3,L4"
    capsys.readouterr()
    rc = main(["accept", "--target", str(root / "target"), "--draft", str(root / f"draft-{name}"),
               "--data", str(root / "val.jsonl"), "--engine", "vllm", "--steps", "4", "--limit", "4", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert EXPECTED[name]["vllm"] in out and "accept" in out


# ---- bad exports, each made from a real trainer's output: one line naming the file and the key ----------------

def _copy(name, root, tmp_path):
    dst = tmp_path / f"bad-{name}"
    shutil.copytree(root / f"draft-{name}", dst)
    return dst


def _edit_weights(folder, edit):
    """Rewrite ``folder/model.safetensors`` after ``edit(state_dict)`` changed it in place."""
    sd = load_file(str(folder / "model.safetensors"))
    edit(sd)
    save_file(sd, str(folder / "model.safetensors"))


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("name", list(TRAINERS))
def test_a_missing_tensor_is_named(name, root, trained, tmp_path):
    _export(name, trained)
    bad = _copy(name, root, tmp_path)
    _edit_weights(bad, lambda sd: sd.pop("fc.weight"))
    with pytest.raises(WorkbenchError) as e:
        checkpoint.load_draft(bad, capture.load_target(root / "target"))
    msg = _one_line(e)
    assert "model.safetensors" in msg and "fc.weight" in msg


@pytest.mark.parametrize("name", list(TRAINERS))
def test_target_ids_where_d2t_offsets_belong_are_named(name, root, trained, tmp_path):
    _export(name, trained)
    bad = _copy(name, root, tmp_path)
    _edit_weights(bad, lambda sd: sd.update(d2t=torch.arange(sd["d2t"].numel(), dtype=sd["d2t"].dtype)))
    with pytest.raises(WorkbenchError) as e:
        checkpoint.load_draft(bad, capture.load_target(root / "target"))
    msg = _one_line(e)
    assert "model.safetensors" in msg and "d2t" in msg and "offset" in msg


@pytest.mark.parametrize("name", list(TRAINERS))
def test_ids_outside_the_target_are_named(name, root, trained, tmp_path):
    _export(name, trained)
    bad = _copy(name, root, tmp_path)
    cfg = json.loads((bad / "config.json").read_text())
    where = cfg["eagle_config"] if EXPECTED[name]["nested"] else cfg
    where["eagle_aux_hidden_state_layer_ids"] = [1, 3, 40]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WorkbenchError) as e:
        checkpoint.load_draft(bad, capture.load_target(root / "target"))
    msg = _one_line(e)
    assert "config.json" in msg and "eagle_aux_hidden_state_layer_ids" in msg and "40" in msg


@pytest.mark.parametrize("name", list(TRAINERS))
def test_a_half_written_export_is_never_loaded(name, root, trained, tmp_path):
    _export(name, trained)
    bad = _copy(name, root, tmp_path)
    w = bad / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    with pytest.raises(WorkbenchError) as e:
        checkpoint.load_draft(bad, capture.load_target(root / "target"))
    assert "model.safetensors" in _one_line(e)


def test_a_trainer_that_cannot_run_is_one_note_and_the_rest_goes_on(root, monkeypatch, tmp_path):
    fresh = tmp_path / "demo"
    shutil.copytree(root / "target", fresh / "target")
    shutil.copy2(root / "train.jsonl", fresh / "train.jsonl")
    root = fresh
    monkeypatch.setitem(TRAINERS, "modelopt", foreign.Trainer("modelopt", "NVIDIA ModelOpt", "nvidia-modelopt",
                                                               "0.47.0", ".venv-does-not-exist"))
    said = []
    notes = foreign.train_foreign(root, ("modelopt",), SMOKE, say=said.append)
    assert len(notes) == 1 and notes[0].startswith("note: draft-modelopt not trained")
    assert "nvidia-modelopt 0.47.0" in notes[0] and ".venv-does-not-exist" in notes[0] and "\n" not in notes[0]


# ---- the CPU shims: each one needed, each one doing what it says ----------------------------------------------

def test_each_speculators_shim_is_needed_and_does_what_it_says():
    _need("speculators")
    r = subprocess.run([str(venv_python(TRAINERS["speculators"])), str(foreign.REPO / "trainers/speculators/shim_effects.py")],
                       capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    shims = {d["shim"]: d for d in map(json.loads, r.stdout.split("\n")[:-1])}
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert "Cannot access accelerator device" in shims["device_cpu"]["error_without"]
    assert "Cannot access accelerator device" in shims["step_timer_sync"]["error_without"]
    assert "pin_memory" in shims["resume_device_cpu"]["error_without"]
    assert shims["autocast_cpu"]["dtype_without"] == "torch.float32" and shims["autocast_cpu"]["dtype_with"] == "torch.bfloat16"


def test_modelopt_needs_only_the_tf32_switch():
    _need("modelopt")
    code = ("import sys, tempfile; sys.path.insert(0, 'trainers/modelopt'); import cpu_shims; "
            "from transformers import TrainingArguments as T; d = tempfile.mkdtemp()\n"
            "try:\n    T(output_dir=d, tf32=True); print('tf32 ok')\n"
            "except ValueError as e:\n    print('tf32 refused:', str(e).splitlines()[0])\n"
            "T(output_dir=d, tf32=False); print('patches', sorted(cpu_shims.PATCHES))")
    r = subprocess.run([str(venv_python(TRAINERS["modelopt"])), "-c", code], capture_output=True, text=True,
                       cwd=str(foreign.REPO), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "tf32 refused: --tf32 requires Ampere" in r.stdout and "patches []" in r.stdout
