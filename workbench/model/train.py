"""Training-time-test trainer for EAGLE-3 drafts (SpecForge ``core/eagle3.py`` recipe), and vocab maps.

    >>> from workbench.model import draft, train
    >>> cfg = draft.new_draft_config(target.config, layer_ids=[1, 3, 4])        # doctest: +SKIP
    >>> model = draft.Eagle3Draft.from_config(cfg, target.embed_weight())       # doctest: +SKIP
    >>> log = train.train_draft(model, target, dataset, ["L1", "L3", "L4"], K=4)  # doctest: +SKIP
    >>> log.acc_per_step                                                          # doctest: +SKIP
    [0.61, 0.48, 0.40, 0.35]

K unrolled steps over the whole sequence at once: step k at position p feeds the teacher-forced
token x_{p+1+k} with the draft's OWN hidden from step k-1, at rotary position p+k, attending to
step-0 keys at positions <= p plus its own keys of steps 1..k (the layout of
:func:`workbench.draft.run_chains`). Label: the target's greedy token for position p+2+k
(``next_token[p+1+k]``) mapped into the draft vocab; positions whose label is outside the draft
vocab, on padding, or with ``loss_mask`` 0 are skipped. Loss = sum_k 0.8^k CE_k.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from workbench.core.errors import WorkbenchError
from workbench.engines.wiring import Wiring
from workbench.model import capture
from workbench.model.draft import unroll


@dataclass
class TrainLog:
    """``losses``: one total loss per optimizer step; ``acc_per_step[k]``: top-1 agreement with the
    target's token at draft step k+1 over the last epoch (teacher-forced inputs, SpecForge acc_k)."""

    steps: int = 0
    losses: list[float] = field(default_factory=list)
    acc_per_step: list[float] = field(default_factory=list)
    seconds: float = 0.0
    epochs: int = 0
    stopped_early: bool = False


@contextlib.contextmanager
def deterministic(seed: int):
    """``torch.manual_seed(seed)`` and deterministic algorithms inside the block (restored after)."""
    was = torch.are_deterministic_algorithms_enabled()
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)


def _features(batch, taps) -> torch.Tensor:
    missing = [t for t in taps if t not in batch.features]
    if missing:
        raise WorkbenchError(f"batch has no features for taps {missing} (it has {sorted(batch.features)})")
    return torch.cat([batch.features[t] for t in taps], dim=-1)


def ttt_targets(draft, input_ids, attention_mask, loss_mask, next_token, K: int):
    """Teacher tokens [B,T,K] (x_{p+1+k}), draft-vocab labels [B,T,K] and the valid mask [B,T,K].

    Label of step k at p: ``next_token[p+1+k]`` (the target's greedy token for position p+2+k);
    valid when p+2+k < T, that position is a real token with loss_mask 1, and the draft vocab has it.
    """
    B, T = input_ids.shape
    dev = input_ids.device
    teacher = torch.zeros(B, T, K, dtype=torch.long, device=dev)
    labels = torch.zeros(B, T, K, dtype=torch.long, device=dev)
    valid = torch.zeros(B, T, K, dtype=torch.bool, device=dev)
    use = (attention_mask.bool() & loss_mask.bool())
    for k in range(K):
        n = T - 1 - k                       # positions p with x_{p+1+k} inside the row
        if n > 0:
            teacher[:, :n, k] = input_ids[:, 1 + k:]
        m = T - 2 - k                       # positions p with p+2+k < T
        if m > 0:
            lab = draft.target_to_draft(next_token[:, 1 + k: 1 + k + m].to(draft.d2t.device)).to(dev)
            labels[:, :m, k] = lab.clamp(min=0)
            valid[:, :m, k] = use[:, 2 + k:] & (lab >= 0)
    return teacher, labels, valid


def soft_labels(draft, topk_ids, topk_logprobs, K: int):
    """The target's next-token distributions as labels (SpecForge's online ``target_p``), from its top-k:
    ``(ids [B,T,K,k] in draft ids, clamped, probs [B,T,K,k])``; step k at p takes the distribution at p+1+k,
    restricted to the draft vocabulary and renormalised (ids outside it get probability 0).

        >>> # ids, probs = soft_labels(model, batch.topk_ids, batch.topk_logprobs, K=4)
    """
    B, T, k = topk_ids.shape
    ids = torch.zeros(B, T, K, k, dtype=torch.long, device=topk_ids.device)
    probs = torch.zeros(B, T, K, k, dtype=torch.float32, device=topk_ids.device)
    for s in range(K):
        m = T - 2 - s
        if m <= 0:
            continue
        d = draft.target_to_draft(topk_ids[:, 1 + s: 1 + s + m].to(draft.d2t.device)).to(topk_ids.device)
        p = topk_logprobs[:, 1 + s: 1 + s + m].float().exp() * (d >= 0)
        ids[:, :m, s] = d.clamp(min=0)
        probs[:, :m, s] = p / p.sum(-1, keepdim=True).clamp(min=1e-12)
    return ids, probs


def train_on_batches(draft, batches, taps, *, K: int, optimizer, loss_decay: float = 0.8,
                     max_grad_norm: float | None = 0.5, deadline: float | None = None,
                     soft: bool = False) -> TrainLog:
    """One pass of training-time-test steps over ``batches`` (objects like ``capture.Batch``).

        >>> opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)  # doctest: +SKIP
        >>> log = train_on_batches(model, batches, ["L1", "L3", "L4"], K=4, optimizer=opt)       # doctest: +SKIP

    One optimizer step per batch. ``deadline`` (a ``time.monotonic()`` value) stops early. ``soft``: the loss is
    the cross-entropy against the target's top-k distribution (the batches carry ``topk_ids``/``topk_logprobs``,
    ``capture.extract(topk=k)``; :func:`soft_labels`), not against its argmax; accuracy is still top-1 agreement.
    """

    if not isinstance(K, int) or isinstance(K, bool) or K < 1:
        raise WorkbenchError(f"K (training-time-test steps) must be a positive integer, got {K!r}")
    taps = list(taps)
    t0 = time.monotonic()
    log = TrainLog()
    hits = torch.zeros(K, dtype=torch.float64)
    counts = torch.zeros(K, dtype=torch.float64)
    dev = draft.fc.weight.device
    draft.train()
    for batch in batches:
        if deadline is not None and time.monotonic() > deadline:
            log.stopped_early = True
            break
        feats = _features(batch, taps).to(dev)
        ids, am = batch.input_ids.to(dev), batch.attention_mask.to(dev)
        teacher, labels, valid = ttt_targets(draft, ids, am, batch.loss_mask.to(dev),
                                             batch.next_token.to(dev), K)
        if soft:
            if batch.topk_ids is None:
                raise WorkbenchError("soft labels need the target's top-k per position (capture.extract(topk=k))")
            s_ids, s_p = soft_labels(draft, batch.topk_ids.to(dev), batch.topk_logprobs.to(dev), K)
        total = feats.new_zeros((), dtype=torch.float32)
        for k, logits in enumerate(unroll(draft, feats, ids, am, K, teacher=teacher)):
            v = valid[:, :, k]
            if not v.any():
                continue
            lg = logits[v].float()
            if soft:
                ce = -(s_p[:, :, k][v] * lg.log_softmax(-1).gather(-1, s_ids[:, :, k][v])).sum(-1).mean()
            else:
                ce = F.cross_entropy(lg, labels[:, :, k][v])
            total = total + (loss_decay ** k) * ce
            with torch.no_grad():
                hits[k] += float((lg.argmax(-1) == labels[:, :, k][v]).sum())
                counts[k] += float(v.sum())
        if not total.requires_grad:          # nothing to learn from in this batch
            continue
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_([p for p in draft.parameters() if p.requires_grad], max_grad_norm)
        optimizer.step()
        log.steps += 1
        log.losses.append(float(total.detach()))
    draft.eval()
    log.acc_per_step = [float(h / c) if c else float("nan") for h, c in zip(hits, counts)]
    log.seconds = time.monotonic() - t0
    return log


def train_draft(draft, target, dataset, taps, *, K: int = 4, epochs: int = 1, lr: float = 1e-3,
                batch_size: int = 8, seed: int = 0, max_seconds: float | None = None,
                progress: bool = True) -> TrainLog:
    """Train ``draft`` on ``dataset`` with features from ``target`` at ``taps`` (via ``capture.extract``).

        >>> log = train_draft(model, target, dataset, ["L1", "L3", "L4"], K=4, epochs=2)   # doctest: +SKIP

    Deterministic given ``seed``. The draft's embedding stays frozen (it is the target's).
    """

    taps = list(Wiring.parse(taps, target.n_layers).taps)
    if len(taps) != 3:
        raise WorkbenchError(f"an EAGLE-3 draft reads 3 taps, got {len(taps)}: {','.join(taps)}")
    capture.check_width(taps, target, 3 * draft.target_hidden_size, where="draft fc")
    if not isinstance(epochs, int) or epochs < 1:
        raise WorkbenchError(f"epochs must be a positive integer, got {epochs!r}")
    if not lr > 0:
        raise WorkbenchError(f"lr must be positive, got {lr!r}")
    dev = getattr(target, "device", None)
    if dev is not None and str(draft.fc.weight.device) != str(torch.device(dev)):
        draft.to(dev)
    t0 = time.monotonic()
    deadline = t0 + max_seconds if max_seconds else None
    log = TrainLog()
    with deterministic(seed):
        opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=lr)
        for epoch in range(epochs):
            batches = capture.extract(target, dataset, taps, batch_size=batch_size, progress=False)  # one line/epoch
            e = train_on_batches(draft, batches, taps, K=K, optimizer=opt, deadline=deadline)
            log.steps += e.steps
            log.losses += e.losses
            log.acc_per_step = e.acc_per_step
            log.epochs = epoch + 1
            if progress:
                acc = ", ".join(f"{a:.3f}" for a in e.acc_per_step)
                last = f"{e.losses[-1]:.4f}" if e.losses else "n/a"
                print(f"  epoch {epoch + 1}/{epochs}: {e.steps} steps, loss {last}, acc per step [{acc}]",
                      flush=True)
            if e.stopped_early or (deadline is not None and time.monotonic() > deadline):
                log.stopped_early = True
                break
    log.seconds = time.monotonic() - t0
    return log


def build_vocab_map(token_counts, vocab_size: int, draft_vocab_size: int):
    """``(d2t offsets int64 [draft_vocab_size], t2d bool [vocab_size])`` from token frequencies.

        >>> d2t, t2d = build_vocab_map({5: 10, 2: 7, 9: 1}, vocab_size=12, draft_vocab_size=2)
        >>> (torch.arange(2) + d2t).tolist(), t2d.nonzero().flatten().tolist()
        ([2, 5], [2, 5])

    As SpecForge: the ``draft_vocab_size`` most frequent ids (ties: lower id first; too few seen →
    filled with the lowest unused ids), sorted ascending, ``d2t[i] = used[i] - i``.
    ``token_counts``: a dict/Counter {id: count} or a 1-D tensor/list of counts indexed by id.
    """
    if not 0 < draft_vocab_size <= vocab_size:
        raise WorkbenchError(f"draft_vocab_size must be in 1..vocab_size ({vocab_size}), got {draft_vocab_size}")
    if isinstance(token_counts, dict):
        items = [(int(t), int(c)) for t, c in token_counts.items()]
    else:
        counts = torch.as_tensor(token_counts).flatten().tolist()
        items = [(i, int(c)) for i, c in enumerate(counts) if c]
    bad = [t for t, _ in items if not 0 <= t < vocab_size]
    if bad:
        raise WorkbenchError(f"token_counts has id {bad[0]} outside the vocab [0, {vocab_size})")
    items = sorted((x for x in items if x[1] > 0), key=lambda x: (-x[1], x[0]))[:draft_vocab_size]
    used = {t for t, _ in items}
    fill = (i for i in range(vocab_size) if i not in used)
    while len(used) < draft_vocab_size:
        used.add(next(fill))
    used = torch.tensor(sorted(used), dtype=torch.long)
    d2t = used - torch.arange(draft_vocab_size)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d
