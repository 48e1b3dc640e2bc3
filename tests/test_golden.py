"""Public behaviour is pinned: every CLI output and JSON on the smoke demo is byte-identical to tests/golden/.

Regenerate on purpose (an intended output change): ``WORKBENCH_UPDATE_GOLDEN=1 python -m pytest -q
tests/test_golden.py`` (see tests/golden_cases.py), then review ``git diff tests/golden``.
"""

import os

import pytest
from golden_cases import CASES, GOLDEN, UPDATE_ENV, run_case


@pytest.mark.parametrize("name", list(CASES))
def test_cli_output_is_golden(name, smoke_demo, tmp_path):
    got = run_case(name, smoke_demo, tmp_path)
    if os.environ.get(UPDATE_ENV):
        GOLDEN.mkdir(exist_ok=True)
        for fname, text in got.items():
            (GOLDEN / fname).write_text(text, encoding="utf-8")
        return
    for fname, text in got.items():
        path = GOLDEN / fname
        assert path.is_file(), f"no golden file {path}: regenerate with {UPDATE_ENV}=1 (tests/golden_cases.py)"
        want = path.read_text(encoding="utf-8")
        assert text == want, f"{fname} differs from the golden file (intended? regenerate with {UPDATE_ENV}=1)"


def test_normalise_masks_paths_and_clock(tmp_path):
    from golden_cases import normalise

    demo, out = tmp_path / "demo", tmp_path / "out"
    text = normalise(f'{demo}/target {out}/x.json "seconds": 1.25 in 3.4 s', demo, out)
    assert text == '<DEMO>/target <OUT>/x.json "seconds": "<s>" in <s> s'
