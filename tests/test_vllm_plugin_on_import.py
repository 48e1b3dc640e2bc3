"""The vLLM plugin's lazy patching (``vllm_plugin/workbench_vllm_cpu_fix/on_import.py``): a fix runs on a module
right after its first import, never breaks that import, and runs at once for a module already imported.
Pure Python: no vLLM needed."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vllm_plugin"))

from workbench_vllm_cpu_fix.on_import import when_imported  # noqa: E402


def test_a_callback_runs_after_the_first_import_and_never_breaks_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "wb_fake_mod.py").write_text("VALUE = 1\n")
    (tmp_path / "wb_fake_bad.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("wb_fake_mod", lambda m: seen.append(m.VALUE))
    when_imported("wb_fake_bad", lambda m: 1 / 0)
    assert seen == []
    import wb_fake_bad  # noqa: F401
    import wb_fake_mod

    assert seen == [1] and wb_fake_mod.VALUE == 1
    assert "not applied to wb_fake_bad: ZeroDivisionError" in capsys.readouterr().err
    when_imported("wb_fake_mod", lambda m: seen.append("again"))         # already imported: at once
    assert seen == [1, "again"]
    for name in ("wb_fake_mod", "wb_fake_bad"):
        sys.modules.pop(name, None)
