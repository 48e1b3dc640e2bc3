"""Rejection-sampling chains: SGLang ``--speculative-use-rejection-sampling`` (eagle_topk 1) and vLLM
``draft_sample_method="probabilistic"``, from the one teacher-forced target pass and a draft chain fed
the data's tokens.

    >>> # res = rejection_chains(target, draft, ds, "L1,L3,L4", Setting(steps=4, temperature=0.7))
    >>> # res.accept_length, res.cumulative, res.summary_lines()

There the draft samples y ~ q (q = the draft's distribution at the served temperature, with the same
top-k/top-p renormalisation as p: SGLang ``eagle_worker.get_renorm_probs``; sampling.md writes
softmax(draft_logits / T), the same when top-k and top-p are off) and the target accepts it with
min(1, p(y)/q(y)), the replacement drawn from relu(p − q). The emitted stream is still a sample of p,
and given it (``shared/sampling.md``): P(A >= k | y) = Π_{j<=k} w_j, w_j = min(1, q_j(y_j)/p_j(y_j)),
with q_j from the draft chain fed y_1..y_{j-1} (the data) and its own hidden states. The low-variance
form Σ_k (Π_{j<k} w_j)·β_k, β_k = Σ_x min(p_k, q_k)(x), is what :class:`RejectionResult` reports
(``sampled.rejection_chain`` holds both forms; tests/test_sampled.py checks them by Monte Carlo).

Cost: no extra target forward. The draft runs its K steps once more, teacher-forced on the data
(``draft.unroll(teacher=)``), and β_k needs the full p and q rows: the target's lm_head runs again
over the kept final hidden states, K times, in memory-budgeted chunks (``workbench.model.chunks``). The
every-position mean is reported (a rejection-sampling server's path depends on its own coins).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import jsonable
from workbench.core.sampling import as_sampling
from workbench.engines.wiring import as_wirings
from workbench.load.inputs import rows as as_rows
from workbench.model import capture
from workbench.model.chunks import memory_budget, rows_per_chunk
from workbench.model.draft import unroll
from workbench.model.served import verify_probs
from workbench.simulate.sampled import StartTable, data_next_tokens
from workbench.stats.counts import counted_starts


@dataclass
class RejectionResult(StartTable):
    """Per counted chain: E[A | y] (low-variance form) and P(A >= k | y) (product form)."""

    steps: int
    sample: np.ndarray
    expected: np.ndarray            # [n] Σ_k (Π_{j<k} w_j) β_k
    expected_plain: np.ndarray      # [n] Σ_k Π_{j<=k} w_j
    at_least: np.ndarray            # [n, K] Π_{j<=k} w_j
    setting: object = None
    seed: int = 0

    def to_dict(self) -> dict:
        return jsonable({"estimator": "rejection-sampling chain: Σ_k (Π_{j<k} w_j) β_k on data sampled from the target",
                         "n_chains": self.n, "accept_length": self.accept_length,
                         "accept_length_interval": self.interval(), "cumulative": self.cumulative})

    def summary_lines(self) -> list[str]:
        lo, hi = self.interval()
        cum = ", ".join(f"{x:.3f}" for x in self.cumulative)
        return [f"rejection-sampling chain (SGLang --speculative-use-rejection-sampling / vLLM probabilistic): "
                f"accept length {self.accept_length:.3f} [95% {lo:.3f}–{hi:.3f}] over {self.n} chains; "
                f"P(A>=k) [{cum}]"]


def rejection_batch(draft, feats, batch, lm_head, s, K: int, *, max_memory=None):
    """(w [B, T, K], β [B, T, K]) of one batch from ``capture.extract(..., sampling=)`` (``hidden`` kept)."""
    import torch


    dev = feats.device
    B, T = batch.input_ids.shape
    x = batch.input_ids.to(dev)
    nxt = data_next_tokens(batch.input_ids, batch.attention_mask).to(dev).clamp(min=0)       # x_{p+1}
    # teacher[b, p, k] = x_{p+1+k}: the token the chain at p feeds at step k (the data's)
    xpad = torch.cat([x, torch.zeros(B, K + 1, dtype=x.dtype, device=dev)], 1)
    teacher = torch.stack([xpad[:, 1 + k: 1 + k + T] for k in range(K)], -1)
    hidden = batch.hidden
    hdev = hidden.device
    V = int(lm_head.weight.shape[0]) if hasattr(lm_head, "weight") else None
    budget = memory_budget(dev, max_memory)
    w = torch.zeros(B, T, K, dtype=torch.float64, device=dev)
    beta = torch.zeros_like(w)
    d2t_ids = draft.to_target(torch.arange(draft.draft_vocab_size, device=dev))
    outs = []

    def keep(h):                  # unroll's head: keep the step's hidden (teacher-forced steps need no ids)
        outs.append(h)
        return h

    with torch.no_grad():
        for _ in unroll(draft, feats, batch.input_ids, batch.attention_mask, K, teacher=teacher, head=keep,
                        max_memory=max_memory):
            pass
        for k, hk in enumerate(outs):
            flat = hk.reshape(B * T, -1)
            rows = rows_per_chunk(B * T, 4 * 8 * max(V or 1, draft.draft_vocab_size), budget)
            for a in range(0, B * T, rows):
                sl = slice(a, min(B * T, a + rows))
                bi, ti = torch.div(torch.arange(sl.start, sl.stop, device=dev), T, rounding_mode="floor"), \
                    torch.arange(sl.start, sl.stop, device=dev) % T
                q_d = verify_probs(draft.logits(flat[sl]).float(), s)                         # [n, Vd]
                tp = (ti + 1 + k).clamp(max=T - 1)                                            # target position
                p = verify_probs(lm_head(hidden[bi.to(hdev), tp.to(hdev)]).float(), s).to(dev)   # [n, V]
                q = torch.zeros_like(p).index_add_(1, d2t_ids, q_d)                           # target vocab
                y = nxt[bi, tp][:, None]                                                      # x_{t+2+k}
                py, qy = p.gather(1, y)[:, 0].double(), q.gather(1, y)[:, 0].double()
                w[bi, ti, k] = torch.where(py > 0, torch.clamp(qy / py.clamp_min(1e-300), max=1.0), torch.zeros_like(py))
                beta[bi, ti, k] = torch.minimum(p, q).sum(1).double()
    return w, beta


def rejection_chains(target, draft, dataset, wiring, setting, *, limit: int | None = None, batch_size: int = 8,
                     progress: bool = True, max_memory=None, seed: int = 0) -> RejectionResult:
    """Rejection-sampling acceptance of chains (module docstring) at ``setting``'s sampling (T > 0)."""
    import torch


    if setting.shape != "chain":
        raise WorkbenchError(f"rejection sampling drafts a chain (SGLang: eagle_topk 1 only); got {setting.label}")
    s = as_sampling(setting)
    if s.greedy:
        raise WorkbenchError("rejection sampling needs a temperature > 0 (at T = 0 the server verifies greedily)")
    w_ = as_wirings(wiring, target.n_layers)[0]
    K = setting.steps
    rows = as_rows(dataset, limit)
    if not rows:
        raise WorkbenchError("rejection_chains: the dataset has no rows")
    lm_head = capture.split_head(target.model)[1]
    ddev, ddtype = draft.device, draft.dtype
    out = {"sample": [], "lv": [], "plain": [], "cum": []}
    for batch in capture.extract(target, rows, [w_.spec], batch_size=batch_size, progress=progress,
                                 max_memory=max_memory, sampling=s):
        feats = batch.concat(w_.taps).to(device=ddev, dtype=ddtype)
        w, beta = rejection_batch(draft, feats, batch, lm_head, s, K, max_memory=max_memory)
        counted = counted_starts(batch.loss_mask.cpu(), batch.lengths.cpu(), K)
        cum = torch.cumprod(w, -1).cpu()
        reach = torch.cat([torch.ones_like(cum[..., :1]), cum[..., :-1]], -1)
        lv = (reach * beta.cpu()).sum(-1)
        bi, ti = torch.nonzero(counted, as_tuple=True)
        out["sample"].extend(np.asarray(batch.rows)[bi.numpy()].tolist())
        out["lv"].append(lv[bi, ti].numpy())
        out["plain"].append(cum.sum(-1)[bi, ti].numpy())
        out["cum"].append(cum[bi, ti].numpy())
    cat = lambda k: np.concatenate(out[k]) if out[k] else np.zeros(0)  # noqa: E731
    return RejectionResult(steps=K, sample=np.asarray(out["sample"], np.int64), expected=cat("lv"),
                           expected_plain=cat("plain"), at_least=cat("cum").reshape(-1, K), setting=setting, seed=seed)


__all__ = ["RejectionResult", "rejection_batch", "rejection_chains"]
