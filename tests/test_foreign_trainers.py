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


def test_every_trainer_gets_the_same_rows_and_ships_its_last_epoch(root, trained):
    """Issue 57: speculators splits its rows itself (the first int(0.9 n) to train); the others are given exactly
    those rows; speculators ships its last epoch, as the others do, and its own pick is recorded."""
    for name in TRAINERS:
        m = _export(name, trained)
        assert m["rows_trained"] == 14 and m["recipe"]["train_share"] == 0.9      # 16 smoke rows
    mo = trained["modelopt"][0]["commands"][0]["argv"]
    assert mo[mo.index("--data") + 1] == "<root>/draft-modelopt.work/train-14-rows.jsonl"
    given = foreign.training_rows(root, root / "rows-check", SMOKE)
    assert given.read_text().splitlines() == (root / "train.jsonl").read_text().splitlines()[:14]
    m = trained["speculators"][0]
    assert m["shipped_epoch"] == SMOKE.epochs - 1 and m["best_epoch"] in range(SMOKE.epochs)
    assert any("--train-data-ratio" in c["argv"] for c in m["commands"])


def test_modelopt_ships_its_default_export_and_the_same_weights_without_the_rope_injection(root, trained):
    """Issue 57: ModelOpt's default eagle_export_rope_scaling writes YaRN x32 into config.json; the second export
    (injection off) holds the same tensors, so the pair measures the default's cost alone."""
    from safetensors.torch import load_file

    m = _export("modelopt", trained)
    default = json.loads((root / "draft-modelopt" / "config.json").read_text())
    plain = json.loads((root / "draft-modelopt-norope" / "config.json").read_text())
    assert default["rope_scaling"]["rope_type"] == "yarn" and default["rope_scaling"]["factor"] == 32.0
    assert default["rope_scaling"]["original_max_position_embeddings"] == 2048
    assert (plain.get("rope_scaling") or {}).get("rope_type", "default") == "default", plain.get("rope_scaling")
    a, b = (load_file(str(root / f / "model.safetensors")) for f in ("draft-modelopt", "draft-modelopt-norope"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert m["export"]["draft-modelopt-norope"] == foreign.export_files(root / "draft-modelopt-norope")


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


def test_diagnose_tune_rewire_and_sampled_accept_run_on_the_exports(root, trained, smoke_demo, capsys, tmp_path):
    """Issue 46 item 2: diagnose under SGLang and vLLM, accept at T=0.7 on data sampled at 0.7, tune, and rewire
    where an engine feeds other taps (ModelOpt's export on vLLM: one layer early), each on the export as written."""
    for name in TRAINERS:
        _need(name)
    from workbench.cli import main

    t, sampled = str(root / "target"), str(smoke_demo / "val-T0.7.jsonl")
    for name in TRAINERS:
        d = str(root / f"draft-{name}")
        for engine in ("sglang", "vllm"):
            capsys.readouterr()
            assert main(["diagnose", "--target", t, "--draft", d, "--data", str(root / "val.jsonl"), "--engine",
                         engine, "--limit", "4", "--quiet"]) == 0
            out = capsys.readouterr().out
            fed = EXPECTED[name]["vllm"] if engine == "vllm" else "L1,L3,L4"
            assert fed in out and "verdict:" in out, out
        capsys.readouterr()
        assert main(["accept", "--target", t, "--draft", d, "--data", sampled, "--engine", "sglang",
                     "--temperature", "0.7", "--limit", "4", "--quiet"]) == 0
        assert "temperature 0.7" in capsys.readouterr().out
        assert main(["tune", "--target", t, "--draft", d, "--data", str(root / "val.jsonl"), "--steps", "1,2",
                     "--eagle-topk", "1,2", "--limit", "4", "--quiet"]) == 0
        assert "eagle_topk" in capsys.readouterr().out
    out_dir = tmp_path / "rewired"
    assert main(["rewire", "--target", t, "--draft", str(root / "draft-modelopt"), "--data", str(root / "train.jsonl"),
                 "--eval-data", str(root / "val.jsonl"), "--engine", "vllm", "--out", str(out_dir), "--limit", "8",
                 "--eval-limit", "4", "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "L0,L2,L3" in said and (out_dir / "config.json").is_file()    # refitted for what vLLM feeds this export
    assert checkpoint.load_draft(out_dir, capture.load_target(root / "target")) is not None


def test_the_reports_show_the_foreign_drafts(root, trained, capsys):
    from leftovers import repeated

    """Issue 46 item 6: the trainer × engine table measured on the exports, notebook 02's and 03's foreign-draft
    cells (run from the notebooks' own source), and the index card built from foreign-drafts.json."""
    for name in TRAINERS:
        _need(name)
    import workbench as wb
    from workbench.demo.foreign_table import measure_foreign
    from workbench.report.export import Page
    from workbench.report.index_page import write_index
    from workbench.report.foreign import cards, markdown

    result = measure_foreign(root, progress=False)
    mo, sp = result["drafts"]["draft-modelopt"], result["drafts"]["draft-speculators"]
    assert mo["engines"]["vllm"]["taps"] == "L0,L2,L3" and sp["engines"]["vllm"]["taps"] == "L1,L3,L4"
    assert mo["engines"]["vllm"]["fix"] == "set eagle_aux_hidden_state_layer_ids (top level) to [2, 4, 5]"
    assert mo["engines"]["sglang"]["fix"] is None and mo["accept_trained"] > 1.0
    md = markdown(result)
    assert "| `draft-modelopt` (NVIDIA ModelOpt 0.47.0) | vLLM V1 (current) | `L1,L3,L4` | `L0,L2,L3` |" in md, md

    # the notebooks' own cells, with the variables the pages define before them (the page's run: any draft of the
    # folder; its foreign drafts are the exports beside it)
    run = wb.diagnose(root / "target", root / "draft-modelopt", root / "val.jsonl", K=4, limit=4, rewire=False)
    env = {"wb": wb, "run": run, "engine": "sglang", "steps": 4, "limit": 4, "device": "cpu"}
    capsys.readouterr()
    for page in ("02_wiring", "03_acceptance"):
        exec(compile(_cell_after(page, "## Drafts that real trainers made"), page, "exec"), env)
    out = capsys.readouterr().out
    assert "draft-modelopt: trained by NVIDIA ModelOpt 0.47.0" in out
    assert "draft-speculators: trained by vllm-project/speculators 0.9.0" in out
    assert "set eagle_aux_hidden_state_layer_ids (top level) to [2, 4, 5]" in out and "[1, 3, 4]" in out
    assert repeated(out) == [], repeated(out)          # issue 58: the drafts share one table each, said once
    foreign = env["foreign"]
    engines = foreign.engines_table().frame
    row = engines[engines["engine"] == "vLLM V1 (current)"]
    assert list(row["drafts"]) == ["draft-modelopt, draft-modelopt-norope", "draft-speculators"], row
    assert list(foreign.config_table().frame.columns) == ["key", "draft-modelopt", "draft-modelopt-norope",
                                                          "draft-speculators", "what it decides"]
    diagnosed = foreign.diagnosis_table(list(zip(foreign.drafts, env["foreign_runs"]))).frame
    judged = dict(zip(diagnosed["draft"], diagnosed["judged under"]))
    assert judged == {"draft-modelopt": "vLLM V1 (current)", "draft-modelopt-norope": "vLLM V1 (current)",
                      "draft-speculators": "SGLang (current)"}, judged        # ModelOpt mis-fed by vLLM
    assert {f.name: f.misfed() for f in env["foreign"].drafts} == {"draft-modelopt": ["vllm"],
                                                                  "draft-modelopt-norope": ["vllm"],
                                                                  "draft-speculators": []}

    # the index: one card, escaped, with the mis-fed row marked
    (root / "foreign-drafts.json").write_text(json.dumps(result))
    cs = cards({"demo": str(root)})
    assert len(cs) == 1 and cards({"demo": str(root / "nowhere")}) == []
    index = write_index(root / "report", [Page(name="02_wiring", title="Wiring", description="", status="missing")],
                        cards=cs).read_text()
    assert "Drafts that real trainers made" in index and '<tr class="mis">' in index
    (root / "foreign-drafts.json").write_text("{not json")
    with pytest.raises(WorkbenchError) as e:
        cards({"demo": str(root)})
    assert str(root / "foreign-drafts.json") in _one_line(e)
    (root / "foreign-drafts.json").unlink()


def _cell_after(page: str, heading: str) -> str:
    """The source of the code cell after the markdown cell that starts with ``# heading`` in notebooks/<page>.py."""
    text = (foreign.REPO / "notebooks" / f"{page}.py").read_text()
    cells = text.split("\n# %%")
    i = next(i for i, c in enumerate(cells) if c.startswith(" [markdown]") and f"# {heading}" in c)
    return cells[i + 1].split("\n", 1)[1]


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
