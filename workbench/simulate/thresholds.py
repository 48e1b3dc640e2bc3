"""Lossy verify thresholds (SGLang ``--speculative-accept-threshold-single/-acc``): the exact per-start
expectation of A, from one extra target forward per row over the row and its drafted trees.

    >>> # res = threshold_expectation(target, draft, ds, "L1,L3,L4",
    >>> #                             Setting(steps=3, eagle_topk=2, num_draft_tokens=5, temperature=0.7),
    >>> #                             threshold_single=0.9, threshold_acc=0.5)
    >>> # res.accept_length, res.lossless_accept_length, res.cost

With thresholds below 1 the walk (``verify_walk.sglang_walk``) accepts a child when the coin is below
the running sum / ``threshold_acc`` or its probability reaches ``threshold_single``: no longer an
exact sample of p, so A is no longer a function of the emitted stream and the decode path on data
does not apply. What is exact is the expectation of A at a given prefix: the sum of the nodes' reach
probabilities (``verify_walk.expected_accept``), which needs p after every tree node, i.e. the
target over each drafted tree, the forward a server's verify makes.

Cost (printed by ``workbench accept``): per row, one target forward over the row followed by the
trees of all its counted starts (in chunks of at most ``max_tree_tokens`` tree tokens), each node
attending to its prefix and its ancestors (``tree_verify.ancestor_mask`` generalised to many trees).
The prefixes are the data's: the numbers are the expected accept length at these prefixes (every
counted start), not along the lossy server's own (different) output.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import jsonable
from workbench.core.sampling import as_sampling
from workbench.engines.wiring import as_wirings
from workbench.load.inputs import rows as as_rows
from workbench.model import capture
from workbench.model.draft import run_chains
from workbench.model.served import verify_probs
from workbench.model.tree import draft_trees
from workbench.simulate.sampled import StartTable, chain_as_tree
from workbench.simulate.tree_verify import ancestor_mask, tree_forward
from workbench.simulate.verify_walk import expected_accept
from workbench.stats.counts import counted_starts


@dataclass
class ThresholdResult(StartTable):
    """Per counted start: E[A] and P(A >= k) under the thresholds, and the lossless values (thresholds 1)
    from the same forward. ``cost``: target forwards, tokens they carried, seconds."""

    steps: int
    threshold_single: float
    threshold_acc: float
    sample: np.ndarray
    expected: np.ndarray            # [n] E[A] under the thresholds
    at_least: np.ndarray            # [n, S] P(A >= k), k = 1..S
    lossless: np.ndarray            # [n] E[A] with thresholds 1
    setting: object = None
    cost: dict = field(default_factory=dict)
    seed: int = 0

    @property
    def lossless_accept_length(self) -> float:
        return float(self.lossless.mean()) + 1 if self.n else math.nan

    def to_dict(self) -> dict:
        return jsonable({"threshold_single": self.threshold_single, "threshold_acc": self.threshold_acc,
                         "estimator": "exact per-start expectation (reach probabilities; target forward over "
                                      "each drafted tree), at the data's prefixes",
                         "n_starts": self.n, "accept_length": self.accept_length,
                         "accept_length_interval": self.interval(), "cumulative": self.cumulative,
                         "lossless_accept_length": self.lossless_accept_length, "cost": self.cost})

    def summary_lines(self) -> list[str]:
        lo, hi = self.interval()
        c = self.cost
        return [f"lossy thresholds (single {self.threshold_single:g}, acc {self.threshold_acc:g}): expected accept "
                f"length {self.accept_length:.3f} [95% {lo:.3f}–{hi:.3f}] over {self.n} starts (lossless, same "
                f"trees: {self.lossless_accept_length:.3f}); output no longer distributed as the target's",
                f"  cost: {c.get('target_forwards', 0)} extra target forwards over {c.get('tokens', 0)} tokens "
                f"({c.get('tree_tokens', 0)} tree tokens), {c.get('seconds', 0.0):.1f} s"]


def trees_mask(L: int, starts, parents_list, depths_list):
    """(bool mask [L+n, L+n], positions [L+n]) of one forward over a row of L tokens followed by the trees
    of ``starts`` (tree at t: its nodes see x_0..x_{t+1}, their ancestors and themselves; node at depth d
    sits at position t+1+d).

        >>> m, pos = trees_mask(3, [0], [[0, 1]], [[1, 2]])
        >>> m.int().tolist(), pos
        ([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 1, 1]], [0, 1, 2, 2, 3])
    """
    import torch


    n = sum(len(p) for p in parents_list)
    m = torch.zeros(L + n, L + n, dtype=torch.bool)
    m[:L, :L] = torch.tril(torch.ones(L, L, dtype=torch.bool))
    pos = list(range(L))
    off = L
    for t, parents, depths in zip(starts, parents_list, depths_list):
        k = len(parents)                  # each tree's nodes: the row up to its root, then tree_verify's ancestors
        m[off:off + k, : t + 2] = True
        m[off:off + k, off:off + k] = ancestor_mask(parents, t + 2)[t + 2:, t + 2:]
        pos += [t + 1 + int(d) for d in depths]
        off += k
    return m, pos


def threshold_expectation(target, draft, dataset, wiring, setting, *, threshold_single: float = 1.0,
                          threshold_acc: float = 1.0, limit: int | None = None, max_tree_tokens: int = 512,
                          batch_size: int = 8, progress: bool = True, max_memory=None,
                          seed: int = 0) -> ThresholdResult:
    """The exact expected A at every counted start of ``dataset`` under SGLang's thresholds (module docstring).

    Trees: ``tree.draft_trees`` on the one capture pass (a chain when ``setting`` is one); p: SGLang's
    verify distribution (``sampled.verify_probs``) of the target's logits after the root (the row's
    own position t+1) and after every node (the extra forward).
    """
    import torch


    w = as_wirings(wiring, target.n_layers)[0]
    s = as_sampling(setting)
    S = setting.steps
    rows = as_rows(dataset, limit)
    if not rows:
        raise WorkbenchError("threshold_expectation: the dataset has no rows")
    out = {"sample": [], "expected": [], "at_least": [], "lossless": []}
    cost = {"target_forwards": 0, "tokens": 0, "tree_tokens": 0, "seconds": 0.0}
    ddev, ddtype = draft.device, draft.dtype
    for batch in capture.extract(target, rows, [w.spec], batch_size=batch_size, progress=progress,
                                 max_memory=max_memory):
        feats = batch.concat(w.taps).to(device=ddev, dtype=ddtype)
        ids, att = batch.input_ids.to(ddev), batch.attention_mask.to(ddev)
        with torch.no_grad():
            if setting.shape == "tree":
                tr = draft_trees(draft, feats, ids, att, S, setting.eagle_topk, setting.num_draft_tokens,
                                 max_memory=max_memory)
                tok, par, dep = tr.tokens, tr.parents, tr.depths
            else:
                tok, par, dep = chain_as_tree(run_chains(draft, feats, ids, att, S, max_memory=max_memory).tokens)
        counted = counted_starts(batch.loss_mask, batch.lengths, S).cpu()     # the chain counting rule
        t0 = time.perf_counter()
        for b, row in enumerate(batch.rows):
            L = int(batch.lengths[b])
            x = batch.input_ids[b, :L].tolist()
            starts = [t for t in range(L) if bool(counted[b, t])]
            n_nodes = tok.shape[-1]
            per = max(1, int(max_tree_tokens) // max(1, n_nodes))
            for a in range(0, len(starts), per):
                chunk = starts[a: a + per]
                trees = [tok[b, t].tolist() for t in chunk]
                pars = [par[b, t].tolist() for t in chunk]
                deps = [dep[b, t].tolist() for t in chunk]
                mask, pos = trees_mask(L, chunk, pars, deps)
                seq = x + [v for tr_ in trees for v in tr_]
                logits, _ = tree_forward(target, [], seq, mask, pos)
                cost["target_forwards"] += 1
                cost["tokens"] += len(seq)
                cost["tree_tokens"] += len(seq) - L
                for i, t in enumerate(chunk):
                    rows_ = torch.cat([logits[t + 1: t + 2], logits[L + i * n_nodes: L + (i + 1) * n_nodes]])
                    probs = verify_probs(rows_, s).double().cpu().numpy()
                    e = expected_accept(trees[i], pars[i], probs, steps=S, threshold_single=threshold_single,
                                        threshold_acc=threshold_acc)
                    e1 = expected_accept(trees[i], pars[i], probs, steps=S)
                    out["sample"].append(row)
                    out["expected"].append(e[0])
                    out["at_least"].append(e[1:])
                    out["lossless"].append(e1[0])
        cost["seconds"] += time.perf_counter() - t0
    return ThresholdResult(steps=S, threshold_single=float(threshold_single), threshold_acc=float(threshold_acc),
                           sample=np.asarray(out["sample"], np.int64), expected=np.asarray(out["expected"]),
                           at_least=np.asarray(out["at_least"]).reshape(-1, S), lossless=np.asarray(out["lossless"]),
                           setting=setting, cost=cost, seed=seed)


__all__ = ["ThresholdResult", "threshold_expectation", "trees_mask"]
