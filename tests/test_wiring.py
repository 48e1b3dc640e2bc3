"""Wiring: what each engine record feeds the draft (facts page section 1), asked through wiring.py."""

import json

import pytest

from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench import engines
from workbench.engines.wiring import (ENGINES, Wiring, draft_layer_ids, ids_for, num_layers, resolve, table,
                              trained_wiring_from_config)

N32 = {"num_hidden_layers": 32}


def nested(ids):
    return {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


def test_parse_keeps_existing_behaviour():
    assert Wiring.parse("embed,L3,L31", 32).taps == ("embed", "L3", "L31")
    w = Wiring.parse("hf:0,4,32", 32)
    assert w.taps == ("embed", "L3", "final") and "HF" in w.note
    with pytest.raises(WorkbenchError, match="L32"):
        Wiring.parse("L32", 32)


def test_every_engine_default_is_L1_mid_Lminus4_and_they_agree():
    rows = table(N32)
    assert [r.engine for r in rows] == list(ENGINES)
    for r in rows:
        assert r.taps == ("L1", "L15", "L28"), r
        assert r.hf_indices == [2, 16, 29]
        assert r.feasible and r.warnings == []


def test_sglang_adds_one_to_eagle_config_ids():
    r = resolve("sglang", N32, nested([1, 3, 4]))
    assert r.taps == ("L1", "L3", "L4")
    assert r.explanation == "sglang: eagle_config ids [1,3,4] +1 → capture points [2,4,5] → L1,L3,L4"


def test_sglang_ignores_top_level_key_but_vllm_uses_it_as_is():
    draft = {"eagle_aux_hidden_state_layer_ids": [4, 10, 20]}
    s = resolve("sglang", N32, draft)
    assert s.taps == ("L1", "L15", "L28")            # silent default
    assert any("ignores the top ids" in w for w in s.warnings)
    v = resolve("vllm", N32, draft)
    assert v.taps == ("L3", "L9", "L19")             # id k = output of layer k-1


def test_vllm_prefers_top_level_then_nested_and_never_adds_one():
    assert resolve("vllm", N32, nested([1, 15, 28])).taps == ("L0", "L14", "L27")
    both = dict(nested([1, 15, 28]), eagle_aux_hidden_state_layer_ids=[2, 16, 29])
    v = resolve("vllm", N32, both)
    assert v.taps == ("L1", "L15", "L28")                     # the top-level key is read first
    assert resolve("vllm-legacy", N32, nested([1, 15, 28])).taps == ("L1", "L15", "L28")   # nested ignored


def test_sglang_first_id_rule_is_the_version():
    assert resolve("sglang-2026.04", N32, nested([2, 16, 29])).taps == ("L2", "L16", "L29")   # +1 always
    assert resolve("sglang", N32, nested([2, 16, 29])).taps == ("L1", "L15", "L28")   # PR #25454: as is
    assert resolve("sglang", N32, nested([1, 15, 28])).taps == ("L1", "L15", "L28")
    assert ids_for("sglang", ["L2", "L3", "L4"], 8) == [3, 4, 5]
    assert ids_for("sglang-2026.04", ["L2", "L3", "L4"], 8) == [2, 3, 4]
    with pytest.raises(WorkbenchError, match="unknown engine"):
        resolve("sglang-new", N32)


def test_sglang_concatenates_in_layer_order():
    r = resolve("sglang-2026.04", N32, nested([28, 1, 15]))
    assert r.taps == ("L1", "L15", "L28")
    assert any("layer order" in w for w in r.warnings)


def test_ids_past_the_last_layer_are_never_captured():
    r = resolve("sglang", N32, nested([1, 15, 31]))   # +1 → 32: no layer 32 to capture before
    assert r.taps == ("L1", "L15") and not r.feasible
    assert any("capture point 32 is outside 1..31" in w for w in r.warnings)
    assert not resolve("specforge", N32, nested([1, 15, 32])).feasible


def test_only_vllm_0_18_on_feeds_the_embedding_and_the_last_layer():   # V1 and V2 runners, 0.18 to 0.32
    s = resolve("sglang-2026.04", N32, nested([-1, 3, 30]))
    assert not s.feasible and any("cannot feed the embedding" in w for w in s.warnings)
    v = resolve("vllm", N32, {"eagle_aux_hidden_state_layer_ids": [0, 4, 32]})
    assert v.taps == ("embed", "L3", "L31") and v.feasible
    assert resolve("vllm-legacy", N32, {"eagle_aux_hidden_state_layer_ids": [0, 4, 32]}).feasible   # served: 0.21
    assert not resolve("vllm-0.17", N32, {"eagle_aux_hidden_state_layer_ids": [0, 4, 32]}).feasible
    h = resolve("hf", N32, {"eagle_aux_hidden_state_layer_ids": [0, 4, 32]})
    assert h.taps == ("embed", "L3", "final") and h.hf_indices == [0, 4, 32]
    feeds = [e for e in ENGINES if engines.get(e).serving and ids_for(e, ["embed", "L3", "L31"], 32)]
    assert feeds == ["vllm", "vllm-v2", "vllm-0.22", "vllm-legacy"]


def test_eagle_ignores_draft_ids_and_specforge_reads_layer_outputs():
    d = nested([3, 31, 59])
    n64 = {"num_hidden_layers": 64}
    assert resolve("eagle", n64, d).taps == ("L1", "L31", "L60")
    assert resolve("specforge", n64, d).taps == ("L3", "L31", "L59")
    assert resolve("sglang-2026.04", n64, d).taps == ("L3", "L31", "L59")
    assert resolve("sglang", n64, d).taps == ("L2", "L30", "L58")     # first id not 1: capture points


def test_table_flags_the_classic_bug_against_trained_taps():
    # trained through HF indices hf:0,4,32 = embed,L3,L31; the config carries the hint our trainer writes
    draft = dict(nested([1, 15, 28]), workbench={"trained_taps": ["embed", "L3", "L31"]})
    rows = {r.engine: r for r in table(N32, draft)}
    assert any("trained on embed,L3,L31; sglang feeds L1,L15,L28" in w for w in rows["sglang"].warnings)
    assert any(w.startswith("engines disagree") and "vllm/vllm-0.22/hf feed L0,L14,L27" in w
               for w in table(N32, draft).notes)
    rows = {r.engine: r for r in table(N32, nested([1, 15, 28]), trained="L1,L15,L28")}
    assert not any("trained on" in w for w in rows["sglang"].warnings)
    assert any("trained on" in w for w in rows["vllm"].warnings)


def test_trained_wiring_from_config():
    assert trained_wiring_from_config({}, 32) is None
    assert trained_wiring_from_config({"workbench": {"trained_taps": "hf:0,4,32"}}, 32).taps == ("embed", "L3", "final")
    with pytest.raises(WorkbenchError, match="trained_taps"):
        trained_wiring_from_config({"workbench": {"trained_taps": 7}}, 32)
    with pytest.raises(WorkbenchError, match="out of range"):
        trained_wiring_from_config({"workbench": {"trained_taps": ["L40"]}}, 32)


def test_target_config_forms(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(num_hidden_layers=6, hidden_size=32, intermediate_size=64,
                                   num_attention_heads=4, vocab_size=100)
    assert num_layers(cfg) == 6
    assert num_layers({"text_config": {"num_hidden_layers": 48}}) == 48
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 12}))
    assert num_layers(tmp_path) == 12 and num_layers(str(tmp_path / "config.json")) == 12
    assert resolve("sglang", tmp_path).taps == ("L1", "L5", "L8")


def test_bad_configs_raise_one_line_errors(tmp_path):
    with pytest.raises(WorkbenchError, match="no config.json"):
        num_layers(tmp_path)
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 4,\n "x": }')
    with pytest.raises(WorkbenchError, match=r"config.json line 2: invalid JSON"):
        num_layers(tmp_path)
    with pytest.raises(WorkbenchError, match="num_hidden_layers"):
        num_layers({"hidden_size": 8})
    with pytest.raises(WorkbenchError, match="eagle_config.eagle_aux_hidden_state_layer_ids"):
        draft_layer_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["1", 2]}})
    with pytest.raises(WorkbenchError, match="unknown engine"):
        resolve("trtllm", N32)


def test_cli_json_and_table(tmp_path, capsys):
    t, d = tmp_path / "t", tmp_path / "d"
    t.mkdir(), d.mkdir()
    (t / "config.json").write_text(json.dumps({"num_hidden_layers": 32}))
    (d / "config.json").write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}))
    assert main(["wiring", "--target", str(t), "--draft", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["engine"] for r in out] == list(ENGINES)
    assert set(out[0]) >= {"engine", "taps", "hf_indices", "explanation", "warnings"}
    assert out[0]["taps"] == ["L1", "L15", "L28"] and out[2]["taps"] == ["L0", "L14", "L27"]
    assert main(["wiring", "--target", str(t), "--trained", "embed,L3,L31"]) == 0
    text = capsys.readouterr().out
    assert "sglang" in text and "trained on embed,L3,L31" in text
    assert "sglang-2026.04  SGLang before 2026-05: before PR #25015" in text        # the version each stands for
    assert main(["wiring", "--engines"]) == 0
    text = capsys.readouterr().out
    for name in ENGINES:                                     # every record, with its version boundary
        assert f"{name:<15} {engines.get(name).label}  [{engines.get(name).boundary}]" in text
    assert main(["wiring", "--engines", "--json"]) == 0
    assert [r["engine"] for r in json.loads(capsys.readouterr().out)] == list(ENGINES)
    assert main(["wiring"]) == 2 and "--engines" in capsys.readouterr().err
    assert main(["wiring", "--target", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith("error: target config:")


def test_docstring_examples_run():
    import doctest

    import workbench.engines.sglang_lint
    import workbench.engines.wiring

    for mod in (workbench.engines.wiring, workbench.engines.sglang_lint):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


def test_a_wrong_number_of_layer_ids_is_infeasible_for_every_engine():
    # SGLang turns eagle_config ids [3, 28] into a two-state capture: the draft's fc expects three
    for engine in ("sglang", "vllm", "specforge", "hf"):
        r = resolve(engine, 32, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 28]}})
        assert len(r.taps) == 2 and not r.feasible, engine
        assert any("expects exactly 3" in w for w in r.warnings), (engine, r.warnings)
