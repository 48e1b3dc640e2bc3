"""A loopback stand-in for an SGLang server: ``/generate``, ``/server_info`` (and the older ``/get_server_info``), ``/health``.

    >>> from workbench.testing.fake_sglang import serve
    >>> from workbench.live.sglang_live import Client
    >>> echo = lambda prompt, n: ([prompt[-1]] * n, [1] * ((n + 1) // 2))   # 2 tokens per verify step
    >>> with serve(generate=echo, K=3, variant="old") as url:
    ...     out, meta = Client(url).generate([5, 6, 7], 4)
    >>> out, meta["spec_verify_ct"]
    ([7, 7, 7, 7], 2)

It generates with the workbench's exact speculative-decoding loops on a target and draft with a
configured wiring, so a server that feeds the draft the wrong taps can be simulated without a GPU:
greedy requests (temperature 0, or top_k 1) with :func:`workbench.acceptance.exact_decode` (chain)
or :func:`workbench.tree_verify.exact_tree_decode` (tree); sampled requests with the same
deterministic drafting and SGLang's target-only verification at T > 0 (:func:`sampled_generator`:
the library's loop, :func:`workbench.verify_walk.sampled_tree_decode`), seeded per request (the
request's ``sampling_seed``, else the server's ``seed``, and the prompt) so runs are reproducible
whatever order the requests arrive in. Or with any ``generate(prompt_ids, max_new_tokens) ->
(output_ids, accepts per verify step)`` callable (one that also takes a ``sampling_params`` keyword
gets the request's sampling parameters and may sample).
It binds 127.0.0.1 only, on a free port, and stops when the ``with`` block ends.

``sampling_fields``: the ``sampling_params`` names it accepts (default: SGLang's current
``SamplingParams`` API fields, ``sampling/sampling_params.py``); any other name is answered with
HTTP 400, as a server whose ``SamplingParams`` does not have it would.

Response variants (``meta_info`` fields, as SGLang versions report them, facts page section 4):

- ``old``: ``spec_verify_ct`` only; ``new``: plus ``spec_accept_length``, ``spec_accept_rate``,
  ``spec_accept_token_num``, ``spec_draft_token_num``, ``spec_accept_histogram``;
- ``renamed``: ``spec_accepted_drafts`` / ``spec_proposed_drafts`` instead of the token_num pair;
- ``newest``: ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts`` / ``spec_correct_drafts_histogram``;
- ``aggregate``: a speculating server that returns no per-request speculative field (only the
  server info's ``avg_spec_accept_length``);
- ``none``: no speculative field (a server started without ``--speculative-algorithm``).

``faults``: replies for the first requests, in order, before normal service: an HTTP status code
(e.g. 503) or ``"garbage"`` (a body that is not JSON). Used to test retries and error messages.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workbench.core.errors import WorkbenchError
from workbench.core.sampling import Sampling, apply_sampling
from workbench.core.setting import Setting
from workbench.engines import wiring as wmod
from workbench.live.fingerprint import COUNTING, server_steps
from workbench.load import inputs
from workbench.model.tree import tree_shape
from workbench.simulate.exact import exact_decode
from workbench.simulate.tree_verify import exact_tree_decode
from workbench.simulate.verify_walk import sampled_tree_decode

VARIANTS = ("old", "new", "renamed", "newest", "aggregate", "none")
# SGLang python/sglang/srt/sampling/sampling_params.py, SamplingParams: the API fields (set by callers)
SAMPLING_FIELDS = ("max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
                   "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
                   "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
                   "spaces_between_special_tokens", "no_stop_trim", "custom_params", "stream_interval",
                   "logit_bias", "sampling_seed")


def spec_meta(output_ids: list[int], accepts: list[int], K: int, variant: str, prompt_len: int,
              counting: str = "v2") -> dict:
    """SGLang's ``meta_info`` for one greedy request (``accepts``: raw A per verify step).

        >>> spec_meta([1, 2, 3, 4, 5], [3, 0], K=3, variant="new", prompt_len=2)["spec_accept_histogram"]
        [1, 0, 0, 1]
        >>> spec_meta([1, 2, 3], [3], K=3, variant="new", prompt_len=2, counting="v1")["spec_accept_histogram"]
        [0, 0, 1, 0]

    ``counting``: the last verify step's A raw ("v2", SGLang's EAGLE worker now) or after the cut at
    ``max_new_tokens`` ("v1"), as :meth:`workbench.fingerprint.ServerSteps.counted`.
    """
    if variant not in VARIANTS:
        raise WorkbenchError(f"fake server variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    n, v = len(output_ids), len(accepts)
    meta = {"id": "fake", "prompt_tokens": prompt_len, "completion_tokens": n, "cached_tokens": 0,
            "finish_reason": {"type": "length", "length": n}}
    if variant in ("none", "aggregate") or v == 0:
        return meta
    accepts = server_steps(accepts, n).counted(counting)
    hist = [0] * (K + 1)
    for a in accepts:
        hist[min(int(a), K)] += 1
    acc, prop = int(sum(accepts)), v * K
    meta["spec_verify_ct"] = v
    if variant == "old":
        return meta
    meta.update(spec_accept_length=n / v, spec_accept_rate=acc / prop)
    if variant == "new":
        meta.update(spec_accept_token_num=acc, spec_draft_token_num=prop, spec_accept_histogram=hist)
    elif variant == "renamed":
        meta.update(spec_accepted_drafts=acc, spec_proposed_drafts=prop, spec_accept_histogram=hist)
    else:
        meta.update(spec_num_correct_drafts=acc, spec_num_proposed_drafts=prop, spec_correct_drafts_histogram=hist)
    return meta


@dataclass
class FakeServer:
    """State of a running fake server (what :func:`serve` yields as ``.url``)."""

    url: str
    K: int
    variant: str
    wiring: str | None
    topk: int = 1
    num_draft_tokens: int | None = None
    adaptive: bool = False
    counting: str = "v2"
    endpoints: tuple = ("/server_info", "/get_server_info")
    sampling_fields: tuple = SAMPLING_FIELDS
    requests: list[dict] = field(default_factory=list)    # every /generate body received
    faults: list = field(default_factory=list)
    _tokens: int = 0
    _verifies: int = 0


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler that answers JSON (``send``) and plays injected faults (``fault``);
    subclasses set ``state`` (with a ``faults`` list) and ``lock``."""

    protocol_version = "HTTP/1.1"
    state = None
    lock = None

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):   # the client gave up (a timeout): nothing to answer, no trace
            pass

    def _fault(self) -> bool:
        with self.lock:
            f = self.state.faults.pop(0) if self.state.faults else None
        if f is None:
            return False
        if f == "garbage":
            self._send(200, b"<html>not json</html>", "text/html")
        else:
            self._send(int(f), {"error": {"message": f"injected fault {f}"}})
        return True

    def _json_body(self):
        """The request body as JSON (None after answering 400 when it is not JSON)."""
        try:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"{}")
        except (ValueError, json.JSONDecodeError):
            self._send(400, {"error": {"message": "request body is not JSON"}})
            return None


def _handler(state: FakeServer, generate, info_extra: dict, lock: threading.Lock):
    class Handler(JsonHandler):
        def do_GET(self):
            if self._fault():
                return
            if self.path == "/health":
                return self._send(200, {})
            if self.path in state.endpoints:
                spec = state.variant != "none"
                with lock:
                    avg = state._tokens / state._verifies if state._verifies else None
                body = {"model_path": info_extra.get("model_path", "fake-target"),
                        "speculative_algorithm": "EAGLE3" if spec else None,
                        "speculative_draft_model_path": info_extra.get("draft_path") if spec else None,
                        "speculative_num_steps": state.K if spec else None,
                        "speculative_eagle_topk": state.topk if spec else None,
                        "speculative_num_draft_tokens": (state.num_draft_tokens or state.K + 1) if spec else None,
                        "speculative_adaptive": state.adaptive, "dtype": info_extra.get("dtype", "float32"),
                        "internal_states": [{"avg_spec_accept_length": avg} if spec else {}], "version": "fake"}
                return self._send(200, body)
            self._send(404, {"detail": "Not Found"})

        def do_POST(self):
            body = self._json_body()
            if body is None:
                return None
            if self._fault():
                return
            if self.path != "/generate":
                return self._send(404, {"detail": "Not Found"})
            ids = body.get("input_ids") if isinstance(body, dict) else None
            sp = body.get("sampling_params") or {} if isinstance(body, dict) else {}
            if not isinstance(ids, list) or not ids or not all(isinstance(x, int) for x in ids):
                return self._send(400, {"error": {"message": "the fake server needs input_ids (a list of ints)"}})
            unknown = sorted(set(sp) - set(state.sampling_fields)) if isinstance(sp, dict) else []
            if unknown:                     # as SamplingParams(**sampling_params) refuses an unknown keyword
                return self._send(400, {"error": {"message": f"SamplingParams.__init__() got an unexpected keyword "
                                                             f"argument '{unknown[0]}'"}})
            takes_sp = "sampling_params" in inspect.signature(generate).parameters
            if sp.get("temperature", 1.0) != 0 and not takes_sp:
                return self._send(400, {"error": {"message": "the fake server only decodes greedily (temperature 0)"}})
            max_new = int(sp.get("max_new_tokens", 16))
            with lock:
                state.requests.append(body)
                try:
                    kw = {"sampling_params": sp} if takes_sp else {}
                    if state.adaptive:        # emulate run-time step changes: every other request one step less
                        kw["steps"] = state.K if len(state.requests) % 2 else max(1, state.K - 1)
                    out, accepts = generate(ids, max_new, **kw)
                except WorkbenchError as e:
                    return self._send(400, {"error": {"message": str(e)}})
                out = [int(x) for x in out][:max_new]
                if accepts:
                    state._tokens += len(out)
                    state._verifies += len(accepts)
            meta = spec_meta(out, list(accepts), state.K, state.variant, len(ids), state.counting)
            self._send(200, {"text": "", "output_ids": out, "meta_info": meta})

    Handler.state, Handler.lock = state, lock
    return Handler


# ─────────────────────────────── sampling (temperature > 0) ───────────────────────────────

def sampling_of(params: dict):
    """:class:`workbench.sampling.Sampling` of a request's ``sampling_params`` (SGLang's defaults for
    missing fields: temperature 1.0, top_p 1.0, top_k -1, no seed)."""

    t, p, k = params.get("temperature"), params.get("top_p"), params.get("top_k")
    k = -1 if k is None else k
    k = -1 if isinstance(k, int) and not isinstance(k, bool) and k >= 1 << 30 else k   # SGLang's TOP_K_ALL
    return Sampling(temperature=1.0 if t is None else t, top_p=1.0 if p is None else p, top_k=k,
                    seed=params.get("sampling_seed"))


def prompt_key(prompt_ids) -> int:
    """A stable integer of a prompt: the stand-in's "row" of a request (its coins are seeded from
    ``(seed, prompt_key(prompt))``), so the order requests arrive in does not matter.

        >>> prompt_key([1, 2]) == prompt_key([1, 2]) != prompt_key([2, 1])
        True
    """
    import hashlib

    return int.from_bytes(hashlib.sha256(",".join(map(str, prompt_ids)).encode()).digest()[:8], "little")


def sampled_generator(target, draft, wiring, K: int, topk: int = 1, num_draft_tokens: int | None = None, *,
                      seed: int = 0):
    """``generate(prompt_ids, max_new_tokens, sampling_params=None, steps=K)``: greedy requests as
    :func:`exact_generator`; sampled ones with :func:`workbench.verify_walk.sampled_tree_decode`, the
    library's SGLang loop at T > 0: the same tree as greedy (a chain when ``topk`` is 1), the
    kernel's walk (:func:`workbench.verify_walk.sglang_walk`) on SGLang's verify distribution
    (:func:`workbench.sampled.verify_probs`: top-k, then top-p of that), and the token after the
    prefill from the ordinary sampler's joint rule (:func:`workbench.sampling.draw`), as SGLang's
    ``forward_target_extend`` samples it with the target worker's sampler. Coins are seeded per
    request from ``(sampling_seed or seed, prompt_key(prompt))``."""

    greedy = exact_generator(target, draft, wiring, K, topk, num_draft_tokens)
    rope = getattr(draft, "rotary_offset", 0)

    def generate(prompt, n, sampling_params=None, steps=K):
        s = sampling_of(sampling_params or {})
        if s.greedy:
            return greedy(prompt, n, steps=steps)
        shape = Setting(steps=int(steps), eagle_topk=int(topk), num_draft_tokens=num_draft_tokens if topk > 1 else None)
        return sampled_tree_decode(target, draft, prompt, wiring, apply_sampling(shape, s), n,
                                   seed=seed if s.seed is None else s.seed, row=prompt_key(prompt), rope_shift=rope)
    return generate


def exact_generator(target, draft, wiring, K: int, topk: int = 1, num_draft_tokens: int | None = None):
    """``generate(prompt_ids, max_new_tokens, steps=K)`` running :func:`workbench.acceptance.exact_decode`
    (topk 1) or SGLang's tree, :func:`workbench.tree_verify.exact_tree_decode` (topk > 1)."""
    def generate(prompt, n, steps=K):
        if topk == 1:
            return exact_decode(target, draft, prompt, wiring, steps, n)
        return exact_tree_decode(target, draft, prompt, wiring, steps, topk, num_draft_tokens, n,
                                 rope_shift=getattr(draft, "rotary_offset", 0))
    return generate


@contextlib.contextmanager
def serve(target=None, draft=None, wiring=None, *, K: int = 3, variant: str = "new", generate=None,
          faults=None, info: dict | None = None, engine: str = "sglang", topk: int = 1,
          num_draft_tokens: int | None = None, adaptive: bool = False, counting: str = "v2",
          endpoints=("/server_info", "/get_server_info"), seed: int = 0, sampling_fields=SAMPLING_FIELDS):
    """Start the fake server on 127.0.0.1 (a free port); yields its URL (a ``str`` whose ``.state`` is
    the :class:`FakeServer`: requests received, variant, wiring). Stopped when the block ends.

    ``target``/``draft``: paths or loaded objects; ``wiring``: the taps this server feeds the draft
    (a spec such as ``"L1,L3,L4"``; default: what ``engine`` feeds). ``engine``: the record in
    :mod:`workbench.engines.records` whose computation the server decodes with (``sglang`` current,
    ``sglang-2026.04`` for an older server: rotary offset, Eagle-3.1 options, the target's embedding);
    see :func:`workbench.wiring.apply_engine` (a loaded ``draft`` is changed in place).
    ``K``/``topk``/``num_draft_tokens``: SGLang's ``--speculative-num-steps``/``-eagle-topk``/``-num-draft-tokens``
    (topk > 1: the real tree, :func:`workbench.tree_verify.exact_tree_decode`). ``adaptive``: report
    ``speculative_adaptive`` and change the steps every other request. ``counting``: how the last verify
    step is counted ("v2" raw, "v1" cut). ``endpoints``: the server-info paths it answers (an old server:
    only ``("/get_server_info",)``). ``seed``: the base seed of sampled requests without ``sampling_seed``.
    ``sampling_fields``: the ``sampling_params`` names it takes (module docstring).
    """
    if counting not in COUNTING:
        raise WorkbenchError(f"fake server counting {counting!r}: expected one of {', '.join(COUNTING)}")
    shape = tree_shape(int(K), int(topk), num_draft_tokens)
    if variant not in VARIANTS:
        raise WorkbenchError(f"fake server variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    if int(K) < 1:
        raise WorkbenchError(f"fake server K={K}: expected K >= 1")
    extra = dict(info or {})
    if generate is None:
        if target is None or draft is None:
            raise WorkbenchError("fake server: give target and draft (or a generate callable)")
        if inputs.is_path(target):
            extra.setdefault("model_path", str(target))
        if inputs.is_path(draft):
            extra.setdefault("draft_path", str(draft))
        generate, wiring = engine_generator(target, draft, wiring, engine, int(K), shape.topk, shape.num_draft_tokens,
                                            seed=seed)
    if adaptive and "steps" not in inspect.signature(generate).parameters:
        raise WorkbenchError("fake server: adaptive=True needs a generate callable with a steps= keyword")
    state = FakeServer(url="", K=int(K), variant=variant, wiring=wiring, faults=list(faults or []), topk=shape.topk,
                       num_draft_tokens=shape.num_draft_tokens if shape.topk > 1 else None, adaptive=bool(adaptive),
                       counting=counting, endpoints=tuple(endpoints), sampling_fields=tuple(sampling_fields))
    with loopback(state, _handler(state, generate, extra, threading.Lock())) as url:
        yield url


def engine_generator(target, draft, wiring, engine: str, K: int, topk: int = 1, num_draft_tokens=None, *,
                     seed: int = 0):
    """(``generate``, the wiring's spec): :func:`sampled_generator` on ``target``/``draft`` (paths or loaded;
    a loaded draft is changed in place) computing as the ``engine`` record computes
    (:func:`workbench.wiring.apply_engine`), fed ``wiring`` (default: what ``engine`` feeds)."""
    target, draft, _ = inputs.load(target, draft, device="cpu")
    spec = wmod.apply_engine(target, draft, engine, wiring)[0].spec
    return sampled_generator(target, draft, spec, int(K), topk, num_draft_tokens, seed=seed), spec


@contextlib.contextmanager
def loopback(state, handler):
    """Serve ``handler`` on 127.0.0.1 (a free port) in a thread; yields the URL (``.state`` = ``state``,
    whose ``url`` is set). Stopped when the block ends."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, name="fake-server", daemon=True)
    thread.start()
    try:
        yield _Url(state)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


class _Url(str):
    """The server URL (a str) that also exposes the server state (``.state``)."""

    def __new__(cls, state: FakeServer):
        s = super().__new__(cls, state.url)
        s.state = state
        return s
