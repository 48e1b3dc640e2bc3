"""Acceptance of an EAGLE-3 draft on a target: per-chain counts, their statistics, the fast simulation
and the exact speculative-decoding loop that validates it.

    >>> import torch
    >>> from workbench.acceptance import accepted_counts, decode_path, AcceptanceResult
    >>> next_token = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])      # g_{p+1} at p
    >>> tokens = next_token[:, :, None].roll(-1, dims=1).repeat(1, 1, 2)  # step-1 always right
    >>> tokens[..., 1] = 0                                              # step 2 always wrong
    >>> A = accepted_counts(tokens, next_token, torch.ones(1, 8, dtype=torch.long), torch.tensor([8]), K=2)
    >>> A.tolist()
    [[1, 1, 1, 1, 1, -1, -1, -1]]
    >>> decode_path(A[0], n_prompt_tokens=1, K=2)
    [(0, 1), (2, 1), (4, 1)]
    >>> r = AcceptanceResult.from_counts(A, K=2, spec="embed,L1,L3", rows=[0], n_prompt_tokens=[1],
    ...                                  sources=["demo"])
    >>> r.accept_length, r.accept_length_no_bonus, r.histogram.tolist()
    (2.0, 1.0, [0, 5, 0])

Definitions (exactly those of ARCHITECTURE.md). A sample is x_0..x_{T-1}; ``next_token[p]`` is the
target's greedy token g_{p+1}. The **chain at t** uses features h_0..h_t and bonus token x_{t+1},
drafts d_1..d_K for positions t+2..t+K+1 and accepts A(t) = number of leading k with
d_k == g_{t+k+1}. It is **counted** when t+K+1 <= T-1 and loss_mask[t+2..t+K+1] are all 1.
Greedy, chain drafting (topk 1). ``accept_length`` = E[A]+1 (bonus counted, SGLang/vLLM);
``accept_length_no_bonus`` = E[A] (SpecForge's simulated acc len).

- every-position estimator: all counted chains;
- decode-path estimator: start at t = n_prompt_tokens-1, then t <- t+A(t)+1 while a counted chain
  exists (what a server does when the sample is the target's greedy output).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

import numpy as np

from workbench.errors import WorkbenchError, atomic_write, jsonable, write_json

Z95 = 1.959963984540054
CONVENTION = "chain drafting (topk 1), greedy (temperature 0)"


# --------------------------------------------------------------------------------------------------
# Per-chain counts
# --------------------------------------------------------------------------------------------------

def accepted_counts(tokens, next_token, loss_mask, lengths, K: int):
    """A(t) for every chain: LongTensor[B, T], -1 where the chain at t is not counted.

        >>> import torch
        >>> g = torch.tensor([[1, 2, 3, 4, 5, 6]])
        >>> d = torch.stack([g.roll(-1, 1), g.roll(-2, 1)], -1)   # both steps right
        >>> accepted_counts(d, g, torch.tensor([[0, 0, 1, 1, 1, 1]]), torch.tensor([6]), K=2).tolist()
        [[2, 2, 2, -1, -1, -1]]

    ``tokens[b, t, k]`` (k = 0..K-1, at least K of them) is the (k+1)-th drafted token of the chain
    at t, in target ids; ``next_token[b, p]`` = g_{p+1}; ``lengths[b]`` = real (unpadded) length.
    """
    import torch

    tokens, next_token, loss_mask, lengths = (torch.as_tensor(x) for x in (tokens, next_token, loss_mask, lengths))
    if K < 1:
        raise WorkbenchError(f"steps K={K}: expected K >= 1")
    if tokens.dim() != 3 or tokens.shape[2] < K:
        raise WorkbenchError(f"draft tokens have shape {tuple(tokens.shape)}: expected [B, T, K>={K}]")
    B, T = tokens.shape[:2]
    for name, x in (("next_token", next_token), ("loss_mask", loss_mask)):
        if tuple(x.shape) != (B, T):
            raise WorkbenchError(f"{name} has shape {tuple(x.shape)}: expected [B, T] = [{B}, {T}]")
    if tuple(lengths.shape) != (B,):
        raise WorkbenchError(f"lengths has shape {tuple(lengths.shape)}: expected [B] = [{B}]")
    if bool((lengths > T).any()) or bool((lengths < 0).any()):
        raise WorkbenchError(f"lengths {lengths.tolist()} must lie in 0..T={T}")
    dev = tokens.device
    next_token, loss_mask, lengths = next_token.to(dev), loss_mask.to(dev), lengths.to(dev)
    tokens = tokens[:, :, :K].long()

    # match[b, t, k] = tokens[b, t, k] == next_token[b, t+k+1]   (g_{t+k+2})
    pad = torch.full((B, K), -1, dtype=torch.long, device=dev)
    g = torch.cat([next_token.long(), pad], dim=1)                          # [B, T+K]
    shifted = torch.stack([g[:, k + 1:k + 1 + T] for k in range(K)], dim=-1)  # [B, T, K]
    match = (tokens == shifted).long()
    A = match.cumprod(dim=-1).sum(dim=-1)                                  # leading matches

    # counted: t+K+1 <= len-1 and loss_mask[t+2 .. t+K+1] all 1
    lm = torch.cat([(loss_mask != 0).long(), torch.zeros(B, K + 2, dtype=torch.long, device=dev)], dim=1)
    csum = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=dev), lm.cumsum(dim=1)], dim=1)
    t = torch.arange(T, device=dev)
    window = csum[:, t + K + 2] - csum[:, t + 2]                            # sum of lm[t+2 .. t+K+1]
    counted = (window == K) & (t[None, :] + K + 1 <= lengths[:, None] - 1)
    return torch.where(counted, A, torch.full_like(A, -1))


def decode_path(A_row, n_prompt_tokens: int, K: int) -> list[tuple[int, int]]:
    """The verify steps a server would make on a target-greedy sample: list of (t, A(t)).

        >>> decode_path([-1, 2, -1, -1, 0, 1, -1, -1], n_prompt_tokens=2, K=2)
        [(1, 2), (4, 0), (5, 1)]

    Starts at t = n_prompt_tokens - 1 and moves t <- t + A(t) + 1 while the chain at t is counted.
    """
    A_row = [int(a) for a in (A_row.tolist() if hasattr(A_row, "tolist") else A_row)]
    if n_prompt_tokens < 1:
        raise WorkbenchError(f"n_prompt_tokens={n_prompt_tokens}: expected >= 1 (the first chain starts at "
                             f"t = n_prompt_tokens - 1)")
    steps, t = [], n_prompt_tokens - 1
    while 0 <= t < len(A_row) and A_row[t] >= 0:
        a = A_row[t]
        if a > K:
            raise WorkbenchError(f"A({t})={a} exceeds K={K}")
        steps.append((t, a))
        t += a + 1
    return steps


# --------------------------------------------------------------------------------------------------
# Statistics helpers (plain numpy on arrays of A values)
# --------------------------------------------------------------------------------------------------

def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval for a proportion; (nan, nan) when n == 0.

        >>> [round(x, 3) for x in wilson(8, 10)]
        [0.49, 0.943]
    """
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo, hi = center - half, center + half
    return (0.0 if successes == 0 else max(0.0, lo), 1.0 if successes == n else min(1.0, hi))


def _stats(A: np.ndarray, K: int) -> dict:
    """conditional, cumulative, histogram, accept lengths of an array of A values (all >= 0)."""
    A = np.asarray(A, dtype=np.int64)
    n = int(A.size)
    hist = np.bincount(A, minlength=K + 1)[:K + 1] if n else np.zeros(K + 1, dtype=np.int64)
    at_least = np.array([int((A >= k).sum()) for k in range(K + 1)])       # at_least[0] = n
    cumulative = np.array([at_least[k] / n if n else math.nan for k in range(1, K + 1)])
    conditional = np.array([at_least[k] / at_least[k - 1] if at_least[k - 1] else math.nan
                            for k in range(1, K + 1)])
    mean = float(A.mean()) if n else math.nan
    return {"n_chains": n, "conditional": conditional, "cumulative": cumulative, "histogram": hist,
            "accept_length": mean + 1, "accept_length_no_bonus": mean, "at_least": at_least}




# --------------------------------------------------------------------------------------------------
# The result object
# --------------------------------------------------------------------------------------------------

_CHAIN_COLS = ("sample", "t", "accepted", "source", "on_path", "top1", "top5")
_SAMPLE_COLS = ("sample", "source", "n_prompt_tokens", "n_response_tokens", "n_coverable")


def _empty_chains() -> dict:
    return {"sample": np.zeros(0, np.int64), "t": np.zeros(0, np.int64), "accepted": np.zeros(0, np.int64),
            "source": np.zeros(0, dtype=object), "on_path": np.zeros(0, bool),
            "top1": np.zeros(0, np.int8), "top5": np.zeros(0, np.int8)}


def _empty_samples() -> dict:
    return {"sample": np.zeros(0, np.int64), "source": np.zeros(0, dtype=object),
            "n_prompt_tokens": np.zeros(0, np.int64), "n_response_tokens": np.zeros(0, np.int64),
            "n_coverable": np.zeros(0, np.int64)}


@dataclass
class AcceptanceResult:
    """Acceptance of one wiring: the per-chain table and everything derived from it.

        >>> import numpy as np
        >>> r = AcceptanceResult.from_arrays("L1,L2,L3", K=2, sample=[0, 0, 1], t=[0, 2, 0],
        ...                                  accepted=[2, 0, 1], source=["a", "a", "b"])
        >>> r.cumulative.tolist(), r.conditional.tolist(), r.accept_length
        ([0.6666666666666666, 0.3333333333333333], [0.6666666666666666, 0.5], 2.0)
        >>> sorted(r.by_source())
        ['a', 'b']

    ``chains``: dict of equal-length numpy arrays, columns ``sample`` (dataset row, 0-based), ``t``
    (chain start), ``accepted`` (A, 0..K), ``source``, ``on_path`` (a decode-path verify step),
    ``top1``/``top5`` (step-1 target token in the draft's top-1/top-5; -1 = not measured).
    ``samples``: one entry per sample seen (``sample``, ``source``, ``n_prompt_tokens``,
    ``n_response_tokens``, ``n_coverable`` = response tokens the draft vocab can emit, -1 unknown).
    """

    spec: str
    taps: tuple[str, ...]
    steps: int
    chains: dict = field(default_factory=_empty_chains, repr=False)
    samples: dict = field(default_factory=_empty_samples, repr=False)
    cost_ratio: float | None = None          # measured draft-step / target-forward time, if any
    seed: int = 0                            # bootstrap seed

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, spec, K: int, *, sample, t, accepted, source=None, on_path=None,
                    top1=None, top5=None, samples: dict | None = None, taps=None) -> "AcceptanceResult":
        """Build from per-chain columns (the inverse of :meth:`to_frame`)."""
        n = len(accepted)
        cols = {"sample": np.asarray(sample, np.int64).reshape(-1), "t": np.asarray(t, np.int64).reshape(-1),
                "accepted": np.asarray(accepted, np.int64).reshape(-1)}
        cols["source"] = np.asarray(["" if s is None else str(s) for s in source] if source is not None
                                    else [""] * n, dtype=object)
        cols["on_path"] = np.asarray(on_path if on_path is not None else np.zeros(n, bool), bool)
        cols["top1"] = np.asarray(top1 if top1 is not None else np.full(n, -1), np.int8)
        cols["top5"] = np.asarray(top5 if top5 is not None else np.full(n, -1), np.int8)
        for k, v in cols.items():
            if len(v) != n:
                raise WorkbenchError(f"per-chain column {k!r} has {len(v)} entries: expected {n}")
        if n and (cols["accepted"].min() < 0 or cols["accepted"].max() > K):
            raise WorkbenchError(f"accepted counts must lie in 0..K={K} (got {cols['accepted'].min()}.."
                                 f"{cols['accepted'].max()})")
        if samples is None:
            uniq, first = np.unique(cols["sample"], return_index=True)
            samples = _empty_samples()
            samples.update(sample=uniq, source=cols["source"][first],
                           n_prompt_tokens=np.full(len(uniq), -1, np.int64),
                           n_response_tokens=np.full(len(uniq), -1, np.int64),
                           n_coverable=np.full(len(uniq), -1, np.int64))
        spec = spec.spec if hasattr(spec, "spec") else str(spec)
        taps = tuple(taps) if taps is not None else tuple(x for x in spec.split(",") if x)
        return cls(spec=spec, taps=taps, steps=int(K), chains=cols, samples=samples)

    @classmethod
    def from_counts(cls, A, *, K: int, spec, rows, n_prompt_tokens, sources=None, top_hits=None,
                    coverage=None, taps=None) -> "AcceptanceResult":
        """Build from ``accepted_counts`` output ``A[B, T]`` (-1 = not counted) of one batch.

        ``top_hits``: optional LongTensor/array [B, T, 2] with step-1 (top1, top5) hits;
        ``coverage``: optional (n_response_tokens[B], n_coverable[B]).
        """
        A = np.asarray(A.cpu() if hasattr(A, "cpu") else A, dtype=np.int64)
        if A.ndim != 2 or A.shape[0] != len(rows) or len(n_prompt_tokens) != len(rows):
            raise WorkbenchError(f"counts of shape {A.shape} do not match {len(rows)} rows / "
                                 f"{len(n_prompt_tokens)} prompt lengths")
        sources = [str(s) for s in sources] if sources is not None else [""] * len(rows)
        b_idx, t_idx = np.nonzero(A >= 0)
        on_path = np.zeros(len(b_idx), bool)
        for b in range(A.shape[0]):
            path_t = {t for t, _ in decode_path(A[b], int(n_prompt_tokens[b]), K)}
            sel = np.nonzero(b_idx == b)[0]
            on_path[sel] = np.isin(t_idx[sel], list(path_t))
        top1 = top5 = None
        if top_hits is not None:
            th = np.asarray(top_hits.cpu() if hasattr(top_hits, "cpu") else top_hits)
            top1, top5 = th[b_idx, t_idx, 0], th[b_idx, t_idx, 1]
        samples = _empty_samples()
        samples.update(sample=np.asarray(rows, np.int64), source=np.asarray(sources, dtype=object),
                       n_prompt_tokens=np.asarray(n_prompt_tokens, np.int64))
        if coverage is not None:
            samples["n_response_tokens"] = np.asarray(coverage[0], np.int64).reshape(-1)
            samples["n_coverable"] = np.asarray(coverage[1], np.int64).reshape(-1)
        else:
            samples["n_response_tokens"] = np.full(len(rows), -1, np.int64)
            samples["n_coverable"] = np.full(len(rows), -1, np.int64)
        return cls.from_arrays(spec, K, sample=np.asarray(rows, np.int64)[b_idx], t=t_idx,
                               accepted=A[b_idx, t_idx], source=np.asarray(sources, dtype=object)[b_idx],
                               on_path=on_path, top1=top1, top5=top5, samples=samples, taps=taps)

    @classmethod
    def concat(cls, results: list["AcceptanceResult"]) -> "AcceptanceResult":
        """Exact concatenation of several results of the same wiring and K (disjoint samples)."""
        if not results:
            raise WorkbenchError("nothing to merge: expected at least one AcceptanceResult")
        first = results[0]
        for r in results[1:]:
            if r.spec != first.spec or r.steps != first.steps:
                raise WorkbenchError(f"cannot merge results of wiring {r.spec!r} K={r.steps} into "
                                     f"{first.spec!r} K={first.steps}: expected the same wiring and steps")
        samples = {k: np.concatenate([r.samples[k] for r in results]) for k in _SAMPLE_COLS}
        if len(np.unique(samples["sample"])) != len(samples["sample"]):
            uniq, counts = np.unique(samples["sample"], return_counts=True)
            dup = uniq[counts > 1][:3].tolist()
            raise WorkbenchError(f"cannot merge: sample rows appear in more than one result (e.g. {dup}); "
                                 f"expected disjoint shards of the data")
        chains = {k: np.concatenate([r.chains[k] for r in results]) for k in _CHAIN_COLS}
        ratios = [r.cost_ratio for r in results if r.cost_ratio is not None]
        return cls(spec=first.spec, taps=first.taps, steps=first.steps, chains=chains, samples=samples,
                   cost_ratio=float(np.mean(ratios)) if ratios else None, seed=first.seed)

    def merge(self, other: "AcceptanceResult") -> "AcceptanceResult":
        """Exact merge with a result over other samples (e.g. another torchrun shard)."""
        return AcceptanceResult.concat([self, other])

    def filter(self, source: str | None = None) -> "AcceptanceResult":
        """The same result restricted to the chains and samples of one ``source``."""
        if source is None:
            return self
        cm = self.chains["source"] == source
        sm = self.samples["source"] == source
        return AcceptanceResult(spec=self.spec, taps=self.taps, steps=self.steps,
                                chains={k: v[cm] for k, v in self.chains.items()},
                                samples={k: v[sm] for k, v in self.samples.items()},
                                cost_ratio=self.cost_ratio, seed=self.seed)

    # ---- statistics ---------------------------------------------------------------------------
    @property
    def n_samples(self) -> int:
        return int(len(self.samples["sample"]))

    @property
    def n_chains(self) -> int:
        return int(len(self.chains["accepted"]))

    @property
    def sources(self) -> list[str]:
        return sorted(set(self.samples["source"].tolist()) | set(self.chains["source"].tolist()))

    def _s(self) -> dict:
        return _stats(self.chains["accepted"], self.steps)

    @property
    def conditional(self) -> np.ndarray:
        """α_k = P(A >= k | A >= k-1), k = 1..K (NaN where nothing reached step k-1)."""
        return self._s()["conditional"]

    @property
    def cumulative(self) -> np.ndarray:
        """P(A >= k), k = 1..K."""
        return self._s()["cumulative"]

    @property
    def histogram(self) -> np.ndarray:
        """H[a] = number of chains with exactly a accepted, a = 0..K."""
        return self._s()["histogram"]

    @property
    def accept_length(self) -> float:
        """E[A] + 1 over every counted chain (bonus token counted: SGLang/vLLM convention)."""
        return self._s()["accept_length"]

    @property
    def accept_length_no_bonus(self) -> float:
        """E[A] over every counted chain (SpecForge's simulated acc len)."""
        return self._s()["accept_length_no_bonus"]

    @property
    def decode_path(self) -> dict:
        """The decode-path estimator: {n_verify_steps, accept_length (mean A+1), histogram}."""
        s = _stats(self.chains["accepted"][self.chains["on_path"]], self.steps)
        return {"n_verify_steps": s["n_chains"], "accept_length": s["accept_length"],
                "histogram": s["histogram"]}

    @property
    def top1(self) -> float:
        """Step-1 top-1 accuracy over counted chains (target token = draft's argmax); NaN if not measured."""
        v = self.chains["top1"]
        v = v[v >= 0]
        return float(v.mean()) if len(v) else math.nan

    @property
    def top5(self) -> float:
        """Step-1 top-5 accuracy over counted chains; NaN if not measured."""
        v = self.chains["top5"]
        v = v[v >= 0]
        return float(v.mean()) if len(v) else math.nan

    @property
    def coverage(self) -> float:
        """Draft-vocab coverage ceiling: share of response tokens whose target greedy token the
        draft vocab (``t2d``) can emit at all. NaN if unknown."""
        ok = self.samples["n_coverable"] >= 0
        n = int(self.samples["n_response_tokens"][ok].sum())
        return float(self.samples["n_coverable"][ok].sum() / n) if n else math.nan

    def _bootstrap_mean(self, mask, n_boot: int = 1000) -> tuple[float, float]:
        """95% percentile bootstrap of mean(A)+1 over chains selected by ``mask``, resampling SAMPLES."""
        A = self.chains["accepted"][mask]
        if not len(A):
            return (math.nan, math.nan)
        ids, inv = np.unique(self.chains["sample"][mask], return_inverse=True)
        sums = np.bincount(inv, weights=A + 1.0, minlength=len(ids))
        cnts = np.bincount(inv, minlength=len(ids)).astype(float)
        rng = np.random.default_rng(self.seed)
        w = rng.multinomial(len(ids), np.full(len(ids), 1.0 / len(ids)), size=n_boot).astype(float)
        num, den = w @ sums, w @ cnts
        means = num[den > 0] / den[den > 0]
        return (float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))

    def intervals(self, n_boot: int = 1000) -> dict:
        """95% intervals: Wilson for α_k and P(A>=k) (per chain), bootstrap over samples (seeded) for
        the accept lengths (every-position and decode-path)."""
        s = self._s()
        al = s["at_least"]
        return {
            "conditional": [list(wilson(int(al[k]), int(al[k - 1]))) for k in range(1, self.steps + 1)],
            "cumulative": [list(wilson(int(al[k]), int(al[0]))) for k in range(1, self.steps + 1)],
            "accept_length": list(self._bootstrap_mean(np.ones(self.n_chains, bool), n_boot)),
            "decode_path_accept_length": list(self._bootstrap_mean(self.chains["on_path"], n_boot)),
            "method": f"Wilson 95% for proportions; percentile bootstrap over samples ({n_boot}, seed "
                      f"{self.seed}) for accept lengths",
        }

    def speedup(self, ratio: float | None = None) -> list[dict]:
        """Projected speed-up for each K' = 1..K: tokens per verify step ÷ (1 + K'·ratio).

            >>> r = AcceptanceResult.from_arrays("L1", K=2, sample=[0, 0], t=[0, 1], accepted=[2, 1])
            >>> [(d["k"], round(d["speedup"], 3), d["best"]) for d in r.speedup(0.1)]
            [(1, 1.818, False), (2, 2.083, True)]

        Tokens per verify step with K' drafted = E[min(A, K')] + 1 (every-position chains; a chain
        that accepted A of K would accept min(A, K') of K'). ``ratio`` = cost of one draft step ÷
        one target forward; defaults to the ratio measured during :func:`simulate`.
        """
        if ratio is None:
            ratio = self.cost_ratio
        if ratio is None or not (ratio >= 0):
            raise WorkbenchError(f"speedup needs a draft/target cost ratio >= 0 (got {ratio!r}; none was "
                                 f"measured: pass ratio=, e.g. 0.05)")
        A = self.chains["accepted"]
        rows = []
        for k in range(1, self.steps + 1):
            tps = float(np.minimum(A, k).mean()) + 1 if len(A) else math.nan
            rows.append({"k": k, "tokens_per_step": tps, "speedup": tps / (1 + k * ratio), "best": False})
        finite = [r for r in rows if not math.isnan(r["speedup"])]
        if finite:
            max(finite, key=lambda r: r["speedup"])["best"] = True
        return rows

    # ---- views --------------------------------------------------------------------------------
    def statistics(self, intervals: bool = False) -> dict:
        """The statistics as plain Python (the body of :meth:`to_json` without ``by_source``)."""
        s = self._s()
        out = {"n_samples": self.n_samples, "n_chains": s["n_chains"], "conditional": s["conditional"],
               "cumulative": s["cumulative"], "histogram": s["histogram"], "accept_length": s["accept_length"],
               "accept_length_no_bonus": s["accept_length_no_bonus"], "decode_path": self.decode_path,
               "top1": self.top1, "top5": self.top5, "coverage": self.coverage}
        if intervals:
            out["intervals"] = self.intervals()
        return jsonable(out)

    def by_source(self) -> dict[str, dict]:
        """{source: statistics} (same keys as the top level of :meth:`to_json`)."""
        return {s: self.filter(source=s).statistics() for s in self.sources}

    def to_json(self, path=None, *, ratio: float | None = None) -> dict:
        """JSON-ready dict (keys of the issue's `accept --json`); written atomically when ``path``."""
        out = {"wiring": {"spec": self.spec, "taps": list(self.taps)}, "steps": self.steps,
               "convention": CONVENTION + "; accept_length = E[A]+1 (bonus counted), "
                                          "accept_length_no_bonus = E[A]"}
        out.update(self.statistics(intervals=True))
        out["by_source"] = self.by_source()
        r = ratio if ratio is not None else self.cost_ratio
        if r is not None:
            out["cost_ratio"] = float(r)
            out["speedup"] = jsonable(self.speedup(r))
        if path is not None:
            write_json(path, out, indent=2)
        return out

    def to_frame(self):
        """The per-chain table as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame({k: self.chains[k] for k in _CHAIN_COLS})

    def write_chains(self, path) -> int:
        """One JSON object per chain (``sample``, ``t``, ``accepted``, ``source``, ``on_path``) to a
        .jsonl file, atomically. Returns the number of lines."""
        c = self.chains
        with atomic_write(path) as f:
            for i in range(self.n_chains):
                f.write(json.dumps({"sample": int(c["sample"][i]), "t": int(c["t"][i]),
                                    "accepted": int(c["accepted"][i]), "source": str(c["source"][i]),
                                    "on_path": bool(c["on_path"][i])}) + "\n")
        return self.n_chains

    def summary(self) -> str:
        """A few human-readable lines."""
        s = self.statistics()
        iv = self.intervals()
        fmt = lambda xs: "[" + ", ".join("—" if x is None else f"{x:.3f}" for x in xs) + "]"  # noqa: E731
        dp = s["decode_path"]
        lines = [
            f"wiring {self.spec}  K={self.steps}  {CONVENTION}",
            f"samples {s['n_samples']}  chains {s['n_chains']}  decode-path verify steps {dp['n_verify_steps']}",
            f"accept length (E[A]+1, bonus counted): {_f(s['accept_length'])} "
            f"[95% {_f(iv['accept_length'][0])}–{_f(iv['accept_length'][1])}]   "
            f"without bonus (E[A]): {_f(s['accept_length_no_bonus'])}",
            f"decode-path accept length: {_f(dp['accept_length'])} "
            f"[95% {_f(iv['decode_path_accept_length'][0])}–{_f(iv['decode_path_accept_length'][1])}]",
            f"conditional α_k: {fmt(s['conditional'])}",
            f"cumulative P(A>=k): {fmt(s['cumulative'])}",
            f"histogram H[0..{self.steps}]: {s['histogram']}",
        ]
        extra = []
        if s["top1"] is not None:
            extra.append(f"step-1 top-1 {_f(s['top1'])} top-5 {_f(s['top5'])}")
        if s["coverage"] is not None:
            extra.append(f"draft-vocab coverage ceiling {_f(s['coverage'])}")
        if extra:
            lines.append("   ".join(extra))
        if len(self.sources) > 1:
            for name, st in self.by_source().items():
                lines.append(f"  source {name or '(none)'}: chains {st['n_chains']} accept length "
                             f"{_f(st['accept_length'])} decode-path {_f(st['decode_path']['accept_length'])}")
        if self.cost_ratio is not None:
            sp = self.speedup()
            lines.append(f"projected speed-up (cost ratio {self.cost_ratio:.3f}): " + ", ".join(
                f"K={d['k']}: {d['speedup']:.2f}" + ("*" if d["best"] else "") for d in sp))
        return "\n".join(lines)


def _f(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


# --------------------------------------------------------------------------------------------------
# The fast simulation: one target pass, the parallel K-step draft for every chain
# --------------------------------------------------------------------------------------------------

def _as_wirings(wirings, n_layers: int) -> list:
    """Wiring specs / Wiring / Resolution objects (or one of them) → list of unique Wiring."""
    from workbench.wiring import Wiring

    if isinstance(wirings, (str, Wiring)) or hasattr(wirings, "taps") and not isinstance(wirings, (list, tuple)):
        wirings = [wirings]
    out, seen = [], set()
    for w in wirings:
        w = Wiring.parse(tuple(w.taps) if hasattr(w, "taps") and not isinstance(w, Wiring) else w, n_layers)
        if w.spec not in seen:
            seen.add(w.spec)
            out.append(w)
    if not out:
        raise WorkbenchError("no wiring given (expected e.g. ['embed,L1,L3'] or an engine's Resolution)")
    return out


def _draft_device_dtype(draft):
    p = next(draft.parameters())
    return p.device, p.dtype


def _fc_width(draft) -> int:
    fc = getattr(draft, "fc", None)
    if fc is not None and hasattr(fc, "in_features"):
        return int(fc.in_features)
    return 3 * int(draft.target_hidden_size)


def _t2d(draft):
    """Bool [V_target]: target ids the draft vocab can emit (all True without a reduced vocab)."""
    import torch

    t2d = getattr(draft, "t2d", None)
    if t2d is not None:
        return torch.as_tensor(t2d).bool()
    if int(getattr(draft, "draft_vocab_size", draft.vocab_size)) == int(draft.vocab_size):
        return torch.ones(int(draft.vocab_size), dtype=torch.bool)
    raise WorkbenchError(f"draft has draft_vocab_size={draft.draft_vocab_size} < vocab_size={draft.vocab_size} "
                         f"but no t2d table: cannot tell which target tokens it can emit")


def coverage_counts(next_token, loss_mask, lengths, t2d):
    """Per sample: (response tokens, those whose target greedy token the draft vocab can emit).

    Counts positions j (1 <= j < length) with loss_mask[j] == 1; the token that must be drafted
    there is g_j = next_token[j-1].
    """
    import torch

    B, T = next_token.shape
    t2d = t2d.to(next_token.device)
    g = next_token[:, :-1].long().clamp(0, len(t2d) - 1)                   # g_j for j = 1..T-1
    pos = torch.arange(1, T, device=next_token.device)[None, :]
    resp = (loss_mask[:, 1:] != 0) & (pos < lengths.to(next_token.device)[:, None])
    ok = resp & t2d[g]
    return resp.sum(1).cpu().numpy(), ok.sum(1).cpu().numpy()


def _sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def simulate(target, draft, dataset, wirings, *, K: int = 4, limit: int | None = None, batch_size: int = 8,
             progress: bool = True, topk: int = 5, cache_dir=None, seed: int = 0,
             max_memory=None) -> dict[str, "AcceptanceResult"]:
    """Acceptance of ``draft`` on ``target`` for each wiring, from ONE target pass over ``dataset``.

        >>> # res = simulate(target, draft, ds, ["embed,L1,L3", "L1,L3,L4"], K=4, limit=200)
        >>> # res["embed,L1,L3"].accept_length, res["L1,L3,L4"].conditional

    ``capture.extract`` captures the union of the wirings' taps once per batch; for each wiring the
    draft runs every chain of the batch in parallel (``draft.run_chains``, K steps) and only the
    per-chain counts are kept (never features across batches). Also measured: step-1 top-1/top-5
    accuracy (``topk`` > 0), the draft-vocab coverage ceiling and the draft-step/target-forward time
    ratio used by :meth:`AcceptanceResult.speedup`. ``max_memory`` (bytes or "2GB") sizes the chunks of
    the target's and the draft's heads and the draft's attention blocks (``workbench.chunks``).
    """
    import torch

    from workbench import capture
    from workbench.draft import run_chains

    if int(K) < 1:
        raise WorkbenchError(f"steps K={K}: expected K >= 1")
    wl = _as_wirings(wirings, target.n_layers)
    width = _fc_width(draft)
    for w in wl:
        capture.check_width(w.taps, target, width, where="the draft's fc")
    ddev, ddtype = _draft_device_dtype(draft)
    t2d = _t2d(draft)
    if len(t2d) < target.vocab_size:
        raise WorkbenchError(f"draft t2d covers {len(t2d)} target ids but the target vocab has {target.vocab_size}: "
                             f"draft and target do not match")
    parts = {w.spec: [] for w in wl}
    t_draft = {w.spec: 0.0 for w in wl}
    t_target = 0.0
    it = capture.extract(target, dataset, [w.spec for w in wl], batch_size=batch_size, topk=0, limit=limit,
                         cache_dir=cache_dir, progress=progress, max_memory=max_memory)
    any_cached = False
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        _sync(target.device)
        if batch is None:
            break
        any_cached |= batch.from_cache
        t_target += time.perf_counter() - t0
        lengths = batch.lengths
        cov = coverage_counts(batch.next_token, batch.loss_mask, lengths, t2d)
        ids, att = batch.input_ids.to(ddev), batch.attention_mask.to(ddev)
        for w in wl:
            feats = batch.concat(w.taps).to(device=ddev, dtype=ddtype)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = run_chains(draft, feats, ids, att, int(K), topk=int(topk), max_memory=max_memory)
            _sync(ddev)
            t_draft[w.spec] += time.perf_counter() - t0
            del feats
            A = accepted_counts(out.tokens, batch.next_token.to(ddev), batch.loss_mask.to(ddev), lengths.to(ddev), K)
            hits = None
            if out.topk_ids is not None:
                g1 = torch.cat([batch.next_token[:, 1:], torch.full_like(batch.next_token[:, :1], -1)], 1).to(ddev)
                step1 = out.topk_ids[:, :, 0, :]                                    # [B, T, k]
                hits = torch.stack([step1[..., 0] == g1, (step1[..., :5] == g1[..., None]).any(-1)], -1).long()
            for b, n in zip(batch.rows, batch.n_prompt_tokens):
                if n < 1:
                    raise WorkbenchError(f"sample row {b}: n_prompt_tokens={n}; the decode-path estimator needs a "
                                         f"prompt of at least 1 token (check the data's prompt/response split)")
            parts[w.spec].append(AcceptanceResult.from_counts(
                A, K=K, spec=w.spec, taps=w.taps, rows=batch.rows, n_prompt_tokens=batch.n_prompt_tokens,
                sources=batch.sources, top_hits=hits, coverage=cov))
            del out
        del batch
    results = {}
    for w in wl:
        r = AcceptanceResult.concat(parts[w.spec])
        r.seed = seed
        if not any_cached and t_target > 0:
            r.cost_ratio = (t_draft[w.spec] / K) / t_target
        results[w.spec] = r
    return results


# --------------------------------------------------------------------------------------------------
# The exact loop: real greedy speculative decoding with the HF target
# --------------------------------------------------------------------------------------------------

def exact_decode(target, draft, prompt_ids, wiring, K: int, max_new_tokens: int) -> tuple[list[int], list[int]]:
    """Greedy chain speculative decoding; returns (generated ids, A per verify step).

        >>> # gen, A = exact_decode(target, draft, [1, 5, 9], "embed,L1,L3", K=4, max_new_tokens=32)

    Prefill the prompt (target forward with tap hooks; its argmax is the first new token x_{t+1}).
    Then repeat: the draft drafts K tokens with ``draft.chain_reference`` from the features
    h_0..h_t and the bonus token x_{t+1}; ONE target forward (KV cache) over x_{t+1}, d_1..d_K
    verifies them; the leading matches are accepted, the target's token after them is the new
    bonus, t <- t + A + 1. The last step may overshoot; output is cut to ``max_new_tokens``.
    """
    import torch

    from workbench import capture
    from workbench.draft import chain_reference

    w = _as_wirings(wiring, target.n_layers)
    if len(w) != 1:
        raise WorkbenchError(f"exact_decode takes one wiring, got {len(w)}")
    taps = list(w[0].taps)
    capture.check_width(taps, target, _fc_width(draft), where="the draft's fc")
    if int(K) < 1 or int(max_new_tokens) < 1:
        raise WorkbenchError(f"exact_decode: expected K >= 1 and max_new_tokens >= 1 (got K={K}, "
                             f"max_new_tokens={max_new_tokens})")
    ids = [int(x) for x in (prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else prompt_ids)]
    if not ids:
        raise WorkbenchError("exact_decode: empty prompt (expected at least 1 token)")
    bad = [x for x in ids if not 0 <= x < target.vocab_size]
    if bad:
        raise WorkbenchError(f"exact_decode: prompt token id {bad[0]} is outside the target vocab 0..{target.vocab_size - 1}")
    ddev, ddtype = _draft_device_dtype(draft)
    model, dev = target.model, target.device

    import inspect

    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def forward(new_ids, cache):
        with torch.no_grad(), capture.tap_hooks(model, taps, device=dev) as f:
            out = model(input_ids=torch.tensor([new_ids], device=dev), use_cache=True, **{cache_kw: cache})
            feats = torch.cat([f[t] for t in taps], dim=-1)[0]                 # [n_new, W]
        new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[0].argmax(-1), feats, new_cache

    greedy, feats, cache = forward(ids, None)
    n_prompt = len(ids)
    ids.append(int(greedy[-1]))
    feat_seq = [feats]                                                       # h_0 .. h_t
    accepts: list[int] = []
    while len(ids) - n_prompt < max_new_tokens:
        t = len(ids) - 2
        h = torch.cat(feat_seq + [feat_seq[0][:1] * 0], 0).to(device=ddev, dtype=ddtype)  # h_0..h_t + unused row
        with torch.no_grad():
            d = chain_reference(draft, h, torch.tensor(ids, device=ddev), t, int(K))
        d = [int(x) for x in d.tolist()]
        greedy, feats, cache = forward([ids[-1]] + d, cache)                 # positions t+1 .. t+K+1
        g = greedy.tolist()                                                  # g_{t+2} .. g_{t+K+2}
        a = 0
        while a < K and d[a] == g[a]:
            a += 1
        accepts.append(a)
        ids.extend(d[:a] + [g[a]])
        feat_seq.append(feats[:a + 1])                                       # h_{t+1} .. h_{t+a+1}
        if a < K:                                   # drop the rejected drafts' keys: keep x_0 .. x_{t+a+1}
            cache.crop(-(K - a))                    # negative = remove that many (all transformers versions)
    return ids[n_prompt:n_prompt + max_new_tokens], accepts


def exact_simulate(target, draft, dataset, wiring, *, K: int = 4, limit: int | None = None,
                   progress: bool = True) -> "AcceptanceResult":
    """Decode-path acceptance from the exact loop, one sample at a time, on each sample's prompt.

        >>> # exact = exact_simulate(target, draft, ds, "embed,L1,L3", K=4, limit=20)
        >>> # exact.decode_path["accept_length"]

    Generates ``n_response_tokens`` greedily per sample and keeps the verify steps whose K drafted
    positions fit (t+K+1 <= T-1), which is exactly the fast decode path when the data is the target's
    greedy output; for other data it is what a server would really do on those prompts.
    """
    from tqdm.auto import tqdm

    w = _as_wirings(wiring, target.n_layers)[0]
    rows = list(dataset.rows(limit) if hasattr(dataset, "rows") else list(dataset)[:limit] if limit else dataset)
    parts = []
    for i, row in enumerate(tqdm(rows, desc="exact", unit="sample", disable=not progress)):
        ids = list(row["input_ids"])
        n_prompt = int(row.get("n_prompt_tokens", 0) or 0)
        where = row.get("_where", f"row {row.get('_row', i)}")
        if not 1 <= n_prompt < len(ids):
            raise WorkbenchError(f"{where}: n_prompt_tokens={n_prompt}: expected 1..{len(ids) - 1} (a prompt and a response)")
        T = len(ids)
        _, accepts = exact_decode(target, draft, ids[:n_prompt], w, K, T - n_prompt)
        t, ts, As = n_prompt - 1, [], []
        for a in accepts:
            if t + K + 1 > T - 1:
                break
            ts.append(t)
            As.append(a)
            t += a + 1
        src = str(row.get("source", "") or "")
        r = AcceptanceResult.from_arrays(w.spec, K, sample=[int(row.get("_row", i))] * len(ts), t=ts, accepted=As,
                                         source=[src] * len(ts), on_path=[True] * len(ts), taps=w.taps)
        r.samples.update(sample=np.asarray([int(row.get("_row", i))]), source=np.asarray([src], dtype=object),
                         n_prompt_tokens=np.asarray([n_prompt]), n_response_tokens=np.asarray([-1]),
                         n_coverable=np.asarray([-1]))
        parts.append(r)
    if not parts:
        raise WorkbenchError("exact_simulate: the dataset has no rows")
    return AcceptanceResult.concat(parts)


# --------------------------------------------------------------------------------------------------
# `workbench accept`: load everything, pick the wiring, simulate
# --------------------------------------------------------------------------------------------------

def choose_wiring(target, draft, wiring=None, engine: str | None = None, *, sglang_rule: str = "classic"):
    """The wiring to evaluate and a one-line note on where it came from.

        >>> # choose_wiring(target, draft, engine="sglang")   # what SGLang would feed this draft
        >>> # choose_wiring(target, draft)                     # what the draft was trained on

    ``wiring`` (a spec) wins; else ``engine`` through ``wiring.resolve``; else the draft config's
    ``workbench.trained_taps``; else SpecForge's reading of its layer ids (layer outputs).
    """
    from workbench import wiring as wmod

    if wiring is not None and engine is not None:
        raise WorkbenchError("give either a wiring spec or an engine, not both")
    if wiring is not None:
        w = wmod.Wiring.parse(wiring, target.n_layers)
        return w, w.note or f"given: {w.spec}"
    cfg = getattr(draft, "config", None)
    if engine is not None:
        r = wmod.resolve(engine, target.config, cfg, sglang_rule=sglang_rule)
        if not r.taps or not getattr(r, "feasible", True):
            raise WorkbenchError(f"engine {engine}: cannot feed this draft ({r.explanation}; "
                                 f"{'; '.join(r.warnings) or 'no taps'})")
        note = r.explanation + ("" if not r.warnings else " [" + "; ".join(r.warnings) + "]")
        return wmod.Wiring.parse(r.taps, target.n_layers), note
    trained = wmod.trained_wiring_from_config(cfg, target.n_layers) if cfg is not None else None
    if trained is not None:
        return trained, f"trained taps from the draft config: {trained.spec}"
    r = wmod.resolve("specforge", target.config, cfg)
    if not r.taps:
        raise WorkbenchError(f"cannot tell which taps to feed the draft ({r.explanation}); pass --wiring or --engine")
    return wmod.Wiring.parse(r.taps, target.n_layers), f"no --wiring/--engine: {r.explanation}"


def accept(target_path, draft_path, data_path, *, wiring=None, engine=None, K: int = 4, limit=None,
           device: str | None = "cpu", dtype=None, batch_size: int = 8, sglang_rule: str = "classic",
           trust_remote_code: bool = False, progress: bool = True, max_memory=None):
    """Everything behind ``workbench accept``: returns (AcceptanceResult, wiring note).

        >>> # result, note = accept("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl",
        >>> #                       engine="sglang", K=4, limit=100)
    """
    from workbench import capture, data
    from workbench import draft as dmod
    from workbench.errors import resolve_device

    device = resolve_device(device)
    if max_memory is not None:                   # a bad size fails before any model is loaded
        from workbench.chunks import parse_memory
        max_memory = parse_memory(max_memory)
    target = capture.load_target(target_path, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                                 progress=progress)
    d = dmod.load_draft(draft_path, target, device=device, dtype=target.dtype)
    w, note = choose_wiring(target, d, wiring, engine, sglang_rule=sglang_rule)
    ds = data.load(data_path, tokenizer=target.tokenizer, vocab_size=target.vocab_size)
    res = simulate(target, d, ds, [w], K=K, limit=limit, batch_size=batch_size, progress=progress,
                   max_memory=max_memory)[w.spec]
    return res, note
