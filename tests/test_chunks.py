"""workbench.model.chunks and its users: the head in memory-budgeted chunks equals the unchunked head
(target capture against the HF model's own logits, draft chains against chunk-free runs and the
sequential reference), budgets parse, models that cannot be split are refused."""

from __future__ import annotations

import pytest
import torch
import transformers

from workbench.model import capture
from workbench.model.chunks import head_chunks, memory_budget, parse_memory, rows_per_chunk
from workbench.model.draft import Eagle3Draft, chain_reference, new_draft_config, run_chains
from workbench.core.errors import WorkbenchError


def test_head_chunks_equal_the_unchunked_head_for_any_budget():
    g = torch.Generator().manual_seed(0)
    hidden, w = torch.randn(3, 11, 16, generator=g), torch.randn(40, 16, generator=g)
    head = lambda h: h @ w.T                                                    # noqa: E731
    full = head(hidden)
    lp = torch.log_softmax(full, -1)
    for budget in (1, 4 * 4 * 40 * 5, 10 ** 9):                                # 1 row, 5 rows, everything
        out = head_chunks(hidden, head, topk=5, temperature=0.6, keep_logits=True, max_memory=budget)
        assert torch.equal(out.ids, full.argmax(-1))
        assert torch.equal(out.topk_ids, lp.topk(5, -1).indices)
        torch.testing.assert_close(out.topk_logprobs, lp.topk(5, -1).values, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out.logits, full, rtol=1e-6, atol=1e-6)   # 1 ulp: BLAS kernels differ by row count
        torch.testing.assert_close(out.log_normaliser, torch.logsumexp(full / 0.6, -1), rtol=1e-6, atol=1e-6)
    assert head_chunks(hidden, head, max_memory=1).chunk_rows == 1
    plain = head_chunks(hidden, head)
    assert plain.topk_ids is None and plain.logits is None and plain.log_normaliser is None


def test_budgets_parse_and_bad_ones_are_one_line_errors():
    assert parse_memory("1GiB") == 2 ** 30 and parse_memory("10 MB") == 10 ** 7 and memory_budget("cpu", 123) == 123
    assert rows_per_chunk(100, 10, 1000) == 100 and rows_per_chunk(100, 10, 50, minimum=16) == 16
    for bad in ("lots", "-1GB", "0", "2 parsecs"):
        with pytest.raises(WorkbenchError, match="--max-memory"):
            parse_memory(bad)
    with pytest.raises(WorkbenchError, match="temperature"):
        head_chunks(torch.zeros(2, 3), lambda h: h, temperature=0)


def test_cli_accept_refuses_a_bad_max_memory_before_loading(tmp_path, capsys):
    from workbench.cli import main as cli_main

    rc = cli_main(["accept", "--target", str(tmp_path / "no-target"), "--draft", str(tmp_path / "no-draft"),
                   "--data", str(tmp_path / "no.jsonl"), "--max-memory", "lots"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: --max-memory 'lots'") and err.count("\n") == 1


def tiny_target(seed=0, **extra):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, **extra)
    return capture.target_from_model(transformers.LlamaForCausalLM(cfg))


def rows(n=3, T=20, V=96, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, V, (T - 3 * i,), generator=g).tolist()} for i in range(n)]


def test_capture_in_chunks_equals_the_models_own_logits():
    target = tiny_target()
    data = rows()
    (big,) = capture.extract(target, data, "L1,L2,L3", batch_size=3, topk=4, progress=False, max_memory="1GB")
    (small,) = capture.extract(target, data, "L1,L2,L3", batch_size=3, topk=4, progress=False, max_memory=1)
    with torch.no_grad():
        logits = target.model(input_ids=big.input_ids, attention_mask=big.attention_mask).logits
    real = big.attention_mask.bool()
    lp = torch.log_softmax(logits.float(), -1).topk(4, -1)
    for b in (big, small):
        assert torch.equal(b.next_token[real], logits.argmax(-1)[real])
        assert torch.equal(b.topk_ids[real], lp.indices[real])
        torch.testing.assert_close(b.topk_logprobs[real], lp.values[real], rtol=1e-6, atol=1e-6)
        assert torch.equal(b.features["L2"], big.features["L2"])


def test_models_whose_logits_are_not_lm_head_of_the_hidden_are_refused():
    with pytest.raises(WorkbenchError, match="final_logit_softcapping"):
        capture.split_head(tiny_target(final_logit_softcapping=30.0).model)

    class Scaled(transformers.LlamaForCausalLM):                  # a forward that rescales its logits
        def forward(self, *a, **k):
            out = super().forward(*a, **k)
            out.logits = out.logits * 3
            return out

    torch.manual_seed(0)
    model = Scaled(transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4))
    target = capture.target_from_model(model)
    with torch.no_grad():
        model.lm_head.weight.mul_(20)                              # logits large enough to tell apart
    with pytest.raises(WorkbenchError, match="not lm_head"):
        next(capture.extract(target, rows(), "L0", progress=False))


def make_draft(seed=0, kv=2):
    torch.manual_seed(seed)
    cfg = new_draft_config({"vocab_size": 60, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": kv,
                            "intermediate_size": 64}, layer_ids=[1, 3, 4], draft_vocab_size=40, num_key_value_heads=kv)
    d = Eagle3Draft.from_config(cfg, torch.randn(60, 32))
    d.set_vocab_map(torch.randperm(60)[:40].sort().values - torch.arange(40))
    return d


def test_draft_chains_in_chunks_equal_chunk_free_ones_and_padding_rows_equal_rows_alone():
    d = make_draft()
    g = torch.Generator().manual_seed(2)
    T, lengths = 30, (30, 17, 4)
    feats, ids = torch.randn(3, T, 96, generator=g), torch.randint(0, 60, (3, T), generator=g)
    mask = torch.zeros(3, T, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    big = run_chains(d, feats, ids, mask, 4, acc_topk=3, return_logits=True, max_memory="1GB")
    small = run_chains(d, feats, ids, mask, 4, acc_topk=3, return_logits=True, max_memory=1)
    assert torch.equal(big.tokens, small.tokens) and torch.equal(big.topk_ids, small.topk_ids)
    torch.testing.assert_close(small.logits, big.logits, rtol=1e-6, atol=1e-6)
    for b, n in enumerate(lengths):                 # a padded row's real positions = the row run alone
        alone = run_chains(d, feats[b:b + 1, :n], ids[b:b + 1, :n], mask[b:b + 1, :n], 4, return_logits=True)
        m = n - 1                                    # chains at p >= n-1 have no bonus token: not compared
        assert torch.equal(alone.tokens[0, :m], big.tokens[b, :m])
        torch.testing.assert_close(alone.logits[0, :m], big.logits[b, :m], rtol=1e-5, atol=1e-5)
    k1 = run_chains(d, feats, ids, mask, 1)                         # K=1: no extra keys at all
    assert torch.equal(k1.tokens[..., 0], big.tokens[..., 0])


def test_long_row_chains_equal_the_sequential_reference():
    d = make_draft(kv=4)
    g = torch.Generator().manual_seed(3)
    T = 400
    feats, ids = torch.randn(1, T, 96, generator=g), torch.randint(0, 60, (1, T), generator=g)
    out = run_chains(d, feats, ids, torch.ones(1, T, dtype=torch.long), 3, return_logits=True, max_memory=20000)
    for t in (0, 1, 200, T - 2):
        toks, logits = chain_reference(d, feats[0], ids[0], t, 3, return_logits=True)
        assert torch.equal(out.tokens[0, t], toks)
        torch.testing.assert_close(out.logits[0, t], logits, rtol=1e-4, atol=1e-4)


def test_a_mask_that_is_not_right_padded_is_refused():
    d = make_draft()
    with pytest.raises(WorkbenchError, match="right-padded"):
        run_chains(d, torch.randn(1, 4, 96), torch.zeros(1, 4, dtype=torch.long), torch.tensor([[0, 1, 1, 1]]), 2)
