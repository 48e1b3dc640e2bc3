"""The old flat import paths (release 0.1) keep working for one release, with a warning naming the new path."""

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.core.compat import MOVED, OLD_PATHS

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_users_old_notebook_imports_still_work_and_warn():
    out = _run("from workbench import acceptance, data\n"
               "from workbench.demo import fill_paths\n"
               "import workbench.sampled as s\n"
               "print(acceptance.simulate.__module__, data.load.__module__, fill_paths.__module__,\n"
               "      s.verify_probs.__module__, acceptance.exact_decode.__module__)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["workbench.simulate.acceptance", "workbench.rows.dataset", "workbench.demo.build",
                                  "workbench.model.served", "workbench.simulate.exact"]
    assert "FutureWarning: workbench.acceptance moved to workbench.simulate.acceptance" in out.stderr
    assert "workbench.data moved to workbench.rows" in out.stderr
    assert "workbench.demo" not in out.stderr.replace("workbench.demo.build", "")     # a package face: no warning


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_every_old_module_imports_and_answers_its_moved_names(old, recwarn):
    import importlib

    mod = importlib.import_module(f"workbench.{old}")
    for name in MOVED.get(old, {}):
        assert getattr(mod, name) is not None
    with pytest.raises(AttributeError):
        getattr(mod, "no_such_name")


def test_the_migration_page_lists_every_old_path():
    page = (ROOT / "docs" / "migration.md").read_text()
    missing = [old for old in OLD_PATHS if f"`workbench.{old}` | `workbench.{OLD_PATHS[old]}`" not in page]
    assert not missing, f"docs/migration.md lacks {missing}"


def test_diagnose_stays_callable_after_its_old_module_path_is_imported():
    import warnings

    import workbench as wb

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import workbench.diagnose  # noqa: F401  (the old flat path of release 0.1)
    assert callable(wb.diagnose)
