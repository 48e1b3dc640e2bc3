"""Acceptance statistics on hand-made A values (no model needed)."""

import json
import math

import numpy as np
import pytest
import torch

from workbench.stats.statistics import AcceptanceResult
from workbench.stats.counts import accepted_counts, decode_path, wilson
from workbench.core.errors import WorkbenchError


def _reference_counts(tokens, next_token, loss_mask, lengths, K):
    """Direct transcription of the definition, one chain at a time."""
    B, T = next_token.shape
    out = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):
        L = int(lengths[b])
        for t in range(T):
            if t + K + 1 > L - 1:
                continue
            if not all(int(loss_mask[b, p]) == 1 for p in range(t + 2, t + K + 2)):
                continue
            a = 0
            for k in range(1, K + 1):                      # d_k vs g_{t+k+1} = next_token[t+k]
                if int(tokens[b, t, k - 1]) != int(next_token[b, t + k]):
                    break
                a += 1
            out[b, t] = a
    return out


@pytest.mark.parametrize("K", [1, 2, 3, 5])
def test_accepted_counts_matches_definition(K):
    torch.manual_seed(K)
    B, T, V = 3, 14, 3                                    # tiny vocab: plenty of partial matches
    next_token = torch.randint(0, V, (B, T))
    tokens = torch.randint(0, V, (B, T, K + 1))           # extra columns beyond K are ignored
    loss_mask = torch.ones(B, T, dtype=torch.long)
    loss_mask[0, :4] = 0                                  # prompt
    loss_mask[1, 8] = 0                                   # a hole in the response
    lengths = torch.tensor([14, 12, 9])
    for b in range(B):
        loss_mask[b, lengths[b]:] = 0                     # padding
    got = accepted_counts(tokens, next_token, loss_mask, lengths, K)
    want = _reference_counts(tokens, next_token, loss_mask, lengths, K)
    assert torch.equal(got, want)
    assert (got >= 0).any() and (got == -1).any()
    assert set(got[got >= 0].tolist()) <= set(range(K + 1))


def test_accepted_counts_hand_example():
    g = torch.tensor([[10, 11, 12, 13, 14, 15, 16]])      # next_token[p] = g_{p+1}
    # chain at t drafts for positions t+2, t+3: perfect drafts are g_{t+2}=next_token[t+1], next_token[t+2]
    tokens = torch.tensor([[[11, 12], [12, 99], [99, 14], [14, 15], [0, 0], [0, 0], [0, 0]]])
    A = accepted_counts(tokens, g, torch.ones(1, 7, dtype=torch.long), torch.tensor([7]), K=2)
    # counted: t + 3 <= 6  ->  t <= 3
    assert A.tolist() == [[2, 1, 0, 2, -1, -1, -1]]
    # prompt of 3 tokens: position 2 is not a response token -> chain at t=0 (positions 2,3) dropped
    A = accepted_counts(tokens, g, torch.tensor([[0, 0, 0, 1, 1, 1, 1]]), torch.tensor([7]), K=2)
    assert A.tolist() == [[-1, 1, 0, 2, -1, -1, -1]]


def test_accepted_counts_bad_shapes():
    with pytest.raises(WorkbenchError, match=r"expected \[B, T, K>=3\]"):
        accepted_counts(torch.zeros(1, 5, 2, dtype=torch.long), torch.zeros(1, 5), torch.ones(1, 5),
                        torch.tensor([5]), K=3)
    with pytest.raises(WorkbenchError, match="loss_mask has shape"):
        accepted_counts(torch.zeros(1, 5, 2, dtype=torch.long), torch.zeros(1, 5), torch.ones(1, 4),
                        torch.tensor([5]), K=2)
    with pytest.raises(WorkbenchError, match="K=0"):
        accepted_counts(torch.zeros(1, 5, 2, dtype=torch.long), torch.zeros(1, 5), torch.ones(1, 5),
                        torch.tensor([5]), K=0)


def test_decode_path_follows_accepts_and_stops_at_uncounted():
    A = [-1, -1, 3, 0, 0, 0, 1, 9, 0, 2, -1, -1]
    # start t=2 (prompt 3): A=3 -> t=6: A=1 -> t=8: A=0 -> t=9: A=2 -> t=12 out of range
    assert decode_path(A, n_prompt_tokens=3, K=3) == [(2, 3), (6, 1), (8, 0), (9, 2)]
    assert decode_path([-1, 0, 0], n_prompt_tokens=1, K=2) == []         # first chain not counted
    with pytest.raises(WorkbenchError, match="exceeds K=2"):
        decode_path([3], n_prompt_tokens=1, K=2)


def _example():
    # sample 0 (source a): A = 0, 1, 2, 2 ; sample 1 (source b): A = 1, 0
    return AcceptanceResult.from_arrays("embed,L1,L3", K=2, sample=[0, 0, 0, 0, 1, 1], t=[1, 2, 3, 4, 0, 1],
                                        accepted=[0, 1, 2, 2, 1, 0], source=["a"] * 4 + ["b"] * 2,
                                        on_path=[True, True, False, True, True, False])


def test_statistics_by_hand():
    r = _example()
    assert r.n_chains == 6 and r.n_samples == 2 and r.taps == ("embed", "L1", "L3")
    assert r.histogram.tolist() == [2, 2, 2]
    assert np.allclose(r.cumulative, [4 / 6, 2 / 6])
    assert np.allclose(r.conditional, [4 / 6, 2 / 4])
    assert r.accept_length_no_bonus == pytest.approx(6 / 6)
    assert r.accept_length == pytest.approx(2.0)
    # SpecForge identity: sum of cumulative products of alpha = E[A]
    assert np.cumprod(r.conditional).sum() == pytest.approx(r.accept_length_no_bonus)
    dp = r.decode_path                                     # on-path A: 0, 1, 2, 1
    assert dp["n_verify_steps"] == 4 and dp["histogram"].tolist() == [1, 2, 1]
    assert dp["accept_length"] == pytest.approx(2.0)


def test_from_counts_marks_decode_path():
    A = torch.tensor([[-1, 2, 0, 0, 1, 0, 0, -1], [0, 0, 1, -1, -1, -1, -1, -1]])
    r = AcceptanceResult.from_counts(A, K=2, spec="L1,L2,L3", rows=[7, 9], n_prompt_tokens=[2, 1],
                                     sources=["x", "y"])
    f = r.to_frame()
    assert len(f) == 9 and sorted(set(f["sample"])) == [7, 9]
    path7 = f[(f["sample"] == 7) & f["on_path"]]["t"].tolist()
    path9 = f[(f["sample"] == 9) & f["on_path"]]["t"].tolist()
    assert path7 == [1, 4, 6] and path9 == [0, 1, 2]      # 1 -A2-> 4 -A1-> 6 -A0-> 7 (uncounted)


def test_wilson_and_bootstrap():
    lo, hi = wilson(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.49, 0.943)
    assert all(math.isnan(x) for x in wilson(0, 0))
    lo, hi = wilson(0, 50)
    assert lo == 0 and 0 < hi < 0.1
    r = _example()
    iv = r.intervals()
    assert iv == r.intervals()                              # seeded: reproducible
    lo, hi = iv["accept_length"]
    assert lo <= r.accept_length <= hi
    # bootstrap is over SAMPLES: sample means are 2.25 and 1.5, so no resample can leave that range
    assert 1.5 - 1e-9 <= lo and hi <= 2.25 + 1e-9
    assert iv["conditional"][0] == list(wilson(4, 6))


def test_bootstrap_width_shrinks_with_more_samples():
    rng = np.random.default_rng(0)
    def make(n):
        acc = rng.integers(0, 4, size=n * 5)
        return AcceptanceResult.from_arrays("L1", K=3, sample=np.repeat(np.arange(n), 5), t=np.tile(np.arange(5), n),
                                            accepted=acc)
    small, big = make(10).intervals()["accept_length"], make(400).intervals()["accept_length"]
    assert (big[1] - big[0]) < (small[1] - small[0]) / 3


def test_merge_is_exact_and_checks():
    r = _example()
    a, b = r.filter(source="a"), r.filter(source="b")
    assert a.n_chains == 4 and b.n_samples == 1
    m = a.merge(b)
    assert m.to_json() == r.to_json()
    assert AcceptanceResult.concat([b, a]).histogram.tolist() == r.histogram.tolist()
    with pytest.raises(WorkbenchError, match="disjoint"):
        a.merge(a)
    other = AcceptanceResult.from_arrays("L1,L2,L3", K=2, sample=[5], t=[0], accepted=[1])
    with pytest.raises(WorkbenchError, match="same wiring"):
        a.merge(other)


def test_by_source_and_json_keys(tmp_path):
    r = _example()
    bs = r.by_source()
    assert set(bs) == {"a", "b"}
    assert bs["a"]["histogram"] == [1, 1, 2] and bs["b"]["accept_length"] == pytest.approx(1.5)
    out = tmp_path / "acc.json"
    js = r.to_json(out, ratio=0.1)
    on_disk = json.loads(out.read_text())
    assert on_disk == json.loads(json.dumps(js))
    for key in ("wiring", "steps", "n_samples", "n_chains", "conditional", "cumulative", "histogram",
                "accept_length", "accept_length_no_bonus", "decode_path", "by_source"):
        assert key in on_disk, key
    assert on_disk["wiring"] == {"spec": "embed,L1,L3", "taps": ["embed", "L1", "L3"]}
    assert len(on_disk["conditional"]) == 2 and len(on_disk["histogram"]) == 3
    assert set(on_disk["decode_path"]) >= {"n_verify_steps", "accept_length", "histogram"}
    assert on_disk["by_source"]["a"]["decode_path"]["n_verify_steps"] == 3
    assert on_disk["top1"] is None                          # not measured -> null, never NaN in JSON
    lines = r.write_chains(tmp_path / "chains.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "chains.jsonl").read_text().splitlines()]
    assert lines == 6 and rows[0] == {"sample": 0, "t": 1, "accepted": 0, "source": "a", "on_path": True}


def test_empty_result_is_nan_not_crash():
    r = AcceptanceResult.from_arrays("L1", K=3, sample=[], t=[], accepted=[])
    assert r.n_chains == 0 and math.isnan(r.accept_length)
    js = r.to_json()
    assert js["accept_length"] is None and js["histogram"] == [0, 0, 0, 0]


def test_speedup_projection():
    # A values of K=3 chains
    one = AcceptanceResult.from_arrays("L1", K=3, sample=[0] * 4, t=[0, 1, 2, 3], accepted=[3, 3, 1, 0])
    assert not any(d["best"] for d in one.speedup(0.0))              # one sample: no interval, no "best"
    r = AcceptanceResult.from_arrays("L1", K=3, sample=[0] * 4 + [1] * 4, t=[0, 1, 2, 3] * 2,
                                     accepted=[3, 3, 1, 0] * 2)
    sp = r.speedup(0.0)
    assert [d["tokens_per_step"] for d in sp] == [1.75, 2.25, 2.75]   # E[min(A,K')]+1
    assert [d["best"] for d in sp] == [False, False, True]          # free drafting: more is better
    sp = r.speedup(1.0)                                              # drafting as costly as the target
    assert [d["k"] for d in sp if d["best"]] == [1]
    assert sp[0]["speedup"] == pytest.approx(1.75 / 2)
    with pytest.raises(WorkbenchError, match="cost ratio"):
        r.speedup()


def test_top_k_and_coverage():
    A = torch.tensor([[0, 1, 1, -1]])
    hits = torch.tensor([[[0, 1], [1, 1], [1, 1], [0, 0]]])
    r = AcceptanceResult.from_counts(A, K=1, spec="L1", rows=[0], n_prompt_tokens=[1], top_hits=hits,
                                     coverage=([10], [8]))
    assert r.top1 == pytest.approx(2 / 3) and r.top5 == pytest.approx(1.0) and r.coverage == pytest.approx(0.8)
    assert r.top1 == pytest.approx(r.cumulative[0])
