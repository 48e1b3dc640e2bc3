"""workbench.model.train: training-time-test targets, the trainer on hand-made batches, determinism, vocab maps."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from workbench.model.draft import Eagle3Draft, new_draft_config, run_chains, unroll
from workbench.core.errors import WorkbenchError
from workbench.model.train import build_vocab_map, train_on_batches, ttt_targets

V, H, TAPS = 30, 32, ["L1", "L2", "L3"]


@dataclass
class HandBatch:
    """The fields of capture.Batch the trainer reads."""
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    features: dict
    next_token: torch.Tensor


def make_draft(seed=0, draft_vocab=None):
    torch.manual_seed(seed)
    cfg = new_draft_config({"vocab_size": V, "hidden_size": H, "num_attention_heads": 4,
                            "intermediate_size": 64}, draft_vocab_size=draft_vocab, layer_ids=[1, 2, 3])
    return Eagle3Draft.from_config(cfg, torch.randn(V, H))


def counting_batches(n_batches=6, B=8, T=12, seed=0):
    """x_{p+1} = x_p + 1 (mod V); the 'target' predicts it perfectly; features carry x_p too."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        start = torch.randint(0, V, (B, 1), generator=g)
        ids = (start + torch.arange(T)) % V
        lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
        am = (torch.arange(T)[None] < lengths[:, None]).long()
        ids = ids * am
        lm = am.clone()
        lm[:, :3] = 0                                  # "prompt" tokens: no loss
        nxt = (ids + 1) % V
        feats = {t: torch.nn.functional.one_hot(ids, H).float() * (i + 1) for i, t in enumerate(TAPS)}
        out.append(HandBatch(ids, am, lm, feats, nxt))
    return out


def test_ttt_targets_alignment_padding_loss_mask_and_draft_vocab():
    d = make_draft(draft_vocab=20)           # d2t = 0: draft covers target ids 0..19
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 25, 11, 0, 0, 0]])
    am = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    lm = torch.tensor([[0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0]])
    nxt = torch.tensor([[14, 15, 16, 17, 18, 19], [29, 12, 13, 1, 1, 1]])
    teacher, labels, valid = ttt_targets(d, ids, am, lm, nxt, K=3)
    assert teacher[0, :, 0].tolist() == [4, 5, 6, 7, 8, 0]          # x_{p+1}
    assert teacher[0, :, 2].tolist() == [6, 7, 8, 0, 0, 0]          # x_{p+3}
    assert labels[0, :, 0].tolist()[:4] == [15, 16, 17, 18]         # next_token[p+1] -> predicts p+2
    assert labels[0, :, 1].tolist()[:3] == [16, 17, 18]             # next_token[p+2]
    # row 0: positions p with p+2+k < 6 and loss_mask[p+2+k] == 1
    assert valid[0, :, 0].tolist() == [True, True, True, True, False, False]
    assert valid[0, :, 2].tolist() == [True, True, False, False, False, False]
    # row 1: length 3; label next_token[1] = 12 at p=0 predicts position 2 (loss_mask 1) -> valid
    assert valid[1, :, 0].tolist() == [True, False, False, False, False, False]
    # a label outside the draft vocab is skipped
    nxt2 = nxt.clone()
    nxt2[0, 1] = 25
    _, _, valid2 = ttt_targets(d, ids, am, lm, nxt2, K=1)
    assert not valid2[0, 0, 0] and valid2[0, 1, 0]


def test_training_layout_is_the_chain_layout():
    """Teacher-forcing the draft's own greedy tokens reproduces run_chains' logits exactly."""
    d = make_draft(draft_vocab=20)
    b = counting_batches(1, B=3, T=8)[0]
    feats = torch.cat([b.features[t] for t in TAPS], -1)
    out = run_chains(d, feats, b.input_ids, b.attention_mask, 4, return_logits=True)
    teacher = torch.zeros(3, 8, 4, dtype=torch.long)
    teacher[:, :-1, 0] = b.input_ids[:, 1:]
    teacher[:, :, 1:] = out.tokens[:, :, :3]
    with torch.no_grad():
        logits = torch.stack(list(unroll(d, feats, b.input_ids, b.attention_mask, 4, teacher=teacher)), 2)
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)


def test_trainer_learns_a_learnable_task_and_reports_per_step_accuracy():
    d = make_draft()
    feats, ids, am = _chain_inputs()
    before = run_chains(d, feats, ids, am, K=3).tokens
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=2e-2)
    batches = counting_batches(6, B=4, T=10)
    first = train_on_batches(d, batches, TAPS, K=3, optimizer=opt)
    for _ in range(3):
        log = train_on_batches(d, batches, TAPS, K=3, optimizer=opt)
    assert first.steps == 6 and len(first.losses) == 6 and len(log.acc_per_step) == 3
    assert log.losses[-1] < 0.3 * first.losses[0]
    assert log.acc_per_step[0] > 0.85 and log.acc_per_step[2] > 0.5
    assert all(0.0 <= a <= 1.0 for a in first.acc_per_step)
    # the trained draft drafts the counting continuation as a real chain (start p=3: bonus x_4)
    toks = run_chains(d, feats, ids, am, K=3).tokens
    want = torch.stack([(ids[:, 4] + 1 + k) % V for k in range(3)], -1)
    assert (toks[:, 3] == want).float().mean() > 0.8
    assert not torch.equal(before, toks)
    assert not d.embed_tokens.weight.requires_grad


def _chain_inputs():
    b = counting_batches(1, B=4, T=10, seed=7)[0]
    return torch.cat([b.features[t] for t in TAPS], -1), b.input_ids, b.attention_mask


def _train_once(seed):
    torch.manual_seed(seed)
    d = make_draft(seed)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=3e-3)
    log = train_on_batches(d, counting_batches(3, B=4, T=8), TAPS, K=2, optimizer=opt)
    return log, d.fc.weight.detach().clone()


def test_training_is_deterministic_given_the_seed():
    a, wa = _train_once(0)
    b, wb = _train_once(0)
    c, wc = _train_once(1)
    assert a.losses == b.losses and torch.equal(wa, wb)
    assert a.losses != c.losses


def test_bad_trainer_input():
    d = make_draft()
    opt = torch.optim.AdamW(d.fc.parameters())
    with pytest.raises(WorkbenchError, match="K .* positive integer"):
        train_on_batches(d, counting_batches(1), TAPS, K=0, optimizer=opt)
    with pytest.raises(WorkbenchError, match=r"no features for taps \['L9'\]"):
        train_on_batches(d, counting_batches(1), ["L1", "L2", "L9"], K=1, optimizer=opt)


def test_build_vocab_map_like_specforge():
    d2t, t2d = build_vocab_map({7: 50, 3: 50, 11: 9, 2: 1, 5: 0}, vocab_size=16, draft_vocab_size=3)
    used = (torch.arange(3) + d2t).tolist()
    assert used == [3, 7, 11]                      # top-3 by count, sorted ascending
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool and t2d.nonzero().flatten().tolist() == used
    d2t, _ = build_vocab_map(torch.tensor([0, 0, 5, 0, 9]), vocab_size=5, draft_vocab_size=3)
    assert (torch.arange(3) + d2t).tolist() == [0, 2, 4]      # too few seen -> lowest unused id filled in
    d = make_draft(draft_vocab=3)
    d.set_vocab_map(*build_vocab_map({29: 3, 1: 2, 17: 1}, V, 3))
    assert d.to_target(torch.arange(3)).tolist() == [1, 17, 29]
    assert d.target_to_draft(torch.tensor([17, 2])).tolist() == [1, -1]
    with pytest.raises(WorkbenchError, match="outside the vocab"):
        build_vocab_map({99: 1}, vocab_size=16, draft_vocab_size=3)


def test_train_draft_end_to_end_with_capture():
    from conftest import random_rows, tiny_draft, tiny_target

    from workbench.model.train import train_draft

    target = tiny_target(vocab_size=V, hidden_size=H, num_key_value_heads=4, max_position_embeddings=64)
    rows = [{**r, "seq_len": 10, "n_prompt_tokens": 4, "n_response_tokens": 6, "source": "code", "_row": i,
             "_where": f"x:{i + 1}"} for i, r in enumerate(random_rows(V, [10] * 8, prompt=4, seed=0))]

    def fresh():
        return tiny_draft(target, seed=0)

    a = train_draft(fresh(), target, rows, TAPS, K=2, epochs=2, batch_size=4, seed=0, progress=False)
    b = train_draft(fresh(), target, rows, "L1,L2,L3", K=2, epochs=1, batch_size=4, seed=0, progress=False)
    assert a.steps == 4 and a.epochs == 2 and len(a.acc_per_step) == 2 and b.steps == 2
    assert a.losses[:2] == b.losses and a.losses[-1] < a.losses[0]
    with pytest.raises(WorkbenchError, match="3 taps"):
        train_draft(fresh(), target, rows, "L1,L2", K=2, progress=False)
