"""The served precision a live comparison judges near-ties at: given, or inferred from the requests themselves.

    >>> served_dtype("infer"), served_dtype("bf16"), served_dtype(None)
    (None, 'bfloat16', None)
    >>> infer({"tokens": 512, "ties": 9, "tie_flips": 0, "flips": 0}, exact="embed,L1,L7").dtype
    'float32'
    >>> infer({"tokens": 512, "ties": 9, "tie_flips": 2, "flips": 2}).dtype
    'bfloat16'

A near-tie is a position where the target's top two logits lie within one step of the served dtype
(relative: ``eps(dtype) * max(|top logit|, 1)``) or where the offline argmax is not the server's token. The
comparison excuses a difference between a request and a wiring only at such a position (``fingerprint``), so
the dtype decides how lenient it is. When it is not given (``--served-dtype infer``, the default; a server
the workbench started passes the dtype it started with; SGLang's ``/server_info`` reports its own), the
requests decide, on the greedy tokens the server returned (one offline target pass over prompt + output):

- the server's token is not the float32 argmax at a bfloat16 near-tie ("tie flips" > 0): it computes at
  reduced precision: **bfloat16** (the lenient resolution);
- no tie flip, and one wiring reproduces every step of every request exactly, or the greedy tokens hold
  bfloat16 near-ties and the server kept the float32 argmax at every one of them: **float32**;
- neither (no near-tie in the greedy tokens, no exact wiring): **bfloat16**, undecided, and the verdict
  says that ``--served-dtype`` would decide.

At temperature > 0 no near-ties are used (the server's sampled tokens decide A), so the precision is moot.
"""

from __future__ import annotations

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


def infer(evidence: dict, exact: str | None = None) -> Precision:
    """The precision the evidence points to (module docstring). ``evidence``: output ``tokens``, ``ties``
    (bfloat16 near-tie positions among them), ``tie_flips`` (the server's token not the float32 argmax there),
    ``flips`` (anywhere); ``exact``: a wiring that reproduces every step of every request, if any."""
    n, ties, tf = evidence.get("tokens", 0), evidence.get("ties", 0), evidence.get("tie_flips", 0)
    if tf:
        return Precision("bfloat16", "inferred", f"at {tf} of the {ties} bfloat16 near-ties in {n} greedy output "
                                                 "tokens the server's token is not the target's float32 argmax: it "
                                                 "computes at reduced precision")
    if exact is not None:
        return Precision("float32", "inferred", f"{exact} reproduces every step of every request exactly, and the "
                                                f"server never left the float32 argmax in {n} greedy tokens")
    if ties:
        return Precision("float32", "inferred", f"the server kept the target's float32 argmax at all {ties} bfloat16 "
                                                f"near-ties in {n} greedy output tokens")
    return Precision(LENIENT, "inferred", "no evidence either way (no near-tie in the greedy tokens, no wiring "
                                          "reproduces every request): the lenient resolution; --served-dtype would "
                                          "decide", decided=False)


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
