"""Accept length by position in the context: the counted chains of an AcceptanceResult binned by where they start.

    >>> from workbench.stats.statistics import AcceptanceResult
    >>> r = AcceptanceResult.from_arrays("L1,L2,L3", K=2, sample=[0, 0, 1, 1], t=[0, 3, 1, 5], accepted=[2, 0, 1, 1])
    >>> b = by_position(r, width=4)
    >>> [(row["start"], row["n_chains"], row["accept_length"]) for row in b.rows]
    [(0, 3, 2.0), (4, 1, 2.0)]

The chain at ``t`` (ARCHITECTURE.md) drafts after the context ``x_0 .. x_{t+1}``: it uses the target's features
``h_0 .. h_t`` and the bonus token ``x_{t+1}``, and its first draft step runs at rotary position ``t`` (``t+1`` on
SGLang before PR #25015). A bin ``[start, start+width)`` holds the counted chains whose ``t`` falls in it; its accept
length is E[A]+1 over those chains (bonus counted, the every-position estimator, or the decode-path one with
``decode_path=True``), its 95% interval the project's one bootstrap over samples
(:func:`workbench.stats.counts.bootstrap_ratio`). :func:`by_position` is the fast path (``np.bincount``);
:func:`by_position_reference` is the plain loop it must equal (tests/test_context_length.py).

Where it answers: does acceptance fall as the context grows, and past the draft's ``max_position_embeddings``
(docs/context-length.md; the lint side is :mod:`workbench.engines.positions`)? Rows of a dataset only reach as far
as they are long: a bin past the longest row is absent, a bin with few rows has a wide interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.render import Rendered
from workbench.core.setting import SCHEMA_VERSION, Setting
from workbench.stats.counts import bootstrap_ratio

ESTIMATORS = ("every-position", "decode-path")


@dataclass
class PositionTable(Rendered):
    """Accept length per bin of chain start ``t``: ``rows`` of ``{start, end, n_chains, n_samples, accept_length,
    low, high}`` (``end`` exclusive; ``low``/``high`` the 95% interval), for one result (``spec``)."""

    spec: str
    width: int
    estimator: str
    setting: Setting
    rows: list = field(default_factory=list)
    max_t: int = -1                      # the largest counted chain start (-1: no chains)
    n_boot: int = 1000

    @property
    def label(self) -> str:
        return self.setting.accept_label(self.estimator)

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "spec": self.spec, "width": self.width, "estimator": self.estimator,
                "accept_label": self.label, "setting": self.setting.to_dict(), "max_t": self.max_t,
                "interval": f"percentile bootstrap over samples ({self.n_boot}), 95%", "rows": [dict(r) for r in self.rows]}

    @classmethod
    def from_dict(cls, d: dict) -> "PositionTable":
        """The table :meth:`to_dict` wrote (a ``bench/long-context.json`` run's ``by_position``)."""
        return cls(spec=d["spec"], width=int(d["width"]), estimator=d["estimator"],
                   setting=Setting.from_dict(d["setting"]), rows=[dict(r) for r in d.get("rows", [])],
                   max_t=int(d.get("max_t", -1)), n_boot=int(str(d.get("interval", "(1000)")).split("(")[1].split(")")[0])
                   if "(" in str(d.get("interval", "")) else 1000)

    def summary(self) -> str:
        lines = [f"{self.spec}: {self.label} by chain start t (bins of {self.width} tokens; 95% bootstrap over samples)",
                 f"  {'t':>13s}  {'chains':>7s}  {'samples':>7s}  {'accept length':>13s}  95% interval"]
        for r in self.rows:
            lines.append(f"  {r['start']:>5d}..{r['end'] - 1:<6d}  {r['n_chains']:>7d}  {r['n_samples']:>7d}  "
                         f"{r['accept_length']:>13.3f}  [{r['low']:.3f}, {r['high']:.3f}]")
        if not self.rows:
            lines.append("  (no counted chains)")
        else:
            lines.append(f"  the longest chain start is t = {self.max_t}: no row reaches further")
        return "\n".join(lines)


def _check(result, width: int, estimator: str):
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise WorkbenchError(f"by_position width={width!r}: expected a positive number of tokens per bin")
    if estimator not in ESTIMATORS:
        raise WorkbenchError(f"by_position estimator={estimator!r}: expected one of {', '.join(ESTIMATORS)}")
    if not (hasattr(result, "chains") and hasattr(result, "steps")):
        raise WorkbenchError(f"by_position: expected an AcceptanceResult, got {type(result).__name__}")
    c = result.chains
    mask = np.asarray(c["on_path"], bool) if estimator == "decode-path" else np.ones(len(c["accepted"]), bool)
    return (np.asarray(c["t"], np.int64), np.asarray(c["accepted"], np.int64), np.asarray(c["sample"]), mask)


def by_position(result, width: int = 64, *, estimator: str = "every-position", n_boot: int = 1000) -> PositionTable:
    """Accept length (E[A]+1) per bin of ``width`` chain starts, with 95% intervals (module docstring).
    ``estimator``: ``every-position`` (every counted chain) or ``decode-path`` (the verify steps of the decode walk).
    Empty bins (no chain starts there) are left out."""
    t, A, sample, mask = _check(result, width, estimator)
    t, A, sample = t[mask], A[mask], sample[mask]
    rows = []
    if len(t):
        b = t // int(width)
        n = np.bincount(b)
        s = np.bincount(b, weights=A.astype(np.float64))
        for i in np.flatnonzero(n):
            sel = b == i
            low, high = bootstrap_ratio(sample, A + 1.0, mask=sel, seed=getattr(result, "seed", 0), n_boot=n_boot)
            rows.append({"start": int(i) * int(width), "end": (int(i) + 1) * int(width), "n_chains": int(n[i]),
                         "n_samples": int(len(np.unique(sample[sel]))), "accept_length": float(s[i] / n[i] + 1.0),
                         "low": low, "high": high})
    return PositionTable(spec=str(result.spec), width=int(width), estimator=estimator, setting=result.setting,
                         rows=rows, max_t=int(t.max()) if len(t) else -1, n_boot=int(n_boot))


def by_position_reference(result, width: int = 64, *, estimator: str = "every-position") -> list[dict]:
    """The plain loop :func:`by_position` must equal: ``[{start, end, n_chains, n_samples, accept_length}]``, one
    chain at a time."""
    t, A, sample, mask = _check(result, width, estimator)
    bins: dict[int, list] = {}
    for ti, a, si, m in zip(t.tolist(), A.tolist(), sample.tolist(), mask.tolist()):
        if m:
            bins.setdefault(ti // int(width), []).append((a, si))
    out = []
    for i in sorted(bins):
        chains = bins[i]
        out.append({"start": i * int(width), "end": (i + 1) * int(width), "n_chains": len(chains),
                    "n_samples": len({s for _, s in chains}),
                    "accept_length": sum(a for a, _ in chains) / len(chains) + 1.0 if chains else math.nan})
    return out


__all__ = ["ESTIMATORS", "PositionTable", "by_position", "by_position_reference"]
