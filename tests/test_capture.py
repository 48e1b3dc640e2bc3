"""workbench.model.capture: hook taps match HF hidden states, batching is exact, one forward per batch,
the feature cache resumes, and bad input gives one-line WorkbenchErrors."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
import transformers
from conftest import FAMILIES, LLAMA, random_rows, tiny_target

from workbench.model.capture import (Batch, check_width, count_forwards, extract, find_layers, load_target, tap_hooks,
                               target_from_model, union_taps)
from workbench.core.errors import WorkbenchError

N = 4
COMMON = dict(LLAMA, vocab_size=96, num_hidden_layers=N, max_position_embeddings=64)


def tiny(family="llama", seed=0, **over):
    return tiny_target(seed, family, **{**COMMON, **over})


def make_rows(lengths, seed=1, vocab=96):
    return [{**r, "_row": i, "_where": f"d.jsonl:{i + 1}", "n_prompt_tokens": 2, "source": f"s{i % 2}"}
            for i, r in enumerate(random_rows(vocab, lengths, prompt=2, seed=seed))]


ALL = ["embed"] + [f"L{k}" for k in range(N)] + ["final"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_tap_equals_hf_hidden_states(family):
    target = tiny(family)
    rows = make_rows([7, 12, 5])
    by_row = {}
    for batch in extract(target, rows, ALL, batch_size=2, topk=3, progress=False):
        for b, r in enumerate(batch.rows):
            by_row[r] = (batch, b)
    assert sorted(by_row) == [0, 1, 2]
    norm = find_layers(target.model)[3]
    for r, row in enumerate(rows):
        batch, b = by_row[r]
        n = len(row["input_ids"])
        with torch.no_grad():
            out = target.model(torch.tensor([row["input_ids"]]), output_hidden_states=True)
        hs = out.hidden_states
        assert len(hs) == N + 1
        f = {t: batch.features[t][b, :n] for t in ALL}
        torch.testing.assert_close(f["embed"], hs[0][0], atol=1e-5, rtol=1e-5)
        for k in range(N - 1):
            torch.testing.assert_close(f[f"L{k}"], hs[k + 1][0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(f["final"], hs[N][0], atol=1e-5, rtol=1e-5)
        # L{N-1} is the RAW last-layer output: not the normed hs[N], but norm(L{N-1}) is.
        assert not torch.allclose(f[f"L{N - 1}"], hs[N][0], atol=1e-3)
        with torch.no_grad():
            torch.testing.assert_close(norm(f[f"L{N - 1}"]), hs[N][0], atol=1e-5, rtol=1e-5)
        # greedy prediction and top-k log-probs from the same pass
        assert torch.equal(batch.next_token[b, :n], out.logits[0].argmax(-1))
        v, i = torch.log_softmax(out.logits[0].float(), -1).topk(3, -1)
        torch.testing.assert_close(batch.topk_logprobs[b, :n], v, atol=1e-5, rtol=1e-5)
        assert torch.equal(batch.topk_ids[b, :n, 0], batch.next_token[b, :n])


def test_batched_is_identical_to_batch_size_1_and_grouped_by_length():
    target = tiny("qwen3")
    rows = make_rows([9, 3, 14, 6, 11, 4, 8])
    taps = ["embed,L1,L2", "L1,L2,L3"]
    single = {b.rows[0]: b for b in extract(target, rows, taps, batch_size=1, progress=False)}
    batches = list(extract(target, rows, taps, batch_size=3, progress=False))
    assert [len(b) for b in batches] == [3, 3, 1]
    lengths = [int(n) for b in batches for n in b.lengths]
    assert lengths == sorted(len(r["input_ids"]) for r in rows)          # grouped by length
    for batch in batches:
        assert batch.input_ids.shape[1] == int(batch.lengths.max())
        for b, r in enumerate(batch.rows):
            n = len(rows[r]["input_ids"])
            ref = single[r]
            assert batch.input_ids[b, :n].tolist() == rows[r]["input_ids"]
            assert batch.loss_mask[b, :n].tolist() == rows[r]["loss_mask"]
            assert batch.attention_mask[b].tolist() == [1] * n + [0] * (batch.input_ids.shape[1] - n)
            assert int(batch.loss_mask[b, n:].sum()) == 0
            assert torch.equal(batch.next_token[b, :n], ref.next_token[0])
            for t in union_taps(taps, N):
                torch.testing.assert_close(batch.features[t][b, :n], ref.features[t][0], atol=1e-5, rtol=1e-5)
                assert float(batch.features[t][b, n:].abs().sum()) == 0.0
            assert batch.sources[b] == rows[r]["source"] and batch.n_prompt_tokens[b] == 2
    assert batches[0].concat(["L3", "L1"]).shape[-1] == 64
    torch.testing.assert_close(batches[0].concat("L3,L1")[..., :32], batches[0].features["L3"])


def test_one_forward_per_batch_for_many_wirings_without_output_hidden_states():
    target = tiny("mistral")
    rows = make_rows([5, 6, 7, 8, 9])
    seen = []
    h = target.model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("output_hidden_states")),
                                               with_kwargs=True)
    try:
        wirings = ["embed,L1,L2", "L1,L2,L3", "L0,L1,L2", "L0,L2,final"]
        with count_forwards(target.model) as c:
            batches = list(extract(target, rows, wirings, batch_size=2, progress=False))
    finally:
        h.remove()
    assert c == {"calls": 3, "samples": 5}                 # each sample goes through the target exactly once
    assert all(v is not True for v in seen)
    assert sorted(batches[0].features) == sorted(["embed", "L0", "L1", "L2", "L3", "final"])


def _n_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_are_removed_on_error_and_on_abandoned_iteration():
    target = tiny()
    before = _n_hooks(target.model)
    with pytest.raises(RuntimeError):
        with tap_hooks(target.model, ["embed", "L2", "final"]) as feats:
            assert _n_hooks(target.model) == before + 3
            raise RuntimeError("boom")
    assert _n_hooks(target.model) == before
    it = extract(target, make_rows([4, 5, 6]), "L1", batch_size=1, progress=False)
    next(it)
    assert _n_hooks(target.model) == before                 # removed before the batch is handed off
    it.close()
    assert _n_hooks(target.model) == before
    assert feats == {}


def test_cache_reused_and_resumed_after_interruption(tmp_path):
    target = tiny("qwen2")
    rows = make_rows([4, 9, 6, 12, 7, 5])
    taps = "embed,L1,L3"
    plain = list(extract(target, rows, taps, batch_size=2, topk=2, progress=False))

    class Killed(Exception):
        pass

    with count_forwards(target.model) as c:
        with pytest.raises(Killed):
            for i, _ in enumerate(extract(target, rows, taps, batch_size=2, topk=2, cache_dir=tmp_path, progress=False)):
                raise Killed()                              # interrupted after the first batch
    assert c["calls"] == 1
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["done"] == [0] and manifest["complete"] is False and manifest["taps"] == ["embed", "L1", "L3"]
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]

    with count_forwards(target.model) as c:                 # resume: only the missing batches run
        resumed = list(extract(target, rows, taps, batch_size=2, topk=2, cache_dir=tmp_path, progress=False))
    assert c["calls"] == 2
    assert [b.from_cache for b in resumed] == [True, False, False]
    with count_forwards(target.model) as c:                 # complete: no forward at all
        cached = list(extract(target, rows, taps, batch_size=2, topk=2, cache_dir=tmp_path, progress=False))
    assert c["calls"] == 0 and all(b.from_cache for b in cached)
    assert json.loads((folder / "manifest.json").read_text())["complete"] is True
    for a, b, d in zip(plain, resumed, cached):
        for x in (b, d):
            assert x.rows == a.rows and x.sources == a.sources and x.n_prompt_tokens == a.n_prompt_tokens
            for name in ("input_ids", "attention_mask", "loss_mask", "next_token", "topk_ids", "topk_logprobs"):
                assert torch.equal(getattr(x, name), getattr(a, name)), name
            for t in a.features:
                assert torch.equal(x.features[t], a.features[t])
    # different taps, data or target → a different cache entry, never a stale hit
    list(extract(target, rows, "L0", batch_size=2, cache_dir=tmp_path, progress=False))
    list(extract(tiny("qwen2", seed=5), rows, taps, batch_size=2, topk=2, cache_dir=tmp_path, progress=False))
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 3
    # a damaged shard is reported, not silently recomputed or trusted
    (folder / "batch-00001.safetensors").write_bytes(b"garbage")
    with pytest.raises(WorkbenchError, match=r"batch-00001\.safetensors is unreadable"):
        list(extract(target, rows, taps, batch_size=2, topk=2, cache_dir=tmp_path, progress=False))


def test_long_sequences_truncated_with_one_warning():
    target = tiny(max_position_embeddings=16)
    rows = make_rows([20, 8, 30])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        batches = list(extract(target, rows, "L1", batch_size=4, progress=False))
    msgs = [str(x.message) for x in w if "max positions" in str(x.message)]
    assert msgs == ["2 of 3 sequences are longer than the target's max positions 16; truncated to 16 tokens"]
    assert batches[0].lengths.tolist() == [8, 16, 16]
    assert batches[0].input_ids[2].tolist() == rows[2]["input_ids"][:16]


def test_bad_input_messages():
    target = tiny()
    rows = make_rows([5])
    with pytest.raises(WorkbenchError, match=r"'L4' is out of range: the target has N=4 .* L0\.\.L3"):
        list(extract(target, rows, "embed,L1,L4", progress=False))
    bad = [{"input_ids": [1, 2, 500], "_where": "val.jsonl:7"}]
    with pytest.raises(WorkbenchError, match=r"val\.jsonl:7: token id 500 is outside the target's vocabulary 0\.\.95"):
        extract(target, bad, "L1", progress=False)
    with pytest.raises(WorkbenchError, match=r"val\.jsonl:3: loss_mask has 2 entries but input_ids has 3"):
        extract(target, [{"input_ids": [1, 2, 3], "loss_mask": [1, 1], "_where": "val.jsonl:3"}], "L1")
    with pytest.raises(WorkbenchError, match="no rows"):
        extract(target, [], "L1")
    with pytest.raises(WorkbenchError, match=r"draft fc expects input width 96 = 3 taps × H but wiring embed,L3 "
                                             r"gives 64 \(2 taps × H=32\)"):
        check_width(["embed", "L3"], target, 96)
    check_width("embed,L1,L3", target, 96)
    b = next(extract(target, rows, "L1", progress=False))
    with pytest.raises(WorkbenchError, match="L2 were not captured"):
        b.concat(["L1", "L2"])

    class NoLayers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = transformers.LlamaConfig(**COMMON)
            self.body = torch.nn.Linear(2, 2)

    with pytest.raises(WorkbenchError, match=r"NoLayers has no recognisable decoder-layer list \(tried model\.layers, "):
        target_from_model(NoLayers())


def _save_tiny(tmp_path, vocab_words):
    from tokenizers import Tokenizer, models, pre_tokenizers

    target = tiny("llama")
    folder = tmp_path / "target"
    target.model.save_pretrained(folder)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab_words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(folder)
    return target, folder


def test_load_target_from_folder(tmp_path):
    target, folder = _save_tiny(tmp_path, ["<unk>"] + [f"w{i}" for i in range(50)])
    assert (folder / "model.safetensors").exists()
    loaded = load_target(folder, device="cpu")
    assert (loaded.n_layers, loaded.hidden_size, loaded.vocab_size, loaded.max_positions) == (N, 32, 96, 64)
    assert loaded.dtype == torch.float32 and loaded.device == "cpu" and loaded.tokenizer is not None
    assert loaded.embed_weight().shape == (96, 32)
    rows = [{"input_ids": loaded.tokenizer("w1 w2 w3 w7")["input_ids"]}]
    a = next(extract(target, rows, "L3", progress=False))
    b = next(extract(loaded, rows, "L3", progress=False))
    torch.testing.assert_close(a.features["L3"], b.features["L3"])
    assert next(extract(loaded, rows, "L3", progress=False)).input_ids.tolist() == [[2, 3, 4, 8]]
    # ids the tokenizer cannot produce (51..95 are padding rows of the embedding) mean the data was
    # tokenized with another tokenizer
    with pytest.raises(WorkbenchError, match=r"d\.jsonl:2: token id 70 is outside the target's tokenizer .*0\.\.50"):
        extract(loaded, [{"input_ids": [3, 70], "_where": "d.jsonl:2"}], "L3")


def test_load_target_bad_input(tmp_path):
    with pytest.raises(WorkbenchError, match="not a folder"):
        load_target(tmp_path / "nope")
    with pytest.raises(WorkbenchError, match="no config.json"):
        load_target(tmp_path)
    _, folder = _save_tiny(tmp_path, ["<unk>"] + [f"w{i}" for i in range(120)])
    with pytest.raises(WorkbenchError, match=r"tokenizer has 121 tokens but the target's embedding has only 96 rows"):
        load_target(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(WorkbenchError, match="config.json"):
        load_target(folder)


def test_a_draft_given_as_the_target_is_named_as_such(tmp_path):
    """An EAGLE-3 draft folder passed as the target: one line naming it, not a layer-count error later."""
    from conftest import tiny_draft

    from workbench.model.checkpoint import save_draft
    from workbench.cli import main

    folder = tmp_path / "draft"
    save_draft(tiny_draft(tiny_target(num_hidden_layers=2), [0, 1, 1]), folder)
    with pytest.raises(WorkbenchError, match=r"this is an EAGLE-3 draft \(LlamaForCausalLMEagle3\), not a target: "
                                             r"pass it as --draft"):
        load_target(folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(cfg, architectures=["Eagle3LlamaForCausalLM"])))
    with pytest.raises(WorkbenchError, match=r"EAGLE-3 draft \(Eagle3LlamaForCausalLM\)"):
        load_target(folder)
    assert main(["accept", "--target", str(folder), "--draft", str(folder), "--data", "x.jsonl"]) == 2
