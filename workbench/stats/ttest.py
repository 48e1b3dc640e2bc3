"""Student's t test on a few paired ratios: does a set of speed-ups lie on one side of 1?

    >>> round(t_p(2.776445, 4), 4), round(t_p(12.7062, 1), 4), round(t_p(4.302653, 2), 4)   # the tables' 5% points
    (0.05, 0.05, 0.05)
    >>> round(log_ratio_p([0.81, 0.85, 1.04]), 3)       # one pass of three on the other side: no side
    0.283
    >>> log_ratio_p([0.70, 0.72, 0.71]) < 0.001          # three steady passes decide
    True

``workbench vllm speed`` calls a side of no speculation only when the per-pass ratios' logs have a mean whose
two-sided p is at most its level: a paired test on tokens/s that can decide with the default three passes, where
the exact sign test cannot (all 3 of 3 on one side gives p = 0.25). Pure Python (no scipy): the two-sided p of t
with ``df`` degrees of freedom is the regularised incomplete beta I_{df/(df+t^2)}(df/2, 1/2), by its continued
fraction (Numerical Recipes' ``betacf``).
"""

from __future__ import annotations

import math
import statistics


def _betacf(a: float, b: float, x: float) -> float:
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_p(t: float, df: float) -> float:
    """Two-sided p of Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return min(1.0, betainc(df / 2.0, 0.5, df / (df + t * t)))


def log_ratio_p(ratios) -> float:
    """Two-sided p that the mean log of ``ratios`` (paired speed-ups, one per pass) is 0, by a one-sample t test;
    1.0 with fewer than two ratios, 0.0 when they are all equal and not 1."""
    logs = [math.log(r) for r in ratios]
    if len(logs) < 2:
        return 1.0
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    return t_p(mean / (sd / math.sqrt(len(logs))), len(logs) - 1)
