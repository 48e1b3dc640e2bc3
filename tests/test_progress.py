"""Progress output a user sees: no transformers "Loading weights" bar when progress is off (library and
`--quiet` CLI), the global transformers setting restored afterwards, and one line per epoch (no
per-epoch capture bar) from ``train.train_draft(progress=True)``."""

import pytest
import torch
from conftest import random_rows, save_world, tiny_draft, tiny_target
from transformers.utils import logging as hf_logging

from workbench.model import capture, train

V, H, N = 32, 32, 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    target = tiny_target(vocab_size=V, hidden_size=H, num_hidden_layers=N, max_position_embeddings=64)
    draft = tiny_draft(target)
    rows = random_rows(V, [12] * 6, prompt=3)
    folder = save_world(tmp_path_factory.mktemp("progress"), target, {"draft": draft}, rows)
    return folder, target, draft, rows


def test_load_target_progress_off_prints_no_loading_bar_and_restores_the_setting(tiny, capsys):
    folder = tiny[0]
    hf_logging.enable_progress_bar()                                # the user's setting: bars on
    capture.load_target(folder / "target", progress=True)
    assert "Loading weights" in capsys.readouterr().err            # the bar exists when asked for ...
    t = capture.load_target(folder / "target", progress=False)
    out = capsys.readouterr()
    assert "Loading weights" not in out.err + out.out               # ... and is gone when progress is off
    assert t.n_layers == N
    assert hf_logging.is_progress_bar_enabled()                     # scoped: the user's setting is back


def test_hf_progress_restores_a_disabled_setting_too():
    hf_logging.disable_progress_bar()
    try:
        with capture.hf_progress(True):
            assert hf_logging.is_progress_bar_enabled()
        assert not hf_logging.is_progress_bar_enabled()
        with pytest.raises(RuntimeError), capture.hf_progress(True):
            raise RuntimeError("boom")                              # restored even on an exception
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()


def test_diagnose_quiet_prints_no_progress_bars(tiny, capsys):
    from workbench.cli import main

    folder = tiny[0]
    main(["diagnose", "--target", str(folder / "target"), "--draft", str(folder / "draft"), "--data",
          str(folder / "data.jsonl"), "--steps", "1", "--top", "1", "--screen-chains", "10", "--quiet"])
    out = capsys.readouterr()
    assert "verdict:" in out.out
    assert "Loading weights" not in out.err and "capture" not in out.err, out.err


def test_train_draft_prints_one_line_per_epoch_and_no_capture_bars(tiny, capsys):
    _, target, draft, rows = tiny
    torch.manual_seed(0)
    train.train_draft(draft, target, rows, ["L0", "L1", "L2"], K=1, epochs=2, batch_size=6, progress=True)
    out = capsys.readouterr()
    lines = [ln for ln in (out.out + out.err).splitlines() if ln.strip()]
    assert [ln.split(":")[0].strip() for ln in lines] == ["epoch 1/2", "epoch 2/2"], lines
    assert "capture" not in out.err
