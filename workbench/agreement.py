"""Greedy agreement: how far the data's responses are from the target's own greedy output.

    >>> import torch
    >>> from workbench.agreement import Agreement
    >>> x = torch.tensor([[1, 2, 3, 4, 5]])               # input ids x_0..x_4
    >>> g = torch.tensor([[9, 3, 3, 5, 0]])               # next_token: g_{p+1} at p
    >>> m = torch.tensor([[0, 0, 1, 1, 1]])               # response = x_2, x_3, x_4
    >>> a = Agreement.from_tensors(x, g, m, rows=[7], sources=["chat"])
    >>> a.n_match.tolist(), a.n_tokens.tolist(), a.share   # x_2 == g_2 and x_4 == g_4, x_3 != g_3
    ([2], [3], 0.6666666666666666)
    >>> a.by_source()["chat"]["share"]
    0.6666666666666666

The **greedy agreement** of a sample is the share of its response tokens (``loss_mask == 1``,
position j >= 1) where ``x_j == g_j``, the target's argmax given ``x_0..x_{j-1}``. It comes from
the one teacher-forced target pass the estimators already make (``capture.Batch.next_token``,
``g_j = next_token[j-1]``): no extra forward. Per source it is pooled over tokens.

Why it matters: the decode-path estimator, the exact-loop equality and the live comparison assume
each response is the target's greedy output (agreement 1). Below :data:`THRESHOLD` (0.98) the
every-position estimator measures teacher-forced acceptance on *this* data, and the decode path
is only an approximation of what a server sees; :meth:`Agreement.check` says so once, in plain
words, and points at ``workbench regenerate``. Data sampled at a temperature > 0 (its per-row
``generation`` key says so) is judged by those recorded settings, not by agreement: a sample of
the target is *expected* to disagree with its argmax.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from workbench.errors import WorkbenchError

THRESHOLD = 0.98


class AgreementWarning(UserWarning):
    """Greedy decoding was asked for, but the data's responses are not the target's greedy output."""


def greedy_matches(input_ids, next_token, loss_mask, attention_mask=None):
    """Per sample ``(n_match, n_tokens)`` as int64 tensors ``[B]`` (the fast path, vectorised).

        >>> import torch
        >>> n, d = greedy_matches(torch.tensor([[4, 5, 6]]), torch.tensor([[5, 0, 0]]), torch.tensor([[0, 1, 1]]))
        >>> n.tolist(), d.tolist()
        ([1], [2])

    Position j (>= 1) counts when ``loss_mask[j] == 1`` (and ``attention_mask[j] == 1`` when given);
    it matches when ``input_ids[j] == next_token[j-1]``.
    """
    import torch

    x, g, m = (torch.as_tensor(t) for t in (input_ids, next_token, loss_mask))
    if x.dim() != 2 or g.shape != x.shape or m.shape != x.shape:
        raise WorkbenchError(f"greedy agreement: input_ids {tuple(x.shape)}, next_token {tuple(g.shape)} and "
                             f"loss_mask {tuple(m.shape)} must all be [B, T]")
    counted = m[:, 1:].bool()
    if attention_mask is not None:
        counted &= torch.as_tensor(attention_mask)[:, 1:].to(counted.device).bool()
    hit = (x[:, 1:] == g[:, :-1].to(x.device)) & counted.to(x.device)
    return hit.sum(1).long().cpu(), counted.sum(1).long().cpu()


def greedy_matches_reference(input_ids: list[int], next_token: list[int], loss_mask: list[int]) -> tuple[int, int]:
    """One sample, a plain loop over positions: the exact reference :func:`greedy_matches` is tested against.

        >>> greedy_matches_reference([4, 5, 6], [5, 0, 0], [0, 1, 1])
        (1, 2)
    """
    n = d = 0
    for j in range(1, len(input_ids)):
        if loss_mask[j]:
            d += 1
            n += int(input_ids[j] == next_token[j - 1])
    return n, d


def is_sampled(generation) -> bool:
    """True when a row's recorded ``generation`` says it was sampled (temperature > 0, top_k != 1).

        >>> is_sampled({"by": "target", "temperature": 0.7}), is_sampled({"by": "target", "temperature": 0}), is_sampled(None)
        (True, False, False)
    """
    if not isinstance(generation, dict):
        return False
    t = generation.get("temperature")
    k = generation.get("top_k")
    return isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 1e-6 and k != 1


def warning_text(share: float, n_tokens: int, *, threshold: float = THRESHOLD, sources: dict | None = None) -> str:
    """The plain-words warning for low agreement (what is measured then, and how to fix it).

        >>> print(warning_text(0.41, 1200).splitlines()[0])
        greedy agreement 0.410 < 0.98: 59% of the 1200 response tokens differ from the target's greedy choice, so this data is not the target's own greedy output.
    """
    worst = ""
    if sources and len(sources) > 1:
        lo = sorted(sources.items(), key=lambda kv: kv[1])[:3]
        worst = " By source: " + ", ".join(f"{k} {v:.3f}" for k, v in lo) + "."
    return (f"greedy agreement {share:.3f} < {threshold:g}: {1 - share:.0%} of the {n_tokens} response tokens differ "
            f"from the target's greedy choice, so this data is not the target's own greedy output.{worst}\n"
            "  - The every-position estimator then measures teacher-forced acceptance on your data: each chain is "
            "judged against contexts a server decoding greedily would never produce.\n"
            "  - The decode path is an approximation: after the first disagreement a server would continue from "
            "its own tokens, not from this data's.\n"
            "  - To fix it, replace the responses with the target's greedy continuation: "
            "workbench regenerate --target TARGET --data IN.jsonl --out OUT.jsonl, then run again on OUT.jsonl.")


@dataclass
class Agreement:
    """Per-sample greedy agreement counts; build with :meth:`from_tensors` / :meth:`add` / :meth:`from_batches`."""

    rows: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    n_match: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    n_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sampled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))   # recorded as sampled
    generations: Counter = field(default_factory=Counter)     # rows: sampled / greedy / not recorded
    _warned: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def from_tensors(cls, input_ids, next_token, loss_mask, *, rows, sources, attention_mask=None,
                     generations=None) -> "Agreement":
        a = cls()
        a.add_tensors(input_ids, next_token, loss_mask, rows=rows, sources=sources, attention_mask=attention_mask,
                      generations=generations)
        return a

    def add_tensors(self, input_ids, next_token, loss_mask, *, rows, sources, attention_mask=None,
                    generations=None) -> "Agreement":
        n, d = greedy_matches(input_ids, next_token, loss_mask, attention_mask)
        if len(rows) != len(n) or len(sources) != len(n):
            raise WorkbenchError(f"greedy agreement: {len(n)} samples but {len(rows)} rows and {len(sources)} sources")
        self.rows += [int(r) for r in rows]
        self.sources += [str(s) for s in sources]
        self.n_match = np.concatenate([self.n_match, n.numpy()])
        self.n_tokens = np.concatenate([self.n_tokens, d.numpy()])
        gens = list(generations) if generations is not None else [None] * len(n)
        self.sampled = np.concatenate([self.sampled, np.array([is_sampled(x) for x in gens], dtype=bool)])
        for gen in gens:
            self.generations["sampled" if is_sampled(gen) else "greedy" if isinstance(gen, dict) else "not recorded"] += 1
        return self

    def add(self, batch, generations=None) -> "Agreement":
        """Add one :class:`workbench.capture.Batch` (its ``next_token`` from the pass already made)."""
        return self.add_tensors(batch.input_ids, batch.next_token, batch.loss_mask, rows=batch.rows,
                                sources=batch.sources, attention_mask=batch.attention_mask, generations=generations)

    @classmethod
    def from_batches(cls, batches, generations: dict | None = None) -> "Agreement":
        """From capture batches; ``generations`` maps ``_row`` to the row's ``generation`` key (if any)."""
        a = cls()
        for b in batches:
            a.add(b, None if generations is None else [generations.get(r) for r in b.rows])
        return a

    # -- statistics ---------------------------------------------------------------------------------
    @property
    def n_samples(self) -> int:
        return len(self.rows)

    @property
    def share(self) -> float:
        """Pooled over all response tokens (NaN when there are none)."""
        d = int(self.n_tokens.sum())
        return float(self.n_match.sum()) / d if d else float("nan")

    @property
    def per_sample(self) -> np.ndarray:
        """Each sample's share (NaN for a sample without counted response tokens)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.n_tokens > 0, self.n_match / np.maximum(self.n_tokens, 1), np.nan)

    def by_source(self) -> dict[str, dict]:
        """``{source: {samples, tokens, matches, share, min_sample}}``, plus ``(all)`` when several sources."""
        src = np.asarray(self.sources)
        out = {}
        keys = sorted(set(self.sources))
        for k in keys + (["(all)"] if len(keys) > 1 else []):
            sel = np.ones(len(src), bool) if k == "(all)" else src == k
            n, d = int(self.n_match[sel].sum()), int(self.n_tokens[sel].sum())
            ps = self.per_sample[sel]
            out[k] = {"samples": int(sel.sum()), "tokens": d, "matches": n, "share": n / d if d else None,
                      "min_sample": float(np.nanmin(ps)) if np.isfinite(ps).any() else None}
        return out

    def to_frame(self):
        """One row per sample: row, source, response tokens, matches, share."""
        import pandas as pd

        return pd.DataFrame({"row": self.rows, "source": self.sources, "tokens": self.n_tokens,
                             "matches": self.n_match, "share": self.per_sample})

    def to_dict(self) -> dict:
        return {"threshold": THRESHOLD, "share": None if np.isnan(self.share) else self.share,
                "tokens": int(self.n_tokens.sum()), "samples": self.n_samples, "by_source": self.by_source(),
                "generations": dict(self.generations)}

    def summary(self) -> str:
        lines = [f"greedy agreement {self.share:.3f} over {int(self.n_tokens.sum())} response tokens, "
                 f"{self.n_samples} samples"]
        for k, v in self.by_source().items():
            share = "n/a" if v["share"] is None else f"{v['share']:.3f}"
            lines.append(f"  {k}: {share} ({v['tokens']} tokens, {v['samples']} samples)")
        return "\n".join(lines)

    # -- the verdict --------------------------------------------------------------------------------
    def message(self, *, greedy: bool = True, threshold: float = THRESHOLD) -> str | None:
        """The warning text when it applies, else None.

        It applies when greedy decoding is asked for (``greedy=True``, the default) and the pooled
        agreement of the rows *not* recorded as sampled is below ``threshold``. Rows whose
        ``generation`` key records a temperature > 0 are judged by those settings, not by agreement.
        """
        keep = ~self.sampled
        if not greedy or not keep.any():
            return None
        sub = self if keep.all() else Agreement([r for r, k in zip(self.rows, keep) if k],
                                                [s for s, k in zip(self.sources, keep) if k],
                                                self.n_match[keep], self.n_tokens[keep], self.sampled[keep])
        if np.isnan(sub.share) or sub.share >= threshold:
            return None
        by = {k: v["share"] for k, v in sub.by_source().items() if k != "(all)" and v["share"] is not None}
        return warning_text(sub.share, int(sub.n_tokens.sum()), threshold=threshold, sources=by)

    def check(self, *, greedy: bool = True, threshold: float = THRESHOLD, warn: bool = True) -> str | None:
        """:meth:`message`, also emitted as an :class:`AgreementWarning` (once per object) when ``warn``."""
        msg = self.message(greedy=greedy, threshold=threshold)
        if msg and warn and not self._warned:
            self._warned = True
            warnings.warn(msg, AgreementWarning, stacklevel=2)
        return msg


__all__ = ["THRESHOLD", "Agreement", "AgreementWarning", "greedy_matches", "greedy_matches_reference",
           "is_sampled", "warning_text"]
