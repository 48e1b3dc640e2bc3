"""The Setting every result carries, and schema_version in every JSON result."""

import pytest

from workbench.stats.statistics import AcceptanceResult
from workbench.core.errors import WorkbenchError
from workbench.core.setting import SCHEMA_VERSION, Setting, resolve_setting


def test_setting_round_trips_and_describes():
    s = Setting(steps=3, engine="vllm", engine_version="0.9.1")
    assert Setting.from_dict(s.to_dict()) == s
    assert "K=3" in s.describe() and "engine vllm 0.9.1" in s.describe() and "greedy" in s.describe()
    tree = Setting(steps=3, shape="tree", eagle_topk=4, num_draft_tokens=8)
    assert "eagle_topk 4" in tree.describe() and tree.label == "tree 3×4 N=8"
    tree.check_simulable()                                  # trees are simulated (issue 18)
    assert Setting(steps=3, eagle_topk=4, num_draft_tokens=8) == tree   # eagle_topk > 1 is a tree by itself
    assert Setting(steps=3, shape="tree").num_draft_tokens == 4         # a tree of branching 1: N = S + 1
    Setting(temperature=0.7, top_k=20).check_simulable()       # T > 0 is simulated (issue 21: workbench.simulate.sampled)
    with pytest.raises(WorkbenchError, match="top_k=0"):
        Setting(temperature=0.7, top_k=0).check_simulable()
    Setting().check_simulable()


@pytest.mark.parametrize("bad, match", [
    (dict(steps=0), "steps=0"), (dict(shape="star"), "shape"), (dict(shape="chain", eagle_topk=2), "shape='tree'"),
    (dict(eagle_topk=2), "num_draft_tokens"), (dict(steps=2, eagle_topk=2, num_draft_tokens=8), "2..7"),
    (dict(steps=2, shape="tree", num_draft_tokens=5), "steps \\+ 1 = 3"), (dict(eagle_topk=0), "eagle_topk"),
    (dict(estimator="mean"), "estimator"), (dict(temperature=-1), "temperature"), (dict(top_p=0), "top_p")])
def test_setting_refuses_bad_fields(bad, match):
    with pytest.raises(WorkbenchError, match=match):
        Setting(**bad)
    with pytest.raises(WorkbenchError, match="unknown key"):
        Setting.from_dict({"steps": 2, "depth": 3})


def test_results_carry_the_setting_and_json_the_schema_version():
    s = Setting(steps=2, engine="sglang")
    r = AcceptanceResult.from_arrays("L1,L2,L3", K=2, sample=[0, 1], t=[0, 0], accepted=[2, 1], setting=s)
    assert r.setting == s and "setting: " + s.describe() in r.summary()
    js = r.to_json()
    assert js["schema_version"] == SCHEMA_VERSION and Setting.from_dict(js["setting"]) == s
    assert r.filter("").setting == s and AcceptanceResult.concat([r]).setting == s
    assert AcceptanceResult.from_arrays("L1", K=2, sample=[0], t=[0], accepted=[1]).setting == Setting(steps=2)
    with pytest.raises(WorkbenchError, match="same setting"):
        AcceptanceResult.concat([r, AcceptanceResult.from_arrays("L1,L2,L3", K=2, sample=[5], t=[0], accepted=[0])])
    with pytest.raises(WorkbenchError, match="K=3"):
        AcceptanceResult.from_arrays("L1", K=2, sample=[0], t=[0], accepted=[1], setting=Setting(steps=3))


def test_resolve_setting():
    assert resolve_setting(None) == Setting(steps=4)
    assert resolve_setting(2, Setting(steps=2, engine="hf")).engine == "hf"
    with pytest.raises(WorkbenchError, match="differs"):
        resolve_setting(3, Setting(steps=2))
    with pytest.raises(WorkbenchError, match="K=0"):
        resolve_setting(0)
    assert resolve_setting(5, eagle_topk=4, num_draft_tokens=8) == Setting(steps=5, eagle_topk=4, num_draft_tokens=8)
    assert resolve_setting(3, eagle_topk=1) == Setting(steps=3)
    with pytest.raises(WorkbenchError, match="eagle_topk=2 differs"):
        resolve_setting(None, Setting(steps=3), eagle_topk=2)
