"""Issue 16 phase 2: every consumer asks workbench/engines.py. The default wiring of a draft by its
format, --engine with --wiring, simulate(engine=), the lint's embedding and auto-flag checks, the
diagnosis's feasible recommendations, and the deprecated --sglang-rule alias."""

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file
from test_engines import H, V, _Target, write_speculators

from workbench import engines
from workbench.analysis import diagnose
from workbench.core.errors import WorkbenchError
from workbench.engines import candidates as engine_candidates
from workbench.engines import wiring
from workbench.engines.sglang_lint import lint_command
from workbench.model.checkpoint import load_draft
from workbench.model.draft import Eagle3Draft, new_draft_config

N = 32


def _stub_target(n=N, embed=None, head=None, arch="LlamaForCausalLM"):
    """What choose_wiring/apply_engine read of a Target: config, n_layers, embedding and lm_head."""
    embed = torch.randn(V, H) if embed is None else embed
    head = torch.randn(V, H) if head is None else head
    model = SimpleNamespace(get_output_embeddings=lambda: SimpleNamespace(weight=head))
    return SimpleNamespace(config={"num_hidden_layers": n, "architectures": [arch], "hidden_size": H},
                           n_layers=n, model=model, embed_weight=lambda: embed, hidden_size=H, vocab_size=V)


def _eagle3(layer_ids=(1, 15, 28), **extra):
    cfg = new_draft_config({"vocab_size": V, "hidden_size": H, "num_attention_heads": 4, "intermediate_size": 64},
                           layer_ids=list(layer_ids))
    cfg.update(extra)
    return Eagle3Draft.from_config(cfg, torch.randn(V, H))


# ───────────────────────────── the draft's own default wiring ─────────────────────────────

def test_a_speculators_draft_defaults_to_vllm_through_choose_wiring(tmp_path):
    """ids [2,16,29] in vLLM's convention on a 32-layer target: L1,L15,L28, not SpecForge's L2,L16,L29."""
    raw, sd = write_speculators(tmp_path / "spec")
    d = load_draft(tmp_path / "spec", _Target(sd["embed_tokens.weight"]))
    w, note = wiring.choose_wiring(_stub_target(), d)
    assert w.spec == "L1,L15,L28" and note.startswith("no --wiring/--engine: trained by vllm-project/speculators"), note
    # an EAGLE-3 checkpoint reads as SpecForge (layer outputs)
    w, note = wiring.choose_wiring(_stub_target(), _eagle3((2, 16, 29)))
    assert w.spec == "L2,L16,L29" and "specforge" in note


def test_engine_fixes_the_computation_and_wiring_overrides_only_the_taps():
    d = _eagle3(norm_output=True)
    assert d.variant["norm_output"] and d.rotary_offset == 0
    tgt = _stub_target()
    w, note = wiring.choose_wiring(tgt, d, wiring="L2,L3,L4", engine="sglang-2026.04")
    assert w.spec == "L2,L3,L4"                                   # the taps given
    assert d.rotary_offset == 1 and not d.variant["norm_output"]  # the engine's computation
    w, note = wiring.choose_wiring(tgt, d, engine="sglang")        # the engine's taps and computation
    assert w.spec == "L1,L15,L28" and d.rotary_offset == 0 and d.variant["norm_output"]
    assert d.lm_head_source == "checkpoint"                       # new_draft_config writes draft_vocab_size
    # a draft that ships its own embedding: SGLang swaps in the target's, vLLM keeps it
    d = _eagle3()
    own = torch.randn(V, H)
    d.set_embedding(own, source="checkpoint")
    wiring.choose_wiring(tgt, d, engine="vllm")
    assert torch.equal(d.embed_tokens.weight, own) and d.embed_source == "checkpoint"
    wiring.choose_wiring(tgt, d, engine="sglang")
    assert torch.equal(d.embed_tokens.weight, tgt.embed_weight()) and d.embed_source == "target"
    # an engine that cannot feed the draft as configured, without a wiring: one-line error
    with pytest.raises(WorkbenchError, match="engine sglang: cannot feed this draft"):
        wiring.choose_wiring(tgt, _eagle3((1, 15, 31)), engine="sglang")


def test_sglang_takes_the_targets_lm_head_without_draft_vocab_size():
    d = _eagle3()
    d.raw_config = {k: v for k, v in d.config.items() if k != "draft_vocab_size"}
    tgt = _stub_target()
    wiring.apply_engine(tgt, d, "sglang")
    assert d.lm_head_source == "target" and torch.equal(d.lm_head.weight, tgt.model.get_output_embeddings().weight)


def test_simulate_with_an_engine_evaluates_what_it_computes(smoke_demo):
    """sglang-2026.04 (rotary offset +1 at steps k>=1) against current sglang, and against set_variant by hand."""
    from workbench.load import inputs
    from workbench.simulate import acceptance

    d = smoke_demo
    tgt, drf, ds = inputs.load(d / "target", d / "draft-aligned", d / "val.jsonl", device="cpu", progress=False)
    spec = wiring.choose_wiring(tgt, drf)[0].spec
    kw = dict(K=3, limit=6, progress=False, acc_topk=0)
    old = acceptance.simulate(tgt, drf, ds, [spec], engine="sglang-2026.04", **kw)[spec]
    assert drf.rotary_offset == 1 and old.setting.engine == "sglang-2026.04"
    by_hand = acceptance.simulate(tgt, drf.set_variant(rotary_offset=1), ds, [spec], **kw)[spec]
    assert list(old.at_least) == list(by_hand.at_least)
    new = acceptance.simulate(tgt, drf, ds, [spec], engine="sglang", **kw)[spec]
    assert drf.rotary_offset == 0 and new.setting.engine == "sglang"
    assert old.at_least[1] == new.at_least[1]           # step 1 has no offset
    assert list(old.at_least) != list(new.at_least)      # later steps do
    res = acceptance.simulate(tgt, drf, ds, None, engine="vllm", **kw)   # the engine's own taps
    assert list(res) == [wiring.resolve("vllm", tgt.config, drf.raw_config).spec]


# ───────────────────────────── the lint ─────────────────────────────

CMD = ("python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 "
       "--speculative-draft-model-path {d} --speculative-num-steps 3 --speculative-eagle-topk 1 "
       "--speculative-num-draft-tokens 4")


def _dirs(tmp_path, *, embed: bool, arch="LlamaForCausalLM", draft_vocab=True):
    t, d = tmp_path / "t", tmp_path / "d"
    t.mkdir(parents=True), d.mkdir()
    (t / "config.json").write_text(json.dumps({"num_hidden_layers": N, "hidden_size": H, "architectures": [arch]}))
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": H, "vocab_size": V,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}
    if draft_vocab:
        cfg["draft_vocab_size"] = V
    (d / "config.json").write_text(json.dumps(cfg))
    sd = {"fc.weight": torch.zeros(H, 3 * H), "lm_head.weight": torch.zeros(V, H)}
    if embed:
        sd["embed_tokens.weight"] = torch.zeros(V, H)
    save_file(sd, str(d / "model.safetensors"))
    return t, d


def test_the_lint_says_when_sglang_replaces_a_shipped_embedding(tmp_path):
    t, d = _dirs(tmp_path, embed=True)
    res = lint_command(CMD.format(t=t, d=d))
    p = next(p for p in res.problems if p.code == "embed-replaced")
    assert p.severity == "warning" and "replaces the draft's own embed_tokens" in p.message
    assert "--engine sglang" in p.fix
    assert "embed-replaced" in [p.code for p in lint_command(CMD.format(t=t, d=d), engine="sglang-2026.04").problems]
    assert "embed-replaced" not in [p.code for p in lint_command(CMD.format(t=t, d=d), engine="vllm").problems]
    t2, d2 = _dirs(tmp_path / "no-embed", embed=False)
    assert "embed-replaced" not in [p.code for p in lint_command(CMD.format(t=t2, d=d2)).problems]


def test_the_lint_says_when_sglang_replaces_the_lm_head(tmp_path):
    t, d = _dirs(tmp_path, embed=False, draft_vocab=False)
    p = next(p for p in lint_command(CMD.format(t=t, d=d)).problems if p.code == "lm-head-replaced")
    assert "no draft_vocab_size" in p.message and "draft_vocab_size" in p.fix


@pytest.mark.parametrize("engine, arch, want", [("sglang", "LlamaForCausalLM", (5, 4, 8)),
                                                ("sglang", "Qwen3ForCausalLM", (3, 1, 4)),
                                                ("sglang-2026.04", "Qwen3ForCausalLM", (5, 4, 8))])
def test_the_lint_auto_flags_follow_the_record(tmp_path, engine, arch, want):
    t, d = _dirs(tmp_path, embed=False, arch=arch)
    res = lint_command(f"python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 "
                       f"--speculative-draft-model-path {d}", engine=engine)
    p = next(p for p in res.problems if p.code == "steps-unset")
    assert f"(steps, topk, draft tokens) = {want}" in p.message
    assert res.settings["speculative_num_steps"] == f"auto ({want[0]})"


# ───────────────────────────── the diagnosis ─────────────────────────────

def test_diagnose_recommendations_are_feasible_for_the_named_engine():
    # current vLLM feeds embed (id 0) and the last layer (id N); SGLang cannot feed embed
    assert engine_candidates.cannot_feed("vllm", ("embed", "L3", "L31"), N) is None
    assert engine_candidates.config_ids("vllm", ("embed", "L3", "L31"), N) == [0, 4, 32]
    assert "embedding" in engine_candidates.cannot_feed("sglang", ("embed", "L3", "L31"), N)
    assert engine_candidates.cannot_feed("vllm-legacy", ("embed", "L3", "L31"), N) is None   # 0.18-0.21 do (issue 55)
    assert "embedding" in engine_candidates.cannot_feed("vllm-0.17", ("embed", "L3", "L31"), N)
    assert engine_candidates.who_can_feed(("embed", "L3", "L31"), N) == [
        f"{who} can feed embed,L3,L31: set eagle_aux_hidden_state_layer_ids (top level) to [0, 4, 32]"
        for who in ("vLLM V1 (current)", "vLLM V2 runner (GPU default)", "vLLM 0.22 to 0.24", "vLLM before 0.22")]
    assert engine_candidates.where_ids_go("vllm").endswith("(top level)")
    assert engine_candidates.where_ids_go("sglang").startswith("eagle_config.")
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
           "workbench": {"trained_taps": ["embed", "L3", "L31"]}}
    by = {c.spec: c for c in engine_candidates.candidates(N, cfg, engine="vllm")}
    assert by["embed,L3,L31"].feasible and by["embed,L3,L31"].trained
    by = {c.spec: c for c in engine_candidates.candidates(N, cfg, engine="sglang")}
    assert not by["embed,L3,L31"].feasible and "embedding" in by["embed,L3,L31"].why_not
    assert set(by["L1,L15,L28"].engines) >= {"sglang", "sglang-2026.04", "specforge"}
    assert set(engine_candidates.SERVING) == {e.name for e in engines.RECORDS.values() if e.serving}


# ───────────────────────────── the CLI ─────────────────────────────

def test_every_command_accepts_every_engine_record(capsys):
    from workbench.cli import build_parser

    parser = build_parser()
    for name in engines.ENGINE_NAMES:
        for argv in (["accept", "--target", "t", "--draft", "d", "--data", "x"],
                     ["diagnose", "--target", "t", "--draft", "d", "--data", "x"],
                     ["rewire", "--target", "t", "--draft", "d", "--data", "x", "--eval-data", "y", "--out", "o"],
                     ["sglang", "lint", "cmd"], ["sglang", "compare", "--url", "u", "--target", "t", "--draft", "d",
                                                 "--data", "x"]):
            assert parser.parse_args(argv + ["--engine", name.upper()]).engine == name
    with pytest.raises(SystemExit):
        parser.parse_args(["accept", "--target", "t", "--draft", "d", "--data", "x", "--engine", "trtllm"])
    assert "sglang-2026.04" in capsys.readouterr().err


def test_the_old_sglang_rule_flag_maps_to_the_engine_records(capsys):
    from workbench.cli import build_parser, engine_of

    parser = build_parser()
    base = ["sglang", "lint", "cmd"]
    assert engine_of(parser.parse_args(base)) == "sglang"
    assert engine_of(parser.parse_args(base + ["--sglang-rule", "classic"])) == "sglang-2026.04"
    assert "deprecated: use --engine sglang-2026.04" in capsys.readouterr().err
    assert engine_of(parser.parse_args(base + ["--sglang-rule", "first-id-1"])) == "sglang"
    args = parser.parse_args(base + ["--engine", "vllm", "--sglang-rule", "classic"])
    assert engine_of(args) == "vllm" and "ignored" in capsys.readouterr().err
