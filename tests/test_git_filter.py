"""Notebook outputs are stripped at commit time, not on save: ``make hooks`` installs nbstripout as the git
clean filter that ``.gitattributes`` names for ``notebooks/*.ipynb``; the working file keeps its outputs."""

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_git_add_stages_a_stripped_notebook_and_the_file_keeps_its_outputs(tmp_path):
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    _git(repo, "init", "-q")
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-C", str(repo), "hooks", f"PY={sys.executable}"],
                   check=True, capture_output=True)
    assert "nbstripout" in _git(repo, "config", "filter.nbstripout.clean")

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print('saved work')", execution_count=3,
                                     outputs=[nbformat.v4.new_output("stream", text="saved work\n")])
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), cell]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    path = repo / "notebooks" / "x.ipynb"
    nbformat.write(nb, str(path))
    _git(repo, "add", "notebooks/x.ipynb")

    staged = nbformat.reads(_git(repo, "show", ":notebooks/x.ipynb"), as_version=4)
    code = staged.cells[1]
    assert code.outputs == [] and code.execution_count is None and "widgets" not in staged.metadata
    assert code.source == "print('saved work')" and code.metadata["tags"] == ["parameters"]
    assert code.id == cell.id                                    # cell ids kept (no churn in diffs)
    kept = nbformat.read(str(path), as_version=4)                # the user's file is untouched
    assert kept.cells[1].outputs and kept.cells[1].execution_count == 3


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_committed_notebooks_are_what_the_filter_stages(path):
    """Installing the filter must not show the committed notebooks as modified."""
    out = subprocess.run([sys.executable, "-m", "nbstripout", "--keep-id", "-t", str(path)],
                         check=True, capture_output=True, text=True).stdout
    assert out == path.read_text(), f"{path.name}: not in the filter's form (run nbstripout --keep-id on it)"


def test_gitattributes_names_the_filter_for_the_notebooks():
    assert "notebooks/*.ipynb filter=nbstripout" in (ROOT / ".gitattributes").read_text()
