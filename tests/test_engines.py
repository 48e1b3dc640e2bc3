"""workbench.engines.records: the engine records (ids ↔ taps, feasibility, options, rotary, embedding/lm_head,
auto flags), the draft variants each engine computes checked against an independent per-token
reference forward, and a speculators-format checkpoint with real key names."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from safetensors.torch import save_file

from workbench import engines
from workbench.engines import wiring
from workbench.model.checkpoint import load_draft
from workbench.model.draft import Eagle3Draft, chain_reference, new_draft_config, run_chains
from workbench.core.errors import WorkbenchError
from engine_presets_reference import preset_resolve

V, H, N = 60, 32, 32


# ───────────────────────────── records, ids and taps ─────────────────────────────

def test_every_record_resolves_and_unknown_names_list_them():
    assert set(engines.ENGINE_NAMES) == {"sglang", "sglang-2026.04", "vllm", "vllm-v2", "vllm-0.22", "vllm-legacy", "vllm-0.17", "specforge",
                                         "speculators", "eagle", "modelopt", "hf", "tensorrt-llm"}
    for name in engines.ENGINE_NAMES:
        assert engines.get(name.upper()).name == name
    with pytest.raises(WorkbenchError) as e:
        engines.get("tgi")
    msg = str(e.value)
    assert "\n" not in msg and "tgi" in msg and all(n in msg for n in engines.ENGINE_NAMES)
    rows = engines.engine_table()
    assert [r["engine"] for r in rows] == list(engines.ENGINE_NAMES) and all(r["version"] for r in rows)
    assert "sglang-2026.04" in engines.format_engine_table()


def test_embed_and_the_last_layer_belong_to_vllm_0_18_on():
    """vLLM from 0.18 captures id 0 (the embedding) and id N (the last layer's output): served by 0.21, 0.22, 0.27.1,
    0.28 and 0.32 (bench/engine-matrix.json, cells id0 and idN); 0.17 and older capture before each layer only."""
    for name in ("vllm", "vllm-v2", "vllm-0.22", "vllm-legacy", "speculators"):
        assert engines.taps_for_ids(name, [0, 4, 32], N).spec == "embed,L3,L31"
        assert engines.ids_for_taps(name, ["embed", "L3", "L31"], N).ids == [0, 4, 32]
    for name in ("sglang", "sglang-2026.04", "vllm-0.17", "specforge", "modelopt"):
        f = engines.ids_for_taps(name, ["embed", "L3", "L30"], N)
        assert not f.feasible and "embedding" in f.reason, name
    for name in ("sglang", "sglang-2026.04", "vllm-0.17"):
        f = engines.ids_for_taps(name, ["L1", "L3", "L31"], N)
        assert not f.feasible and "L31" in f.reason, name
        assert not engines.taps_for_ids(name, [0, 4, 30] if name == "vllm-0.17" else [-1, 3, 29], N).feasible


def test_gpt_oss_boundary_rule_lets_current_sglang_feed_the_last_layer():
    gpt = {"num_hidden_layers": 24, "architectures": ["GptOssForCausalLM"]}
    assert engines.ids_for_taps("sglang", ["L1", "L11", "L23"], gpt).ids == [2, 12, 24]   # boundaries
    assert engines.taps_for_ids("sglang", [24, 30, 36], {"num_hidden_layers": 36,      # nvidia Eagle3-v3
                                                         "architectures": ["GptOssForCausalLM"]}).spec == "L23,L29,L35"
    assert engines.taps_for_ids("sglang", [1, 11, 21], gpt).spec == "L0,L10,L20"  # no +1 even for first id 1
    assert not engines.ids_for_taps("sglang", ["L1", "L11", "L23"], 24).feasible
    assert not engines.ids_for_taps("sglang-2026.04", ["L1", "L11", "L23"], gpt).feasible


def test_sglang_first_id_rule_after_25454():
    # SpecForge's ids start at 1: both versions agree; speculators-style ids starting at 2 differ
    assert engines.taps_for_ids("sglang", [1, 15, 28], N).spec == "L1,L15,L28"
    assert engines.taps_for_ids("sglang-2026.04", [1, 15, 28], N).spec == "L1,L15,L28"
    assert engines.taps_for_ids("sglang", [2, 16, 29], N).spec == "L1,L15,L28"
    assert engines.taps_for_ids("sglang-2026.04", [2, 16, 29], N).spec == "L2,L16,L29"


def _triples(n):
    taps = ["embed"] + [f"L{k}" for k in range(n)] + ["final"]
    return list(itertools.permutations(taps, 3))


@pytest.mark.parametrize("name", list(engines.ENGINE_NAMES))
def test_ids_for_taps_round_trips_through_taps_for_ids(name):
    n = 6
    for taps in _triples(n):
        f = engines.ids_for_taps(name, taps, n)
        if f.feasible:
            assert engines.taps_for_ids(name, f.ids, n).taps == taps, (name, taps, f.ids)
        else:
            assert f.reason and "\n" not in f.reason
    # every engine can feed its own default
    default = engines.wiring_for(name, None, N)
    assert default.feasible and default.spec == "L1,L15,L28", name


@pytest.mark.parametrize("seed", range(40))
def test_records_agree_with_the_wiring_presets(seed):
    """engines.py restates the old wiring presets (tests/engine_presets_reference.py) where versions agree."""
    g = torch.Generator().manual_seed(seed)
    n = 8
    ids = torch.randint(-1, n + 1, (3,), generator=g).tolist()
    where = ["nested", "top", "both"][seed % 3]
    cfg = {}
    if where in ("nested", "both"):
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    if where in ("top", "both"):
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    pairs = [("sglang-2026.04", "sglang", "classic"), ("sglang", "sglang", "first-id-1"),
             ("eagle", "eagle", "classic"), ("hf", "hf", "classic")]
    if 0 not in ids and n not in ids:        # vLLM now feeds id 0 and id N; the preset predates that
        pairs.append(("vllm", "vllm", "classic"))
    if min(ids) >= 0 and max(ids) < n:
        pairs += [("specforge", "specforge", "classic"), ("modelopt", "modelopt", "classic")]
    for name, preset, rule in pairs:
        a, b = engines.wiring_for(name, cfg, n), preset_resolve(preset, n, cfg, sglang_rule=rule)
        assert a.feasible == b.feasible, (name, cfg, a.explanation, b.explanation)
        if a.feasible:        # (an infeasible preset lists the taps it cannot feed too; the record drops them)
            assert a.taps == b.taps, (name, cfg, a.explanation, b.explanation)


def test_key_read_order_per_engine():
    cfg = {"eagle_aux_hidden_state_layer_ids": [2, 16, 29],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}
    assert engines.wiring_for("vllm", cfg, N).spec == "L1,L15,L28"            # top-level first
    assert engines.wiring_for("sglang", cfg, N).spec == "L1,L3,L5"            # nested only
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}
    assert engines.wiring_for("vllm", nested, N).spec == "L0,L2,L4"           # nested since #42764
    legacy = engines.wiring_for("vllm-legacy", nested, N)
    assert legacy.spec == "L1,L15,L28" and any("ignores" in w for w in legacy.warnings)
    v2 = engines.wiring_for("vllm-v2", nested, N)                              # 0.32's V2 runner (GPU default)
    assert v2.spec == "L1,L15,L28" and any("ignores" in w for w in v2.warnings)   # nested never read: default
    assert engines.wiring_for("vllm-v2", cfg, N).spec == "L1,L15,L28"         # top-level read, as V1 reads it
    dflash = {"dflash_config": {"target_layer_ids": [1, 15, 28]}}
    assert engines.wiring_for("vllm", dflash, N).spec == "L1,L15,L28"         # dflash ids +1
    assert engines.wiring_for("vllm-v2", dflash, N).spec == "L1,L15,L28"
    assert engines.options_for("vllm-v2", {"norm_output": True})[0] == engines.options_for("vllm", {"norm_output": True})[0]
    assert engines.wiring_for("eagle", cfg, N).spec == "L1,L15,L28"


def test_a_checkpoint_with_both_conventions_serves_on_both_engines():
    """What phase 2's rewire writes: vLLM ids top-level, SGLang ids under eagle_config."""
    taps = ["embed", "L3", "L30"]
    v = engines.ids_for_taps("vllm", taps, N)
    s = engines.ids_for_taps("sglang", ["L2", "L3", "L30"], N)
    cfg = {"eagle_aux_hidden_state_layer_ids": engines.ids_for_taps("vllm", ["L2", "L3", "L30"], N).ids,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": s.ids}}
    assert v.ids == [0, 4, 31]
    assert engines.wiring_for("vllm", cfg, N).spec == engines.wiring_for("sglang", cfg, N).spec == "L2,L3,L30"


def test_options_embedding_lm_head_rotary_and_auto_flags():
    spec_cfg = {"speculators_model_type": "eagle3", "norm_output": True, "fc_norm": True}
    opts, warn = engines.options_for("vllm", spec_cfg)
    assert opts == {"norm_before_fc": False, "fc_norm": True, "norm_output": True, "norm_before_residual": True}
    assert engines.options_for("vllm", {"fc_norm": True})[0]["norm_before_residual"] is False
    assert engines.options_for("vllm", {"eagle_config": {"norm_before_fc": True}})[0]["norm_before_fc"]
    opts, warn = engines.options_for("sglang", dict(spec_cfg, norm_before_fc=True, norm_before_residual=True))
    assert opts["fc_norm"] and opts["norm_output"] and opts["norm_before_fc"] and not opts["norm_before_residual"]
    assert len(warn) == 1 and "norm_before_residual" in warn[0]
    assert engines.options_for("sglang", {"use_aux_norm": True})[0]["fc_norm"]
    assert engines.options_for("sglang-2026.04", spec_cfg)[0] == dict.fromkeys(engines.OPTION_NAMES, False)
    assert engines.get("sglang-2026.04").rotary_offset == 1 and engines.get("sglang").rotary_offset == 0
    assert engines.embed_source("sglang", {"hidden_size": 64, "target_hidden_size": 128}, True) == ("checkpoint", None)
    assert engines.embed_source("sglang", {"hidden_size": 64}, False) == ("target", None)
    assert engines.lm_head_source("sglang", {"draft_vocab_size": 10}) == ("checkpoint", None)
    assert engines.lm_head_source("vllm", {}, ships_lm_head=False) == ("target", None)
    assert engines.auto_flags("sglang", "Grok1ForCausalLM") == (5, 4, 8)
    assert engines.auto_flags("sglang", "GptOssForCausalLM") == (3, 1, 4)
    assert engines.auto_flags("sglang-2026.04", "Qwen3ForCausalLM") == (5, 4, 8)
    assert engines.auto_flags("vllm", "LlamaForCausalLM") is None
    r = engines.read("vllm", {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, N, wiring="embed,L3,L31")
    assert r.resolution.spec == "embed,L3,L31" and r.embed_source == "target"
    with pytest.raises(WorkbenchError, match="architectures"):
        engines.default_engine({"architectures": ["LlamaForCausalLM"]})


# ───────────────────────────── the draft computes every variant ─────────────────────────────

def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, pos, theta):
    """x [heads, d] at integer position ``pos`` (HF rotate_half convention)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = (pos * inv).float()
    cos, sin = torch.cat([ang.cos(), ang.cos()]), torch.cat([ang.sin(), ang.sin()])
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * cos + rot * sin


def reference_chain(sd, cfg, opts, feats, ids, t, K, offset):
    """One greedy chain, one token at a time, written from vLLM llama_eagle3.py / speculators
    eagle3 core.py + model_definitions.py (not from workbench.model.draft): returns [K, Vd] logits."""
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg["hidden_size"] // nh
    x = feats[: t + 1]
    if opts["norm_before_fc"]:
        x = _rms(x, sd["input_norm.weight"], eps)
    if opts["fc_norm"]:
        x = torch.cat([_rms(c, sd[f"fc_norm.{i}.weight"], eps) for i, c in enumerate(x.chunk(3, -1))], -1)
    proj = x @ sd["fc.weight"].T
    keys, vals = [], []

    def step(h, tok, pos):
        e = sd["embed_tokens.weight"][tok]
        hn = _rms(h, sd["midlayer.hidden_norm.weight"], eps)
        res = hn if opts["norm_before_residual"] else h
        inp = torch.cat([_rms(e, sd["midlayer.input_layernorm.weight"], eps), hn])
        q = (inp @ sd["midlayer.self_attn.q_proj.weight"].T).view(nh, d)
        k = (inp @ sd["midlayer.self_attn.k_proj.weight"].T).view(nkv, d)
        v = (inp @ sd["midlayer.self_attn.v_proj.weight"].T).view(nkv, d)
        keys.append(_rope(k, pos, theta))
        vals.append(v)
        q = _rope(q, pos, theta)
        out = []
        for head in range(nh):
            g = head // (nh // nkv)
            s = torch.stack([kk[g] @ q[head] for kk in keys]) / math.sqrt(d)
            out.append(torch.softmax(s, 0) @ torch.stack([vv[g] for vv in vals]))
        h2 = res + torch.cat(out) @ sd["midlayer.self_attn.o_proj.weight"].T
        m = _rms(h2, sd["midlayer.post_attention_layernorm.weight"], eps)
        mlp = (torch.nn.functional.silu(m @ sd["midlayer.mlp.gate_proj.weight"].T)
               * (m @ sd["midlayer.mlp.up_proj.weight"].T)) @ sd["midlayer.mlp.down_proj.weight"].T
        return h2 + mlp

    for p in range(t + 1):
        out = step(proj[p], int(ids[p + 1]), p)
    logits = []
    for k in range(K):
        normed = _rms(out, sd["norm.weight"], eps)
        lg = normed @ sd["lm_head.weight"].T
        logits.append(lg)
        tok = int(lg.argmax()) + int(sd["d2t"][lg.argmax()])
        if k + 1 < K:
            out = step(normed if opts["norm_output"] else out, tok, t + k + 1 + offset)
    return torch.stack(logits)


def _full_draft(seed=0, kv=2):
    torch.manual_seed(seed)
    cfg = new_draft_config({"vocab_size": V, "hidden_size": H, "num_attention_heads": 4,
                            "num_key_value_heads": kv, "intermediate_size": 64}, layer_ids=[1, 3, 4])
    cfg.update(norm_before_fc=True, fc_norm=True, norm_output=True, norm_before_residual=True)
    d = Eagle3Draft.from_config(cfg, torch.randn(V, H))
    with torch.no_grad():
        for n, p in d.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.5 * torch.randn_like(p))
    return d


VARIANT_CASES = [dict(zip(engines.OPTION_NAMES, bits)) for bits in itertools.product([False, True], repeat=4)]


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("case", range(len(VARIANT_CASES)))
def test_every_variant_matches_the_reference_forward(case, offset):
    opts = VARIANT_CASES[case]
    d = _full_draft().set_variant(rotary_offset=offset, **opts)
    sd = {k: v.detach() for k, v in d.state_dict().items()}
    torch.manual_seed(3)
    T, K, t = 7, 3, 4
    feats, ids = torch.randn(T, 3 * H), torch.randint(0, V, (T,))
    want = reference_chain(sd, d.config, opts, feats, ids, t, K, offset)
    toks, logits = chain_reference(d, feats, ids, t, K, return_logits=True)
    torch.testing.assert_close(logits, want, atol=2e-4, rtol=1e-4)
    out = run_chains(d, feats[None], ids[None], torch.ones(1, T, dtype=torch.long), K, return_logits=True)
    torch.testing.assert_close(out.logits[0, t], want, atol=2e-4, rtol=1e-4)


def test_each_variant_changes_what_the_draft_computes():
    torch.manual_seed(3)
    T, K, t = 7, 3, 4
    feats, ids = torch.randn(T, 3 * H), torch.randint(0, V, (T,))
    off = dict.fromkeys(engines.OPTION_NAMES, False)
    base = chain_reference(_full_draft().set_variant(**off), feats, ids, t, K, return_logits=True)[1]
    for name in engines.OPTION_NAMES:
        got = chain_reference(_full_draft().set_variant(**dict(off, **{name: True})), feats, ids, t, K,
                              return_logits=True)[1]
        assert not torch.allclose(got, base, atol=1e-3), name
    shifted = chain_reference(_full_draft().set_variant(rotary_offset=1, **off), feats, ids, t, K,
                              return_logits=True)[1]
    assert torch.allclose(shifted[0], base[0]) and not torch.allclose(shifted[1:], base[1:], atol=1e-3)


def test_switching_on_a_norm_without_weights_is_an_error():
    d = Eagle3Draft.from_config(new_draft_config({"vocab_size": V, "hidden_size": H, "num_attention_heads": 4,
                                                  "intermediate_size": 64}), torch.randn(V, H))
    with pytest.raises(WorkbenchError, match="no input_norm weights"):
        d.set_variant(norm_before_fc=True)
    with pytest.raises(WorkbenchError, match="unknown draft option 'norm'"):
        d.set_variant(norm=True)
    d.set_lm_head(torch.zeros(V, H))
    assert d.lm_head_source == "target" and not d.lm_head.weight.any()


# ───────────────────────────── a speculators-format checkpoint ─────────────────────────────

def write_speculators(folder, *, seed=0, norm_before_fc=False, fc_norm=False, norm_output=True,
                      norm_before_residual=None, ids=(2, 16, 29)):
    """A speculators Eagle3 checkpoint with random weights: the config layout of speculators
    models/eagle3/config.py (Eagle3SpeculatorConfig) and the state-dict names of core.py
    (layers.0.* from the transformers LlamaDecoderLayer + hidden_norm, fc, norm, lm_head, input_norm,
    fc_norm.{i}, d2t, t2d, embed_tokens)."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    layer = {"model_type": "llama", "vocab_size": V, "hidden_size": H, "intermediate_size": 64,
             "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": H // 4,
             "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256,
             "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False}
    cfg = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"], "speculators_version": "0.4.0",
           "transformer_layer_config": layer, "draft_vocab_size": 40, "target_hidden_size": None,
           "eagle_aux_hidden_state_layer_ids": list(ids), "norm_before_fc": norm_before_fc, "fc_norm": fc_norm,
           "norm_output": norm_output, "embed_requires_grad": False,
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                  "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct",
                                               "architectures": ["LlamaForCausalLM"]}}}
    if norm_before_residual is not None:
        cfg["norm_before_residual"] = norm_before_residual
    r = lambda *s: torch.randn(*s, generator=g) * 0.2                       # noqa: E731
    kvd = 2 * (H // 4)
    sd = {"fc.weight": r(H, 3 * H), "layers.0.hidden_norm.weight": 1 + r(H),
          "layers.0.input_layernorm.weight": 1 + r(H), "layers.0.post_attention_layernorm.weight": 1 + r(H),
          "layers.0.self_attn.q_proj.weight": r(H, 2 * H), "layers.0.self_attn.k_proj.weight": r(kvd, 2 * H),
          "layers.0.self_attn.v_proj.weight": r(kvd, 2 * H), "layers.0.self_attn.o_proj.weight": r(H, H),
          "layers.0.mlp.gate_proj.weight": r(64, H), "layers.0.mlp.up_proj.weight": r(64, H),
          "layers.0.mlp.down_proj.weight": r(H, 64), "norm.weight": 1 + r(H), "lm_head.weight": r(40, H),
          "embed_tokens.weight": r(V, H), "d2t": torch.arange(40) * 0 + 5, "t2d": torch.zeros(V, dtype=torch.bool)}
    sd["t2d"][5:45] = True
    if norm_before_fc:
        sd["input_norm.weight"] = 1 + r(3 * H)
    if fc_norm:
        for i in range(3):
            sd[f"fc_norm.{i}.weight"] = 1 + r(H)
    save_file(sd, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return cfg, sd


class _Target:
    def __init__(self, embed):
        self._embed = embed
        self.hidden_size, self.vocab_size, self.device, self.dtype = H, V, "cpu", torch.float32

    def embed_weight(self):
        return self._embed


def test_speculators_checkpoint_keeps_vllm_ids_and_resolves_to_vllm_taps(tmp_path):
    raw, sd = write_speculators(tmp_path / "spec")
    d = load_draft(tmp_path / "spec", _Target(sd["embed_tokens.weight"]))
    assert d.source_format == "speculators" and "eagle_config" not in d.config
    assert d.config["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]
    assert engines.default_engine(d.raw_config) == "vllm"
    assert engines.default_wiring(d.raw_config, N).spec == "L1,L15,L28"
    assert engines.wiring_for("vllm", d.config, N).spec == "L1,L15,L28"
    assert wiring.resolve("vllm", N, d.config).spec == "L1,L15,L28"
    assert engines.wiring_for("sglang-2026.04", d.config, N).spec == "L1,L15,L28"   # default: ids ignored
    # vLLM's conversion: norm_before_residual missing → True; the three Eagle-3.1 keys as written
    assert d.variant == {"norm_before_fc": False, "fc_norm": False, "norm_output": True, "norm_before_residual": True}
    assert d.embed_source == "checkpoint"


@pytest.mark.parametrize("flags", [dict(norm_before_fc=True, norm_output=True, norm_before_residual=False),
                                   dict(fc_norm=True, norm_output=False, norm_before_residual=True)])
def test_speculators_checkpoint_honours_its_eagle31_options(tmp_path, flags):
    raw, sd = write_speculators(tmp_path / "spec", **flags)
    d = load_draft(tmp_path / "spec", _Target(sd["embed_tokens.weight"]))
    opts = {k: bool(flags.get(k, False)) for k in engines.OPTION_NAMES}
    assert d.variant == opts == engines.options_for("vllm", raw)[0]
    ref_sd = {k.replace("layers.0.", "midlayer."): v for k, v in sd.items()}
    torch.manual_seed(4)
    T, K, t = 6, 3, 3
    feats, ids = torch.randn(T, 3 * H), torch.randint(0, V, (T,))
    want = reference_chain(ref_sd, d.config, opts, feats, ids, t, K, 0)
    torch.testing.assert_close(chain_reference(d, feats, ids, t, K, return_logits=True)[1], want,
                               atol=2e-4, rtol=1e-4)


def test_speculators_checkpoint_refuses_both_fc_norms(tmp_path):
    write_speculators(tmp_path / "spec", norm_before_fc=True, fc_norm=True)
    with pytest.raises(WorkbenchError, match="norm_before_fc and fc_norm are both true"):
        load_draft(tmp_path / "spec", None)
