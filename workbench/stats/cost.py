"""The cost model behind every speed-up projection: one draft step (k lanes) and one target verify of N
tokens, measured with fixed-size probes or fixed by a ratio.

    >>> from workbench.stats.cost import CostModel
    >>> cm = CostModel.fixed(0.1)                       # draft step = 0.1 target forward; verify flat in N
    >>> round(cm.speedup(3.0, steps=4), 4)              # accept length 3.0 with 4 draft steps: 3 / (1 + 0.4)
    2.1429
    >>> cm.describe()
    'fixed cost model: draft step / target forward = 0.1, verify cost flat in N (device: none)'
    >>> m = CostModel(device="cuda", device_name="H200", draft_step={1: 1.0, 4: 1.2}, verify={1: 10.0, 8: 11.0})
    >>> m.verify_time(4), m.draft_time(2)               # linear between probes
    (10.428571428571429, 1.0666666666666667)

A speculative step with drafting shape (steps S, eagle_topk k, N verified tokens) costs
``S · draft(k) + verify(N)``: S draft forwards over k lanes (SGLang: the first one extends the
draft over the accepted tokens, the others decode the tree's slots) and one target forward over the
N tree tokens. Without speculation one token costs ``verify(1)``. With accept length τ = E[A]+1
(tokens per verify step, bonus counted) the projected speed-up is

    τ · verify(1) / (S · draft(k) + verify(N)).

Two kinds of model, one formula:

- **fixed** (``--cost-ratio r``, and the ratio :func:`workbench.acceptance.simulate` measures):
  draft(k) = r, verify(N) = 1 for every N (a memory-bound target: verifying 64 tokens costs what one
  does). For chains this is the old ``τ / (1 + K·r)``; it cannot choose N.
- **measured** (:func:`measure`, ``workbench tune --measure-cost-model out.json --device cuda``):
  a low quantile of interleaved, repeated fixed-size probes after untimed warm-up calls (:func:`_timed`): a target forward of N new tokens after a prefix of
  ``prefix`` tokens in the KV cache (N in :data:`VERIFY_PROBES`), a draft step of k lanes after the
  same prefix (k in :data:`LANE_PROBES`); between probes linear, beyond them the last slope.
  The spread (min, median over repeats) is kept; a median far above the minimum marks the model
  :attr:`CostModel.too_noisy` (a busy machine), and its projections then name no best K'. Read back with :meth:`CostModel.load` (``--cost-model``).

Every projection names its model's device (:meth:`CostModel.describe`); a model measured on a CPU is
labelled "indicative only": CPU costs do not choose GPU flags (:attr:`CostModel.indicative`).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json
from workbench.core.render import Rendered

VERIFY_PROBES = (1, 2, 4, 8, 16, 32, 64)
LANE_PROBES = (1, 2, 4, 8)
PREFIX = 256
REPEATS = 7
COST_SCHEMA = 1
QUANTILE = 0.2          # the estimate of one probe: this low quantile of its repeats (load only ever adds time)
WARMUP = 2              # untimed calls of every probe first (kernels, allocator, caches)
TOO_WIDE = 1.5          # a probe whose median exceeds its minimum by this factor: too noisy to rank


def _interp(table: dict, x: float) -> float:
    """Linear between the probes, the last segment's slope beyond them (flat for a single probe)."""
    xs = sorted(table)
    if not xs:
        raise WorkbenchError("cost model: no probes")
    if len(xs) == 1:
        return float(table[xs[0]])
    if x <= xs[0]:
        a, b = xs[0], xs[1]
    elif x >= xs[-1]:
        a, b = xs[-2], xs[-1]
    else:
        b = next(v for v in xs if v >= x)
        a = xs[xs.index(b) - 1]
        if b == x:
            return float(table[b])
    ya, yb = float(table[a]), float(table[b])
    return ya + (yb - ya) * (x - a) / (b - a)


@dataclass
class CostModel(Rendered):
    """Seconds (or units of one target forward, for a fixed model) per draft step and per verify."""

    device: str | None = None                    # "cuda", "cpu", None (a fixed ratio: no device)
    device_name: str | None = None               # e.g. "NVIDIA H200", the CPU model
    kind: str = "measured"                       # "measured" or "fixed"
    draft_step: dict = field(default_factory=dict)   # k lanes -> seconds of one draft step (a low quantile)
    verify: dict = field(default_factory=dict)       # N tokens -> seconds of one target forward (a low quantile)
    spread: dict = field(default_factory=dict)       # {"draft_step": {k: [min, median]}, "verify": {N: [min, median]}}
    prefix: int = PREFIX
    repeats: int = 0
    target: str | None = None
    draft: str | None = None
    source: str | None = None                    # where a fixed ratio came from

    @classmethod
    def fixed(cls, ratio: float, *, device: str | None = None, source: str | None = None) -> "CostModel":
        """draft step = ``ratio`` target forwards at any k; verify flat in N (``--cost-ratio``)."""
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio >= 0:
            raise WorkbenchError(f"cost ratio {ratio!r}: expected a number >= 0 (draft step / target forward)")
        return cls(device=device, kind="fixed", draft_step={1: float(ratio)}, verify={1: 1.0}, source=source)

    @property
    def ratio(self) -> float:
        """One single-lane draft step over one single-token target forward."""
        return self.draft_time(1) / self.verify_time(1)

    @property
    def too_noisy(self) -> bool:
        """Some probe's median exceeds its minimum by :data:`TOO_WIDE` or more: the machine was busy while
        measuring, and the projections built on it do not rank K' (they say so)."""
        return any(hi > TOO_WIDE * lo for part in self.spread.values() for lo, hi in part.values() if lo > 0)

    @property
    def indicative(self) -> bool:
        """A measured model from a CPU: its projections do not choose GPU flags."""
        return self.kind == "measured" and str(self.device or "").startswith("cpu")

    @property
    def chooses_flags(self) -> bool:
        """Only a model measured on a GPU picks SGLang flags (N's cost is flat in a fixed model)."""
        return self.kind == "measured" and str(self.device or "").startswith("cuda")

    def draft_time(self, lanes: int = 1) -> float:
        if self.kind == "fixed":
            return float(self.draft_step[1])
        return _interp(self.draft_step, lanes)

    def verify_time(self, n_tokens: int = 1) -> float:
        if self.kind == "fixed":
            return float(self.verify[1])
        return _interp(self.verify, n_tokens)

    def step_time(self, steps: int, eagle_topk: int = 1, num_draft_tokens: int | None = None) -> float:
        """S · draft(k) + verify(N) (N defaults to S+1, a chain)."""
        N = int(steps) + 1 if num_draft_tokens is None else int(num_draft_tokens)
        return int(steps) * self.draft_time(eagle_topk) + self.verify_time(N)

    def speedup(self, accept_length: float, steps: int, eagle_topk: int = 1,
                num_draft_tokens: int | None = None) -> float:
        """τ · verify(1) / (S · draft(k) + verify(N)): tokens per second over plain decoding."""
        if accept_length is None or (isinstance(accept_length, float) and math.isnan(accept_length)):
            return math.nan
        return float(accept_length) * self.verify_time(1) / self.step_time(steps, eagle_topk, num_draft_tokens)

    def speedup_range(self, tokens_low: float, tokens_high: float, steps: int, eagle_topk: int = 1,
                      num_draft_tokens: int | None = None) -> tuple[float, float]:
        """(low, high) speed-up from a tokens-per-step interval and the model's timing spread (min, max over
        repeats): low pairs the fewest tokens with the slowest draft/verify and the fastest plain step, high
        the reverse. A fixed model has no spread: only the tokens' interval counts.

            >>> m = CostModel(device="cpu", draft_step={1: 1.0}, verify={1: 10.0, 5: 10.0},
            ...               spread={"draft_step": {1: [0.9, 1.2]}, "verify": {1: [9.0, 11.0], 5: [9.5, 12.0]}})
            >>> [round(x, 3) for x in m.speedup_range(2.0, 2.4, steps=4)]
            [1.071, 2.015]
        """
        N = int(steps) + 1 if num_draft_tokens is None else int(num_draft_tokens)
        if self.kind == "fixed" or not self.spread:
            return (self.speedup(tokens_low, steps, eagle_topk, N), self.speedup(tokens_high, steps, eagle_topk, N))
        sp = self.spread
        d = {i: _interp({k: v[i] for k, v in sp.get("draft_step", {}).items()} or self.draft_step, eagle_topk)
             for i in (0, 1)}
        v = {i: {n: _interp({k: x[i] for k, x in sp.get("verify", {}).items()} or self.verify, n) for n in (1, N)}
             for i in (0, 1)}
        low = float(tokens_low) * v[0][1] / (int(steps) * d[1] + v[1][N])
        high = float(tokens_high) * v[1][1] / (int(steps) * d[0] + v[0][N])
        return (low, high)

    @property
    def label(self) -> str:
        """A few words for a figure: the model's kind and device, and its caveats."""
        if self.kind == "fixed":
            return f"fixed ratio draft step / target forward = {self.ratio:.3g}"
        notes = [w for w, on in (("indicative only", self.indicative), ("timings too noisy to rank", self.too_noisy))
                 if on]
        return f"measured on {self.device}" + (f" ({', '.join(notes)})" if notes else "")

    def describe(self) -> str:
        """One line naming the model and its device (every projection prints it)."""
        if self.kind == "fixed":
            src = f", {self.source}" if self.source else ""
            return (f"fixed cost model: draft step / target forward = {self.ratio:.3g}, verify cost flat in N "
                    f"(device: {self.device or 'none'}{src})")
        dev = f"{self.device}" + (f" ({self.device_name})" if self.device_name else "")
        text = (f"cost model measured on {dev}: draft step {self.draft_time(1) * 1e3:.3g} ms, target verify "
                f"of 1 / {max(self.verify)} tokens {self.verify_time(1) * 1e3:.3g} / "
                f"{self.verify_time(max(self.verify)) * 1e3:.3g} ms (low quantile of {self.repeats} interleaved "
                f"repeats after warm-up, prefix {self.prefix})")
        if self.too_noisy:
            text += (f"; timings too noisy to rank (a median over {TOO_WIDE:g}× its minimum: a busy machine; "
                     f"measure again when it is idle)")
        if self.indicative:
            text += "; indicative only: CPU costs do not choose GPU flags"
        return text

    def summary(self) -> str:
        lines = [self.describe()]
        if self.kind == "measured":
            sp = self.spread
            lines.append("draft step (k lanes): " + ", ".join(
                f"k={k}: {v * 1e3:.3g} ms" + (f" [{sp['draft_step'][k][0] * 1e3:.3g}–{sp['draft_step'][k][1] * 1e3:.3g}]"
                                               if k in sp.get("draft_step", {}) else "")
                for k, v in sorted(self.draft_step.items())))
            lines.append("target verify (N tokens): " + ", ".join(
                f"N={n}: {v * 1e3:.3g} ms" for n, v in sorted(self.verify.items())))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"schema": COST_SCHEMA, "kind": self.kind, "device": self.device, "device_name": self.device_name,
                "indicative": self.indicative, "prefix": self.prefix, "repeats": self.repeats,
                "target": self.target, "draft": self.draft, "source": self.source,
                "draft_step": {str(k): v for k, v in sorted(self.draft_step.items())},
                "verify": {str(k): v for k, v in sorted(self.verify.items())},
                "spread": {part: {str(k): list(v) for k, v in sorted(d.items())} for part, d in self.spread.items()}}

    def save(self, path) -> None:
        """Write the model as JSON (atomically)."""
        write_json(path, self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict, where: str = "cost model") -> "CostModel":
        try:
            kind = d.get("kind", "measured")
            if kind not in ("measured", "fixed"):
                raise WorkbenchError(f"{where}: kind {kind!r}: expected 'measured' or 'fixed'")
            ds = {int(k): float(v) for k, v in d["draft_step"].items()}
            vf = {int(k): float(v) for k, v in d["verify"].items()}
            spread = {part: {int(k): [float(x) for x in v] for k, v in dd.items()}
                      for part, dd in (d.get("spread") or {}).items()}
        except WorkbenchError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise WorkbenchError(f"{where}: expected keys draft_step and verify mapping integers to seconds "
                                 f"({type(e).__name__}: {e})") from None
        if not ds or not vf or 1 not in vf or min(list(ds.values()) + list(vf.values())) <= 0:
            raise WorkbenchError(f"{where}: draft_step and verify need positive times, verify one for N=1")
        return cls(device=d.get("device"), device_name=d.get("device_name"), kind=kind, draft_step=ds, verify=vf,
                   spread=spread, prefix=int(d.get("prefix", PREFIX)), repeats=int(d.get("repeats", 0)),
                   target=d.get("target"), draft=d.get("draft"), source=d.get("source"))

    @classmethod
    def load(cls, path) -> "CostModel":
        """Read a model written by :meth:`save` (``--cost-model file.json``)."""
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except OSError as e:
            raise WorkbenchError(f"--cost-model {path}: cannot read it ({e.strerror})") from None
        except ValueError as e:
            raise WorkbenchError(f"--cost-model {path}: not JSON ({e})") from None
        if not isinstance(d, dict):
            raise WorkbenchError(f"--cost-model {path}: expected a JSON object")
        return cls.from_dict(d, where=f"--cost-model {path}")


def as_cost_model(cost_model=None, ratio=None) -> CostModel | None:
    """A CostModel from a model, a path to one, or a fixed ratio (None when neither is given)."""
    if cost_model is not None and ratio is not None:
        raise WorkbenchError("give a cost model or a cost ratio, not both")
    if isinstance(cost_model, CostModel):
        return cost_model
    if cost_model is not None:
        return CostModel.load(cost_model)
    if ratio is not None:
        return CostModel.fixed(ratio, source="given")
    return None


# ----------------------------------------------------------------------------------------- projecting

def projection(result, cost_model, *, n_boot: int = 500) -> dict:
    """Projected speed-up of one AcceptanceResult per draft depth K' with its uncertainty, and the best K'
    only when it is clearly best.

        >>> from workbench.stats.statistics import AcceptanceResult
        >>> r = AcceptanceResult.from_arrays("L1", K=3, sample=[0, 0, 1, 1, 2, 2], t=[0, 1] * 3,
        ...                                  accepted=[3, 2, 3, 1, 2, 3])
        >>> p = projection(r, CostModel.fixed(0.1))
        >>> [row["k"] for row in p["rows"]], p["best"], p["within_noise"]
        ([1, 2, 3], None, [2, 3])

    ``rows``: per K' (a tree result: its own shape only) ``tokens_per_step`` = E[min(A, K')]+1 with its 95%
    bootstrap interval over samples (``tokens_low``/``tokens_high``), ``speedup`` and its range
    ``speedup_low``/``speedup_high`` (:meth:`CostModel.speedup_range`: the tokens' interval and the timing
    spread together). ``best``: the K' whose low end lies above every other K''s high end, else None (also
    with a single option, a tree's own shape, and with a cost model too noisy to rank);
    ``within_noise``: the K' whose high end reaches the highest point estimate's low end (the candidates
    the data cannot tell apart). ``text``: one line saying which (:func:`verdict`), and why when the best
    projection is a slowdown. Every speed-up the workbench prints or draws comes from here.
    """
    cm = cost_model
    st = result.setting
    A = result.chains["accepted"]
    c = result.chains
    depths = [result.steps] if st.eagle_topk > 1 else list(range(1, result.steps + 1))
    rows, shapes = [], {}
    for k in depths:
        capped = type(result).from_arrays(result.spec, k, sample=c["sample"], t=c["t"],
                                              accepted=np.minimum(A, k), samples=result.samples)
        capped.seed = result.seed
        tps = capped.accept_length
        lo, hi = capped.intervals(n_boot=n_boot)["accept_length"]
        shape = (k, st.eagle_topk, st.num_draft_tokens) if st.eagle_topk > 1 else (k, 1, None)
        s_lo, s_hi = cm.speedup_range(lo, hi, *shape)
        shapes[k] = shape
        rows.append({"k": k, "tokens_per_step": tps, "tokens_low": lo, "tokens_high": hi,
                     "speedup": cm.speedup(tps, *shape), "speedup_low": s_lo, "speedup_high": s_hi})
    n = len(np.unique(result.chains["sample"])) if len(result.chains["sample"]) else 0
    return {"rows": rows, **verdict(rows, cm, shapes=shapes, n_samples=n), "cost_model": cm.describe()}


def verdict(rows: list[dict], cm: CostModel, *, shapes: dict | None = None, n_samples: int | None = None) -> dict:
    """``best``, ``within_noise``, ``text`` and ``short`` (a figure's legend) of projection ``rows`` (each ``k``, ``speedup``, ``speedup_low``,
    ``speedup_high``, ``tokens_per_step``): the one rule every speed-up verdict follows.

    "Clearly best" needs at least two options, at least two samples (``n_samples``: one sample gives the
    bootstrap no interval) and a cost model steady enough to rank (:attr:`CostModel.too_noisy`); a projected slowdown (< 1×) says why: the verify step's cost in target
    forwards against the tokens it yields.

        >>> rows = [{"k": 5, "speedup": 0.84, "speedup_low": 0.8, "speedup_high": 0.9, "tokens_per_step": 2.13}]
        >>> verdict(rows, CostModel.fixed(0.3), shapes={5: (5, 4, 8)})["text"]
        'one shape, nothing to choose between: 0.84× (slower than target-only decoding: a verify step costs 2.5 target forwards (5 draft steps × 0.3 + the verify of 8 tokens) and yields 2.13 tokens)'
    """
    finite = [r for r in rows if not math.isnan(r["speedup"])]
    best, near, parts = None, [], []
    if not finite:
        return {"best": None, "within_noise": [], "text": "no projection: no counted chains", "short": "no chains"}
    top = max(finite, key=lambda r: r["speedup"])
    near = [r["k"] for r in finite if r["speedup_high"] >= top["speedup_low"]]
    noisy = ("the timings are too noisy to project a speed-up (a busy machine: measure the cost model again when "
             "it is idle); the accept lengths stand")
    if len(finite) == 1 and cm.too_noisy:       # a noisy number is not a verdict (issue 35): no number at all
        parts.append(f"one shape, nothing to choose between; {noisy}")
        short = "timings too noisy: no speed-up verdict"
    elif len(finite) == 1:
        parts.append(f"one shape, nothing to choose between: {top['speedup']:.3g}×")
        short = f"{top['speedup']:.3g}×"
    elif n_samples is not None and n_samples < 2:
        parts.append(f"best point estimate K'={top['k']} ({top['speedup']:.3g}×), but {n_samples} sample gives no "
                     f"interval to rank K' (more samples would decide)")
        near = [r["k"] for r in finite]
        short = "too few samples to rank K'"
    elif cm.too_noisy:
        parts.append(f"no K' named: {noisy}")
        near = [r["k"] for r in finite]
        short = "timings too noisy: no speed-up verdict"
    elif near == [top["k"]]:
        best = top["k"]
        short = f"best K'={best}"
        parts.append(f"best K'={best} ({top['speedup']:.3g}×): clearly best (its range lies above every other K')")
    else:
        parts.append(f"no single best K': K' in {{{', '.join(map(str, near))}}} within noise (their ranges overlap "
                     f"the best point estimate's; best point estimate K'={top['k']}, {top['speedup']:.3g}×); more "
                     f"samples or a steadier cost model would decide")
        short = f"K' within noise: {', '.join(map(str, near))}"
    if top["speedup"] < 1 and not cm.too_noisy:
        parts[-1] += f" ({slowdown_reason(top, cm, (shapes or {}).get(top['k']))})"
        short += "; a slowdown"
    return {"best": best, "within_noise": near, "text": " ".join(parts), "short": short}


def slowdown_reason(row: dict, cm: CostModel, shape=None) -> str:
    """Why a projection is below 1×: one verify step's cost in target forwards against its tokens; ``shape``
    (steps, eagle_topk, N or None) defaults to a chain of depth ``row["k"]``."""
    shape = shape or (row["k"], 1, None)
    cost = cm.step_time(*shape) / cm.verify_time(1)
    draft = shape[0] * cm.draft_time(shape[1]) / cm.verify_time(1)
    steps = f"{shape[0]} draft step" + ("s" if shape[0] != 1 else "")
    return (f"slower than target-only decoding: a verify step costs {cost:.2g} target forwards ({steps} × "
            f"{draft / shape[0]:.2g} + the verify of {shape[2] or shape[0] + 1} tokens) and yields "
            f"{row['tokens_per_step']:.2f} tokens")


# ----------------------------------------------------------------------------------------- measuring

def _timed(probes: dict, repeats: int, sync, *, warmup: int = WARMUP, q: float = QUANTILE) -> tuple[dict, dict]:
    """A low quantile (``q``) and the spread (min, median) in seconds of each probe, after ``warmup`` untimed
    calls of each, the repeats INTERLEAVED (repeat r times every probe before repeat r+1), so a load spike
    or a clock change lands on all probes alike instead of on one. A busy machine only ever adds time, so
    the low quantile is the cost and one slow repeat (a 12 ms probe among 2.7 ms ones) moves neither the
    estimate nor the spread's low end; a median far above the minimum says the machine was busy
    (:attr:`CostModel.too_noisy`).

        >>> med, spread = _timed({"a": lambda: None, "b": lambda: None}, 3, lambda: None)
        >>> sorted(med), all(lo <= med[k] <= hi for k, (lo, hi) in spread.items())
        (['a', 'b'], True)
    """
    for _ in range(int(warmup)):
        for fn in probes.values():
            fn()
    sync()
    ts = {k: [] for k in probes}
    for _ in range(int(repeats)):
        for k, fn in probes.items():
            t0 = time.perf_counter()
            fn()
            sync()
            ts[k].append(time.perf_counter() - t0)
    est = {k: float(np.quantile(v, q)) for k, v in ts.items()}
    return est, {k: [min(v), max(est[k], statistics.median(v))] for k, v in ts.items()}


def measure(target, draft, *, prefix: int = PREFIX, verify_probes=VERIFY_PROBES, lane_probes=LANE_PROBES,
            repeats: int = REPEATS, progress: bool = False) -> CostModel:
    """Time the probes on the target's and the draft's device (module docstring); returns a measured model.

        >>> # cm = measure(target, draft)            # then cm.save("cost.json")

    Target probe: one forward of N new tokens (batch 1) after ``prefix`` tokens in the KV cache, the
    cache cropped back after each repeat. Draft probe: one draft layer step of k lanes (qkv, attention
    over ``prefix`` cached keys plus its own, the MLP, the draft head and its top-k): what one
    SGLang draft decode step computes.
    """
    import torch

    if int(prefix) < 1 or int(repeats) < 1:
        raise WorkbenchError(f"cost probes: expected prefix >= 1 and repeats >= 1 (got {prefix}, {repeats})")
    dev = target.device

    def sync():
        if str(dev).startswith("cuda"):
            torch.cuda.synchronize(dev)
        if str(draft.device).startswith("cuda"):
            torch.cuda.synchronize(draft.device)

    import inspect

    model = target.model
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.vocab_size, (1, int(prefix) + max(verify_probes)), generator=g).to(dev)
    with torch.no_grad():
        out = model(input_ids=ids[:, :prefix], use_cache=True)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        if cache is None or not hasattr(cache, "crop"):
            raise WorkbenchError("cost probes: the target returns no croppable KV cache (transformers DynamicCache)")
        def step(n):
            model(input_ids=ids[:, prefix:prefix + n], use_cache=True, **{cache_kw: cache})
            cache.crop(-int(n))                    # negative: remove that many (all transformers versions)
        probes = {("verify", int(n)): (lambda n=n: step(n)) for n in verify_probes}
        # the draft: one step of k lanes after `prefix` cached keys
        sp = draft.spec
        ddev, ddt = draft.device, draft.dtype
        for k in lane_probes:
            if k > draft.draft_vocab_size:
                continue
            hid = torch.randn(k, 1, sp.hidden_size, generator=g).to(ddev, ddt)
            tok = torch.zeros(k, 1, dtype=torch.long, device=ddev)
            pk = torch.randn(k, sp.num_heads, int(prefix), sp.head_dim, generator=g).to(ddev, ddt)
            pos = torch.tensor([int(prefix)], device=ddev)

            def dstep(hid=hid, tok=tok, pk=pk, pos=pos, k=k):
                q, kk, vv, res = draft.qkv(hid, draft.embed_tokens(tok), pos)
                att = torch.nn.functional.scaled_dot_product_attention(
                    q, torch.cat([pk, kk], 2), torch.cat([pk, vv], 2))
                o = draft.finish(res, att)
                draft.logits(o).float().softmax(-1).topk(k, dim=-1)
            probes[("draft", int(k))] = dstep
        med, spread = _timed(probes, repeats, sync)       # draft and target probes interleaved: a fair ratio
    verify = {n: v for (part, n), v in med.items() if part == "verify"}
    spread_v = {n: v for (part, n), v in spread.items() if part == "verify"}
    draft_step = {k: v for (part, k), v in med.items() if part == "draft"}
    spread_d = {k: v for (part, k), v in spread.items() if part == "draft"}
    name = None
    if str(dev).startswith("cuda"):
        name = torch.cuda.get_device_name(dev)
    else:
        import platform
        name = platform.processor() or platform.machine() or None
    return CostModel(device=str(dev).split(":")[0], device_name=name, kind="measured", draft_step=draft_step,
                     verify=verify, spread={"draft_step": spread_d, "verify": spread_v}, prefix=int(prefix),
                     repeats=int(repeats), target=getattr(target, "name", None) or getattr(target, "path", None),
                     draft=getattr(draft, "name", None))


__all__ = ["CostModel", "as_cost_model", "measure", "projection", "verdict", "slowdown_reason", "VERIFY_PROBES", "LANE_PROBES", "PREFIX", "REPEATS"]
