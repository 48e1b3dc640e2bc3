"""Notebooks find their inputs wherever the kernel starts (JupyterLab at the repository root starts kernels
in ``notebooks/``): relative paths resolve against the project root (``workbench.inputs.resolve``), and a
demo build is never silent (``workbench.demo.fill_paths``)."""

from pathlib import Path

import pytest

from workbench import demo as demo_mod
from workbench.report.export import run_report

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"


def _project(tmp_path) -> Path:
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return project


def test_fill_paths_from_a_subfolder_uses_the_project_root_and_announces_a_build(tmp_path, monkeypatch, capsys):
    project = _project(tmp_path)
    built = []
    monkeypatch.setattr(demo_mod.build, "ensure_demo", lambda out, size: built.append((Path(out), size)))
    monkeypatch.chdir(project / "notebooks")
    paths = demo_mod.fill_paths("data/demo", "smoke", data="", tokenizer="")
    assert built == [(project.resolve() / "data" / "demo", "smoke")]          # not notebooks/data/demo
    assert paths["data"] == f"{project.resolve()}/data/demo/val.jsonl"
    out = capsys.readouterr().out
    assert out.startswith("[demo] building the smoke demo into ") and "about half a minute" in out
    assert "there is no demo in" in out and "make demo" in out
    assert not (project / "notebooks" / "data").exists()
    # a path that exists from the working directory wins; one found nowhere is left as given
    (project / "notebooks" / "mine.jsonl").write_text("")
    (project / "data" / "theirs.jsonl").write_text("")
    assert demo_mod.fill_paths("data/demo", "smoke", data="mine.jsonl") == {"data": "mine.jsonl"}
    assert demo_mod.fill_paths("data/demo", "smoke", data="data/theirs.jsonl") == \
        {"data": str(project.resolve() / "data" / "theirs.jsonl")}
    assert demo_mod.fill_paths("data/demo", "smoke", data="nowhere.jsonl") == {"data": "nowhere.jsonl"}


def test_build_reason_says_why(smoke_demo, tmp_path):
    assert demo_mod.build_reason(smoke_demo, "smoke") is None and demo_mod.is_built(smoke_demo, "smoke")
    assert "holds the smoke demo (seed 0), this asks for default" in demo_mod.build_reason(smoke_demo, "default")
    assert demo_mod.build_reason(tmp_path, "smoke") == f"there is no demo in {tmp_path}"


@pytest.mark.slow
def test_a_notebook_whose_kernel_starts_in_notebooks_uses_the_built_demo(tmp_path, smoke_demo, monkeypatch):
    project = _project(tmp_path)
    (project / "data" / "demo").symlink_to(Path(smoke_demo).resolve(), target_is_directory=True)
    manifest = Path(smoke_demo) / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    monkeypatch.chdir(project / "notebooks")                 # the kernel's working directory (run_report: cwd)
    rep = run_report(tmp_path / "out", notebooks=["01_dataset"], parameters={"size": "smoke"}, folder=NB_DIR,
                     progress=False)
    page = rep.pages[0]
    assert (page.name, page.status, page.error) == ("01_dataset", "ok", "")
    text = page.notebook.read_text()
    assert f"{project.resolve()}/data/demo/val.jsonl: " in text     # the notebook's own "<data>: N rows" line
    assert "[demo" not in text                                       # no build, no notice
    assert manifest.stat().st_mtime_ns == stamp
    assert not (project / "notebooks" / "data").exists()
