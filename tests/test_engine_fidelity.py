"""Engine features against HF's (``workbench.live.engine_fidelity``, ``vllm capture --fidelity``, notebook 02's
figure). The real vLLM path is in ``tests/test_vllm_extract_real.py``; here a stand-in engine hands
``capture.extract(engine=...)`` HF's own hidden states scaled by ``1 + eps·noise``, so the measure is checked
against a known gap."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.live.engine_fidelity import Fidelity, compare, find
from workbench.model.capture import extract, load_target
from workbench.model.checkpoint import load_draft
from workbench.report import plots
from workbench.report.layout import assert_clean_layout
from workbench.rows.dataset import load as load_data
from workbench.simulate.distributed import global_rows

WIRINGS = ["embed,L1,L3", "L0,L2,L3"]


class Scaled:
    """A stand-in engine: ``output_hidden_states`` (id 0 = embed, id k+1 = L{k}) times ``1 + eps·N(0,1)``."""

    def __init__(self, target, eps):
        self.target, self.eps, self.source = target, eps, f"stand-in engine (HF states x (1 + {eps}·noise))"

    def __call__(self, rows, ids, att):
        with torch.no_grad():
            out = self.target.model(ids, attention_mask=att, output_hidden_states=True)
        g = torch.Generator().manual_seed(0)
        m = att[..., None].to(out.hidden_states[0].dtype)
        feats = {}
        for t in ("embed", "L0", "L1", "L2", "L3"):
            h = out.hidden_states[0 if t == "embed" else int(t[1:]) + 1]
            feats[t] = h * (1 + self.eps * torch.randn(h.shape, generator=g)) * m
        return feats, out.logits.argmax(-1) * att


@pytest.fixture(scope="module")
def world(smoke_demo):
    target = load_target(smoke_demo / "target", progress=False)
    draft = load_draft(smoke_demo / "draft-mismatched", target)
    rows = global_rows(load_data(smoke_demo / "val.jsonl"), 8)
    return target, draft, rows


def _engine_cache(world, folder, eps):
    target, _, rows = world
    for _ in extract(target, rows, WIRINGS, cache_dir=folder, progress=False, engine=Scaled(target, eps)):
        pass
    return folder


def test_a_small_gap_is_measured_at_its_size_and_leaves_accept_lengths_alone(world, tmp_path):
    target, draft, rows = world
    fid = compare(target, draft, rows, WIRINGS, _engine_cache(world, tmp_path / "eng", 1e-6), K=3)
    assert list(fid.taps) == ["embed", "L0", "L1", "L2", "L3"]
    for t, v in fid.taps.items():
        assert 3e-7 <= v["token_rel_median"] <= 3e-6, (t, v)          # ‖noise‖/‖h‖ = eps per token
        assert v["max_rel"] <= 1e-5, (t, v)
    assert fid.tokens["equal"] == fid.tokens["total"] > 100
    for w in WIRINGS:
        assert fid.accept[w]["engine"] == pytest.approx(fid.accept[w]["hf"], abs=0.02), w
    assert fid.source.startswith("stand-in engine") and fid.K == 3 and fid.rows == 8
    assert "greedy next tokens equal" in "\n".join(fid.lines())


def test_a_large_gap_shows_in_every_tap_and_round_trips_through_json(world, tmp_path):
    target, draft, rows = world
    fid = compare(target, draft, rows, WIRINGS, _engine_cache(world, tmp_path / "eng", 0.3), K=3)
    assert all(v["token_rel_median"] > 0.1 for v in fid.taps.values()), fid.taps
    path = tmp_path / "demo" / "engine-fidelity.json"
    path.parent.mkdir()
    fid.save(path)
    assert Fidelity.load(path) == fid
    (tmp_path / "demo" / "draft").mkdir()
    assert find("", tmp_path / "demo" / "draft") == fid                # beside the draft's folder, as in a demo
    assert find("", tmp_path / "eng") is None


def test_an_hf_cache_is_not_called_engine_features(world, tmp_path):
    target, draft, rows = world
    for _ in extract(target, rows, WIRINGS, cache_dir=tmp_path / "hf", progress=False):
        pass
    with pytest.raises(WorkbenchError, match=r"hf: expected the features of one serving engine.*HF hooks only"):
        compare(target, draft, rows, WIRINGS, tmp_path / "hf")


def test_a_broken_fidelity_file_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "f.json"
    bad.write_text(json.dumps({"source": "x"}))
    with pytest.raises(WorkbenchError, match=r"f\.json: not an engine-fidelity JSON"):
        Fidelity.load(bad)
    with pytest.raises(WorkbenchError, match=r"missing\.json: no such file.*--fidelity"):
        Fidelity.load(tmp_path / "missing.json")


def test_the_figure_draws_both_panels_cleanly():
    fid = Fidelity(source="vLLM 0.32 extract_hidden_states", target="t", rows=8, K=4,
                   taps={"embed": {"max_rel": 0.0, "token_rel_median": 0.0, "token_rel_max": 0.0},
                         "L0": {"max_rel": 3.9e-7, "token_rel_median": 1.1e-7, "token_rel_max": 4e-7},
                         "L13": {"max_rel": 2e-6, "token_rel_median": 3e-7, "token_rel_max": 9e-6}},
                   tokens={"equal": 240, "total": 240},
                   accept={"embed,L1,L3": {"engine": 3.721, "hf": 3.721}, "L0,L2,L3": {"engine": 2.635, "hf": 2.6}})
    fig = plots.engine_fidelity(fid)
    assert [ax.get_title() for ax in fig.axes] == ["Engine features against HF, per tap", "Accept length from each"]
    assert "accept lengths differ by at most 0.035" in fig._suptitle.get_text()
    assert_clean_layout(fig)
