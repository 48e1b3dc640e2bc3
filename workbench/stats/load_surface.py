"""The speed model at load: a cell's step cost (batched verify steps at concurrency C and a context length, in units
of the baseline measured beside it), a draft's speed-up from its accept length, the crossover concurrency and the
best K at each C (issue 56; measured by :mod:`workbench.live.vllm_load`).

    >>> cost = cell_cost([{"baseline_wall": 10.0, "wall": 9.0, "decode": 28.0, "steps": 80, "concurrency": 4}])
    >>> cost["fixed"], cost["per_step"]      # 9 s of wall, 28/4 = 7 of them in batched verify steps of 0.35 s
    (0.2, 0.035)
    >>> speedup_at(cost, tokens=[33] * 8, accept_length=2.0, concurrency=4)   # 1 / (0.2 + 0.035 x 128 / 4) = 1 / 1.32
    0.7576

At concurrency C a server runs batched steps. A request's decode time (``vllm:request_decode_time_seconds``, first
token to last) is its verify steps times the batched step's cost, so the requests' summed decode time over their
summed verify steps is that cost, and that sum over C is the wall time the pass spent decoding; the rest of the wall
is ``fixed`` (prefill, HTTP, scheduling). Both in units of the baseline pass (no speculation) at the same C and
prompts. A draft's pass then takes fixed + per_step x (its verify steps / C) baseline passes, its verify steps the
sum over requests of (tokens - 1) / accept length. At C = 1 this is ``workbench.live.vllm_speed.step_cost``'s model.
"""

from __future__ import annotations

import math
import statistics

from workbench.core.errors import WorkbenchError

NOISE = 0.05          # a speed-up within 5% of 1 calls no side (as vllm speed)


def verify_steps(tokens, accept_length: float) -> float:
    """Verify steps to generate requests of ``tokens`` new tokens each at ``accept_length`` tokens per step (the
    first token of each is the prefill's)."""
    if not accept_length or accept_length <= 0 or math.isnan(accept_length):
        return math.nan
    return round(sum((n - 1) / accept_length for n in tokens), 4)


def cell_cost(passes) -> dict:
    """The step cost of one cell from its speculative passes (each ``{baseline_wall, wall, decode, steps,
    concurrency}``: ``decode`` the server's decode seconds summed over the pass's requests, ``steps`` their verify
    steps), in baseline-pass units: ``fixed`` = (wall - decode / C) / baseline wall, ``per_step`` = decode / steps /
    baseline wall (the batched step), medians over passes. A pass without timers is refused in one line."""
    passes = [p for p in passes if p["steps"] > 0 and p["baseline_wall"] > 0]
    if not passes:
        raise WorkbenchError("cell cost: no request reported a verify step (was the server speculating?)")
    if any(p.get("decode") is None for p in passes):
        raise WorkbenchError("cell cost: the server reported no vllm:request_decode_time_seconds around a pass "
                             "(its /metrics lacks the request timers; the load model needs them)")
    fixed = [(p["wall"] - p["decode"] / p["concurrency"]) / p["baseline_wall"] for p in passes]
    per = [p["decode"] / p["steps"] / p["baseline_wall"] for p in passes]
    return {"fixed": round(statistics.median(fixed), 6), "per_step": round(statistics.median(per), 6),
            "unit": "baseline pass seconds"}


def speedup_at(cost: dict, tokens, accept_length: float, concurrency: int) -> float:
    """Speed-up over no speculation of requests of ``tokens`` new tokens each at ``accept_length``, ``concurrency``
    in flight, on a cell of ``cost`` (:func:`cell_cost`): 1 / (fixed + per_step x steps / C)."""
    steps = verify_steps(tokens, accept_length)
    seconds = cost["fixed"] + cost["per_step"] * steps / int(concurrency)
    return round(1.0 / seconds, 4) if seconds > 0 and not math.isnan(seconds) else math.nan


def predict_cell(cost: dict, baseline_tokens_per_s: float, tokens, accept_length: float, concurrency: int) -> dict:
    """Aggregate tokens/s, per-request tokens/s and time per output token (ms) of a cell, predicted."""
    sp = speedup_at(cost, tokens, accept_length, concurrency)
    agg = sp * baseline_tokens_per_s
    per = agg / int(concurrency)
    return {"speedup": sp, "tokens_per_s": round(agg, 2), "per_request_tokens_per_s": round(per, 2),
            "ms_per_output_token": round(1000.0 / per, 1) if per > 0 else math.nan}


def predict(surf: dict, accept: dict, *, drafts_twins: dict, max_tokens: int, measured: list | None = None) -> dict:
    """Every (draft, K, context, C) cell of the surface predicted for the served and the trained wiring, beside the
    measured one when there is one; then the crossover and the best K at each C per draft."""
    cost = {(c["twin"], c["k"], c["context"], c["concurrency"]): c for c in surf["cells"]}
    meas = {(m["server"], m["k"], m["context"], m["concurrency"]): m for m in (measured or [])}
    preds = []
    for name, twin in drafts_twins.items():
        for (t, k, b, c), s in sorted(cost.items(), key=lambda x: (x[0][1], x[0][2], x[0][3])):
            if t != twin or name not in accept or str(k) not in accept[name] or b not in accept[name][str(k)]:
                continue
            acc = accept[name][str(k)][b]
            tokens = [int(max_tokens)] * int(s["requests"])
            p = {"draft": name, "k": k, "context": b, "prompt_tokens": s["prompt_tokens"], "concurrency": c,
                 "baseline_tokens_per_s": s["baseline_tokens_per_s"],
                 "served": predict_cell(s, s["baseline_tokens_per_s"], tokens, acc["served"], c),
                 "trained": predict_cell(s, s["baseline_tokens_per_s"], tokens, acc["trained"], c),
                 "served_accept_length": acc["served"], "trained_accept_length": acc["trained"],
                 "served_wiring": acc.get("served_wiring"), "trained_wiring": acc.get("trained_wiring")}
            m = meas.get((name, k, b, c))
            if m is not None:
                # the prediction's tokens/s is rescaled to the baseline measured beside the draft's own cell
                # (machine drift between the twin's server and the draft's cancels, as in vllm speed)
                pt = p["served"]["speedup"] * m["baseline_tokens_per_s"]
                p["measured"] = {x: m[x] for x in ("measured_tokens_per_s", "measured_spread", "baseline_tokens_per_s",
                                                   "measured_speedup", "speedup_spread", "too_noisy", "side_p")}
                p["predicted_tokens_per_s"] = round(pt, 2)
                p["error"] = round(pt / m["measured_tokens_per_s"] - 1.0, 4)
            preds.append(p)
    return {"predictions": preds, "crossover": {n: crossover(preds, n) for n in drafts_twins},
            "best_k": {n: best_k_by_c(preds, n) for n in drafts_twins}}


def _side(m: dict) -> int | None:
    """+1 faster, -1 slower, 0 about the same, None too noisy: a measured cell's side, called by its test."""
    if m["too_noisy"]:
        return None
    if abs(m["measured_speedup"] - 1.0) < NOISE:
        return 0
    return 1 if m["measured_speedup"] > 1 else -1


def crossover(preds: list, draft: str, context: str | None = None) -> dict:
    """The lowest C where speculation stops paying (no K faster), on the context bucket with the most C values
    (``context``), predicted for both wirings and measured; None where it pays at every C measured. The measured
    one is "undecided" where a cell at or below it is too noisy to call."""
    mine = [p for p in preds if p["draft"] == draft]
    if not mine:
        return {}
    if context is None:
        per = {}
        for p in mine:
            per.setdefault(p["context"], set()).add(p["concurrency"])
        context = max(per, key=lambda b: (len(per[b]), b == "data"))
    mine = [p for p in mine if p["context"] == context]
    cs = sorted({p["concurrency"] for p in mine})
    out = {"context": context, "grid": cs}
    for wiring in ("served", "trained"):
        out[f"predicted_{wiring}"] = next((c for c in cs if max(p[wiring]["speedup"] for p in mine
                                                                 if p["concurrency"] == c) <= 1.0), None)
    meas, undecided = None, False
    for c in cs:
        sides = [_side(p["measured"]) for p in mine if p["concurrency"] == c and "measured" in p]
        if not sides:
            undecided = True
            break
        if 1 in sides:
            continue
        if None in sides:
            undecided = True
            break
        meas = c
        break
    out["measured"] = "undecided" if undecided else meas
    if undecided:
        out["measured_note"] = ("a cell is too noisy to call a side: more passes (--repeats) or a quieter machine "
                                "would decide it")
    pm, mm = out["predicted_served"], out["measured"]
    if mm != "undecided":
        ix = {c: i for i, c in enumerate(cs + [None])}
        out["within_one_step"] = abs(ix[pm] - ix[mm]) <= 1
    return out


def best_k_by_c(preds: list, draft: str) -> dict:
    """Per context and C: the K predicted best (served and trained wiring) and the K measured best (None when the
    top two's pass spreads overlap: too noisy to rank)."""
    out = {}
    mine = [p for p in preds if p["draft"] == draft]
    for b, c in sorted({(p["context"], p["concurrency"]) for p in mine}):
        cell = [p for p in mine if (p["context"], p["concurrency"]) == (b, c)]
        row = {"predicted_served": max(cell, key=lambda p: p["served"]["tokens_per_s"])["k"],
               "predicted_trained": max(cell, key=lambda p: p["trained"]["tokens_per_s"])["k"]}
        m = sorted((p for p in cell if "measured" in p), key=lambda p: -p["measured"]["measured_tokens_per_s"])
        if m:
            ranked = len(m) == 1 or m[0]["measured"]["measured_spread"]["min"] > m[1]["measured"]["measured_spread"]["max"]
            row["measured"] = m[0]["k"] if ranked else None
            row["right"] = (row["measured"] == row["predicted_served"]) if ranked else None
        out.setdefault(b, {})[str(c)] = row
    return out


def answer_line(state: dict, draft: str, wiring: str = "served") -> str:
    """One line: up to which concurrency speculation pays, at which K, and what it costs past it (predicted from
    the surface, on the bucket of the crossover).

        >>> p = lambda c, k, sp: {"draft": "d", "k": k, "context": "data", "concurrency": c,
        ...                       "served": {"speedup": sp}, "trained": {"speedup": sp}}
        >>> st = {"predictions": [p(1, 1, 1.2), p(1, 2, 1.3), p(4, 1, 1.1), p(4, 2, 1.05), p(8, 1, 0.88), p(8, 2, 0.8)]}
        >>> answer_line(st, "d")
        'd as served, prompts of the data bucket: pays up to concurrency 4 at K=1 (1.10x); past it, at concurrency 8, the best K (K=1) costs 12%'
    """
    preds = [p for p in state.get("predictions", []) if p["draft"] == draft]
    if not preds:
        return f"{draft}: no predictions"
    co = crossover(preds, draft)
    b = co["context"]
    best = {}
    for p in preds:
        if p["context"] == b and (p["concurrency"] not in best or p[wiring]["speedup"] > best[p["concurrency"]][wiring]["speedup"]):
            best[p["concurrency"]] = p
    cs = sorted(best)
    pays = [c for c in cs if best[c][wiring]["speedup"] > 1.0]
    head = f"{draft} as {wiring}, prompts of the {b} bucket"
    if cs[0] not in pays:
        return f"{head}: does not pay even at concurrency {cs[0]} (its best K, K={best[cs[0]]['k']}, " \
               f"{_costs(best[cs[0]][wiring]['speedup'])})"
    top = max(c for c in pays if all(x in pays for x in cs if x <= c))
    line = f"{head}: pays up to concurrency {top} at K={best[top]['k']} ({best[top][wiring]['speedup']:.2f}x)"
    past = [c for c in cs if c > top]
    if past:
        c = past[0]
        line += f"; past it, at concurrency {c}, the best K (K={best[c]['k']}) {_costs(best[c][wiring]['speedup'])}"
    else:
        line += " (the highest measured)"
    return line


def _costs(speedup: float) -> str:
    """``costs 12%`` (of no speculation's tokens/s), or ``about breaks even`` within 1%."""
    loss = (1.0 - speedup) * 100
    return "about breaks even" if abs(loss) < 1 else f"costs {loss:.0f}%"



def measured_line(preds: list, draft: str) -> str:
    """What the server measured per C on the crossover's bucket, each cell called by its test: "faster" where a K's
    paired t test calls faster, "slower" where every K's calls slower, else "too noisy to call" ('' without
    measurements).

        >>> m = lambda c, k, sp, noisy: {"draft": "d", "k": k, "context": "data", "concurrency": c,
        ...     "served": {"speedup": 1.0}, "trained": {"speedup": 1.0},
        ...     "measured": {"measured_speedup": sp, "too_noisy": noisy}}
        >>> measured_line([m(1, 1, 1.2, False), m(1, 2, 1.1, True), m(4, 1, 0.6, False), m(4, 2, 0.5, False)], "d")
        'measured: C=1 faster (K=1, 1.20x); C=4 slower at every K (best 0.60x)'
    """
    co = crossover(preds, draft)
    if not co:
        return ""
    out = []
    for c in co["grid"]:
        cell = [p for p in preds if p["draft"] == draft and p["context"] == co["context"] and p["concurrency"] == c
                and "measured" in p]
        if not cell:
            continue
        best = max(cell, key=lambda p: p["measured"]["measured_speedup"])
        sides = [_side(p["measured"]) for p in cell]
        sp = best["measured"]["measured_speedup"]
        if 1 in sides:
            fast = max((p for p in cell if _side(p["measured"]) == 1), key=lambda p: p["measured"]["measured_speedup"])
            out.append(f"C={c} faster (K={fast['k']}, {fast['measured']['measured_speedup']:.2f}x)")
        elif all(x == -1 for x in sides):
            out.append(f"C={c} slower at every K (best {sp:.2f}x)")
        else:
            out.append(f"C={c} too noisy to call (best K={best['k']}, {sp:.2f}x)")
    return "measured: " + "; ".join(out) if out else ""


__all__ = ["verify_steps", "measured_line", "cell_cost", "speedup_at", "predict_cell", "predict", "crossover", "best_k_by_c",
           "answer_line"]
