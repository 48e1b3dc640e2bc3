"""Engine capture and ``vllm taps`` without a server: the extraction arguments, the tensor matching, the
engine's files (lock, cleanup), and ``capture.extract(engine=...)`` (same cache, resumable, never mixed).
The real-vLLM checks are in ``tests/test_vllm_extract_real.py``."""

from __future__ import annotations

import fcntl
import json
import os

import pytest
import torch
from conftest import random_rows, tiny_target

from workbench.core.errors import WorkbenchError
from workbench.live.vllm_capture import EngineFeatures, engine_ids, greedy_tokens
from workbench.live.vllm_extract import extraction_args, read_states, served_id_keys
from workbench.live.vllm_taps import TapsResult, match_slots
from workbench.model import capture


def test_served_id_keys_keep_only_what_vllm_reads():
    cfg = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]},
           "num_hidden_layers": 1, "hidden_size": 32}
    assert served_id_keys(cfg) == {"eagle_aux_hidden_state_layer_ids": [0, 2, 4],
                                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}}
    assert served_id_keys({"hidden_size": 8}) == {}
    spec = json.loads(extraction_args({"eagle_aux_hidden_state_layer_ids": [1, 2]}, "/s")[1])
    kv = json.loads(extraction_args({}, "/s")[3])
    assert spec["method"] == "extract_hidden_states" and spec["num_speculative_tokens"] == 1
    assert kv["kv_connector"] == "ExampleHiddenStatesConnector" and kv["kv_connector_extra_config"] == {
        "shared_storage_path": "/s"}


def test_engine_ids_are_capture_points_and_final_is_refused():
    assert engine_ids(["L3", "embed", "L7"], 8) == [0, 4, 8]
    with pytest.raises(WorkbenchError, match="'final'"):
        engine_ids(["final"], 8)


def _hf(n=4, h=8, taps=("embed", "L0", "L1", "L2")):
    g = torch.Generator().manual_seed(0)
    return {t: torch.randn(n, h, generator=g) for t in taps}


def test_match_slots_names_each_slot_and_refuses_a_near_tie():
    hf = _hf()
    got = match_slots(torch.stack([hf["L0"] + 1e-8, hf["L2"]], dim=1), hf)
    assert [s.tap for s in got] == ["L0", "L2"] and got[0].rel < 1e-6 and got[0].next_rel > 0.1
    off = match_slots(torch.stack([hf["L0"] * 1.01], dim=1), hf)          # 1% off: no tap
    assert off[0].tap is None and off[0].rel > 1e-3
    res = TapsResult([s.tap for s in got], got, {"eagle_config": {}}, "L0,L2", 4)
    assert res.agrees and "the engine captures `L0,L2`" in res.summary()
    assert not TapsResult(["L0", None], got, {}, "L0,L2", 4).agrees


def test_greedy_tokens_from_prompt_logprobs():
    plp = [None, {"5": {"rank": 3}, "7": {"rank": 1}}, {"9": {"rank": 1}}]
    reply = {"choices": [{"prompt_logprobs": plp, "token_ids": [11]}]}
    assert greedy_tokens(reply, 3) == [7, 9, 11]
    with pytest.raises(WorkbenchError, match="prompt_logprobs"):
        greedy_tokens({"choices": [{"token_ids": [1]}]}, 3)


def test_read_states_reads_and_cleans_up_and_reports_a_stale_lock(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "r.safetensors"
    save_file({"hidden_states": torch.ones(3, 2, 4), "token_ids": torch.tensor([1, 2, 3])}, str(path))
    (tmp_path / "r.safetensors.lock").write_text("")
    states, ids = read_states(path, timeout=5)
    assert tuple(states.shape) == (3, 2, 4) and ids.tolist() == [1, 2, 3]
    assert list(tmp_path.iterdir()) == []                                # both files removed
    stale = tmp_path / "s.safetensors"
    fd = os.open(str(stale) + ".lock", os.O_CREAT | os.O_WRONLY, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)                                       # a writer that never finishes
    try:
        with pytest.raises(WorkbenchError, match="did not finish writing it within 1 s"):
            read_states(stale, timeout=1)
    finally:
        os.close(fd)


class FakeEngine:
    """Stands in for EngineFeatures: the HF target's own taps (optionally failing at batch ``fail_at``)."""

    source = "fake engine"

    def __init__(self, target, taps, fail_at=None):
        self.target, self.taps, self.fail_at, self.calls = target, taps, fail_at, 0

    def __call__(self, rows, ids, att):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise WorkbenchError("the server died")
        with torch.no_grad(), capture.tap_hooks(self.target.model, self.taps) as feats:
            logits = self.target.model(input_ids=ids, attention_mask=att).logits
            return {t: feats[t].clone() for t in self.taps}, logits.argmax(-1)


def test_extract_with_an_engine_fills_the_same_cache_resumes_and_never_mixes(tmp_path):
    target = tiny_target(num_hidden_layers=4)
    rows = random_rows(target.vocab_size, [5, 6, 7, 8, 9, 10], prompt=2)
    taps = ["embed,L1,L2"]
    cache = tmp_path / "cache"
    with pytest.raises(WorkbenchError, match="the server died"):        # killed after the first shard
        list(capture.extract(target, rows, taps, batch_size=2, cache_dir=cache, progress=False,
                             engine=FakeEngine(target, ["embed", "L1", "L2"], fail_at=2)))
    (folder,) = cache.iterdir()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["done"] == [0] and manifest["source"] == "fake engine" and not manifest["complete"]
    with pytest.raises(WorkbenchError, match="unfinished or another source"):     # an HF run never mixes in
        list(capture.extract(target, rows, taps, batch_size=2, cache_dir=cache, progress=False))
    eng = FakeEngine(target, ["embed", "L1", "L2"])
    got = list(capture.extract(target, rows, taps, batch_size=2, cache_dir=cache, progress=False, engine=eng))
    assert [b.from_cache for b in got] == [True, False, False] and eng.calls == 2
    with capture.count_forwards(target.model) as c:                     # an HF-side run reads the engine's shards
        again = list(capture.extract(target, rows, taps, batch_size=2, cache_dir=cache, progress=False))
    assert c["calls"] == 0 and all(b.from_cache for b in again)
    hf = list(capture.extract(target, rows, taps, batch_size=2, progress=False))
    for a, b in zip(again, hf):
        assert torch.equal(a.next_token * a.attention_mask, b.next_token * b.attention_mask)
        m = a.attention_mask.bool()
        assert all(torch.allclose(a.features[t][m], b.features[t][m], atol=1e-6) for t in ("embed", "L1", "L2"))


def test_engine_features_refuse_a_server_without_the_taps():
    with pytest.raises(WorkbenchError, match="lack the taps L5"):
        EngineFeatures(object(), ["L1", "L5"], 8, server_ids=[0, 2, 4])


def test_an_engine_refusal_is_one_line_naming_the_version_and_cause(tmp_path, smoke_demo):
    from workbench.live.vllm_extract import start_extractor

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\ncase \"$2\" in *importlib*) echo 0.32.0; exit 0;; esac\n"
                    "echo 'ValueError: eagle_aux_hidden_state_layer_ids must be set in the draft model config'; exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(WorkbenchError) as e:
        start_extractor(smoke_demo / "target", {}, tmp_path / "store", python=str(fake), timeout=30)
    msg = str(e.value)
    assert msg.startswith("vLLM 0.32.0 refused hidden-states extraction (ids {})") and "\n" not in msg
    assert "eagle_aux_hidden_state_layer_ids must be set" in msg


def test_engine_capture_starts_no_server_for_a_finished_cache(tmp_path):
    from workbench.live.vllm_capture import engine_capture

    target = tiny_target(num_hidden_layers=4)
    rows = random_rows(target.vocab_size, [5, 6, 7], prompt=2)
    cache = tmp_path / "cache"
    list(capture.extract(target, rows, ["embed,L1,L2"], batch_size=2, cache_dir=cache, progress=False,
                         engine=FakeEngine(target, ["embed", "L1", "L2"])))
    for p in cache.iterdir():                                     # as an engine capture would have written it
        m = json.loads((p / "manifest.json").read_text())
        m["source"] = "vLLM 0.32 extract_hidden_states"
        (p / "manifest.json").write_text(json.dumps(m))
    info = engine_capture(target, "unused", rows, ["embed,L1,L2"], cache, batch_size=2)   # no server started
    assert info["batches"] == info["from_cache"] == 2
