"""The positions lint (workbench/engines/positions.py) in `sglang lint`, `vllm lint` and `inspect`: the draft's
max_position_embeddings against the served context (an error), rope_theta / rope_scaling against the target's
(warnings with the numbers), missing keys named with the default the engines use (docs/context-length.md)."""

import json

import pytest

from workbench.cli import main
from workbench.engines.positions import MODELOPT_YARN, context, findings, read, served_context
from workbench.engines.sglang_lint import lint_command, lint_server_info
from workbench.engines.vllm_lint import lint_command as vllm_lint_command

LLAMA31_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}


def sglang(t, d, extra=""):
    return (f"python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 "
            f"--speculative-draft-model-path {d} --speculative-num-steps 3 --speculative-eagle-topk 1 "
            f"--speculative-num-draft-tokens 4 {extra}")


def vllm(t, d, extra=""):
    spec = json.dumps({"method": "eagle3", "model": str(d), "num_speculative_tokens": 3})
    return f"vllm serve {t} {extra} --speculative-config '{spec}'"


@pytest.fixture
def world(tmp_path):
    """A config-only target (Llama-3.1-like: 131072 positions, theta 500000, llama3 scaling) and a draft folder."""
    t, d = tmp_path / "target", tmp_path / "draft"
    t.mkdir(), d.mkdir()
    (t / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64, "vocab_size": 256,
        "num_attention_heads": 4, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": LLAMA31_SCALING}))
    return t, d


def draft(d, **cfg):
    base = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "hidden_size": 64,
            "num_attention_heads": 4, "vocab_size": 256,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}
    base.update(cfg)
    (d / "config.json").write_text(json.dumps({k: v for k, v in base.items() if v is not None}))
    return d


def by_code(res, code):
    return [p for p in res.problems if p.code == code]


def test_sglang_draft_positions_before_the_served_context_is_an_error(world, capsys):
    t, d = world
    draft(d, max_position_embeddings=2048, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    res = lint_command(sglang(t, d, "--context-length 8192"))
    (p,) = by_code(res, "draft-positions-short")
    assert p.severity == "error" and not res.ok
    assert p.message == (f"{d}/config.json: the draft's positions end at 2048 (max_position_embeddings 2048) but the "
                         "served context is 8192 (--context-length)")
    assert "#6783" in p.why and "--context-length 2048" in p.fix
    assert res.settings["served_context"] == "8192 (--context-length)"
    # the CLI's exit code says so
    capsys.readouterr()
    assert main(["sglang", "lint", sglang(t, d, "--context-length 8192")]) == 1
    assert "ERROR [draft-positions-short]" in capsys.readouterr().out


def test_sglang_without_context_length_serves_the_targets_context(world):
    t, d = world
    draft(d, max_position_embeddings=2048, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    (p,) = by_code(lint_command(sglang(t, d)), "draft-positions-short")
    assert "served context is 131072 (no --context-length: SGLang serves the target's context" in p.message
    assert "max_position_embeddings 131072" in p.message


def test_a_matching_draft_passes(world, capsys):
    t, d = world
    draft(d, max_position_embeddings=131072, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    for res in (lint_command(sglang(t, d)), lint_command(sglang(t, d, "--context-length 32768")),
                vllm_lint_command(vllm(t, d, "--max-model-len 32768"), device="gpu")):
        pos = [p for p in res.problems if p.code.startswith(("draft-positions", "rope-", "draft-theta", "spec-max"))]
        assert pos == [], pos
    draft(d, max_position_embeddings=8192, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    res = lint_command(sglang(t, d, "--context-length 8192"))           # equal: fine
    assert not by_code(res, "draft-positions-short")
    capsys.readouterr()
    assert main(["sglang", "lint", sglang(t, d, "--context-length 8192")]) == 0


def test_modelopt_yarn_x32_against_a_target_without_scaling_warns(world):
    t, d = world
    (t / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32,
                                               "hidden_size": 64, "vocab_size": 256, "num_attention_heads": 4,
                                               "max_position_embeddings": 32768, "rope_theta": 1000000.0}))
    draft(d, max_position_embeddings=32768, rope_theta=1000000.0, rope_scaling=dict(MODELOPT_YARN))
    for res in (lint_command(sglang(t, d)), vllm_lint_command(vllm(t, d), device="gpu")):
        (p,) = by_code(res, "rope-scaling-mismatch")
        assert p.severity == "warning" and res.ok
        assert p.message == (f"{d}/config.json rope_scaling yarn (factor 32, original_max_position_embeddings 2048) "
                             f"but {t}/config.json rope_scaling none")
        assert "ModelOpt" in p.why and "1.81" in p.why and "eagle_export_rope_scaling={}" in p.fix
    # yarn with original_max_position_embeddings: neither engine multiplies the length by the factor
    assert context(read({"max_position_embeddings": 32768, "rope_scaling": dict(MODELOPT_YARN)}), "sglang")[0] == 32768


def test_scaling_on_the_target_only_and_theta_mismatch_warn_with_the_numbers(world):
    t, d = world
    draft(d, max_position_embeddings=131072, rope_theta=10000.0)
    res = lint_command(sglang(t, d))
    (theta,) = by_code(res, "rope-theta-mismatch")
    assert theta.severity == "warning"
    assert theta.message == f"{d}/config.json rope_theta 10000 but {t}/config.json rope_theta 500000"
    (sc,) = by_code(res, "rope-scaling-mismatch")
    assert "rope_scaling none but" in sc.message and "llama3 (factor 8" in sc.message and "past 8192 tokens" in sc.why


def test_missing_keys_say_which_default_the_engine_uses(world):
    t, d = world
    draft(d)                                           # no max_position_embeddings, no rope_theta
    res = lint_command(sglang(t, d, "--context-length 4096"))
    (mpe,) = by_code(res, "draft-positions-defaulted")
    assert mpe.severity == "info" and "default 2048 (defaulted)" in mpe.message
    (theta,) = by_code(res, "draft-theta-defaulted")
    assert "default 10000 (defaulted)" in theta.message
    (short,) = by_code(res, "draft-positions-short")
    assert "end at 2048 (max_position_embeddings 2048 (defaulted))" in short.message
    (tm,) = by_code(res, "rope-theta-mismatch")
    assert "rope_theta (defaulted) 10000" in tm.message


def test_vllm_max_model_len_and_the_speculative_max_model_len(world, capsys):
    t, d = world
    draft(d, max_position_embeddings=2048, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    res = vllm_lint_command(vllm(t, d, "--max-model-len 8K"), device="gpu")
    (p,) = by_code(res, "draft-positions-short")
    assert p.severity == "error" and "served context is 8192 (--max-model-len)" in p.message
    assert "past 2045 tokens" in p.why and "_input_fits_in_drafter" in p.why
    spec = json.dumps({"method": "eagle3", "model": str(d), "num_speculative_tokens": 3, "max_model_len": 4096})
    res = vllm_lint_command(f"vllm serve {t} --speculative-config '{spec}'", device="gpu")
    assert [p.severity for p in by_code(res, "spec-max-model-len")] == ["error"]
    capsys.readouterr()
    assert main(["vllm", "lint", vllm(t, d, "--max-model-len 8192"), "--device", "gpu"]) == 1
    draft(d, max_position_embeddings=131072, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    assert not by_code(vllm_lint_command(vllm(t, d, "--max-model-len 8192"), device="gpu"), "draft-positions-short")


def test_server_info_context_length(world):
    t, d = world
    draft(d, max_position_embeddings=4096, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    info = {"server_args": {"model_path": str(t), "speculative_algorithm": "EAGLE3",
                            "speculative_draft_model_path": str(d), "speculative_num_steps": 3,
                            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "context_length": 16384}}
    (p,) = by_code(lint_server_info(info), "draft-positions-short")
    assert "16384 (server_args.context_length)" in p.message


def test_readers():
    assert served_context({"max_model_len": "25.6k"}, "vllm") == 25600
    assert served_context({"max_model_len": -1}, "vllm") is None and served_context({}, "sglang") is None
    assert served_context({"context_length": None}, "sglang") is None
    # transformers 5 keeps theta under rope_parameters; ModelOpt writes it in rope_scaling too (type default)
    p = read({"rope_scaling": {"rope_type": "default", "rope_theta": 100000.0}})
    assert (p["rope_theta"], p["rope_theta_key"], p["rope_scaling"]) == (100000.0, "rope_scaling.rope_theta", None)
    p = read({"transformer_layer_config": {"max_position_embeddings": 4096, "rope_theta": 1e6}})   # speculators
    assert (p["max_position_embeddings"], p["max_positions_key"]) == (4096, "transformer_layer_config.max_position_embeddings")
    # SGLang multiplies a linear factor (no original_max_position_embeddings); vLLM too; llama3 neither
    lin = read({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert context(lin, "sglang")[0] == context(lin, "vllm")[0] == 8192
    assert context(read({"max_position_embeddings": 8192, "rope_scaling": LLAMA31_SCALING}), "vllm")[0] == 8192
    # two different thetas in one file: which one an engine reads depends on its transformers
    out = findings({"rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert [f["code"] for f in out if f["severity"] == "warning"] == ["draft-theta-ambiguous"]


def test_the_demo_draft_matches_its_target(smoke_demo):
    """The demo's target writes theta the transformers-5 way (rope_parameters), its drafts top level: no finding."""
    for name in ("draft-aligned", "draft-mismatched"):
        assert findings(smoke_demo / name, smoke_demo / "target") == []
        assert findings(smoke_demo / name, smoke_demo / "target", engine="sglang") == []


def test_inspect_on_a_draft_shows_its_positions(world, capsys):
    t, d = world
    draft(d, max_position_embeddings=131072, rope_theta=500000.0, rope_scaling=dict(MODELOPT_YARN))
    capsys.readouterr()
    assert main(["inspect", str(d), "--target", str(t), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["positions"]["max_position_embeddings"] == 131072
    assert [f["code"] for f in doc["positions"]["findings"]] == ["rope-scaling-mismatch"]
    assert main(["inspect", str(d), "--target", str(t)]) == 0
    out = capsys.readouterr().out
    assert "positions: max_position_embeddings 131072, rope_theta 500000" in out
    assert "WARNING [rope-scaling-mismatch]" in out
    draft(d, max_position_embeddings=2048, rope_theta=500000.0, rope_scaling=LLAMA31_SCALING)
    assert main(["inspect", str(d), "--target", str(t)]) == 0      # no server: a warning, not an error
    out = capsys.readouterr().out
    assert "WARNING [draft-positions-short]" in out and "the target's at 131072" in out
