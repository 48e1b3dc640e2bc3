"""Issue 57: the like-for-like trainer comparison's arithmetic (``bench/foreign_quality.py``) on the smoke demo: the
per-row split of the decode-path accept length sums back to it, and the paired bootstrap interval tells a strong
draft from a mis-wired one and a draft from itself not at all."""

from __future__ import annotations

import pytest

from bench.foreign_quality import paired_interval, per_row

pytestmark = pytest.mark.usefixtures("one_thread")


def test_rows_sum_to_the_decode_path_and_the_interval_is_paired(smoke_demo):
    from workbench import rows as data
    from workbench.load import inputs
    from workbench.model import checkpoint
    from workbench.simulate import acceptance

    target = inputs.target(smoke_demo / "target")
    val = data.load(smoke_demo / "val.jsonl")
    got = {}
    for name in ("draft-aligned", "draft-mismatched"):
        d = checkpoint.load_draft(smoke_demo / name, target)
        res = acceptance.simulate(target, d, val, ["L1,L3,L4"], K=4, progress=False)["L1,L3,L4"]
        num, den = got[name] = per_row(res)
        assert len(num) == 16 and num.sum() / den.sum() == pytest.approx(res.decode_path["accept_length"], rel=1e-12)
    d = paired_interval(got["draft-aligned"], got["draft-mismatched"])
    assert d["told_apart"] and d["low"] > 0 and d["low"] <= d["difference"] <= d["high"]
    same = paired_interval(got["draft-aligned"], got["draft-aligned"])
    assert same == {"difference": 0.0, "low": 0.0, "high": 0.0, "told_apart": False}
