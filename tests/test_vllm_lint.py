"""`workbench vllm lint`: vLLM 0.32's --speculative-config against the draft and target (no torch, no vllm)."""

import doctest
import json
import struct

import pytest

from workbench import engines
from workbench.engines import vllm_lint
from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.engines.vllm_lint import lint_command, parse_command, read_source

N = 32


def codes(res, severity=None):
    return [p.code for p in res.problems if severity is None or p.severity == severity]


def problem(res, code):
    return next(p for p in res.problems if p.code == code)


def write_safetensors(path, names):
    """A header-only safetensors file (zero-length tensors): enough for the lint, which reads names only."""
    header = json.dumps({n: {"dtype": "I64", "shape": [0], "data_offsets": [0, 0]} for n in names}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def write_json(path, data):
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(data))


@pytest.fixture
def dirs(tmp_path):
    """A config-only target (N=32, H=64, 1 head of 64) and an EAGLE-3 draft (reduced vocab, d2t) whose config
    says it was trained on embed,L3,L31 and carries the vLLM ids for them."""
    t, d = tmp_path / "target", tmp_path / "draft"
    write_json(t, {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": N, "hidden_size": 64,
                   "num_attention_heads": 1, "vocab_size": 256})
    write_json(d, {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "hidden_size": 64,
                   "num_attention_heads": 1, "vocab_size": 256, "draft_vocab_size": 64,
                   "eagle_aux_hidden_state_layer_ids": [0, 4, 32], "norm_before_residual": False,
                   "workbench": {"trained_taps": ["embed", "L3", "L31"], "ttt_steps": 4}})
    write_safetensors(d / "model.safetensors", ["fc.weight", "d2t", "t2d", "midlayer.hidden_norm.weight"])
    return t, d


def cfg(d, **change):
    c = json.loads((d / "config.json").read_text())
    for k, v in change.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    (d / "config.json").write_text(json.dumps(c))


def cmd(t, d, k=4, **extra):
    spec = {"method": "eagle3", "model": str(d), "num_speculative_tokens": k, **extra}
    return f"vllm serve {t} --speculative-config '{json.dumps(spec)}'"


def test_clean_setup_has_no_findings_but_info(dirs):
    t, d = dirs
    res = lint_command(cmd(t, d))
    assert res.ok and codes(res, "warning") == [], res.summary()
    assert res.wiring.spec == "embed,L3,L31" and res.trained.spec == "embed,L3,L31"
    assert res.settings["num_speculative_tokens"] == 4 and res.settings["device (head-size rule)"].startswith("cpu")


def test_parse_command_forms():
    a = parse_command("CUDA_VISIBLE_DEVICES=0 python -m vllm.entrypoints.openai.api_server --model m \\\n"
                      "  --speculative-config.method eagle3 --speculative-config.num_speculative_tokens 3 "
                      "--enforce-eager --port 8000")
    assert a["model"] == "m" and a["speculative_config"] == {"method": "eagle3", "num_speculative_tokens": 3}
    assert a["enforce_eager"] is True and a["_env"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert parse_command("vllm serve m --spec-method eagle3 --spec-model d --spec-tokens 2")["spec_tokens"] == 2
    with pytest.raises(WorkbenchError, match="no 'vllm serve'"):
        parse_command("python -m sglang.launch_server --model-path m")
    with pytest.raises(WorkbenchError, match="invalid JSON"):
        parse_command("vllm serve m --speculative-config '{method: eagle3}'")
    assert read_source('{"method": "eagle3", "num-speculative-tokens": 3}')[0]["speculative_config"] == {
        "method": "eagle3", "num_speculative_tokens": 3}


def test_bare_json_string_and_file(dirs, tmp_path):
    t, d = dirs
    spec = {"method": "eagle3", "model": str(d), "num_speculative_tokens": 4}
    res = lint_command(json.dumps(spec), target=t)
    assert res.source == "speculative config" and res.ok, res.summary()
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(spec))
    assert lint_command(str(f), target=t).wiring.spec == "embed,L3,L31"


def test_top_level_ids_beat_nested_and_both_readings_are_named(dirs):
    t, d = dirs
    cfg(d, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    res = lint_command(cmd(t, d))
    assert res.wiring.spec == "embed,L3,L31"                       # vLLM: top-level key first
    p = problem(res, "ids-disagree")
    assert p.severity == "warning" and "vLLM feeds embed,L3,L31" in p.message
    assert "SGLang feeds L1,L15,L28" in p.message
    # both keys naming the same taps in their own engine's convention (what rewire writes): no warning
    taps = ["L2", "L3", "L30"]
    cfg(d, eagle_config={"eagle_aux_hidden_state_layer_ids": engines.ids_for_taps("sglang", taps, N).ids},
        eagle_aux_hidden_state_layer_ids=engines.ids_for_taps("vllm", taps, N).ids, workbench={"trained_taps": taps})
    res = lint_command(cmd(t, d))
    assert "ids-disagree" not in codes(res) and res.ok, res.summary()


def test_nested_ids_beat_dflash_ids_as_in_the_0_32_source():
    """gpu_model_runner assigns dflash ids first, then a non-empty eagle_config dict overwrites them."""
    both = {"dflash_config": {"target_layer_ids": [1, 15, 28]},
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}
    assert engines.wiring_for("vllm", both, N).spec == "L0,L2,L4"


def test_gpu_runs_the_v2_runner_which_ignores_nested_ids(dirs):
    """0.32 picks the V2 model runner when Triton is there (GPUs); it reads no eagle_config ids."""
    t, d = dirs
    cfg(d, eagle_aux_hidden_state_layer_ids=None, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 4, 32]})
    assert lint_command(cmd(t, d)).ok                                     # CPU: V1 reads the nested ids
    res = lint_command(cmd(t, d), device="gpu")
    assert res.settings["model runner"].startswith("V2") and res.wiring.spec == "L1,L15,L28"
    assert "nested-ids-ignored" in codes(res, "warning") and "wiring-mismatch" in codes(res, "error")
    assert "[0, 4, 32]" in problem(res, "wiring-mismatch").fix
    res = lint_command("VLLM_USE_V2_MODEL_RUNNER=0 " + cmd(t, d), device="gpu")
    assert res.settings["model runner"].startswith("V1") and res.ok


def test_default_taken_silently_warns(dirs):
    t, d = dirs
    cfg(d, eagle_aux_hidden_state_layer_ids=None, workbench=None)
    res = lint_command(cmd(t, d))
    p = problem(res, "default-ids")
    assert p.severity == "warning" and "[2, 16, 29]" in p.message and "L1,L15,L28" in p.message
    assert "trained-unknown" in codes(res, "info")


def test_wiring_mismatch_is_an_error_with_the_key_to_write(dirs):
    t, d = dirs
    res = lint_command(cmd(t, d), trained_wiring="L1,L15,L28")
    p = problem(res, "wiring-mismatch")
    assert p.severity == "error" and 'top-level "eagle_aux_hidden_state_layer_ids": [2, 16, 29]' in p.fix
    assert not res.ok


def test_specforge_nested_ids_are_off_by_one_on_vllm(dirs):
    """A SpecForge checkpoint (nested ids = layer outputs) without a trained-taps hint: vLLM reads the
    nested ids as its own convention, one layer lower."""
    t, d = dirs
    cfg(d, eagle_aux_hidden_state_layer_ids=None, workbench=None,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    res = lint_command(cmd(t, d))
    p = problem(res, "wiring-mismatch")
    assert "vLLM feeds L0,L14,L27" in p.message and "L1,L15,L28 (assumed" in p.message and "[2, 16, 29]" in p.fix


def test_full_vocab_with_d2t_is_refused(dirs):
    t, d = dirs
    cfg(d, draft_vocab_size=256)
    p = problem(lint_command(cmd(t, d)), "d2t-full-vocab")
    assert p.severity == "error" and "draft_id_to_target_id" in p.why


def test_reduced_vocab_without_d2t(dirs):
    t, d = dirs
    write_safetensors(d / "model.safetensors", ["fc.weight"])
    assert problem(lint_command(cmd(t, d)), "no-d2t").severity == "error"
    cfg(d, draft_vocab_size=256)                                  # full vocab, no d2t: fine
    assert "no-d2t" not in codes(lint_command(cmd(t, d)))


def test_cpu_head_dim_12_and_the_device_rule(dirs):
    t, d = dirs
    cfg(t, hidden_size=48, num_attention_heads=4)                 # head_dim 12
    cfg(d, target_hidden_size=48)
    res = lint_command(cmd(t, d))
    p = problem(res, "cpu-head-size")
    assert p.severity == "error" and "head_dim 12" in p.message and "target" in p.message
    assert "cpu-head-size" not in codes(lint_command(cmd(t, d), device="gpu"))
    assert "cpu-head-size" not in codes(lint_command("CUDA_VISIBLE_DEVICES=0 " + cmd(t, d)))
    assert "cpu-head-size" in codes(lint_command("VLLM_CPU_KVCACHE_SPACE=1 " + cmd(t, d)))
    cfg(d, head_dim=12)                                           # the draft's head size counts too
    assert sum(c == "cpu-head-size" for c in codes(lint_command(cmd(t, d)))) == 2


def test_tree_option_is_an_error(dirs):
    t, d = dirs
    res = lint_command(cmd(t, d, speculative_token_tree="[(0,), (1,)]"))
    p = problem(res, "tree-removed")
    assert p.severity == "error" and "#42121" in p.why
    assert "tree-removed" in codes(lint_command(cmd(t, d, attention_backend="TREE_ATTN")))


def test_unknown_key_names_the_closest(dirs):
    t, d = dirs
    p = problem(lint_command(cmd(t, d, draft_sampling_method="greedy")), "unknown-key")
    assert '"draft_sample_method"' in p.message and 'extra="forbid"' in p.why


def test_sample_methods(dirs):
    t, d = dirs
    p = problem(lint_command(cmd(t, d, draft_sample_method="random")), "bad-draft-sample-method")
    assert p.severity == "error"
    assert "probabilistic-drafts" in codes(lint_command(cmd(t, d, draft_sample_method="probabilistic")))
    assert "bad-rejection-sample-method" in codes(lint_command(cmd(t, d, rejection_sample_method="strict")))
    res = lint_command(cmd(t, d, rejection_sample_method="synthetic"))
    assert {"synthetic-acceptance", "synthetic-rates"} <= set(codes(res))
    assert "block-verification" in codes(lint_command(cmd(t, d, rejection_sample_method="block")))


def test_parallel_drafting_needs_a_mask_token_and_mask_hidden(dirs):
    t, d = dirs
    res = lint_command(cmd(t, d, parallel_drafting=True))
    assert {"no-mask-token", "no-mask-hidden"} <= set(codes(res, "error"))
    cfg(d, pard_token=0)
    write_safetensors(d / "model.safetensors", ["fc.weight", "d2t", "t2d", "mask_hidden"])
    assert lint_command(cmd(t, d, parallel_drafting=True)).ok


def test_method_rules(dirs):
    t, d = dirs
    assert "method-not-eagle3" in codes(lint_command(cmd(t, d, method="eagle")), "error")
    assert "unknown-method" in codes(lint_command(cmd(t, d, method="eagle-3")), "error")
    spec = {"model": str(d), "num_speculative_tokens": 4}            # no method; path without "eagle3"
    p = problem(lint_command(json.dumps(spec), target=t), "method-inferred")
    assert p.severity == "error" and "'draft_model'" in p.message
    res = lint_command(f"vllm serve {t}")
    assert codes(res, "error") == ["no-speculation"]


def test_depth_against_training(dirs):
    t, d = dirs
    p = problem(lint_command(cmd(t, d, k=6)), "beyond-trained-depth")
    assert p.severity == "warning" and "workbench.ttt_steps" in p.message
    cfg(d, workbench={"trained_taps": ["embed", "L3", "L31"]})
    assert "depth-unknown" in codes(lint_command(cmd(t, d)), "info")
    res = lint_command(cmd(t, d).replace(', "num_speculative_tokens": 4', ""))
    assert "no-num-speculative-tokens" in codes(res, "error")


def test_norm_options(dirs):
    t, d = dirs
    cfg(d, norm_before_residual=None)                              # SpecForge format: vLLM False = trainer's
    assert "norm-before-residual-default" not in codes(lint_command(cmd(t, d)))
    cfg(d, speculators_model_type="eagle3")                        # speculators: vLLM True, trainer False
    p = problem(lint_command(cmd(t, d)), "norm-before-residual-default")
    assert "vLLM computes with True" in p.message and '"norm_before_residual": false' in p.fix
    write_safetensors(d / "model.safetensors", ["fc.weight", "d2t", "input_norm.weight"])
    assert problem(lint_command(cmd(t, d)), "norm-before-fc-ignored").severity == "error"
    cfg(d, norm_before_fc=True)
    assert "norm-before-fc-ignored" not in codes(lint_command(cmd(t, d)))


def test_cli_exit_codes_and_json(dirs, capsys):
    t, d = dirs
    assert main(["vllm", "lint", cmd(t, d)]) == 0
    assert "0 error(s)" in capsys.readouterr().out
    assert main(["vllm", "lint", cmd(t, d, speculative_token_tree="[]"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and any(p["code"] == "tree-removed" for p in out["problems"])
    assert main(["vllm", "lint", "vllm serve m --speculative-config '{bad'"]) == 2
    assert "invalid JSON" in capsys.readouterr().err
    assert main(["vllm"]) == 2


def test_docstring_examples_run():
    res = doctest.testmod(vllm_lint)
    assert res.attempted > 0 and res.failed == 0


def test_a_speculators_checkpoint_as_model(dirs, tmp_path):
    """`vllm serve SPECULATORS_DIR`: the verifier is the target, speculative_tokens the depth, and vLLM's
    conversion computes with norm_before_residual True (speculators trained with False by default)."""
    t, _ = dirs
    s = tmp_path / "spec"
    write_json(s, {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"],
                   "transformer_layer_config": {"hidden_size": 64, "num_attention_heads": 1, "vocab_size": 256},
                   "draft_vocab_size": 64, "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
                   "speculators_config": {"algorithm": "eagle3", "verifier": {"name_or_path": str(t)},
                                          "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}]}})
    write_safetensors(s / "model.safetensors", ["fc.weight", "d2t", "t2d"])
    res = lint_command(f"vllm serve {s}")
    assert res.settings["model"] == str(t) and res.settings["num_speculative_tokens"] == 3
    assert res.wiring.spec == "L1,L15,L28" and "speculators-model" in codes(res, "info")
    assert "norm-before-residual-default" in codes(res, "warning") and res.ok, res.summary()
