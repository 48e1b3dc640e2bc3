"""The one cost model behind every speed-up projection (workbench.cost): the fixed ratio keeps the old
formula, measured models round-trip through JSON and name their device, bad files are one-line errors."""

import json
import math

import numpy as np
import pytest
import torch
from conftest import tiny_draft, tiny_target

from workbench.cost import CostModel, as_cost_model, measure
from workbench.errors import WorkbenchError
from workbench.setting import Setting
from workbench.statistics import AcceptanceResult


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
