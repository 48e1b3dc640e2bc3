"""Statistics of drafted chains and the result objects: per-chain counts, their statistics, tap statistics.

    >>> import torch
    >>> from workbench.stats.statistics import AcceptanceResult
    >>> from workbench.stats.counts import accepted_counts, decode_path
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
  exists (what a server does when the sample is the target's greedy output); in a row with several replies
  (all-turns) the walk restarts before each reply.

The counts come from :mod:`workbench.simulate.acceptance` (the fast simulation and the exact loop); figures
of these results from :mod:`workbench.report.plots`. Tap statistics (feature norms, cosines between taps)
are here too: :func:`tap_statistics`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, jsonable, write_json
from workbench.core.render import Rendered
from workbench.core.sampling import as_sampling
from workbench.core.setting import SCHEMA_VERSION, Setting
from workbench.load.agreement import Agreement
from workbench.stats.cost import CostModel, as_cost_model, projection
from workbench.stats.counts import (
    bootstrap_ratio,
    chain_statistics,
    decode_path,
    wilson,
)

CONVENTION = "chain drafting (eagle_topk 1), greedy (temperature 0)"


def convention(setting: Setting) -> str:
    """The drafting convention of a result in one phrase (:data:`CONVENTION` for chains)."""
    if not setting.greedy:                      # T > 0: workbench.simulate.sampled

        s = as_sampling(setting)
        return (f"{setting.label} drafting; sampled at temperature {s.temperature:g}, top_p {s.top_p:g}, top_k "
                f"{s.top_k} (A = leading drafted tokens that equal the data's next tokens, SGLang's lossless "
                f"verify / vLLM's default chain)")
    if setting.shape == "chain":
        return CONVENTION
    return (f"tree drafting (steps {setting.steps}, eagle_topk {setting.eagle_topk}, {setting.num_draft_tokens} "
            f"draft tokens; A = nodes the greedy walk accepts, 0..{setting.steps}), greedy (temperature 0)")


# --------------------------------------------------------------------------------------------------
# Per-chain counts
# --------------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------------
# Statistics helpers (plain numpy on arrays of A values)
# --------------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------------
# The result object
# --------------------------------------------------------------------------------------------------

CHAIN_COLUMNS = ("sample", "t", "accepted", "source", "on_path", "top1", "top5")
SAMPLE_COLUMNS = ("sample", "source", "n_prompt_tokens", "n_response_tokens", "n_coverable",
                  "n_agree", "n_agree_tokens", "gen_temperature", "gen_top_p", "gen_top_k")
# the greedy-agreement columns (workbench.load.agreement) and their "not measured / not recorded" fill
AGREEMENT_DEFAULTS = {"n_agree": (-1, np.int64), "n_agree_tokens": (-1, np.int64),
                      "gen_temperature": (-1.0, np.float64), "gen_top_p": (-1.0, np.float64),
                      "gen_top_k": (0, np.int64)}


def _empty_chains() -> dict:
    return {"sample": np.zeros(0, np.int64), "t": np.zeros(0, np.int64), "accepted": np.zeros(0, np.int64),
            "source": np.zeros(0, dtype=object), "on_path": np.zeros(0, bool),
            "top1": np.zeros(0, np.int8), "top5": np.zeros(0, np.int8)}


def _empty_samples() -> dict:
    return {"sample": np.zeros(0, np.int64), "source": np.zeros(0, dtype=object),
            "n_prompt_tokens": np.zeros(0, np.int64), "n_response_tokens": np.zeros(0, np.int64),
            "n_coverable": np.zeros(0, np.int64), **{k: np.zeros(0, t) for k, (_, t) in AGREEMENT_DEFAULTS.items()}}


def _fill_agreement(samples: dict) -> dict:
    """``samples`` with every greedy-agreement column present ("not measured" where it was missing)."""
    n = len(samples["sample"])
    for k, (v, t) in AGREEMENT_DEFAULTS.items():
        if k not in samples or len(samples[k]) != n:
            samples[k] = np.full(n, v, t)
    return samples


@dataclass
class AcceptanceResult(Rendered):
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
    ``n_response_tokens``, ``n_coverable`` = response tokens the draft vocab can emit, -1 unknown;
    ``n_agree``/``n_agree_tokens`` = response tokens equal to the target's greedy choice / counted,
    -1 not measured; ``gen_temperature``/``gen_top_p``/``gen_top_k`` = the sampling settings the row's
    ``generation`` key records, -1/-1/0 when none: :attr:`agreement`).
    """

    spec: str
    taps: tuple[str, ...]
    steps: int
    chains: dict = field(default_factory=_empty_chains, repr=False)
    samples: dict = field(default_factory=_empty_samples, repr=False)
    cost_ratio: float | None = None          # measured draft-step / target-forward time, if any
    seed: int = 0                            # bootstrap seed
    setting: Setting | None = None           # what was measured (default: chain K=steps, greedy)
    cost_model: object | None = None         # a workbench.cost.CostModel for projections (else cost_ratio)
    per_depth: object | None = None          # T > 0: a workbench.sampled.PerDepth (Rao–Blackwellised) table

    def __post_init__(self):
        _fill_agreement(self.samples)
        if self.setting is None:
            self.setting = Setting(steps=int(self.steps))
        elif int(self.setting.steps) != int(self.steps):
            raise WorkbenchError(f"result of K={self.steps} carries a setting of K={self.setting.steps}")

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, spec, K: int, *, sample, t, accepted, source=None, on_path=None,
                    top1=None, top5=None, samples: dict | None = None, taps=None,
                    setting: Setting | None = None) -> "AcceptanceResult":
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
        return cls(spec=spec, taps=taps, steps=int(K), chains=cols, samples=samples, setting=setting)

    @classmethod
    def from_counts(cls, A, *, K: int, spec, rows, n_prompt_tokens, sources=None, top_hits=None,
                    coverage=None, taps=None, setting: Setting | None = None,
                    agreement=None, reply_starts=None) -> "AcceptanceResult":
        """Build from ``accepted_counts`` output ``A[B, T]`` (-1 = not counted) of one batch.

        ``top_hits``: optional LongTensor/array [B, T, 2] with step-1 (top1, top5) hits;
        ``coverage``: optional (n_response_tokens[B], n_coverable[B]);
        ``agreement``: optional :class:`workbench.agreement.Agreement` of the same batch's rows;
        ``reply_starts``: optional per row, the first position of each reply (``counts.batch_reply_starts``):
        the decode path restarts there (all-turns rows).
        """
        A = np.asarray(A.cpu() if hasattr(A, "cpu") else A, dtype=np.int64)
        if A.ndim != 2 or A.shape[0] != len(rows) or len(n_prompt_tokens) != len(rows):
            raise WorkbenchError(f"counts of shape {A.shape} do not match {len(rows)} rows / "
                                 f"{len(n_prompt_tokens)} prompt lengths")
        sources = [str(s) for s in sources] if sources is not None else [""] * len(rows)
        b_idx, t_idx = np.nonzero(A >= 0)
        on_path = np.zeros(len(b_idx), bool)
        for b in range(A.shape[0]):
            path_t = {t for t, _ in decode_path(A[b], int(n_prompt_tokens[b]), K,
                                                None if reply_starts is None else reply_starts[b])}
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
        if agreement is not None:
            if [int(r) for r in rows] != list(agreement.rows):
                raise WorkbenchError(f"the agreement counts are of rows {agreement.rows[:5]}..., the acceptance "
                                     f"counts of rows {list(rows)[:5]}...: expected the same batch")
            samples.update(agreement.columns())
        return cls.from_arrays(spec, K, sample=np.asarray(rows, np.int64)[b_idx], t=t_idx,
                               accepted=A[b_idx, t_idx], source=np.asarray(sources, dtype=object)[b_idx],
                               on_path=on_path, top1=top1, top5=top5, samples=samples, taps=taps,
                               setting=setting)

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
            if r.setting != first.setting:
                raise WorkbenchError(f"cannot merge a result of setting ({r.setting.describe()}) into one of "
                                     f"({first.setting.describe()}): expected the same setting")
        samples = {k: np.concatenate([_fill_agreement(r.samples)[k] for r in results]) for k in SAMPLE_COLUMNS}
        if len(np.unique(samples["sample"])) != len(samples["sample"]):
            uniq, counts = np.unique(samples["sample"], return_counts=True)
            dup = uniq[counts > 1][:3].tolist()
            raise WorkbenchError(f"cannot merge: sample rows appear in more than one result (e.g. {dup}); "
                                 f"expected disjoint shards of the data")
        chains = {k: np.concatenate([r.chains[k] for r in results]) for k in CHAIN_COLUMNS}
        ratios = [r.cost_ratio for r in results if r.cost_ratio is not None]
        pds = [r.per_depth for r in results if r.per_depth is not None]
        return cls(spec=first.spec, taps=first.taps, steps=first.steps, chains=chains, samples=samples,
                   cost_ratio=float(np.mean(ratios)) if ratios else None, seed=first.seed, setting=first.setting,
                   cost_model=_merged_cost_model([r.cost_model for r in results]),
                   per_depth=type(pds[0]).concat(pds) if pds else None)

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
                                cost_ratio=self.cost_ratio, seed=self.seed, setting=self.setting,
                                cost_model=self.cost_model,
                                per_depth=None if self.per_depth is None else
                                self.per_depth.filter(self.samples["sample"][sm]))

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
        return chain_statistics(self.chains["accepted"], self.steps)

    @property
    def at_least(self) -> np.ndarray:
        """N(A >= k), k = 0..K (N(A >= 0) = number of counted chains): the counts behind α_k."""
        return self._s()["at_least"]

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
        s = chain_statistics(self.chains["accepted"][self.chains["on_path"]], self.steps)
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

    @property
    def agreement(self):
        """The data's greedy agreement with the target (:class:`workbench.agreement.Agreement`, per
        sample and source), from the target pass the estimators made; None when not measured."""
        return Agreement.from_samples(self.samples)

    @property
    def greedy_agreement(self) -> float:
        """The pooled share of response tokens equal to the target's greedy choice (NaN: not measured)."""
        ok = self.samples["n_agree_tokens"] >= 0
        n = int(self.samples["n_agree_tokens"][ok].sum())
        return float(self.samples["n_agree"][ok].sum() / n) if n else math.nan

    def data_note(self) -> str | None:
        """What this result's data means for its setting (``Agreement.note``): the low-agreement warning
        when greedy decoding is asked for, or what recorded-sampled data was sampled at; else None."""
        a = self.agreement
        return None if a is None else a.note(self.setting)

    def _bootstrap_mean(self, mask, n_boot: int = 1000) -> tuple[float, float]:
        """95% percentile bootstrap of mean(A)+1 over chains selected by ``mask``, resampling SAMPLES."""
        mask = np.asarray(mask, bool)
        return tuple(bootstrap_ratio(self.chains["sample"][mask], self.chains["accepted"][mask] + 1.0, seed=self.seed,
                                     n_boot=n_boot))

    def intervals(self, n_boot: int = 1000) -> dict:
        """95% intervals: Wilson for α_k and P(A>=k) (per chain), bootstrap over samples (seeded) for
        the accept lengths (every-position and decode-path). Computed once per result and reused: every
        summary, table and figure of one result prints the same interval (issue 35)."""
        cache = self.__dict__.setdefault("_interval_cache", {})
        key = (int(n_boot), self.n_chains)
        if key not in cache:
            cache[key] = self._intervals(n_boot)
        return {k: (list(v) if isinstance(v, list) else v) for k, v in cache[key].items()}

    def _intervals(self, n_boot: int) -> dict:
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

    def speedup(self, ratio: float | None = None, *, cost_model=None, n_boot: int = 200) -> list[dict]:
        """Projected speed-up (tokens per second over plain decoding) from a :mod:`workbench.stats.cost` model.

            >>> r = AcceptanceResult.from_arrays("L1", K=2, sample=[0, 0], t=[0, 1], accepted=[2, 1])
            >>> [(d["k"], round(d["speedup"], 3), d["best"]) for d in r.speedup(0.1)]
            [(1, 1.818, False), (2, 2.083, False)]

        The rows of :func:`workbench.stats.cost.projection` (the one projection rule for chains and trees),
        ``best`` True only on the K' it calls clearly best (never with a single option, never within
        noise). A chain: one row per K' = 1..K with tokens per verify step E[min(A, K')] + 1 (a chain that
        accepted A of K would accept min(A, K') of K'). A tree (eagle_topk > 1): one row, its own
        shape (another depth or N is another selection: ``workbench tune`` sweeps them). Speed-up =
        tokens per step · verify(1) / (K'·draft(k) + verify(N)) (``CostModel.speedup``); ``ratio``
        (a fixed model: draft step / target forward) or ``cost_model`` (a CostModel or a JSON path);
        default the result's own (``cost_model``, else the ratio measured during :func:`simulate`).
        """
        cm = self.projection_model(ratio, cost_model)
        if cm is None:
            raise WorkbenchError(f"speedup needs a cost model or a draft/target cost ratio >= 0 (got {ratio!r}; none "
                                 f"was measured: pass ratio=, e.g. 0.05, or cost_model=)")
        p = projection(self, cm, n_boot=n_boot)
        return [{"k": d["k"], "tokens_per_step": d["tokens_per_step"], "speedup": d["speedup"],
                 "best": d["k"] == p["best"]} for d in p["rows"]]

    def projection_model(self, ratio=None, cost_model=None):
        """The CostModel a projection uses, or None: the one given (``cost_model`` or a fixed ``ratio``),
        else the result's ``cost_model``, else a fixed model of its ``cost_ratio``."""

        cm = as_cost_model(cost_model, ratio) or self.cost_model
        if cm is None and self.cost_ratio is not None and self.cost_ratio >= 0:
            cm = CostModel.fixed(self.cost_ratio)
        return cm

    # ---- views --------------------------------------------------------------------------------
    def statistics(self, intervals: bool = False) -> dict:
        """The statistics as plain Python (the body of :meth:`to_json` without ``by_source``)."""
        s = self._s()
        out = {"n_samples": self.n_samples, "n_chains": s["n_chains"], "conditional": s["conditional"],
               "cumulative": s["cumulative"], "histogram": s["histogram"], "accept_length": s["accept_length"],
               "accept_length_no_bonus": s["accept_length_no_bonus"], "decode_path": self.decode_path,
               "top1": self.top1, "top5": self.top5, "coverage": self.coverage,
               "greedy_agreement": self.greedy_agreement}
        if intervals:
            out["intervals"] = self.intervals()
        return jsonable(out)

    def by_source(self) -> dict[str, dict]:
        """{source: statistics} (same keys as the top level of :meth:`to_json`)."""
        return {s: self.filter(source=s).statistics() for s in self.sources}

    def to_json(self, path=None, *, ratio: float | None = None) -> dict:
        """JSON-ready dict (keys of the issue's `accept --json`); written atomically when ``path``."""
        out = {"schema_version": SCHEMA_VERSION, "wiring": {"spec": self.spec, "taps": list(self.taps)},
               "steps": self.steps, "setting": self.setting.to_dict(), "tree": self.setting.tree,
               "convention": convention(self.setting) + "; accept_length = E[A]+1 (bonus counted), "
                                          "accept_length_no_bonus = E[A]"}
        out["accept_length_label"] = self.setting.accept_label("every-position")
        out["decode_path_accept_length_label"] = self.setting.accept_label("decode-path")
        out.update(self.statistics(intervals=True))
        if self.per_depth is not None:
            out["per_depth"] = self.per_depth.to_dict()
        out["by_source"] = self.by_source()
        a = self.agreement
        out["agreement"] = None if a is None else jsonable(a.to_dict(self.setting))
        cm = self.projection_model(ratio)
        if cm is not None:
            if cm.kind == "fixed":
                out["cost_ratio"] = float(cm.ratio)
            out["cost_model"] = cm.to_dict()
            out["speedup"] = jsonable(self.speedup(cost_model=cm))

            p = projection(self, cm, n_boot=200)
            out["speedup_uncertainty"] = jsonable({"best": p["best"], "within_noise": p["within_noise"],
                                                   "text": p["text"], "rows": p["rows"]})
        if path is not None:
            write_json(path, out, indent=2)
        return out

    def to_frame(self):
        """The per-chain table as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame({k: self.chains[k] for k in CHAIN_COLUMNS})

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
            f"wiring {self.spec}",
            f"setting: {self.setting.describe()}",
            f"samples {s['n_samples']}  chains {s['n_chains']}  decode-path verify steps {dp['n_verify_steps']}",
            f"{self.setting.accept_label('every-position')}: {_f(s['accept_length'])} "
            f"[95% {_f(iv['accept_length'][0])}–{_f(iv['accept_length'][1])}]   "
            f"without bonus (E[A]): {_f(s['accept_length_no_bonus'])}",
            f"{self.setting.accept_label('decode-path')}: {_f(dp['accept_length'])} "
            f"[95% {_f(iv['decode_path_accept_length'][0])}–{_f(iv['decode_path_accept_length'][1])}]",
            f"conditional α_k: {fmt(s['conditional'])}",
            f"cumulative P(A>=k): {fmt(s['cumulative'])}",
            f"histogram H[0..{self.steps}]: {s['histogram']}",
        ]
        if self.per_depth is not None:
            lines.extend(self.per_depth.summary_lines())
        extra = []
        if s["top1"] is not None:
            extra.append(f"step-1 top-1 {_f(s['top1'])} top-5 {_f(s['top5'])}")
        if s["coverage"] is not None:
            extra.append(f"draft-vocab coverage ceiling {_f(s['coverage'])}")
        if extra:
            lines.append("   ".join(extra))
        a = self.agreement
        if a is not None:
            lines.append(a.headline(self.setting))
        if len(self.sources) > 1:
            for name, st in self.by_source().items():
                lines.append(f"  source {name or '(none)'}: chains {st['n_chains']} accept length "
                             f"{_f(st['accept_length'])} decode-path {_f(st['decode_path']['accept_length'])}")
        cm = self.projection_model()
        if cm is not None and getattr(self.setting, "drafting", None) == "parallel":
            lines.append("projected speed-up: not modelled for parallel drafting (one draft pass drafts all K tokens; "
                         "the cost model counts K sequential draft steps)")
        elif cm is not None:
            p = projection(self, cm, n_boot=200)
            lines.append("projected speed-up: " + ", ".join(
                f"K={d['k']}: {d['speedup']:.2f} [{d['speedup_low']:.2f}–{d['speedup_high']:.2f}]"
                + ("*" if d["k"] == p["best"] else "") for d in p["rows"]) + f"; {p['text']}  ({cm.describe()})")
        return "\n".join(lines)


def _merged_cost_model(models):
    """One cost model for merged shards: a measured one as is; fixed ratios (measured per shard): their mean."""
    models = [m for m in models if m is not None]
    if not models:
        return None
    if all(m.kind == "fixed" for m in models) and len({(m.device, m.source) for m in models}) == 1:

        return CostModel.fixed(float(np.mean([m.ratio for m in models])), device=models[0].device,
                               source=models[0].source)
    return models[0]


def _f(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


# --------------------------------------------------------------------------------------------------
# Tap statistics: feature norms and cosines between taps
# --------------------------------------------------------------------------------------------------

