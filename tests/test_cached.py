"""Issue 48: the rewire refit and the cost model are computed once per (target, draft, data, engine, settings), kept
beside the draft, and reused; a changed input or a damaged file recomputes. The cached result equals the computed one
exactly (the reference: computing it again)."""

import shutil
from pathlib import Path

import pytest
import torch


@pytest.fixture()
def demo(smoke_demo, tmp_path):
    d = tmp_path / "demo"
    shutil.copytree(smoke_demo, d, ignore=shutil.ignore_patterns(".workbench-cache"))   # other tests' results
    return d


def _same(a, b):
    for k in ("before", "after", "reference"):
        x, y = getattr(a, k), getattr(b, k)
        assert x.accept_length == y.accept_length and x.decode_path["accept_length"] == y.decode_path["accept_length"]
        assert x.n_chains == y.n_chains and x.intervals() == y.intervals()
    assert torch.equal(a.draft.fc.weight, b.draft.fc.weight)
    assert a.recovered == b.recovered and a.to_taps == b.to_taps and a.ridge.lam == b.ridge.lam


def test_a_rewire_is_computed_once_reused_exactly_and_recomputed_when_an_input_changes(demo):
    from workbench.analysis import cached
    from workbench.load.inputs import load

    tgt, drf, ds = load(demo / "target", demo / "draft-mismatched", demo / "val.jsonl", progress=False)
    kw = dict(engine="sglang", K=3, limit=8, eval_limit=8)
    first, s1 = cached.rewire(tgt, drf, demo / "draft-mismatched", demo / "train.jsonl", ds, **kw)
    again, s2 = cached.rewire(tgt, drf, demo / "draft-mismatched", demo / "train.jsonl", ds, **kw)
    assert (s1, s2) == ("computed", "reused")
    _same(first, again)
    files = sorted(p.suffix for p in (demo / cached.FOLDER).glob("rewire-*"))
    assert files == [".json", ".npz", ".safetensors"]
    # the reference: computed afresh, without the cache, it is the same result
    fresh, s3 = cached.rewire(tgt, drf, None, demo / "train.jsonl", ds, **kw)
    assert s3 == "computed"
    _same(fresh, again)
    # a changed setting, or other evaluation rows: recomputed under another key
    assert cached.rewire(tgt, drf, demo / "draft-mismatched", demo / "train.jsonl", ds, **dict(kw, K=2))[1] == "computed"
    assert cached.rewire(tgt, drf, demo / "draft-mismatched", demo / "train.jsonl", ds,
                         **dict(kw, eval_limit=6))[1] == "computed"
    # a damaged file is recomputed, never trusted
    for npz in (demo / cached.FOLDER).glob("rewire-*.npz"):
        npz.write_bytes(b"not an npz")
    res, s4 = cached.rewire(tgt, drf, demo / "draft-mismatched", demo / "train.jsonl", ds, **kw)
    assert s4 == "computed"
    _same(res, first)


def test_changed_draft_weights_change_the_key(demo):
    from workbench.analysis import cached
    from workbench.load.inputs import load

    tgt, drf, ds = load(demo / "target", demo / "draft-mismatched", demo / "val.jsonl", progress=False)
    k1 = cached.rewire_key(tgt, drf, demo / "train.jsonl", ds, engine="sglang", K=3, limit=8, eval_limit=8)
    with torch.no_grad():
        drf.fc.weight[0, 0] += 1.0
    k2 = cached.rewire_key(tgt, drf, demo / "train.jsonl", ds, engine="sglang", K=3, limit=8, eval_limit=8)
    assert k1["draft"] != k2["draft"] and cached.digest(k1) != cached.digest(k2)


def test_the_cost_model_is_measured_once_per_machine_and_reused(demo):
    from workbench.analysis import cached
    from workbench.load.inputs import load

    tgt, drf, _ = load(demo / "target", demo / "draft-mismatched", None, progress=False)
    kw = dict(verify_probes=(1, 2), lane_probes=(1,), repeats=3)
    cm, s1 = cached.cost_model(tgt, drf, demo / "draft-mismatched", **kw)
    again, s2 = cached.cost_model(tgt, drf, demo / "draft-mismatched", **kw)
    assert (s1, s2) == ("computed", "reused") and again.to_dict() == cm.to_dict()
    key = next((demo / cached.FOLDER).glob("cost-*.json")).read_text()
    assert cached.machine().split()[0] in key          # the machine is part of the key: never reused elsewhere


def test_three_pages_of_one_run_refit_the_rewire_once(demo, monkeypatch):
    """What the report does: wb.diagnose from each page; only the first computes the rewire, the others reuse it.
    (On the smoke rows the cheapest fix is new ids; the diagnosis is told the fix is a rewire, as on the default and
    real demos, so that the rewire runs.)"""
    import workbench as wb
    from workbench.analysis import cached
    from workbench.report import run as run_mod

    calls, real, real_dx = [], cached.rw.rewire, run_mod.dxm.diagnose

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    def rewire_fix(*a, **k):
        dx = real_dx(*a, **k)
        dx.fix = "rewire"
        return dx

    monkeypatch.setattr(cached.rw, "rewire", counting)
    monkeypatch.setattr(run_mod.dxm, "diagnose", rewire_fix)
    runs = [wb.diagnose(demo / "target", demo / "draft-mismatched", demo / "val.jsonl", K=3, limit=8, rewire_limit=8)
            for _ in range(3)]
    assert len(calls) == 1 and [r.rewire_status for r in runs] == ["computed", "reused", "reused"]
    assert runs[0].rewired.recovered == runs[2].rewired.recovered
    assert Path(demo / cached.FOLDER).is_dir()


def test_the_candidates_reuse_the_diagnosis_curves_and_they_equal_a_fresh_simulation(demo):
    """Notebook 03's candidates take the wirings the diagnosis measured in full (the same rows and chain) instead of
    simulating them again; the reference: the same wirings simulated afresh give the same numbers."""
    import workbench as wb
    from workbench.report.candidates_view import reusable
    from workbench.simulate.acceptance import simulate

    run = wb.diagnose(demo / "target", demo / "draft-mismatched", demo / "val.jsonl", K=3, limit=8, rewire=False)
    c = run.candidates(limit=8, ratio=0.1)
    known = reusable(run, c.specs, 8)
    assert known, "the diagnosis measured none of the candidates in full"
    fresh = simulate(run.target, run.draft, run.data, list(known), K=3, limit=8, engine=run.engine, progress=False)
    for spec in known:
        a, b = c.results[spec], fresh[spec]
        assert (a.accept_length, a.decode_path["accept_length"], a.n_chains) == \
               (b.accept_length, b.decode_path["accept_length"], b.n_chains), spec
        assert list(a.conditional) == list(b.conditional) and a.cost_model is c.cost_model
    assert run.diagnosis.results[next(iter(known))].cost_model is not c.cost_model     # the diagnosis' own untouched
    assert reusable(run, c.specs, 4) == {}                  # other rows: nothing reused


# ───────────────────────── issue 57, item 6: keys that cannot miss ─────────────────────────

def test_a_value_at_the_end_of_a_tensor_changes_the_key():
    import torch

    from workbench.simulate.distributed import module_fingerprint

    m = torch.nn.Linear(64, 64)                      # 4096 weights: past the first 1024 values the old key read
    before = module_fingerprint(m, {"a": 1})
    with torch.no_grad():
        m.weight.view(-1)[-1] += 1e-3
    assert module_fingerprint(m, {"a": 1}) != before


def test_one_line_of_rewire_changes_the_code_version(tmp_path):
    from workbench.analysis import cached

    src = Path(cached.__file__).resolve().parent / "rewire.py"
    copy = tmp_path / "rewire.py"
    copy.write_text(src.read_text())
    same = cached.code_version([copy])
    copy.write_text(src.read_text().replace("\n", "\n# one line changed\n", 1))
    assert cached.code_version([copy]) != same
    assert "analysis/rewire.py" in cached.CODE and "engines" in cached.CODE


def test_the_path_a_target_was_opened_by_is_not_in_the_key(monkeypatch):
    """make demo opens data/demo/target, notebook 03's kernel (in notebooks/) ../data/demo/target: one key."""
    from workbench.load import inputs
    from workbench.simulate.distributed import module_fingerprint

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    a = inputs.target("tests/data/smoke-demo/target", progress=False)
    monkeypatch.chdir(root / "notebooks")
    b = inputs.target("../tests/data/smoke-demo/target", progress=False)
    ka = module_fingerprint(a.model, a.config.to_dict())
    kb = module_fingerprint(b.model, b.config.to_dict())
    assert a.config.to_dict()["_name_or_path"] != b.config.to_dict()["_name_or_path"]
    assert ka == kb
