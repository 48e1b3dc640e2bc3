"""workbench.model.draft: the EAGLE-3 forward (facts section 2), parallel chains == sequential chains,
checkpoint load/save in the engines' format, and one-line errors for bad checkpoints."""

from __future__ import annotations

import json
import pickle
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from workbench.cli import main as cli_main
from workbench.model.checkpoint import load_draft, save_draft
from workbench.model.draft import ChainOutput, Eagle3Draft, chain_reference, describe_draft, new_draft_config, run_chains
from workbench.core.errors import WorkbenchError

V, H = 60, 32


def make_draft(seed=0, *, target_hidden=H, draft_vocab=None, kv=4, **extra):
    torch.manual_seed(seed)
    tcfg = {"vocab_size": V, "hidden_size": target_hidden, "num_attention_heads": 4,
            "num_key_value_heads": kv, "intermediate_size": 64}
    cfg = new_draft_config(tcfg, hidden_size=H, draft_vocab_size=draft_vocab, layer_ids=[1, 3, 4],
                           num_key_value_heads=kv)
    cfg.update(extra)
    embed = torch.randn(V, H)
    d = Eagle3Draft.from_config(cfg, embed)
    with torch.no_grad():                  # non-trivial norms so a swapped norm would show
        for n, p in d.named_parameters():
            if n.endswith("norm.weight") or ".fc_norm." in n or n.startswith("fc_norm"):
                p.copy_(1 + 0.5 * torch.randn_like(p))
    if draft_vocab and draft_vocab < V:
        used = torch.randperm(V)[:draft_vocab].sort().values
        d.set_vocab_map(used - torch.arange(draft_vocab))
    return d


VARIANTS = {
    "plain": {},
    "gqa-reduced-vocab-wide-target": dict(kv=2, draft_vocab=40, target_hidden=48),
    "fc_norm-norm_output-bias-llama3": dict(
        fc_norm=True, norm_output=True, bias=True, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
}


def batch(draft, B=3, T=8, lengths=(8, 5, 3), seed=1):
    torch.manual_seed(seed)
    feats = torch.randn(B, T, 3 * draft.target_hidden_size)
    ids = torch.randint(0, V, (B, T))
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        ids[b, n:] = 0
        feats[b, n:] = 0
    return feats, ids, mask


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_parallel_chains_equal_sequential_reference_for_every_start(variant):
    d = make_draft(**VARIANTS[variant])
    feats, ids, mask = batch(d)
    K = 8
    out = run_chains(d, feats, ids, mask, K, return_logits=True)
    assert out.tokens.shape == (3, 8, K) and out.logits.shape == (3, 8, K, d.draft_vocab_size)
    checked = 0
    for b, n in enumerate(mask.sum(1).tolist()):
        for t in range(n - 1):
            toks, logits = chain_reference(d, feats[b, :n], ids[b, :n], t, K, return_logits=True)
            assert torch.equal(out.tokens[b, t], toks), (variant, b, t)
            torch.testing.assert_close(out.logits[b, t], logits, rtol=1e-4, atol=1e-4)
            checked += 1
    assert checked == 7 + 4 + 2
    # the chains are real chains: later steps differ from step 0 somewhere
    assert (out.tokens[:, :, 1:] != out.tokens[:, :, :1]).any()


def test_tokens_are_target_ids_through_d2t_offsets():
    d = make_draft(draft_vocab=40)
    feats, ids, mask = batch(d)
    out = run_chains(d, feats, ids, mask, 3, return_logits=True)
    draft_ids = out.logits.argmax(-1)
    assert torch.equal(out.tokens, draft_ids + d.d2t[draft_ids])
    assert bool(d.t2d[out.tokens].all())          # every drafted token is one the draft vocab covers


def test_step0_matches_the_facts_formula_with_transformers_rope():
    """Step 0 at every position, computed straight from the facts page with transformers' rotary code."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    d = make_draft(**VARIANTS["fc_norm-norm_output-bias-llama3"])
    feats, ids, mask = batch(d, B=1, T=7, lengths=(7,))
    m, a = d.midlayer, d.midlayer.self_attn

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    f = torch.cat([rms(c, n.weight) for n, c in zip(d.fc_norm, feats.chunk(3, -1))], -1)
    h = f @ d.fc.weight.T + d.fc.bias
    emb = d.embed_tokens.weight[torch.cat([ids[:, 1:], torch.zeros(1, 1, dtype=torch.long)], 1)]
    x = torch.cat([rms(emb, m.input_layernorm.weight), rms(h, m.hidden_norm.weight)], -1)   # embeds first
    T, nh, hd = 7, 4, H // 4
    q = (x @ a.q_proj.weight.T).view(1, T, nh, hd).transpose(1, 2)
    k = (x @ a.k_proj.weight.T).view(1, T, nh, hd).transpose(1, 2)
    v = (x @ a.v_proj.weight.T).view(1, T, nh, hd).transpose(1, 2)
    lc = LlamaConfig(hidden_size=H, num_attention_heads=4, rope_theta=500000.0, max_position_embeddings=64,
                     rope_scaling=dict(d.config["rope_scaling"]))
    cos, sin = LlamaRotaryEmbedding(lc)(v, torch.arange(T)[None])
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    att = torch.softmax((q @ k.transpose(-1, -2)) / hd ** 0.5 + torch.full((T, T), float("-inf")).triu(1), -1)
    h = h + (att @ v).transpose(1, 2).reshape(1, T, H) @ a.o_proj.weight.T
    mm = d.midlayer.mlp
    hn = rms(h, m.post_attention_layernorm.weight)
    h = h + (torch.nn.functional.silu(hn @ mm.gate_proj.weight.T) * (hn @ mm.up_proj.weight.T)) @ mm.down_proj.weight.T
    logits = rms(h, d.norm.weight) @ d.lm_head.weight.T
    out = run_chains(d, feats, ids, mask, 1, return_logits=True)
    torch.testing.assert_close(out.logits[0, :, 0], logits[0], rtol=1e-4, atol=1e-4)


def test_topk_is_sorted_and_its_first_entry_is_the_greedy_token():
    d = make_draft(draft_vocab=40)
    feats, ids, mask = batch(d)
    out = run_chains(d, feats, ids, mask, 4, acc_topk=5)
    assert isinstance(out, ChainOutput) and out.topk_ids.shape == (3, 8, 4, 5)
    assert torch.equal(out.topk_ids[..., 0], out.tokens)
    lp = out.topk_logprobs
    assert bool((lp <= 0).all()) and bool((lp[..., :-1] >= lp[..., 1:]).all())
    assert bool(d.t2d[out.topk_ids].all())


def fake_target(d, embed=None, head=None):
    embed = d.embed_tokens.weight.detach().clone() if embed is None else embed
    model = SimpleNamespace(get_output_embeddings=lambda: SimpleNamespace(weight=head))
    return SimpleNamespace(embed_weight=lambda: embed, hidden_size=d.target_hidden_size, vocab_size=d.vocab_size,
                           device="cpu", dtype=torch.float32, model=model)


def test_save_load_round_trip_in_the_engines_format(tmp_path):
    d = make_draft(**VARIANTS["gqa-reduced-vocab-wide-target"])
    save_draft(d, tmp_path / "dr", extra_config={"workbench": {"trained_taps": ["L1", "L3", "L4"]}})
    cfg = json.loads((tmp_path / "dr" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == 1 and cfg["draft_vocab_size"] == 40 and cfg["target_hidden_size"] == 48
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    sd = load_file(str(tmp_path / "dr" / "model.safetensors"))
    assert not any("embed" in k for k in sd)
    assert sd["d2t"].dtype == torch.int64 and sd["t2d"].dtype == torch.bool
    assert sd["fc.weight"].shape == (H, 3 * 48) and sd["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * H
    d2 = load_draft(tmp_path / "dr", fake_target(d))
    assert d2.embed_source == "target" and d2.eagle_layer_ids == [1, 3, 4]
    feats, ids, mask = batch(d)
    assert torch.equal(run_chains(d, feats, ids, mask, 5).tokens, run_chains(d2, feats, ids, mask, 5).tokens)
    info = describe_draft(d2)
    assert info["draft_vocab_size"] == 40 and info["vocab_mapped"] and info["t2d_coverage"] == 40
    assert info["features"]["target_hidden_size_differs"] and info["kv_heads"] == 2


def test_a_full_vocab_draft_is_saved_without_d2t_and_loads(tmp_path):
    """vLLM refuses d2t/t2d on a full-vocab draft (no draft_id_to_target_id parameter): none are written."""
    d = make_draft()
    assert d.draft_vocab_size == d.vocab_size
    save_draft(d, tmp_path / "full")
    sd = load_file(str(tmp_path / "full" / "model.safetensors"))
    assert "d2t" not in sd and "t2d" not in sd
    d2 = load_draft(tmp_path / "full", fake_target(d))
    assert not d2.d2t.any() and bool(d2.t2d.all())
    feats, ids, mask = batch(d)
    assert torch.equal(run_chains(d, feats, ids, mask, 3).tokens, run_chains(d2, feats, ids, mask, 3).tokens)


def test_bin_sharded_and_speculators_checkpoints_load_to_the_same_model(tmp_path):
    d = make_draft(draft_vocab=40)
    save_draft(d, tmp_path / "st")
    sd = load_file(str(tmp_path / "st" / "model.safetensors"))
    cfg = json.loads((tmp_path / "st" / "config.json").read_text())
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text(json.dumps(cfg))
    torch.save(sd, tmp_path / "bin" / "pytorch_model.bin")
    (tmp_path / "shard").mkdir()
    (tmp_path / "shard" / "config.json").write_text(json.dumps(cfg))
    keys = sorted(sd)
    save_file({k: sd[k] for k in keys[:5]}, str(tmp_path / "shard" / "a.safetensors"))
    save_file({k: sd[k] for k in keys[5:]}, str(tmp_path / "shard" / "b.safetensors"))
    (tmp_path / "shard" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: "a.safetensors" if i < 5 else "b.safetensors" for i, k in enumerate(keys)}}))
    (tmp_path / "spec").mkdir()
    layer = {k: v for k, v in cfg.items() if k not in ("draft_vocab_size", "eagle_config", "architectures")}
    (tmp_path / "spec" / "config.json").write_text(json.dumps({
        "speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"], "draft_vocab_size": 40,
        "transformer_layer_config": layer, "eagle_aux_hidden_state_layer_ids": [1, 3, 4],
        "norm_before_residual": False}))      # speculators always writes it; missing means True to vLLM
    spec_sd = {k.replace("midlayer.", "layers.0."): v for k, v in sd.items()}
    spec_sd["embed_tokens.weight"] = d.embed_tokens.weight.detach().clone()
    save_file(spec_sd, str(tmp_path / "spec" / "model.safetensors"))
    feats, ids, mask = batch(d)
    want = run_chains(d, feats, ids, mask, 4).tokens
    for name in ("bin", "shard", "spec"):
        d2 = load_draft(tmp_path / name, fake_target(d))
        assert torch.equal(run_chains(d2, feats, ids, mask, 4).tokens, want), name
    assert d2.source_format == "speculators" and d2.embed_source == "checkpoint" and d2.eagle_layer_ids == [1, 3, 4]


def test_without_target_the_draft_describes_but_refuses_to_run(tmp_path):
    d = make_draft()
    save_draft(d, tmp_path / "dr")
    d2 = load_draft(tmp_path / "dr")
    assert describe_draft(d2)["embed_source"] == "missing"
    feats, ids, mask = batch(d)
    with pytest.raises(WorkbenchError, match="no embed_tokens.*load_draft\\(path, target\\)"):
        run_chains(d2, feats, ids, mask, 2)


# ------------------------------------------------------------------------------------ bad input

@pytest.fixture()
def saved(tmp_path):
    d = make_draft(draft_vocab=40)
    save_draft(d, tmp_path / "dr")
    return d, tmp_path / "dr"


def _rewrite(folder, *, cfg=None, sd=None):
    if cfg is not None:
        (folder / "config.json").write_text(json.dumps(cfg))
    if sd is not None:
        save_file(sd, str(folder / "model.safetensors"))


def _one_line_error(fn, match):
    with pytest.raises(WorkbenchError, match=match) as e:
        fn()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_directory_without_config(tmp_path):
    (tmp_path / "x").mkdir()
    _one_line_error(lambda: load_draft(tmp_path / "x"), "no config.json")


def test_config_of_another_architecture_says_which(saved):
    d, folder = saved
    cfg = json.loads((folder / "config.json").read_text())
    _rewrite(folder, cfg=dict(cfg, architectures=["LlamaForCausalLM"]))
    _one_line_error(lambda: load_draft(folder), r"\['LlamaForCausalLM'\].*plain model.*LlamaForCausalLMEagle3")
    _rewrite(folder, cfg=dict(cfg, architectures=["LlamaForCausalLMEagle"]))
    _one_line_error(lambda: load_draft(folder), "EAGLE-1/2")


def test_invalid_json_names_the_line(saved):
    _, folder = saved
    (folder / "config.json").write_text('{\n  "vocab_size": 60,\n  oops\n}')
    _one_line_error(lambda: load_draft(folder), r"config.json:3: invalid JSON")


def test_fc_width_not_three_times_target_hidden(saved):
    d, folder = saved
    sd = load_file(str(folder / "model.safetensors"))
    sd["fc.weight"] = torch.zeros(H, 2 * H)
    _rewrite(folder, sd=sd)
    _one_line_error(lambda: load_draft(folder), r"fc.weight has input width 64, expected 3 x target hidden size")


def test_d2t_wrong_length_and_outside_the_target_vocab(saved):
    d, folder = saved
    sd = load_file(str(folder / "model.safetensors"))
    _rewrite(folder, sd=dict(sd, d2t=torch.zeros(39, dtype=torch.long)))
    _one_line_error(lambda: load_draft(folder), r"d2t has shape \[39\], expected \[draft_vocab_size\] = \[40\]")
    bad = sd["d2t"].clone()
    bad[-1] = V   # draft id 39 -> 39 + 60, outside [0, 60)
    _rewrite(folder, sd=dict(sd, d2t=bad))
    _one_line_error(lambda: load_draft(folder), r"d2t maps draft id 39 to target id 99, outside the target vocab")


def test_unknown_and_missing_keys_are_listed(saved):
    d, folder = saved
    sd = load_file(str(folder / "model.safetensors"))
    sd.pop("midlayer.hidden_norm.weight")
    sd["midlayer.extra.weight"] = torch.zeros(2)
    _rewrite(folder, sd=sd)
    _one_line_error(lambda: load_draft(folder),
                    r"unknown keys: midlayer.extra.weight; missing keys: midlayer.hidden_norm.weight")


def test_unflagged_fc_bias_in_the_eagle3_format_is_an_unknown_key(saved):
    # SGLang would silently drop it and serve a draft without the bias: we say so instead of using it
    d, folder = saved
    sd = load_file(str(folder / "model.safetensors"))
    sd["fc.bias"] = torch.zeros(sd["fc.weight"].shape[0])
    _rewrite(folder, sd=sd)
    _one_line_error(lambda: load_draft(folder), r"unknown keys: fc.bias")


def test_shape_mismatch_names_key_expected_and_found(saved):
    d, folder = saved
    sd = load_file(str(folder / "model.safetensors"))
    sd["midlayer.self_attn.q_proj.weight"] = torch.zeros(H, H)       # q/k/v must take 2H
    _rewrite(folder, sd=sd)
    _one_line_error(lambda: load_draft(folder),
                    r"midlayer.self_attn.q_proj.weight has shape \[32, 32\], expected \[32, 64\]")


def test_unsafe_bin_is_refused(saved, tmp_path):
    d, folder = saved
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"fc.weight": SimpleNamespace(x=1)}, f, protocol=2)
    _one_line_error(lambda: load_draft(folder), r"refused, loading it needs unsafe unpickling")


def test_more_than_one_layer_and_unknown_rope_are_refused(saved):
    d, folder = saved
    cfg = json.loads((folder / "config.json").read_text())
    _rewrite(folder, cfg=dict(cfg, num_hidden_layers=2))
    _one_line_error(lambda: load_draft(folder), r"num_hidden_layers is 2.*refusing")
    _rewrite(folder, cfg=dict(cfg, rope_scaling={"rope_type": "longrope", "factor": 4.0}))
    _one_line_error(lambda: load_draft(folder), r"rope_scaling type 'longrope' is not supported")
    _rewrite(folder, cfg=dict(cfg, rope_scaling={"rope_type": "yarn", "factor": 4.0}))     # YaRN needs its base length
    _one_line_error(lambda: load_draft(folder), r"rope_scaling yarn needs a positive original_max_position_embeddings")


def test_target_that_does_not_fit(saved):
    d, folder = saved
    t = fake_target(d)
    t.hidden_size = 64
    _one_line_error(lambda: load_draft(folder, t), r"expects a target with hidden size 32.*target has 64")
    _one_line_error(lambda: load_draft(folder, fake_target(d, embed=torch.zeros(V, 16))),
                    r"embedding from the target has shape \[60, 16\].*\[60, 32\]")


def test_features_of_the_wrong_width_are_a_clear_error():
    d = make_draft()
    _, ids, mask = batch(d)
    _one_line_error(lambda: run_chains(d, torch.zeros(3, 8, 2 * H), ids, mask, 2),
                    r"width 64.*3 taps x target hidden 32 = 96")


# ------------------------------------------------------------------------------------ CLI

def test_cli_reports_the_draft(saved, capsys):
    d, folder = saved
    assert cli_main(["draft", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "LlamaForCausalLMEagle3" in out and "draft vocab 40" in out and "[1, 3, 4]" in out
    assert cli_main(["draft", str(folder), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["draft_vocab_size"] == 40 and info["embed_source"] == "missing"


def test_cli_bad_path_is_error_exit_2(tmp_path, capsys):
    assert cli_main(["draft", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no such draft directory" in err


def test_top_level_layer_ids_are_flagged_because_sglang_ignores_them(saved):
    d, folder = saved
    cfg = json.loads((folder / "config.json").read_text())
    ids = cfg.pop("eagle_config")["eagle_aux_hidden_state_layer_ids"]
    _rewrite(folder, cfg=dict(cfg, eagle_aux_hidden_state_layer_ids=ids))
    d2 = load_draft(folder)
    assert d2.eagle_layer_ids == [1, 3, 4] and "eagle_config" not in d2.raw_config
    assert any("SGLang reads only eagle_config" in n for n in describe_draft(d2)["notes"])


def test_save_draft_is_atomic(tmp_path, monkeypatch):
    """A crash while writing leaves no half checkpoint: no folder at all (new) or the old files (existing)."""
    from workbench.model import checkpoint

    d = make_draft()
    save_draft(d, tmp_path / "dr")
    before = {p.name: p.read_bytes() for p in (tmp_path / "dr").iterdir()}

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(checkpoint, "write_json", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        save_draft(d, tmp_path / "new")
    assert not (tmp_path / "new").exists() and [p.name for p in tmp_path.iterdir()] == ["dr"]
    d.fc.weight.data += 1
    with pytest.raises(RuntimeError, match="disk full"):
        save_draft(d, tmp_path / "dr")
    assert {p.name for p in (tmp_path / "dr").iterdir()} == set(before)      # no temp file left behind
    assert (tmp_path / "dr" / "config.json").read_bytes() == before["config.json"]
    monkeypatch.undo()
    save_draft(d, tmp_path / "dr")
    assert torch.equal(load_draft(tmp_path / "dr", fake_target(d)).fc.weight, d.fc.weight)
