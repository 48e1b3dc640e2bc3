"""End to end at T = 0.7 on the smoke demo: the offline speculative-sampling loop (HF target + draft tree +
SGLang's verify walk) against the decode-path and per-depth estimates on data sampled from the target
(``workbench.live.regenerate`` at the same settings): they agree within bootstrap intervals."""

from __future__ import annotations

import pytest

from workbench import rows as wbdata
from workbench.load import inputs
from workbench.simulate.acceptance import simulate
from workbench.live.regenerate import regenerate
from workbench.core.sampling import Sampling
from workbench.core.setting import Setting
from workbench.simulate.verify_walk import sampled_simulate

WIRING = "L1,L3,L4"          # the demo's aligned draft (demo.demo_taps(8)["aligned"])
ROWS = 32


pytestmark = pytest.mark.usefixtures("one_thread")


def test_loop_tokens_per_step_agree_with_the_decode_path_estimate(smoke_demo, tmp_path):
    setting = Setting(steps=3, eagle_topk=2, num_draft_tokens=5, temperature=0.7, top_p=0.95)
    target, draft, _ = inputs.load(smoke_demo / "target", smoke_demo / "draft-aligned", None)
    data = tmp_path / "sampled.jsonl"
    s = Sampling(temperature=setting.temperature, top_p=setting.top_p, seed=0)
    regenerate(target, smoke_demo / "train.jsonl", data, sampling=s, max_new_tokens=20, ignore_eos=True,
               batch_size=16, progress=False, limit=ROWS)
    rows = inputs.rows(wbdata.load(data))
    est = simulate(target, draft, rows, [WIRING], setting=setting, progress=False)[WIRING]
    loop = sampled_simulate(target, draft, rows, WIRING, setting, seed=1, progress=False)
    lo_e, hi_e = est.intervals()["decode_path_accept_length"]
    lo_l, hi_l = loop.intervals()["decode_path_accept_length"]
    lo_r, hi_r = est.per_depth.intervals()["decode_path_accept_length"]
    got = (loop.decode_path["accept_length"], est.decode_path["accept_length"], est.per_depth.decode_path_accept_length)
    assert loop.decode_path["n_verify_steps"] > 120 and est.decode_path["n_verify_steps"] > 120
    assert 1.05 < got[0] < setting.steps + 1                # the draft is accepted at all, not always
    assert lo_e <= hi_l and lo_l <= hi_e, (got, (lo_e, hi_e), (lo_l, hi_l))       # intervals overlap
    assert lo_r <= hi_l and lo_l <= hi_r, (got, (lo_r, hi_r), (lo_l, hi_l))
    assert hi_r - lo_r <= hi_e - lo_e + 1e-9                # Rao–Blackwell: no wider than the raw decode path
