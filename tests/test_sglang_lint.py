"""`workbench sglang lint`: SGLang speculative flags against the draft and target (facts sections 1, 3, 4)."""

import json

import pytest
import torch

from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.engines.sglang_lint import draft_weight_names, lint, lint_command, lint_server_info, parse_command

GOOD = ("python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path {d} --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4")


def codes(res, severity=None):
    return [p.code for p in res.problems if severity is None or p.severity == severity]


@pytest.fixture
def dirs(tmp_path):
    """A config-only target (N=32, H=64) and an EAGLE-3 draft with d2t, trained on L1,L15,L28."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    t, d = tmp_path / "target", tmp_path / "draft"
    t.mkdir(), d.mkdir()
    (t / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32,
                                               "hidden_size": 64, "vocab_size": 256}))
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "hidden_size": 64,
           "vocab_size": 256, "draft_vocab_size": 64,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": True}}
    (d / "config.json").write_text(json.dumps(cfg))
    save_file({"fc.weight": torch.randn(64, 192), "d2t": torch.zeros(64, dtype=torch.int64)},
              str(d / "model.safetensors"))
    return t, d


def write_cfg(d, **change):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(change)
    (d / "config.json").write_text(json.dumps(cfg))


def test_parse_command_forms():
    cmd = ("CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server \\\n  --model-path m \\\n"
           "  --speculative-algorithm=EAGLE3 --enable-metrics --speculative-num-steps 5  # comment")
    assert parse_command(cmd) == {"model_path": "m", "speculative_algorithm": "EAGLE3", "enable_metrics": True,
                                  "speculative_num_steps": 5}
    assert parse_command("sglang serve --model m --speculative-draft-model d") == {
        "model_path": "m", "speculative_draft_model_path": "d"}
    with pytest.raises(WorkbenchError, match="no 'sglang.launch_server'"):
        parse_command("vllm serve m")
    with pytest.raises(WorkbenchError, match="--speculative-num-steps expects an integer"):
        parse_command("python -m sglang.launch_server --speculative-num-steps three")


def test_clean_setup_has_no_errors(dirs):
    t, d = dirs
    res = lint_command(GOOD.format(t=t, d=d), trained_wiring="L1,L15,L28")
    assert res.ok, res.summary()
    assert res.wiring.spec == "L1,L15,L28" and res.settings["tokens_drafted_per_verify"] == 3
    assert main(["sglang", "lint", GOOD.format(t=t, d=d)]) == 0


def test_topk1_with_16_draft_tokens_drafts_one_token(dirs, capsys):
    t, d = dirs
    cmd = GOOD.format(t=t, d=d).replace("--speculative-num-steps 3", "--speculative-num-steps 1").replace(
        "--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 16")
    res = lint_command(cmd)
    assert res.settings["speculative_num_draft_tokens"] == 2
    assert res.settings["tokens_drafted_per_verify"] == 1
    p = next(p for p in res.problems if p.code == "topk1-draft-tokens")
    assert p.severity == "error" and "adjusted to speculative_num_steps + 1" in p.why
    assert "--speculative-num-steps 15" in p.fix
    assert main(["sglang", "lint", cmd, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "topk1-draft-tokens" in [x["code"] for x in out["problems"]]


def test_unset_steps(dirs):
    t, d = dirs
    base = f"python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 " \
           f"--speculative-draft-model-path {d}"
    res = lint_command(base)
    assert "steps-unset" in codes(res, "warning") and res.ok
    assert str(res.settings["speculative_num_steps"]).startswith("auto")
    res = lint_command(base + " --speculative-eagle-topk 1")
    assert "steps-unset" in codes(res, "error")


def test_eagle_algorithm_with_eagle3_draft(dirs):
    t, d = dirs
    res = lint_command(GOOD.format(t=t, d=d).replace("EAGLE3", "EAGLE"))
    assert "eagle-with-eagle3-draft" in codes(res, "error")
    # without the draft on disk, the name alone gives a warning
    res = lint_command("python -m sglang.launch_server --model-path x --speculative-algorithm EAGLE "
                       "--speculative-draft-model-path org/llama-eagle3 --speculative-num-steps 3 "
                       "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    assert "eagle-with-eagle3-draft" in codes(res, "warning")


def test_top_level_ids_are_ignored_by_sglang(dirs):
    t, d = dirs
    write_cfg(d, eagle_config=None, eagle_aux_hidden_state_layer_ids=[3, 15, 28])
    res = lint_command(GOOD.format(t=t, d=d), trained_wiring="L3,L15,L28")
    assert "top-level-ids" in codes(res, "error")
    assert res.wiring.spec == "L1,L15,L28"            # SGLang's silent default
    mismatch = next(p for p in res.problems if p.code == "wiring-mismatch")
    # current SGLang (PR #25454): ids not starting at 1 are capture points, so L3 is id 4
    assert '"eagle_aux_hidden_state_layer_ids": [4, 16, 29]' in mismatch.fix
    res = lint_command(GOOD.format(t=t, d=d), trained_wiring="L3,L15,L28", engine="sglang-2026.04")
    mismatch = next(p for p in res.problems if p.code == "wiring-mismatch")
    assert '"eagle_aux_hidden_state_layer_ids": [3, 15, 28]' in mismatch.fix        # +1 always


def test_the_suggested_ids_follow_the_chosen_sglang_version(dirs):
    # after PR #25454 ids not starting at 1 are before-layer indices: [2,15,28] would feed L1,L14,L27
    t, d = dirs
    write_cfg(d, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]})
    res = lint_command(GOOD.format(t=t, d=d), trained_wiring="L2,L15,L28", engine="sglang")
    fix = next(p for p in res.problems if p.code == "wiring-mismatch").fix
    assert '"eagle_aux_hidden_state_layer_ids": [3, 16, 29]' in fix and "feeds L2,L15,L28" in fix
    res = lint_command(GOOD.format(t=t, d=d), trained_wiring="L0,L15,L28", engine="sglang")
    assert "cannot feed L0,L15,L28" in next(p for p in res.problems if p.code == "wiring-mismatch").fix


def test_ids_past_the_last_layer(dirs):
    t, d = dirs
    write_cfg(d, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 31]})
    res = lint_command(GOOD.format(t=t, d=d))
    p = next(p for p in res.problems if p.code == "wiring-infeasible")
    assert p.severity == "error" and "capture point 32 is outside 1..31" in p.message


def test_wiring_versus_trained(dirs):
    t, d = dirs
    res = lint_command(GOOD.format(t=t, d=d), trained_wiring="hf:0,4,32")   # embed,L3,final
    p = next(p for p in res.problems if p.code == "wiring-mismatch")
    assert "SGLang feeds L1,L15,L28" in p.message and "cannot feed" in p.fix
    write_cfg(d, workbench={"trained_taps": ["L1", "L15", "L28"]})        # our trainer's hint
    res = lint_command(GOOD.format(t=t, d=d))
    assert res.trained.spec == "L1,L15,L28" and res.ok


def test_draft_vocab_without_d2t(dirs):
    from safetensors.torch import save_file

    t, d = dirs
    assert "d2t" in draft_weight_names(d)
    save_file({"fc.weight": torch.zeros(64, 192)}, str(d / "model.safetensors"))
    res = lint_command(GOOD.format(t=t, d=d))
    assert "no-d2t" in codes(res, "error")
    write_cfg(d, draft_vocab_size=256)                # full vocab: no mapping needed
    assert "no-d2t" not in codes(lint_command(GOOD.format(t=t, d=d)))


def test_d2t_in_a_bin_checkpoint(dirs):
    t, d = dirs
    (d / "model.safetensors").unlink()
    torch.save({"d2t": torch.zeros(64, dtype=torch.int64)}, d / "pytorch_model.bin")
    assert draft_weight_names(d) == ["d2t"]
    (d / "pytorch_model.bin").write_bytes(b"not a pickle")
    with pytest.raises(WorkbenchError, match="weights_only=True"):
        draft_weight_names(d)


def test_token_map_is_ignored_for_eagle3(dirs):
    t, d = dirs
    res = lint_command(GOOD.format(t=t, d=d) + " --speculative-token-map hot.pt")
    p = next(p for p in res.problems if p.code == "token-map-ignored")
    assert p.severity == "warning" and "Ignoring the specified token map" in p.why


def test_no_speculation_and_target_hidden_mismatch(dirs):
    t, d = dirs
    assert "no-speculation" in codes(lint_command(f"python -m sglang.launch_server --model-path {t}"), "error")
    write_cfg(d, target_hidden_size=128)
    assert "target-hidden-size" in codes(lint_command(GOOD.format(t=t, d=d)), "error")


def test_server_info(dirs, tmp_path, capsys):
    t, d = dirs
    info = {"model_path": str(t), "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": str(d),
            "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2,
            "internal_states": [{"avg_spec_accept_length": 1.01}]}
    res = lint_server_info(info)
    assert res.source == "server info" and res.settings["avg_spec_accept_length"] == 1.01
    assert "accept-length-one" in codes(res, "error") and "one-step" in codes(res, "warning")
    f = tmp_path / "info.json"
    f.write_text(json.dumps(info))
    assert main(["sglang", "lint", str(f), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["source"] == "server info"
    f.write_text("{\n  bad")
    assert main(["sglang", "lint", str(f)]) == 2
    assert "line 2: invalid JSON" in capsys.readouterr().err


def test_lint_rejects_bad_draft_config(dirs):
    t, d = dirs
    (d / "config.json").write_text("{oops")
    with pytest.raises(WorkbenchError, match="draft config: .*config.json line 1"):
        lint(parse_command(GOOD.format(t=t, d=d)))


def test_speculative_adaptive_is_resolved_as_sglang_resolves_it(tmp_path):
    """--speculative-adaptive (SGLang's _init_adaptive_speculative_params): a chain from the middle of the candidate
    steps (checked against SGLang 0.5.23's and 0.5.14's own hook by tests/test_commands.py where their venvs exist)."""
    from workbench.engines import sglang_lint as sl

    def run(flags):
        r = sl.lint(sl.parse_command("sglang serve --model-path T --speculative-algorithm EAGLE3 "
                                     "--speculative-draft-model-path D --speculative-adaptive " + flags),
                    target={"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32})
        shape = tuple(r.settings[k] for k in ("speculative_num_steps", "speculative_eagle_topk",
                                              "speculative_num_draft_tokens"))
        return shape, {p.code: p.severity for p in r.problems}

    shape, codes = run("")
    assert shape == (3, 1, 4) and codes["adaptive"] == "info" and "steps-unset" not in codes   # not Llama's (5, 4, 8)
    shape, codes = run("--speculative-num-steps 4 --speculative-eagle-topk 1")
    assert codes["adaptive-steps"] == "error"                                        # SGLang refuses to start
    shape, codes = run("--speculative-num-steps 3 --speculative-eagle-topk 2 --speculative-num-draft-tokens 6")
    assert shape == (3, 2, 6) and codes["adaptive-off"] == "warning" and "adaptive" not in codes
    cfg = tmp_path / "adaptive.json"
    cfg.write_text('{"1": {"candidate_steps": [2, 4]}, "16": {"candidate_steps": [1, 2]}}')
    shape, codes = run(f"--speculative-adaptive-config {cfg}")
    assert shape == (2, 1, 3) and "adaptive-steps" not in codes                       # the middle of [1, 2, 4]
    shape, codes = run("--speculative-adaptive-config /nowhere.json --speculative-num-steps 5 --speculative-eagle-topk 1")
    assert shape == (5, 1, 6) and "adaptive-steps" not in codes                       # the default's candidates
