"""The one cost model behind every speed-up projection (workbench.stats.cost): the fixed ratio keeps the old
formula, measured models round-trip through JSON and name their device, bad files are one-line errors."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import tiny_draft, tiny_target

from workbench.stats.cost import CostModel, as_cost_model, measure
from workbench.core.errors import WorkbenchError
from workbench.core.setting import Setting
from workbench.stats.statistics import AcceptanceResult


def test_a_fixed_ratio_is_the_old_chain_formula():
    A = np.array([0, 1, 2, 3, 3, 1])
    r = AcceptanceResult.from_arrays("L1", K=3, sample=[0] * 6, t=range(6), accepted=A)
    for row in r.speedup(0.07):
        tps = float(np.minimum(A, row["k"]).mean()) + 1
        assert row["speedup"] == tps / (1 + row["k"] * 0.07)
    assert r.speedup(0.07) == r.speedup(cost_model=CostModel.fixed(0.07))
    r.cost_ratio = 0.07
    assert "fixed cost model: draft step / target forward = 0.07" in r.summary()
    assert r.to_json()["cost_ratio"] == 0.07 and r.to_json()["cost_model"]["kind"] == "fixed"


def test_measured_model_projects_trees_with_the_verify_cost_of_n():
    cm = CostModel(device="cuda", device_name="X", draft_step={1: 1.0, 4: 2.0}, verify={1: 10.0, 8: 12.0, 64: 40.0})
    assert cm.chooses_flags and not cm.indicative
    assert cm.step_time(5, 4, 8) == 5 * 2.0 + 12.0
    assert cm.speedup(3.0, 5, 4, 8) == 3.0 * 10.0 / 22.0
    tree = AcceptanceResult.from_arrays("L1", K=5, sample=[0, 0], t=[0, 1], accepted=[4, 2],
                                        setting=Setting(steps=5, eagle_topk=4, num_draft_tokens=8))
    (row,) = tree.speedup(cost_model=cm)
    assert row["k"] == 5 and row["tokens_per_step"] == 4.0 and row["speedup"] == 4.0 * 10.0 / 22.0
    assert "measured on cuda (X)" in cm.describe() and "indicative" not in cm.describe()


def test_a_cpu_measurement_is_indicative_and_round_trips(tmp_path):
    torch.manual_seed(0)
    target = tiny_target()
    draft = tiny_draft(target)
    cm = measure(target, draft, prefix=16, verify_probes=(1, 4, 8), lane_probes=(1, 2), repeats=2)
    assert cm.device == "cpu" and cm.indicative and not cm.chooses_flags
    assert "indicative only: CPU costs do not choose GPU flags" in cm.describe()
    assert set(cm.verify) == {1, 4, 8} and set(cm.draft_step) == {1, 2}
    assert all(lo <= cm.verify[n] <= hi for n, (lo, hi) in cm.spread["verify"].items())
    cm.save(tmp_path / "cost.json")
    back = CostModel.load(tmp_path / "cost.json")
    assert back.to_dict() == cm.to_dict() and back.indicative
    assert math.isclose(as_cost_model(str(tmp_path / "cost.json")).ratio, cm.ratio)


@pytest.mark.parametrize("text, match", [("{", "not JSON"), ("[]", "JSON object"),
                                         ('{"draft_step": {"1": 1}}', "draft_step and verify"),
                                         ('{"draft_step": {"1": 1}, "verify": {"2": 1}}', "N=1"),
                                         ('{"kind": "guess", "draft_step": {}, "verify": {}}', "kind")])
def test_bad_cost_model_files_are_one_line_errors(tmp_path, text, match):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(WorkbenchError, match=match) as e:
        CostModel.load(p)
    assert "\n" not in str(e.value)
    with pytest.raises(WorkbenchError, match="cannot read"):
        CostModel.load(tmp_path / "missing.json")
    with pytest.raises(WorkbenchError, match="not both"):
        as_cost_model(CostModel.fixed(0.1), 0.2)


# ------------------------------------------------------------------------- uncertainty (issue 22)

def test_projection_names_a_best_depth_only_when_it_is_clearly_best():
    import numpy as np

    from workbench.report import plots
    from workbench.stats.cost import projection
    from workbench.stats.statistics import AcceptanceResult

    rng = np.random.default_rng(0)
    n = 400
    sample = np.repeat(np.arange(n // 10), 10)

    def res(A):
        return AcceptanceResult.from_arrays("L1", K=3, sample=sample, t=np.tile(np.arange(10), n // 10), accepted=A)

    # drafts always accepted, drafting free: deeper is better beyond noise
    sure = projection(res(np.full(n, 3)), CostModel.fixed(0.0))
    assert sure["best"] == 3 and sure["within_noise"] == [3] and "clearly best" in sure["text"]
    # noisy, nearly flat: no best, the set within noise instead
    A = np.minimum(rng.geometric(0.5, n) - 1, 3)
    flat = projection(res(A), CostModel.fixed(0.3))
    top = max(flat["rows"], key=lambda r: r["speedup"])
    assert flat["best"] is None and len(flat["within_noise"]) >= 2 and top["k"] in flat["within_noise"]
    assert "within noise" in flat["text"] and "would decide" in flat["text"]
    for r in flat["rows"]:                                     # the point lies inside its range
        assert r["speedup_low"] <= r["speedup"] <= r["speedup_high"]
        assert r["tokens_low"] <= r["tokens_per_step"] <= r["tokens_high"]
    assert [r["speedup"] for r in flat["rows"]] == [d["speedup"] for d in res(A).speedup(0.3)]
    # a measured model's timing spread widens the range
    m = CostModel(device="cpu", draft_step={1: 1.0}, verify={1: 10.0, 4: 10.0},
                  spread={"draft_step": {1: [0.5, 3.0]}, "verify": {1: [8.0, 12.0], 4: [8.0, 12.0]}})
    wide, tight = projection(res(A), m)["rows"][-1], projection(res(A), CostModel.fixed(0.1))["rows"][-1]
    assert wide["speedup_high"] - wide["speedup_low"] > tight["speedup_high"] - tight["speedup_low"]
    # the figure: a star only for a clear best, the legend says which
    fig = plots.speedup_projection({"flat": res(A)}, ratio=0.3)
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "*"]
    texts = lambda f: [t.get_text() for t in f.legends[0].get_texts()]  # noqa: E731
    assert any(t.startswith("flat: K' within noise: ") for t in texts(fig))
    fig = plots.speedup_projection({"sure": res(np.full(n, 3))}, ratio=0.0)
    assert [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "*"]
    assert "sure: best K'=3" in texts(fig)
