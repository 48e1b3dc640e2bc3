"""Tokens per second on a real vLLM server, with and without speculation, beside two offline predictions.

    >>> cost = step_cost([{"baseline_wall": 10.0, "wall": 12.0, "decode": 8.0, "steps": 40}])
    >>> cost                      # in baseline-pass seconds: 0.4 outside the verify steps, 0.02 per step
    {'fixed': 0.4, 'per_step': 0.02, 'source': 'server timers'}
    >>> verify_steps([49, 49], accept_length=1.6)     # the first token of a request is the prefill's
    60.0
    >>> predict_speedup(cost, 30.0)                   # 1 / (0.4 + 0.02 x 30)
    1.0
    >>> # rows = sweep("data/demo-real/target", {"draft-aligned": "data/demo-real/draft-aligned"},
    >>> #              "data/demo-real/val.jsonl", ks=[1, 2, 3, 4], out="speed.json")

What :func:`sweep` does (``workbench vllm speed``, docs/vllm.md "How fast"):

1. One server without speculation (the baseline) stays up for the whole sweep. For each draft's shape twin and
   K, then each draft and K, a server with it at K starts beside it; one warm-up request goes to it and one
   warm-up pass to the baseline, which idled while the new server loaded (both excluded), then ``repeats`` passes alternate between the two servers (baseline pass, speculative pass, ...), so both
   see the same machine load. A pass sends the same prompts with the same ``max_tokens`` (``ignore_eos``,
   greedy), one request at a time, then with ``concurrency`` requests in flight. Medians and the spread
   (min..max over passes) are reported; the measured speed-up is the median of the per-pass ratios.
2. **Predicted from the server's own costs (a)**: around each request of a one-at-a-time pass, the server's own
   timers (``/metrics``: ``vllm:request_prefill_time_seconds``, ``vllm:request_decode_time_seconds``) and the
   request's verify steps (``metrics.speculative_decoding``) split the pass's wall time into the verify steps
   (the decode time) and everything else (prefill, HTTP, scheduling). Both are kept in units of the baseline
   pass run just before (a machine that speeds up or slows down between rows moves both alike): ``fixed`` =
   (wall - decode) / baseline wall and ``per_step`` = decode / verify steps / baseline wall, medians over
   passes (:func:`step_cost`). These costs are measured on a server of the draft's **shape twin**
   (:mod:`workbench.model.shape_twin`: its config and tensor shapes, seeded weights; a verify step costs the same
   whatever the weights), at each K, interleaved with the baseline like a draft's row, so no row is predicted from
   the passes it is judged against, even with one draft (``calibrated_on``: the twin; ``calibration`` says it in
   words). Every wiring's speed-up then follows from its offline accept length alone: 1 / (fixed + per_step x
   steps), steps = (tokens - 1) / accept length per request (:func:`predict_speedup`), and its tokens/s from the
   baseline measured beside it. The draft's own cost per step against its twin's (``step_cost_spread``) checks the
   assumption afterwards and predicts nothing. The offline accept length is the decode path of vLLM's reading of
   the draft (``accept --engine vllm``) on the same rows cut to ``max_tokens``.
3. **Predicted in process (b)**: the workbench's cost model (:func:`workbench.stats.cost.measure`, HF
   forwards here) turns the same accept length into a speed-up over the measured baseline.

Every row is written to ``out`` as soon as it is measured (atomic); the same command resumes a sweep that
was interrupted or whose server died, and redoes only the missing rows. It resumes only a sweep of the same
``key`` (:func:`resume_key`): the drafts and their bytes, the Ks, the target's bytes, the prompts and reply
length, the repeats and concurrency, the machine; and only on the same vLLM release (read off ``/version``);
anything else is one line naming what differs. Every server started is stopped by
its pid, whatever happens; their logs go beside ``out`` (``<out stem>-baseline.log``, ``<out stem>-<draft>-k<K>.log``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.devices import cpu_model
from workbench.core.files import beside, content_digest, write_json
from workbench.live import vllm_server
from workbench.live.vllm_live import Client, parse_spec_decoding, pick_engine
from workbench.load import inputs
from workbench.model import shape_twin
from workbench.rows.dataset import load
from workbench.simulate.acceptance import accept
from workbench.stats import cost
from workbench.stats.load_surface import verify_steps  # noqa: F401  (the one definition; re-exported)
from workbench.stats.ttest import log_ratio_p

NOISE = 0.05          # a speed-up within 5% of 1, or a spread this wide around it, ranks nothing
SIDE_P = 0.05         # a side (faster / slower) is called only when a paired t test on the passes' log ratios
                      # (stats.ttest.log_ratio_p) gives two-sided p <= this, the one level the docs state, whether or
                      # not the passes straddle 1 (issue 57, item 5): it can decide with 3 passes (the exact sign test
                      # could not: 3 of 3 on one side gives p = 0.25)
CALIBRATION = "shape twin"   # each K's step cost: measured on a server of the draft's shape twin (model.shape_twin)
FILE_NAME = "vllm-speed.json"
HOW = ("`make demo` measures the default demo's (2:14 on 2 quiet cores); for your own draft, `workbench vllm speed` with "
       "your target, draft and data and `--json vllm-speed.json` beside the draft's folder (about 25 minutes on 2 cores "
       "for two drafts at four Ks; docs/vllm.md).")


def step_cost(passes) -> dict:
    """The server's own costs at one K, from its one-at-a-time passes (each a dict of ``baseline_wall``, the
    paired baseline pass's wall seconds; ``wall``; ``decode``, the server's decode seconds over the pass, None
    when it reports no timers; ``steps``, verify steps), in units of the baseline pass's wall time: ``fixed``,
    everything outside the verify steps (prefill, HTTP, scheduling), and ``per_step``; medians over passes.
    Without the server's timers the whole wall time is put on the steps (``fixed`` 0), and ``source`` says so."""
    passes = [p for p in passes if p["steps"] > 0 and p["baseline_wall"] > 0]
    if not passes:
        raise WorkbenchError("step cost: no request reported a verify step (was the server speculating?)")
    timed = all(p.get("decode") is not None for p in passes)
    fixed = [(p["wall"] - p["decode"]) / p["baseline_wall"] if timed else 0.0 for p in passes]
    per = [_per_step(p, timed) for p in passes]
    return {"fixed": round(statistics.median(fixed), 6), "per_step": round(statistics.median(per), 6),
            "source": "server timers" if timed else "pass wall time over verify steps (the server reports no "
                                                    "vllm:request_decode_time_seconds)"}


def _per_step(p: dict, timed: bool) -> float:
    """One pass's cost per verify step in baseline-pass units: the server's decode seconds (its whole wall time
    without timers) over its verify steps, over the paired baseline pass's wall."""
    return (p["decode"] if timed else p["wall"]) / p["steps"] / p["baseline_wall"]


def predict_speedup(cost: dict, steps: float) -> float:
    """Speed-up over no speculation of a pass of ``steps`` verify steps on a server of ``cost`` (:func:`step_cost`,
    in baseline-pass units): 1 / (fixed + per_step x steps)."""
    seconds = cost["fixed"] + cost["per_step"] * steps
    return round(1.0 / seconds, 4) if seconds > 0 else math.nan


@dataclass
class Pass:
    """One pass over the prompts: wall seconds, tokens, and per request (tokens, seconds, verify steps, and the
    server's prefill and decode seconds, None when it reports no timers or requests overlapped)."""

    concurrency: int
    wall: float
    requests: list = field(default_factory=list)
    pooled: dict | None = None       # requests in flight together: the server's timers summed over the pass

    def totals(self) -> dict:
        """Wall, decode seconds (None without timers; summed over requests, which overlap when ``concurrency`` >
        1) and verify steps of the pass."""
        dec = [r[4] for r in self.requests]
        if None in dec and self.pooled:
            dec_s, pre_s = self.pooled["decode"], self.pooled["prefill"]
        else:
            dec_s = None if None in dec else sum(dec)
            pre_s = None if None in dec else sum(r[3] for r in self.requests)
        return {"wall": round(self.wall, 5), "decode": None if dec_s is None else round(dec_s, 5),
                "prefill": None if pre_s is None else round(pre_s, 5), "steps": sum(r[2] for r in self.requests)}

    @property
    def tokens(self) -> int:
        return sum(r[0] for r in self.requests)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall if self.wall > 0 else math.nan


def one_pass(client: Client, prompts, max_tokens: int, concurrency: int = 1) -> Pass:
    """Every prompt once (greedy, ``ignore_eos``, ``max_tokens`` each), ``concurrency`` in flight. One at a time,
    the server's request timers are read around each request (:meth:`Client.request_timers`); with several in
    flight, around the whole pass (``Pass.pooled``, the sums over its requests); the reads are left out of the
    pass's wall time."""
    params = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "ignore_eos": True}

    def ask(prompt):
        t = time.perf_counter()
        out, reply = client.complete(prompt, max_tokens, sampling=params, where="speed")
        seconds = time.perf_counter() - t
        sd = (reply.get("metrics") or {}).get("speculative_decoding") if isinstance(reply.get("metrics"), dict) \
            else None
        steps = (parse_spec_decoding(sd, completion_tokens=len(out)).verify_ct or 0) if sd else 0
        return len(out), seconds, steps

    if concurrency > 1:
        before = client.request_timers()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            reqs = [(*r, None, None) for r in pool.map(ask, prompts)]
        wall = time.perf_counter() - t0
        after = _timers_after(client, before, wait=10.0, n=len(prompts))   # all of them, however loaded the machine
        pooled = None
        if {"prefill", "decode"} <= set(before) and after.get("requests", 0) == before.get("requests", 0) + len(prompts):
            pooled = {"prefill": after["prefill"] - before["prefill"], "decode": after["decode"] - before["decode"]}
        return Pass(concurrency, wall, reqs, pooled)
    reqs, reading = [], 0.0
    before = client.request_timers()
    t0 = time.perf_counter()
    for p in prompts:
        n, seconds, steps = ask(p)
        t = time.perf_counter()
        after = _timers_after(client, before)
        reading += time.perf_counter() - t
        timed = {"prefill", "decode"} <= set(before) and after.get("requests", 0) == before.get("requests", 0) + 1
        reqs.append((n, seconds, steps, round(after["prefill"] - before["prefill"], 5) if timed else None,
                     round(after["decode"] - before["decode"], 5) if timed else None))
        before = after
    return Pass(1, time.perf_counter() - t0 - reading, reqs)


def _timers_after(client: Client, before: dict, wait: float = 1.0, n: int = 1) -> dict:
    """The server's timers once they count ``n`` more finished requests (vLLM records them as the reply goes out;
    polled for up to ``wait`` seconds); as they are when the server has none."""
    deadline = time.perf_counter() + wait
    while True:
        after = client.request_timers()
        if not after or after.get("requests", 0) >= before.get("requests", 0) + n or time.perf_counter() > deadline:
            return after
        time.sleep(0.01)


def spread(values) -> dict:
    """{"median", "min", "max"} of a list of numbers (2 decimals)."""
    v = sorted(float(x) for x in values)
    return {"median": round(statistics.median(v), 2), "min": round(v[0], 2), "max": round(v[-1], 2)}


def compare_passes(base: list[Pass], spec: list[Pass]) -> dict:
    """Measured tokens/s of both servers (median and spread over passes) and the speed-up (median of the
    per-pass ratios, passes paired in the order they ran), and whether the spread allows a verdict."""
    ratios = [s.tokens_per_s / b.tokens_per_s for b, s in zip(base, spec)]
    r = spread(ratios)
    faster, slower = sum(x > 1.0 for x in ratios), sum(x < 1.0 for x in ratios)
    p = log_ratio_p(ratios)
    noisy = not p <= SIDE_P
    return {"measured_tokens_per_s": spread(p.tokens_per_s for p in spec)["median"],
            "measured_spread": spread(p.tokens_per_s for p in spec),
            "baseline_tokens_per_s": spread(p.tokens_per_s for p in base)["median"],
            "baseline_spread": spread(p.tokens_per_s for p in base),
            "measured_speedup": r["median"], "speedup_spread": r, "too_noisy": bool(noisy),
            "passes_faster": faster, "passes_slower": slower, "side_p": round(p, 4)}


def verdict(speedup: float, too_noisy: bool = False) -> str:
    """Faster or slower than no speculation, and by how much, in words.

        >>> verdict(0.67), verdict(1.3), verdict(1.02, too_noisy=True)
        ('slower than no speculation (0.67x)', 'faster than no speculation (1.30x)', 'too noisy to tell (1.02x)')
    """
    if too_noisy or math.isnan(speedup):
        return f"too noisy to tell ({speedup:.2f}x)"
    if abs(speedup - 1.0) < NOISE:
        return f"about the same as no speculation ({speedup:.2f}x)"
    return f"{'faster' if speedup > 1 else 'slower'} than no speculation ({speedup:.2f}x)"


def sign_right(predicted: float, measured: float, too_noisy: bool = False, margin: float = 0.0) -> bool | None:
    """Whether the prediction puts the speed-up on the measured side of no speculation; None (undecided) when the
    measurement calls no side (too noisy, or within :data:`NOISE` of 1) or the prediction calls none: it lies
    within ``margin`` of 1, the sweep's own uncertainty of its calibration (the two drafts' cost per verify step
    differ by that much at this K, though both run the same verify step).

        >>> sign_right(0.9, 0.8), sign_right(1.1, 0.8), sign_right(0.93, 1.02), sign_right(0.9, 1.2, too_noisy=True)
        (True, False, None, None)
        >>> sign_right(1.07, 0.85, margin=0.21), sign_right(1.3, 0.85, margin=0.21)
        (None, False)
    """
    if too_noisy or abs(measured - 1.0) < NOISE or math.isnan(predicted) or abs(predicted - 1.0) < abs(margin):
        return None
    return (predicted > 1) == (measured > 1)


# ──────────────────────────────────────────── the sweep ────────────────────────────────────────────

def speed_rows(data, n_rows: int, max_tokens: int | None) -> tuple[list[dict], int]:
    """The first ``n_rows`` rows of ``data`` cut to their prompt + ``max_tokens`` response tokens (default: the
    shortest response), and that ``max_tokens``. A row whose response is shorter is refused in one line."""
    rows = load(data).rows()[:int(n_rows)]
    if not rows:
        raise WorkbenchError(f"{data}: no rows")
    return cut_rows(rows, max_tokens, data)


def cut_rows(rows, max_tokens: int | None, where) -> tuple[list[dict], int]:
    """:func:`speed_rows` on rows already read (``where`` names them in an error)."""
    cut = []
    for i, r in enumerate(rows):
        n_prompt = r["loss_mask"].index(1) if 1 in r["loss_mask"] else len(r["input_ids"])
        cut.append((i, n_prompt, len(r["input_ids"]) - n_prompt))
    n = int(max_tokens) if max_tokens else min(c[2] for c in cut)
    short = [c for c in cut if c[2] < n]
    if short or n < 1:
        i, _, have = short[0] if short else cut[0]
        raise WorkbenchError(f"{where}: row {i} has {have} response tokens, fewer than --max-tokens {n} (the offline "
                             f"accept length needs the target's own tokens for every generated one)")
    out = [{"input_ids": rows[i]["input_ids"][:p + n], "loss_mask": [0] * p + [1] * n, "n_prompt_tokens": p}
           for i, p, _ in cut]
    return out, n


def check_inputs(target, drafts: dict, data) -> None:
    """Local inputs first, before any server starts: each draft loaded by the loader users use (a checkpoint vLLM
    would refuse is one line here, not a server log); one line naming what is wrong."""
    for what, path in [("--target", target)] + [(f"--draft {name}", p) for name, p in drafts.items()]:
        if not (Path(path) / "config.json").is_file():
            raise WorkbenchError(f"{what} {path}: no config.json there (expected a model folder)")
    if not Path(data).exists():
        raise WorkbenchError(f"--data {data}: no such file")
    tgt = inputs.target(target, progress=False)
    for p in drafts.values():
        inputs.draft(p, tgt)


def offline(target, draft_path, rows, k: int, cost_model=None, engine: str = "vllm", cache_dir=None) -> dict:
    """Offline accept lengths (decode path, K=k) of vLLM's reading (``engine``: the record of the served release)
    and of the trained wiring, and, given the draft's in-process ``cost_model``, its speed-ups for both.
    ``cache_dir``: the target's features kept for the next call on these rows (:func:`accept`)."""
    served, note = accept(target, draft_path, rows, engine=engine, K=k, progress=False, cost_ratio=0.05,
                          cache_dir=cache_dir)
    trained, tnote = accept(target, draft_path, rows, K=k, progress=False, cost_ratio=0.05, cache_dir=cache_dir)
    out = {"served_wiring": served.spec, "served_accept_length": round(served.decode_path["accept_length"], 4),
           "trained_wiring": trained.spec, "trained_accept_length": round(trained.decode_path["accept_length"], 4)}
    if cost_model is not None:
        cm = cost_model
        out["in_process_speedup"] = round(cm.speedup(out["served_accept_length"], k), 4)
        out["in_process_speedup_trained"] = round(cm.speedup(out["trained_accept_length"], k), 4)
    return out


def sweep(target, drafts: dict, data, ks, *, rows: int = 8, max_tokens: int | None = None, repeats: int = 3,
          concurrency: int = 4, out=None, in_process: bool = True, server_kw: dict | None = None,
          say=None, start=None, stop=None, replace: bool = False) -> dict:
    """Measure tokens/s without speculation, with each draft's shape twin and with each draft, at each K, on real
    vLLM servers (module docstring), predict each draft's from its twin's step cost and its offline accept length,
    and return (and write to ``out``) ``{"rows": [...], "calibration": [...], "twins": ..., "step_costs": ...,
    "best_k": ...}``. ``drafts``: {name: folder}. Resumes from ``out``. ``start``/``stop``:
    :func:`workbench.live.vllm_server.start`/``stop`` unless given (the tests' stand-ins). ``replace``: a file at
    ``out`` of another key is moved to ``<stem>.previous.json`` and the sweep starts again (the demo's own sweep),
    instead of one line naming what differs."""
    say = say or (lambda m: None)
    start, stop = start or vllm_server.start, stop or vllm_server.stop
    check_inputs(target, drafts, data)
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise WorkbenchError(f"-K {ks}: expected draft depths >= 1")
    cut, n_tok = speed_rows(data, rows, max_tokens)
    prompts = [r["input_ids"][:r["loss_mask"].index(1)] for r in cut]
    settings = {"target": str(target), "data": str(data), "rows": len(cut), "max_tokens": n_tok,
                "repeats": int(repeats), "concurrency": int(concurrency), "costs": "server timers",
                "calibration": CALIBRATION}
    key = resume_key(target, drafts, ks, prompts, n_tok, settings)
    state = _resume(out, settings, key, replace, say)
    logs = (Path(out).parent, Path(out).stem) if out else (Path(tempfile.mkdtemp(prefix="wb-speed-")), "vllm-speed")
    folders = {name: shape_twin.make(path, logs[0] / f"{logs[1]}-twins") for name, path in drafts.items()}
    twins = {name: folder.name for name, folder in folders.items()}          # drafts of one shape share a twin
    twin_dirs = {folder.name: folder for folder in folders.values()}
    state["twins"] = twins
    done = {(r["draft"], r["k"]) for r in state["rows"] + state["calibration"]}
    todo = ([("calibration", t, twin_dirs[t], k) for t in twin_dirs for k in ks]
            + [("rows", name, drafts[name], k) for name in drafts for k in ks])
    todo = [job for job in todo if (job[1], job[3]) not in done]
    if done:
        say(f"resuming: {len(done)} rows measured, {len(todo)} to go ({out})")
    kw = {"enforce_eager": True, "dtype": "float32", "max_num_seqs": max(4, int(concurrency)),
          "max_model_len": max(512, max(map(len, prompts)) + n_tok + 16), **(server_kw or {})}

    def log(what: str) -> str:
        return str(logs[0] / f"{logs[1]}-{what}.log")

    base_srv = None
    try:
        if todo:
            base_srv = start(target, None, k=1, say=say, log=log("baseline"), **kw)
            base = Client(base_srv.url)
            version = base.version()
            record, said = pick_engine(None, version)              # the served release's record (GET /version)
            old = (state.get("engine") or {}).get("version")
            if done and old and old != version:
                raise WorkbenchError(f"{out}: its {len(done)} rows were measured on vLLM {old}, this server is "
                                     f"vLLM {version}; use another --json or remove it")
            state["engine"] = {"version": version, "record": record}
            say(said)
            one_pass(base, prompts[:1], n_tok)                       # warm-up, excluded
        for kind, name, folder, k in todo:
            what = f"{name} (the shape twin of {', '.join(d for d, t in twins.items() if t == name)})" \
                if kind == "calibration" else name
            say(f"{what} at K={k}: starting its server")
            srv = None
            passes = {"base1": [], "spec1": [], "baseN": [], "specN": []}
            n_conc = concurrency if kind == "rows" else 1            # the twin calibrates the one-at-a-time cost
            try:
                srv = start(target, folder, k=k, say=say, log=log(f"{name}-k{k}"), **kw)
                client = Client(srv.url)
                one_pass(client, prompts[:1], n_tok)                 # warm-up, excluded
                one_pass(base, prompts, n_tok)                       # the baseline again, excluded: it idled
                # while this server loaded, and its first pass after that ran up to 2x slower (cold)
                for _ in range(int(repeats)):                        # interleaved: both see the same load
                    passes["base1"].append(one_pass(base, prompts, n_tok))
                    passes["spec1"].append(one_pass(client, prompts, n_tok))
                    if n_conc > 1:
                        passes["baseN"].append(one_pass(base, prompts, n_tok, n_conc))
                        passes["specN"].append(one_pass(client, prompts, n_tok, n_conc))
            except WorkbenchError as e:
                kept = len(state["rows"]) + len(state["calibration"])
                raise WorkbenchError(f"vllm speed: {'shape twin' if kind == 'calibration' else 'draft'} {name} at "
                                     f"K={k}: {e} ({kept} finished rows kept in {out}; the same command resumes)") \
                    from None
            finally:
                if srv is not None:
                    stop_server(stop, srv)
            row = {"draft": name, "k": k, **compare_passes(passes["base1"], passes["spec1"]),
                   "steps": [[s, round(t, 5), n, pre, dec] for p in passes["spec1"] for n, t, s, pre, dec in p.requests],
                   "passes": [_paired(b, p) for b, p in zip(passes["base1"], passes["spec1"])]}
            if n_conc > 1:
                cN = compare_passes(passes["baseN"], passes["specN"])
                row[f"concurrency_{concurrency}"] = {key: cN[key] for key in (
                    "measured_tokens_per_s", "baseline_tokens_per_s", "measured_speedup", "too_noisy")}
            state[kind].append(row)
            _save(out, state)
            sp = row["speedup_spread"]
            say(f"{what} at K={k}: {row['measured_tokens_per_s']} tokens/s, baseline {row['baseline_tokens_per_s']} "
                f"(medians); speed-up {row['measured_speedup']}x, the median of the paired passes' ratios "
                f"[{sp['min']}-{sp['max']}]" + (f"; too noisy to tell faster from slower ({row['passes_faster']} of "
                                                f"{len(row['passes'])} passes faster): more passes (--repeats) or a "
                                                f"quieter machine would decide it" if row["too_noisy"] else ""))
    finally:
        if base_srv is not None:
            stop_server(stop, base_srv)
    _predict(state, target, drafts, cut, n_tok, in_process, say)
    _save(out, state)
    return state


def _paired(base: Pass, spec: Pass) -> dict:
    """One interleaved pair as the row keeps it: the speculative pass's totals, the baseline's wall and timers."""
    bt = base.totals()
    return {"baseline_wall": bt["wall"], "baseline_prefill": bt["prefill"], "baseline_decode": bt["decode"],
            **spec.totals()}


def stop_server(stop, srv) -> None:
    """Stop a server by its pid (``stop``: vllm_server.stop, or a test's stand-in), then remove its pid file."""
    stop(srv.pid)
    vllm_server.remove_pid_file(srv)


def resume_key(target, drafts: dict, ks, prompts, n_tok: int, settings: dict) -> dict:
    """Everything that changes a row of a sweep, and nothing that does not (no path): each draft's name and bytes,
    the Ks, the target's bytes, the prompts and reply length, the sweep's settings, the machine. The vLLM release
    is checked when its server answers (``sweep``)."""
    import hashlib

    rows = hashlib.blake2b(json.dumps([list(map(int, p)) for p in prompts]).encode(), digest_size=12).hexdigest()
    return {"drafts": {name: content_digest(path) for name, path in sorted(drafts.items())},
            "ks": [int(k) for k in ks], "target": content_digest(target), "prompts": rows, "max_tokens": int(n_tok),
            **{k: settings[k] for k in ("repeats", "concurrency", "costs", "calibration")},
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                        "avx512": "avx512f" in vllm_server.cpu_flags()}}   # vLLM's CPU kernels differ by it


def _resume(out, settings: dict, key: dict, replace: bool = False, say=None) -> dict:
    fresh = {"settings": settings, "key": key, "rows": [], "calibration": [], "complete": False}
    if out and Path(out).is_file():
        try:
            old = json.loads(Path(out).read_text())
        except (OSError, ValueError):
            raise WorkbenchError(f"{out}: unreadable speed sweep (remove it to start again)") from None
        if old.get("key") == json.loads(json.dumps(key)):
            return {**fresh, "rows": old.get("rows", []), "calibration": old.get("calibration", []),
                    **({"engine": old["engine"]} if "engine" in old else {})}
        theirs = old.get("key") or {}
        differs = [k for k in key if theirs.get(k) != json.loads(json.dumps(key[k]))] or ["its key (an older file)"]
        if replace:                    # a sweep this command owns (the demo's): kept aside, measured again
            kept = Path(out).with_name(f"{Path(out).stem}.previous.json")
            os.replace(out, kept)
            (say or (lambda m: None))(f"{out} measured another {', '.join(differs)}: kept as {kept.name}, measuring "
                                      f"again")
            return fresh
        raise WorkbenchError(f"{out}: a sweep of another {', '.join(differs)}; use another --json or remove it")
    return fresh


def read_result(path, what: str, command: str) -> dict:
    """The JSON object a long command wrote to ``path`` (``what`` names it, ``command`` writes it), or one line."""
    try:
        state = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise WorkbenchError(f"{path}: no such file (write it with `{command} ... --json {path}`)") from None
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{path}: not a {what} JSON ({e})") from None
    if not isinstance(state, dict):
        raise WorkbenchError(f"{path}: not a {what} JSON (not an object)")
    return state


def find_result(path, draft, name: str, reader) -> dict | None:
    """``reader(path)``; with no path, ``reader`` of the file ``name`` beside the draft's folder (a demo's), else None."""
    if path:
        return reader(path)
    found = beside(draft, name) if draft else None
    return reader(found) if found else None


def load_sweep(path) -> dict:
    """A finished ``workbench vllm speed --json`` file (one line naming it when it is not one)."""
    state = read_result(path, "speed sweep", "workbench vllm speed")
    if not state.get("rows") or not state.get("complete"):
        raise WorkbenchError(f"{path}: an unfinished speed sweep (no rows, or no predictions yet): run the same "
                             f"`workbench vllm speed` command again to finish it")
    return state


def find(path="", draft="") -> dict | None:
    """The sweep at ``path``; with no path, ``vllm-speed.json`` beside the draft's folder (a demo's), else None."""
    return find_result(path, draft, FILE_NAME, load_sweep)


def _save(out, state: dict) -> None:
    if out:
        write_json(out, state)


def _predict(state: dict, target, drafts: dict, cut, n_tok: int, in_process: bool, say) -> None:
    """Each row predicted from its draft's shape twin's server costs at its K (:func:`step_cost`, in baseline-pass
    units, so the machine's drift between rows cancels): never from the passes it predicts, one draft or many.
    Both predictions for every row, the verdicts."""
    rows, twins = state["rows"], state["twins"]
    tgt = inputs.load(target, None, None, device="cpu", progress=False).target
    costs, own = {}, {}                          # (twin, K) -> its step_cost; (draft, K) -> the draft's own
    for c in state["calibration"]:
        c["step_cost"] = costs[c["draft"], c["k"]] = step_cost(c["passes"])
    for r in rows:
        r["step_cost"] = own[r["draft"], r["k"]] = step_cost(r["passes"])
    say("offline: accept lengths" + (" and the in-process cost model" if in_process else ""))
    models = {}                                  # the in-process cost model, measured once per draft
    if in_process:
        for name in {r["draft"] for r in rows}:
            models[name] = cost.measure(tgt, inputs.load(tgt, drafts[name], None, device="cpu", progress=False).draft)
    state["step_costs"] = {t: {str(k): {**c, "unit": "baseline pass seconds"} for (tt, k), c in costs.items()
                               if tt == t} for t in sorted(set(twins.values()))}
    # how far "a verify step costs the same whatever the weights" held: each draft's own cost per step against its
    # twin's (a check, read after the predictions; it predicts nothing)
    state["step_cost_spread"] = {d: {str(k): round(c["per_step"] / costs[twins[d], k]["per_step"] - 1.0, 4)
                                     for (dd, k), c in own.items() if dd == d and (twins[d], k) in costs}
                                 for d in drafts}
    tokens = [n_tok] * len(cut)
    for r in rows:
        off = offline(tgt, drafts[r["draft"]], cut, r["k"], models.get(r["draft"]),
                      engine=state.get("engine", {}).get("record", "vllm"))
        r.update(off)
        cal = twins[r["draft"]]
        if (cal, r["k"]) not in costs:
            raise WorkbenchError(f"vllm speed: no measured step cost of {cal} (the shape twin of {r['draft']}) at "
                                 f"K={r['k']}: run the same command again to measure it")
        r["calibrated_on"] = cal                 # a shape twin: never the row's own draft
        r["calibration"] = (f"K={r['k']} step cost measured on a server of {cal}, the shape twin of {r['draft']} "
                            f"(its config and tensor shapes, seeded weights), not on {r['draft']}'s passes")
        base = r["baseline_tokens_per_s"]
        for key, acc in (("", "served_accept_length"), ("_trained", "trained_accept_length")):
            r[f"predicted_speedup{key}"], r[f"predicted_tokens_per_s{key}"] = predicted(
                costs[cal, r["k"]], tokens, off[acc], base)
        r["predicted_error"] = round(r["predicted_tokens_per_s"] / r["measured_tokens_per_s"] - 1.0, 4)
        if in_process:
            r["predicted_tokens_per_s_in_process"] = round(base * off["in_process_speedup"], 2)
            r["in_process_error"] = round(r["predicted_tokens_per_s_in_process"] / r["measured_tokens_per_s"] - 1, 4)
        r["verdict"] = verdict(r["measured_speedup"], r["too_noisy"])
        twin_row = next(c for c in state["calibration"] if (c["draft"], c["k"]) == (cal, r["k"]))
        r["sign_margin"] = calibration_noise(twin_row["passes"])
        # how far the machine moved between the twin's row and this one: the baseline measured beside each
        r["calibration_drift"] = round(r["baseline_tokens_per_s"] / twin_row["baseline_tokens_per_s"] - 1.0, 4)
        r["sign_right"] = sign_right(r["predicted_speedup"], r["measured_speedup"], r["too_noisy"], r["sign_margin"])
    state["best_k"] = {name: best_k([r for r in rows if r["draft"] == name]) for name in drafts}
    state["complete"] = True


def predicted(cost: dict, tokens, accept_length: float, baseline_tokens_per_s: float) -> tuple[float, float]:
    """(speed-up, tokens/s) of requests of ``tokens`` new tokens at ``accept_length``, from a step cost
    (:func:`step_cost`) and the baseline's tokens/s measured beside it."""
    sp = predict_speedup(cost, verify_steps(tokens, accept_length))
    return sp, round(sp * baseline_tokens_per_s, 2)


def replay(state: dict) -> list[dict]:
    """Every row of a finished sweep predicted again by the current code from what the real server measured: the
    shape twins' recorded passes (their step costs, :func:`step_cost`) and each row's offline accept length and
    baseline, against the row's measured tokens/s. The check a change to the cost model must pass: it cannot
    satisfy it by construction, since the measured tokens/s are the server's.

        >>> st = {"settings": {"max_tokens": 9, "rows": 1}, "twins": {"d": "t"}, "calibration": [{"draft": "t", "k": 1,
        ...       "passes": [{"baseline_wall": 1.0, "wall": 1.0, "decode": 0.8, "steps": 4}]}],
        ...       "rows": [{"draft": "d", "k": 1, "served_accept_length": 2.0, "baseline_tokens_per_s": 10.0,
        ...                 "measured_tokens_per_s": 12.5}]}
        >>> [(r["predicted_tokens_per_s"], r["error"]) for r in replay(st)]   # same cost per token: no gain
        [(10.0, -0.2)]
    """
    costs = {(c["draft"], c["k"]): step_cost(c["passes"]) for c in state.get("calibration", [])}
    n_tok, n_rows = state["settings"]["max_tokens"], state["settings"]["rows"]
    out = []
    for r in state["rows"]:
        cost = costs.get((state["twins"][r["draft"]], r["k"]))
        if cost is None:
            raise WorkbenchError(f"replay: no recorded twin passes for {r['draft']} at K={r['k']}")
        _, tps = predicted(cost, [n_tok] * n_rows, r["served_accept_length"], r["baseline_tokens_per_s"])
        out.append({"draft": r["draft"], "k": r["k"], "predicted_tokens_per_s": tps,
                    "measured_tokens_per_s": r["measured_tokens_per_s"],
                    "error": round(tps / r["measured_tokens_per_s"] - 1.0, 4)})
    return out


def calibration_noise(passes) -> float:
    """How far the twin's cost per verify step moved between its passes: half its range over its median (the
    prediction's own uncertainty; a predicted speed-up within it of 1 calls no side).

        >>> calibration_noise([{"baseline_wall": 10.0, "wall": 5.0, "decode": d, "steps": 100} for d in (3.6, 4.0, 4.4)])
        0.1
    """
    per = [_per_step(p, p.get("decode") is not None) for p in passes if p["steps"] > 0 and p["baseline_wall"] > 0]
    if not per:
        return 0.0
    mid = statistics.median(per)
    return round((max(per) - min(per)) / 2 / mid, 4) if mid > 0 else 0.0


def _range(row: dict) -> str:
    """``12.37 [12.18–12.60]``: a row's measured tokens/s and the range of its passes, as a reader reads them."""
    spread = row["measured_spread"]
    return f"{row['measured_tokens_per_s']:.2f} [{spread['min']:.2f}–{spread['max']:.2f}]"


def best_k(rows: list[dict]) -> dict:
    """The K that maximises tokens/s measured under the served wiring (None when the passes' spreads of the
    top two overlap: too noisy to rank), and the K predicted best under the served and the trained wiring."""
    if not rows:
        return {}
    by = sorted(rows, key=lambda r: -r["measured_tokens_per_s"])
    ranked = len(by) == 1 or by[0]["measured_spread"]["min"] > by[1]["measured_spread"]["max"]
    return {"measured": by[0]["k"] if ranked else None,
            "measured_note": "" if ranked else (f"too noisy to rank: K={by[0]['k']} and K={by[1]['k']} overlap "
                                                f"({_range(by[0])} vs {_range(by[1])} tokens/s)"),
            "predicted_served": max(rows, key=lambda r: r["predicted_tokens_per_s"])["k"],
            "predicted_trained": max(rows, key=lambda r: r["predicted_tokens_per_s_trained"])["k"]}


def answer(state: dict) -> list[str]:
    """The seed's question per draft, in one sentence each: faster or slower than no speculation as served, at
    which K, and what the server's own costs predict under the trained wiring.

        >>> st = {"rows": [{"draft": "d", "k": 1, "served_wiring": "L0,L13,L25", "trained_wiring": "embed,L1,L14",
        ...                 "measured_tokens_per_s": 30.0, "baseline_tokens_per_s": 40.0, "measured_speedup": 0.75,
        ...                 "too_noisy": False, "predicted_tokens_per_s_trained": 44.0},
        ...                {"draft": "d", "k": 2, "served_wiring": "L0,L13,L25", "trained_wiring": "embed,L1,L14",
        ...                 "measured_tokens_per_s": 26.0, "baseline_tokens_per_s": 40.0, "measured_speedup": 0.65,
        ...                 "too_noisy": False, "predicted_tokens_per_s_trained": 48.0, "calibrated_on": "twin-ab12"}],
        ...       "best_k": {"d": {"measured": 1, "predicted_trained": 2}}}
        >>> print(answer(st)[0])
        d as served (L0,L13,L25): slower than no speculation (0.75x) at its fastest, K=1; under its trained wiring embed,L1,L14 the server's costs predict 48.0 tokens/s at K=2 (1.20x no speculation) (step cost measured on its shape twin twin-ab12)
    """
    out = []
    for name, best in state.get("best_k", {}).items():
        rows = [r for r in state.get("rows", []) if r["draft"] == name]
        if not rows:
            continue
        top = max(rows, key=lambda r: r["measured_tokens_per_s"])
        if best.get("measured") is None:
            said = (f"too noisy to name its fastest K ({best.get('measured_note', 'the spreads overlap')}); the "
                    f"best measured is {verdict(top['measured_speedup'], top['too_noisy'])} at K={top['k']}")
        else:
            said = f"{verdict(top['measured_speedup'], top['too_noisy'])} at its fastest, K={top['k']}"
        line = f"{name} as served ({top.get('served_wiring', '?')}): {said}"
        kt = best.get("predicted_trained")
        tr = next((r for r in rows if r["k"] == kt), None)
        if tr is not None and tr.get("predicted_tokens_per_s_trained") is not None:
            line += (f"; under its trained wiring {tr.get('trained_wiring', '?')} the server's costs predict "
                     f"{tr['predicted_tokens_per_s_trained']} tokens/s at K={kt} "
                     f"({tr['predicted_tokens_per_s_trained'] / tr['baseline_tokens_per_s']:.2f}x no speculation)")
            line += f" ({calibrated(tr)})"
        out.append(line)
    return out


def measured_words(state: dict, draft: str, k: int | None = None) -> str:
    """What the sweep measured for ``draft`` (a folder name) and its one-line fix (``<draft>-fixed``, when the sweep
    holds it), at ``k`` (default: its fastest measured K), in one sentence with units; '' when it holds no row of
    ``draft``. Every number is a median over passes; the speed-up is the median of the paired passes' ratios with
    their range.

        >>> row = lambda d, tps, sp, lo, hi: {"draft": d, "k": 2, "measured_tokens_per_s": tps,
        ...     "baseline_tokens_per_s": 40.0, "measured_speedup": sp, "too_noisy": False,
        ...     "speedup_spread": {"min": lo, "max": hi}, "served_wiring": "L0,L6,L11",
        ...     "concurrency_4": {"measured_speedup": sp - 0.2, "measured_tokens_per_s": 2 * tps,
        ...                       "baseline_tokens_per_s": 100.0, "too_noisy": False}}
        >>> st = {"engine": {"version": "0.32.0"}, "settings": {"rows": 4, "max_tokens": 32, "repeats": 3,
        ...       "concurrency": 4}, "rows": [row("d", 30.0, 0.75, 0.7, 0.8), row("d-fixed", 48.0, 1.2, 1.1, 1.3)]}
        >>> print(measured_words(st, "d"))
        measured on vLLM 0.32.0, K=2, 4 prompts x 32 tokens, 3 passes: 30.0 tokens/s as served against 40.0 with no speculation, 0.75x [0.70–0.80] (slower); with the one-line fix 48.0 tokens/s, 1.20x [1.10–1.30] (faster). At 4 requests in flight: 0.55x as served, 1.00x with the fix
        >>> measured_words(st, "d", k=4).split(", 4 prompts")[0]
        'measured on vLLM 0.32.0, K=2 (its fastest measured K; K=4 was not measured)'
    """
    rows = [r for r in state.get("rows", []) if r["draft"] == draft]
    if not rows:
        return ""
    row = (next((r for r in rows if r["k"] == k), None) if k is not None else None) \
        or max(rows, key=lambda r: r["measured_tokens_per_s"])
    fixed = next((r for r in state.get("rows", []) if r["draft"] == f"{draft}-fixed" and r["k"] == row["k"]), None)
    s = state.get("settings", {})
    version = (state.get("engine") or {}).get("version") or "?"

    def side(r) -> str:
        v = verdict(r["measured_speedup"], r.get("too_noisy", False))
        return v.split(" than")[0].split(" (")[0] if not v.startswith("about") else "about the same"

    def x(r) -> str:
        sp = r.get("speedup_spread") or {}
        return (f"{r['measured_speedup']:.2f}x [{sp['min']:.2f}–{sp['max']:.2f}] ({side(r)})" if sp else
                f"{r['measured_speedup']:.2f}x ({side(r)})")

    other = (f" (its fastest measured K; K={k} was not measured)" if k is not None and row["k"] != k else "")
    out = (f"measured on vLLM {version}, K={row['k']}{other}, {s.get('rows')} prompts x {s.get('max_tokens')} tokens, "
           f"{s.get('repeats')} passes: {row['measured_tokens_per_s']:.1f} tokens/s as served against "
           f"{row['baseline_tokens_per_s']:.1f} with no speculation, {x(row)}")
    if fixed is not None:
        out += f"; with the one-line fix {fixed['measured_tokens_per_s']:.1f} tokens/s, {x(fixed)}"
    c = s.get("concurrency")
    at = row.get(f"concurrency_{c}")
    if c and c > 1 and at:
        noisy = lambda r: " (too noisy to tell)" if r.get("too_noisy") else ""  # noqa: E731
        out += f". At {c} requests in flight: {at['measured_speedup']:.2f}x as served{noisy(at)}"
        fat = (fixed or {}).get(f"concurrency_{c}")
        if fat:
            out += f", {fat['measured_speedup']:.2f}x with the fix{noisy(fat)}"
    return out


def quote(sweep: dict | None, draft, target=None, k: int | None = None) -> str:
    """:func:`measured_words` for the draft folder ``draft`` (by its name), or '' when the sweep is None, holds no
    row of it, or (given ``target``) measured another target: the one check every page quoting tokens/s makes."""
    if not sweep or (target is not None and not inputs.same_path(sweep.get("settings", {}).get("target", ""), target)):
        return ""
    return measured_words(sweep, Path(str(draft).rstrip("/")).name, k=k)


def calibrated(row: dict) -> str:
    """What a row's step cost was measured on, in words: its shape twin, another draft (a sweep from before the
    twins), or its own passes (in sample, said so).

        >>> calibrated({"draft": "d", "calibrated_on": "twin-ab12"}), calibrated({"draft": "d", "calibrated_on": "d"})
        ('step cost measured on its shape twin twin-ab12', 'step cost measured on its own passes: in sample')
    """
    on = row.get("calibrated_on")
    if on is None:
        return "step cost: not recorded"
    if on == row.get("draft"):
        return "step cost measured on its own passes: in sample"
    if str(on).startswith("twin-"):
        return f"step cost measured on its shape twin {on}"
    return f"step cost measured on another draft, {on}"


def table(state: dict) -> str:
    """The sweep as a Markdown table, then the best K per draft."""
    lines = ["| draft | K | served wiring | measured tokens/s | no speculation | speed-up | predicted (twin's server costs) "
             "| error | predicted (in process) | error | verdict |", "|" + "---|" * 11]
    for r in state["rows"]:
        ip = r.get("predicted_tokens_per_s_in_process")
        lines.append(f"| {r['draft']} | {r['k']} | {r.get('served_wiring', '?')} | {r['measured_tokens_per_s']} "
                     f"[{r['measured_spread']['min']}–{r['measured_spread']['max']}] | {r['baseline_tokens_per_s']} "
                     f"| {r['measured_speedup']}x | {r.get('predicted_tokens_per_s', '?')} | "
                     f"{_pct(r.get('predicted_error'))} | {ip if ip is not None else '–'} | "
                     f"{_pct(r.get('in_process_error'))} | {r.get('verdict', '')} |")
    for d, t in (state.get("twins") or {}).items():
        sp = (state.get("step_cost_spread") or {}).get(d) or {}
        lines.append(f"{d}: every K predicted from the step cost of its shape twin {t} (same config and tensor "
                     f"shapes, seeded weights; measured on its own server, never on {d}'s passes)"
                     + (f"; {d}'s own cost per verify step against the twin's: "
                        + ", ".join(f"K={k} {_pct(v)}" for k, v in sp.items()) if sp else ""))
    for name, b in state.get("best_k", {}).items():
        best = f"K={b['measured']}" if b.get("measured") else b.get("measured_note", "")
        lines.append(f"{name}: fastest measured {best}; predicted best K={b.get('predicted_served')} as served, "
                     f"K={b.get('predicted_trained')} under its trained wiring")
    return "\n".join(lines)


def _pct(x) -> str:
    return "–" if x is None else f"{x * 100:+.1f}%"
