"""A live SGLang server against the offline simulation: HTTP client, ``meta_info`` parsing, compare.

    >>> from workbench.sglang_live import parse_meta_info
    >>> m = parse_meta_info({"completion_tokens": 9, "spec_verify_ct": 3, "spec_accept_histogram": [0, 1, 2]})
    >>> m.variant, m.histogram, m.accept_length
    ('new', [0, 1, 2], 2.6666666666666665)

    >>> # cmp = compare("http://127.0.0.1:30000", "data/demo/target", "data/demo/draft-mismatched",
    >>> #               "data/demo/val.jsonl", limit=32)
    >>> # print(cmp.summary()); cmp.verdict

What :func:`compare` does (facts page, sections 3 and 4; ``docs/sglang.md``):

1. ``GET /server_info`` (else the deprecated ``/get_server_info``; optional) gives the speculative
   settings: steps, topk (> 1: a tree), draft tokens, ``--speculative-adaptive``, the dtype, and
   ``internal_states[0].avg_spec_accept_length``.
2. Each sample's prompt goes to ``POST /generate`` as ``input_ids`` with explicit sampling parameters
   (temperature, top_p, top_k, min_p 0, no penalties; ``sampling_seed`` when a seed is given; never the
   model's generation_config defaults) and ``max_new_tokens`` = the sample's response length; the
   reply's ``output_ids`` and the
   speculative fields of ``meta_info`` are kept (every variant: ``spec_verify_ct`` only;
   ``spec_accept_length``/``_rate``/``_token_num``/``spec_draft_token_num``/``spec_accept_histogram``;
   the renamed ``spec_accepted_drafts``/``spec_proposed_drafts``; the newest
   ``spec_num_correct_drafts``/``spec_num_proposed_drafts``/``spec_correct_drafts_histogram``).
3. Offline, each request (prompt + the server's own output) is decoded as a server on each candidate
   wiring would decode it (:mod:`workbench.fingerprint`), chain or tree as the server is configured.
   At temperature > 0 the same holds: SGLang drafts the same deterministic tree and, with its default
   thresholds (1, 1), A is the longest prefix of its own sampled continuation that is a path in the
   tree, so each step is matched against the returned tokens; only the last step's A past the end of
   the output is open (``docs/sglang.md``).
4. Request by request, the reply's fingerprint is compared with each wiring's; the verdict names the
   wiring most requests reproduce, with an exact sign test against the runner-up, or "undecided".
   Servers without per-request fields get the weaker aggregate comparison (pooled accept length).

The client only ever talks to the URL it is given (no proxy, no redirects followed elsewhere).
"""

from __future__ import annotations

import json
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from workbench import engines, inputs
from workbench import fingerprint as fp
from workbench import wiring as wmod
from workbench.diagnose import Candidate
from workbench.errors import WorkbenchError
from workbench.files import jsonable, write_json
from workbench.render import Rendered
from workbench.setting import SCHEMA_VERSION, Setting

# meta_info keys of speculative runs, by SGLang generation (facts page, section 4)
SPEC_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_accept_token_num",
             "spec_draft_token_num", "spec_accept_histogram", "spec_accepted_drafts", "spec_proposed_drafts",
             "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_correct_drafts_histogram")
VERDICTS = ("match-trained", "match-other", "undecided", "below-all", "no-match")
ALPHA = 0.05                 # the sign test's level for "separated"


# ─────────────────────────────── meta_info ───────────────────────────────

@dataclass
class SpecMeta:
    """The speculative fields of one ``/generate`` reply; any of them may be None.

    ``accept_length`` is the best per-request estimate of tokens per verify step: mean(A)+1 from
    the histogram when there is one, else (accepted drafts + verify steps) / verify steps, else
    SGLang's own ``completion_tokens / spec_verify_ct`` (which also counts the prefill token).
    """

    variant: str                          # "old", "new", "renamed", "newest" or "none"
    completion_tokens: int | None = None
    verify_ct: int | None = None
    accepted_drafts: int | None = None    # drafted tokens accepted (bonus not counted)
    proposed_drafts: int | None = None
    histogram: list[int] | None = None    # H[a] = verify steps that accepted exactly a drafts
    reported_accept_length: float | None = None   # the server's spec_accept_length
    reported_accept_rate: float | None = None
    note: str | None = None               # why a field was set aside (e.g. an inconsistent histogram)

    @property
    def has_spec(self) -> bool:
        return self.variant != "none"

    @property
    def accept_length(self) -> float | None:
        if self.histogram and sum(self.histogram) > 0:
            n = sum(self.histogram)
            return sum((a + 1) * h for a, h in enumerate(self.histogram)) / n
        if self.verify_ct:
            if self.accepted_drafts is not None:
                return (self.accepted_drafts + self.verify_ct) / self.verify_ct
            if self.completion_tokens is not None:
                return self.completion_tokens / self.verify_ct
            if self.reported_accept_length is not None:
                return float(self.reported_accept_length)
        return self.reported_accept_length

    @property
    def source_of_accept_length(self) -> str:
        if self.histogram and sum(self.histogram) > 0:
            return "histogram: mean(A)+1"
        if self.verify_ct and self.accepted_drafts is not None:
            return "(accepted drafts + verify steps) / verify steps"
        if self.verify_ct and self.completion_tokens is not None:
            return "completion_tokens / spec_verify_ct (counts the prefill token)"
        return "server's spec_accept_length" if self.reported_accept_length is not None else "none"


def _num(meta: dict, key: str, where: str, kind=int):
    v = meta.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and float(v) != int(v)) \
            or (isinstance(v, float) and not math.isfinite(v)) or v < 0:
        raise WorkbenchError(f"{where}: meta_info.{key} = {v!r}: expected a non-negative "
                             f"{'integer' if kind is int else 'number'}")
    return int(v) if kind is int else float(v)


def _hist(meta: dict, key: str, where: str):
    v = meta.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise WorkbenchError(f"{where}: meta_info.{key} = {str(v)[:60]}: expected a list of non-negative integers")
    return list(v)


def parse_meta_info(meta, *, where: str = "meta_info") -> SpecMeta:
    """Parse every known variant of SGLang's speculative ``meta_info`` fields; none is required.

        >>> parse_meta_info({"completion_tokens": 8, "spec_verify_ct": 4}).accept_length
        2.0
        >>> parse_meta_info({"completion_tokens": 8, "spec_verify_ct": 4, "spec_accepted_drafts": 5,
        ...                  "spec_proposed_drafts": 12}).accept_length
        2.25
        >>> parse_meta_info({"completion_tokens": 8}).variant
        'none'
    """
    if not isinstance(meta, dict):
        raise WorkbenchError(f"{where}: meta_info is {type(meta).__name__}: expected a JSON object")
    m = SpecMeta(variant="none", completion_tokens=_num(meta, "completion_tokens", where),
                 verify_ct=_num(meta, "spec_verify_ct", where),
                 reported_accept_length=_num(meta, "spec_accept_length", where, float),
                 reported_accept_rate=_num(meta, "spec_accept_rate", where, float))
    newest = _num(meta, "spec_num_correct_drafts", where)
    renamed = _num(meta, "spec_accepted_drafts", where)
    old_new = _num(meta, "spec_accept_token_num", where)
    m.accepted_drafts = next((x for x in (newest, renamed, old_new) if x is not None), None)
    m.proposed_drafts = next((x for x in (_num(meta, "spec_num_proposed_drafts", where),
                                          _num(meta, "spec_proposed_drafts", where),
                                          _num(meta, "spec_draft_token_num", where)) if x is not None), None)
    m.histogram = _hist(meta, "spec_correct_drafts_histogram", where) or _hist(meta, "spec_accept_histogram", where)
    if newest is not None or "spec_correct_drafts_histogram" in meta:
        m.variant = "newest"
    elif renamed is not None or "spec_proposed_drafts" in meta:
        m.variant = "renamed"
    elif any(k in meta for k in ("spec_accept_length", "spec_accept_token_num", "spec_accept_histogram",
                                 "spec_draft_token_num", "spec_accept_rate")):
        m.variant = "new"
    elif m.verify_ct is not None:
        m.variant = "old"
    if m.histogram is not None and m.verify_ct is not None and sum(m.histogram) not in (0, m.verify_ct):
        # some SGLang versions clamp spec_verify_ct; never require one field: keep the counts, drop the histogram
        m.note = (f"{where}: spec accept histogram sums to {sum(m.histogram)} but spec_verify_ct is "
                  f"{m.verify_ct} (expected equal): histogram set aside, accepted/verify counts used")
        m.histogram = None
    return m


# ─────────────────────────────── HTTP client ───────────────────────────────

def check_url(url: str) -> str:
    """The server's base URL without a trailing slash; WorkbenchError unless plain http(s)://host[:port].

        >>> check_url("http://127.0.0.1:30000/")
        'http://127.0.0.1:30000'
    """
    if not isinstance(url, str) or not url.strip():
        raise WorkbenchError("--url: empty server URL (expected e.g. http://127.0.0.1:30000)")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username or parts.password:
        raise WorkbenchError(f"--url {url!r}: expected http(s)://HOST[:PORT] of the SGLang server "
                             "(no query, fragment or credentials)")
    try:
        parts.port
    except ValueError:
        raise WorkbenchError(f"--url {url!r}: the port is not a number in 1..65535") from None
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # only the URL the user gave
        return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


@dataclass
class Client:
    """A small ``/generate`` client: timeouts, retries with exponential backoff, a concurrency limit.

        >>> c = Client("http://127.0.0.1:30000", timeout=30, retries=2)
        >>> c.url
        'http://127.0.0.1:30000'

    Connection errors, timeouts and HTTP 5xx are retried ``retries`` times (waits ``backoff``,
    2·backoff, 4·backoff, ...); HTTP 4xx and replies that do not parse fail at once.
    """

    url: str
    timeout: float = 120.0
    retries: int = 3
    backoff: float = 0.5
    concurrency: int = 4
    info_endpoint: str | None = field(default=None, repr=False)

    def __post_init__(self):
        self.url = check_url(self.url)
        for name, lo in (("timeout", 0.0), ("backoff", 0.0)):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v >= lo or (name == "timeout" and v == 0):
                raise WorkbenchError(f"--{name} {v!r}: expected a positive number of seconds")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise WorkbenchError(f"retries {self.retries!r}: expected an integer >= 0")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise WorkbenchError(f"--concurrency {self.concurrency!r}: expected an integer >= 1")

    def request(self, path: str, payload: dict | None = None):
        """GET (payload None) or POST JSON to ``url + path``; the decoded JSON reply."""
        target = self.url + path
        data = None if payload is None else json.dumps(payload).encode()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(target, data=data, method="GET" if data is None else "POST",
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
            try:
                with _OPENER.open(req, timeout=self.timeout) as resp:
                    body = resp.read()
            except urllib.error.HTTPError as e:
                text = _snippet(e.read() if e.fp is not None else b"")
                if 500 <= e.code < 600:
                    last = f"HTTP {e.code} {text}".rstrip()
                    continue
                raise WorkbenchError(f"{target}: HTTP {e.code} {e.reason}{': ' + text if text else ''}") from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError) as e:
                reason = getattr(e, "reason", e)
                last = "timed out" if isinstance(reason, (socket.timeout, TimeoutError)) else str(reason)
                continue
            try:
                return json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise WorkbenchError(f"{target}: the reply is not JSON ({getattr(e, 'msg', e)}; starts "
                                     f"{_snippet(body)!r}): is this an SGLang server?") from None
        raise WorkbenchError(f"cannot reach the SGLang server at {target}: {last} (after {self.retries + 1} "
                             f"tries, timeout {self.timeout:g} s; is it running and is --url right?)")

    def server_info(self) -> dict:
        """``GET /server_info`` (canonical), else the deprecated alias ``/get_server_info``, as a dict;
        ``info_endpoint`` records which one answered."""
        try:
            path, info = "/server_info", self.request("/server_info")
        except WorkbenchError as e:
            if ": HTTP 4" not in str(e):
                raise
            path, info = "/get_server_info", self.request("/get_server_info")
        if not isinstance(info, dict):
            raise WorkbenchError(f"{self.url}{path}: expected a JSON object, got {type(info).__name__}")
        self.info_endpoint = path
        return info

    def generate(self, input_ids: list[int], max_new_tokens: int, *, where: str = "sample",
                 sampling: dict | None = None) -> tuple[list[int], dict]:
        """``/generate`` on token ids: (output_ids, meta_info). ``sampling``: the ``sampling_params``
        (default :func:`sampling_params` of greedy: every field explicit, temperature 0)."""
        payload = {"input_ids": [int(x) for x in input_ids],
                   "sampling_params": {**(sampling_params() if sampling is None else sampling),
                                       "max_new_tokens": int(max_new_tokens)}}
        reply = self.request("/generate", payload)
        if isinstance(reply, list) and len(reply) == 1:
            reply = reply[0]
        if not isinstance(reply, dict):
            raise WorkbenchError(f"{self.url}/generate ({where}): expected a JSON object, got {type(reply).__name__}")
        meta = reply.get("meta_info")
        if not isinstance(meta, dict):
            raise WorkbenchError(f"{self.url}/generate ({where}): the reply has no 'meta_info' object "
                                 f"(keys: {', '.join(sorted(reply)) or 'none'}): is this an SGLang server?")
        out = reply.get("output_ids")
        if out is None and isinstance(meta.get("output_token_logprobs"), list):
            out = [x[1] for x in meta["output_token_logprobs"] if isinstance(x, (list, tuple)) and len(x) > 1]
        if not isinstance(out, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in out):
            raise WorkbenchError(f"{self.url}/generate ({where}): the reply has no 'output_ids' list of token ids "
                                 "(expected SGLang's /generate JSON with output_ids)")
        return out, meta

    def map(self, fn, items: list, *, progress: bool = False, desc: str = "requests") -> list:
        """``fn(item)`` for every item with at most ``concurrency`` in flight; results in input order."""
        from tqdm.auto import tqdm

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool, \
                tqdm(total=len(items), desc=desc, unit="req", disable=not progress) as bar:
            futures = [pool.submit(fn, x) for x in items]
            out = []
            try:
                for f in futures:
                    out.append(f.result())
                    bar.update(1)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return out


def sampling_params(sampling=None, row: int | None = None) -> dict:
    """The ``sampling_params`` every ``/generate`` request carries, explicitly (a server otherwise takes
    the model's generation_config.json defaults): :meth:`workbench.sampling.Sampling.sglang_params`,
    plus, when sampling with a seed, ``sampling_seed`` = :func:`workbench.sampling.row_seed` of the
    data row (as ``workbench regenerate --url`` sends it: the same row gets the same seed; SGLang
    ``sampling/sampling_params.py``, honoured with ``--enable-deterministic-inference``).

        >>> from workbench.sampling import Sampling, row_seed
        >>> sampling_params()["temperature"], "sampling_seed" in sampling_params(Sampling(0.7, seed=3))
        (0.0, False)
        >>> sampling_params(Sampling(0.7, top_p=0.9, seed=3), row=5)["sampling_seed"] == row_seed(3, 5)
        True
    """
    from workbench.sampling import Sampling, row_seed

    s = Sampling() if sampling is None else sampling
    out = s.sglang_params()
    if s.seed is not None and not s.greedy and row is not None:
        out["sampling_seed"] = row_seed(s.seed, int(row))
    return out


def _snippet(body: bytes, n: int = 120) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    return " ".join(text.split())[:n]


# ─────────────────────────────── server info ───────────────────────────────

def server_settings(info: dict) -> dict:
    """Speculative settings from a ``/get_server_info`` reply (flat or under ``server_args``).

        >>> server_settings({"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
        ...                  "internal_states": [{"avg_spec_accept_length": 2.5}]})["avg_spec_accept_length"]
        2.5
    """
    if not isinstance(info, dict):
        raise WorkbenchError(f"/get_server_info: expected a JSON object, got {type(info).__name__}")
    args = dict(info.get("server_args")) if isinstance(info.get("server_args"), dict) else {}
    args.update({k: v for k, v in info.items() if k not in ("server_args", "internal_states")})
    out = {k: args.get(k) for k in ("model_path", "speculative_algorithm", "speculative_draft_model_path",
                                    "speculative_num_steps", "speculative_eagle_topk",
                                    "speculative_num_draft_tokens", "speculative_adaptive", "dtype")}
    for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
        v = out[k]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise WorkbenchError(f"/get_server_info: '{k}' = {v!r}: expected an integer or null")
    acc = None
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        acc = states[0].get("avg_spec_accept_length")
        if acc is not None and (isinstance(acc, bool) or not isinstance(acc, (int, float))):
            raise WorkbenchError(f"/get_server_info: internal_states[0].avg_spec_accept_length = {acc!r}: "
                                 "expected a number")
    out["avg_spec_accept_length"] = None if acc is None else float(acc)
    return out


# ─────────────────────────────── live samples ───────────────────────────────

@dataclass
class LiveSample:
    """One sample as the server answered it."""

    row: int
    where: str
    source: str
    prompt_ids: list[int]
    output_ids: list[int]
    max_new_tokens: int
    meta: SpecMeta
    seconds: float

    def as_row(self) -> dict:
        """The offline row: prompt + the server's output, loss_mask 1 on the output."""
        ids = list(self.prompt_ids) + list(self.output_ids)
        return {"input_ids": ids, "loss_mask": [0] * len(self.prompt_ids) + [1] * len(self.output_ids),
                "seq_len": len(ids), "n_prompt_tokens": len(self.prompt_ids),
                "n_response_tokens": len(self.output_ids), "source": self.source, "_row": self.row,
                "_where": self.where}


def _prompt_of(row: dict, i: int) -> tuple[list[int], int, str]:
    where = row.get("_where", f"row {row.get('_row', i)}")
    ids = row.get("input_ids")
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)) or not ids:
        raise WorkbenchError(f"{where}: input_ids must be a non-empty list of token ids")
    n = int(row.get("n_prompt_tokens", 0) or 0)
    resp = row.get("n_response_tokens")
    n_resp = int(resp) if resp is not None else len(ids) - n
    if not 1 <= n < len(ids) or n_resp < 1:
        raise WorkbenchError(f"{where}: n_prompt_tokens={n} of {len(ids)} tokens: expected a prompt of at least 1 "
                             "token and a response (the server is sent the prompt, asked for the response length)")
    return [int(x) for x in ids[:n]], n_resp, where


def generate_samples(client: Client, rows: list[dict], *, vocab_size: int | None = None,
                     progress: bool = False, require_spec: bool = True, sampling=None) -> list[LiveSample]:
    """Send each row's prompt to ``/generate`` (max_new_tokens = response length) with the explicit
    :func:`sampling_params` of ``sampling`` (a :class:`workbench.sampling.Sampling`; default greedy).

    WorkbenchError when no reply carries speculative fields and ``require_spec`` (the server is not
    speculating; pass False when its server info says it is) or a returned token id falls outside
    ``vocab_size``.
    """
    jobs = []
    for i, row in enumerate(rows):
        prompt, n_new, where = _prompt_of(row, i)
        jobs.append((int(row.get("_row", i)), where, str(row.get("source", "") or ""), prompt, n_new))

    def one(job):
        row, where, source, prompt, n_new = job
        t0 = time.perf_counter()
        out, meta = client.generate(prompt, n_new, where=where, sampling=sampling_params(sampling, row))
        m = parse_meta_info(meta, where=f"{client.url}/generate ({where})")
        if vocab_size is not None:
            bad = [x for x in out if not 0 <= x < vocab_size]
            if bad:
                raise WorkbenchError(f"{client.url}/generate ({where}): returned token id {bad[0]} outside the target "
                                     f"vocab 0..{vocab_size - 1}: the server runs another model or tokenizer")
        return LiveSample(row, where, source, prompt, [int(x) for x in out][:n_new], n_new, m,
                          time.perf_counter() - t0)

    samples = client.map(one, jobs, progress=progress, desc="live")
    if require_spec and samples and not any(s.meta.has_spec for s in samples):
        raise WorkbenchError(f"{client.url}: no /generate reply has speculative fields in meta_info "
                             f"({', '.join(SPEC_KEYS[:3])}, ...): the server runs without speculative decoding "
                             "(launch it with --speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT)")
    return samples


# ─────────────────────────────── comparison ───────────────────────────────

def candidates(target, draft_config, trained=None, extra=None) -> list[Candidate]:
    """The trained taps, every wiring an engine record feeds as configured (``wiring.table``) and
    ``extra`` specs, unique, as :class:`workbench.diagnose.Candidate` (``engines`` lists who feeds it).

        >>> [c.spec for c in candidates({"num_hidden_layers": 8},
        ...                             {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}},
        ...                             trained="embed,L1,L3")]
        ['embed,L1,L3', 'L1,L3,L4', 'L0,L2,L3']
    """
    n = wmod.num_layers(target)
    tw = wmod.Wiring.parse(trained, n) if trained is not None else None
    out: dict[str, Candidate] = {}
    if tw is not None:
        out[tw.spec] = Candidate(tw, ["trained taps"], engines=["trained"], trained=True)
    for r in wmod.table(target, draft_config, trained=tw):
        if r.feasible and r.taps:
            out.setdefault(r.spec, Candidate(r.wiring, ["fed as configured"])).engines.append(r.engine)
    for spec in extra or []:
        w = wmod.Wiring.parse(spec, n)
        out.setdefault(w.spec, Candidate(w, ["given"], engines=["given"]))
    return list(out.values())


@dataclass
class Comparison(Rendered):
    """Live versus offline: request by request (fingerprints), in total, and the verdict.

    ``requests[spec]`` holds, per sample, the :class:`~workbench.fingerprint.ServerSteps` a server on
    that wiring makes on that request (prompt + the server's own output); ``offline[spec]`` is the same
    as an :class:`~workbench.statistics.AcceptanceResult` (decode path). ``counting``: how the server
    counts its last verify step ("v2" raw, "v1" cut at the finish). Without per-request fields in any
    reply (or without ``requests``) the verdict falls back to the aggregate accept length within
    ``tolerance`` (weaker).
    """

    url: str
    K: int
    samples: list[LiveSample]
    offline: dict
    candidates: list[Candidate]
    trained: str | None
    settings: dict = field(default_factory=dict)
    tolerance: float = 0.25
    notes: list[str] = field(default_factory=list)
    setting: Setting | None = None        # chain K or tree, greedy, engine sglang, decode-path estimator
    requests: dict | None = None          # {spec: [fingerprint.ServerSteps per sample]}
    counting: str = "v2"
    sampling: dict | None = None          # the sampling_params sent with every request (max_new_tokens aside)

    def __post_init__(self):
        if self.setting is None:
            self.setting = Setting(steps=int(self.K), engine="sglang", estimator="decode-path")

    # ---- per request ----
    @property
    def mode(self) -> str:
        """"per-request" when replies carry fingerprint fields and the offline requests exist, else "aggregate"."""
        ok = self.requests is not None and any(fp.fields_of(s.meta) for s in self.samples)
        return "per-request" if ok else "aggregate"

    @property
    def adaptive(self) -> bool:
        return bool(self.settings.get("speculative_adaptive"))

    def statuses(self, counting: str | None = None) -> dict:
        """{spec: ["identical" | "tie" | "differs" | "n/a" per sample]}."""
        c = counting or self.counting
        if self.requests is None:
            return {}
        return {cd.spec: [fp.status(fp.fields_of(s.meta), st, c) for s, st in zip(self.samples, self.requests[cd.spec])]
                for cd in self.candidates}

    def ranking(self) -> list[dict]:
        """Wirings best first: identical, tie, differs (requests with a fingerprint)."""
        out = []
        for spec, sts in self.statuses().items():
            out.append({"wiring": spec, "identical": sts.count("identical"), "tie": sts.count("tie"),
                        "differs": sts.count("differs"), "n": sum(x != "n/a" for x in sts),
                        "trained": spec == self.trained})
        return sorted(out, key=lambda d: (-(d["identical"] + d["tie"]), -d["identical"]))

    def separation(self) -> dict | None:
        """The sign test between the two best wirings, on the requests where one is identical and the other differs."""
        rk = self.ranking()
        if len(rk) < 2:
            return None
        st = self.statuses()
        a, b = st[rk[0]["wiring"]], st[rk[1]["wiring"]]
        wins = sum(x == "identical" and y == "differs" for x, y in zip(a, b))
        losses = sum(y == "identical" and x == "differs" for x, y in zip(a, b))
        n = rk[0]["n"]
        p = fp.sign_test(wins, losses)
        return {"best": rk[0]["wiring"], "other": rk[1]["wiring"], "wins": wins, "losses": losses, "p": p,
                "separated": wins > losses and p < ALPHA, "more_requests": fp.more_to_separate(wins, losses, n, ALPHA)}

    # ---- live totals (the aggregate fallback) ----
    @property
    def live_histogram(self) -> list[int] | None:
        hs = [s.meta.histogram for s in self.samples if s.meta.verify_ct or s.meta.histogram]
        if not hs or any(h is None for h in hs):
            return None
        out = [0] * max(self.K + 1, max(len(h) for h in hs))
        for h in hs:
            for a, c in enumerate(h):
                out[a] += c
        return out

    @property
    def live_accept_length(self) -> float:
        """Pooled tokens per verify step over all replies (see :class:`SpecMeta` for the estimate); without
        per-request fields the server's ``avg_spec_accept_length`` (all requests it served)."""
        h = self.live_histogram
        if h is not None and sum(h):
            return sum((a + 1) * c for a, c in enumerate(h)) / sum(h)
        ms = [s.meta for s in self.samples if s.meta.verify_ct]
        if ms and all(m.accepted_drafts is not None for m in ms):
            v = sum(m.verify_ct for m in ms)
            return (sum(m.accepted_drafts for m in ms) + v) / v
        if ms and all(m.completion_tokens is not None for m in ms):
            return sum(m.completion_tokens for m in ms) / sum(m.verify_ct for m in ms)
        vals = [s.meta.accept_length for s in self.samples if s.meta.accept_length is not None]
        if vals:
            return sum(vals) / len(vals)
        avg = self.settings.get("avg_spec_accept_length")
        return float(avg) if avg is not None else math.nan

    @property
    def live_source(self) -> str:
        srcs = sorted({s.meta.source_of_accept_length for s in self.samples if s.meta.has_spec})
        if not srcs and self.settings.get("avg_spec_accept_length") is not None:
            return "server's internal_states avg_spec_accept_length (every request it served)"
        return "; ".join(srcs) or "none"

    def offline_accept_length(self, spec: str, row: int | None = None) -> float:
        r = self.offline[spec]
        if row is not None:
            on = r.chains["on_path"] & (r.chains["sample"] == row)
            a = r.chains["accepted"][on]
            return float(a.mean()) + 1 if len(a) else math.nan
        return float(r.decode_path["accept_length"])

    # ---- verdict ----
    def _decide(self) -> tuple[str, str | None, str]:
        if self.mode == "per-request":
            return self._decide_requests()
        code, wiring, text = self._decide_aggregate()
        return code, wiring, ("aggregate comparison (weaker: the server returns no per-request speculative fields, "
                              f"so only the pooled accept length within ±{self.tolerance:g} is compared): {text}")

    def _decide_requests(self) -> tuple[str, str | None, str]:
        rk = self.ranking()
        best = rk[0]
        n = best["n"]

        def said(d):
            tie = f" (+{d['tie']} near-tie)" if d["tie"] else ""
            return f"{d['identical']}/{d['n']}{tie}"

        head = f"{said(best)} requests identical under {best['wiring']}"
        if len(rk) > 1:
            head += f"; best other wiring {rk[1]['wiring']}: {said(rk[1])}"
        if self.adaptive:
            return "undecided", None, (f"undecided: the server runs --speculative-adaptive (its draft steps change at "
                                       f"run time), so no fixed-steps simulation reproduces its requests ({head}); "
                                       "restart it without --speculative-adaptive to decide")
        if best["identical"] + best["tie"] < 0.5 * n:
            tree = self.settings.get("speculative_eagle_topk")
            return "no-match", None, (f"no wiring reproduces the server's requests: {head}; suspect flags (steps, topk, "
                                      f"draft tokens{'' if isinstance(tree, int) else ': the server did not report them'}), "
                                      "the rotary offset (servers before SGLang PR #25015), loading or vocab mapping "
                                      "(run `workbench sglang lint`)")
        sep = self.separation()
        if sep is not None and not sep["separated"]:
            more = sep["more_requests"]
            why = (f"{sep['wins']} requests favour {sep['best']} and {sep['losses']} favour {sep['other']} "
                   f"(exact sign test p = {sep['p']:.3g}, not < {ALPHA:g})")
            hint = (f"about {more} more requests like these would separate them" if more is not None else
                    "no request so far tells them apart: more or longer requests (or other data) are needed")
            return "undecided", None, f"undecided: {head}; {why}; {hint}"
        margin = "" if sep is None else f" (exact sign test {sep['wins']}:{sep['losses']}, p = {sep['p']:.3g})"
        if best["wiring"] == self.trained:
            return "match-trained", best["wiring"], f"{head}{margin}: the server feeds the trained wiring"
        engines = {c.spec: c.engines for c in self.candidates}
        who = "/".join(e for e in engines.get(best["wiring"], []) if e != "trained") or "given"
        return "match-other", best["wiring"], (f"{head}{margin}: the server feeds {best['wiring']} ({who}), not the "
                                               f"trained {self.trained}: the draft gets the wrong taps")

    def _decide_aggregate(self) -> tuple[str, str | None, str]:
        live = self.live_accept_length
        offs = {c.spec: self.offline_accept_length(c.spec) for c in self.candidates}
        offs = {k: v for k, v in offs.items() if not math.isnan(v)}
        if math.isnan(live) or not offs:
            return "no-match", None, "nothing to compare: no live accept length or no offline verify step"
        if self.adaptive:
            return "undecided", None, ("the server runs --speculative-adaptive (its draft steps change at run time): "
                                       "a fixed-steps simulation cannot be compared with it")
        tol = self.tolerance
        close = sorted((s for s in offs if abs(live - offs[s]) <= tol), key=lambda s: abs(live - offs[s]))
        fmt = lambda s: f"{s} (offline {offs[s]:.2f})"  # noqa: E731
        engines = {c.spec: c.engines for c in self.candidates}
        if len(offs) > 1 and len(close) == len(offs):
            return "undecided", None, (f"live {live:.2f} matches every wiring (offline {min(offs.values()):.2f}.."
                                       f"{max(offs.values()):.2f}, all within ±{tol:g}): the draft is accepted about "
                                       "equally under all of them, so this data cannot tell which one the server feeds")
        if len(close) > 1:
            return "undecided", None, (f"live {live:.2f} is within ±{tol:g} of several wirings: "
                                       f"{', '.join(fmt(s) for s in close)}; the aggregate cannot tell them apart "
                                       "(a server with per-request meta_info fields can)")
        if close:
            best = close[0]
            if best == self.trained:
                return "match-trained", best, (f"live matches offline under wiring {best} (the trained wiring): "
                                               f"live {live:.2f} vs offline {offs[best]:.2f}")
            who = "/".join(e for e in engines[best] if e != "trained") or "given"
            tr = (f"the trained one ({self.trained}, offline {offs[self.trained]:.2f})" if self.trained in offs
                  else "the trained one")
            return "match-other", best, (f"live matches wiring {best} ({who}), not {tr}: live {live:.2f} vs "
                                         f"offline {offs[best]:.2f}; the server feeds the draft the wrong taps")
        lowest = min(offs.values())
        best = min(offs, key=lambda s: abs(live - offs[s]))
        if live < lowest - tol:
            return "below-all", None, (f"live is below every wiring: live {live:.2f}, offline {lowest:.2f}.."
                                       f"{max(offs.values()):.2f}; suspect loading, vocab mapping or flags "
                                       "(run `workbench sglang lint`)")
        hint = (" (tree drafting, topk > 1, beats the offline chain)"
                if isinstance(self.settings.get("speculative_eagle_topk"), int)
                and self.settings["speculative_eagle_topk"] > 1 and self.setting.shape == "chain" else "")
        return "no-match", best, (f"live {live:.2f} matches no wiring within ±{tol:g}; closest {fmt(best)}{hint}")

    @property
    def verdict_code(self) -> str:
        return self._decide()[0]

    @property
    def matched(self) -> str | None:
        return self._decide()[1]

    @property
    def verdict(self) -> str:
        return self._decide()[2]

    # ---- views ----
    def per_sample(self) -> list[dict]:
        """One dict per sample: live numbers, and per wiring the offline accept length and the request's status."""
        st = self.statuses()
        rows = []
        for i, s in enumerate(self.samples):
            d = {"sample": s.row, "source": s.source, "n_prompt": len(s.prompt_ids), "n_output": len(s.output_ids),
                 "verify_ct": s.meta.verify_ct, "live_accept_length": s.meta.accept_length,
                 "server_accept_length": s.meta.reported_accept_length, "live_histogram": s.meta.histogram,
                 "fingerprint": fp.fields_of(s.meta) or None, "seconds": round(s.seconds, 3)}
            for c in self.candidates:
                d[f"offline {c.spec}"] = self.offline_accept_length(c.spec, s.row)
                if st:
                    d[f"status {c.spec}"] = st[c.spec][i]
            rows.append(d)
        return rows

    def to_frame(self):
        """:meth:`per_sample` as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.per_sample())

    def totals(self) -> list[dict]:
        """Live and each wiring in total: accept length, histogram, verify steps."""
        out = [{"what": "live", "accept_length": self.live_accept_length, "histogram": self.live_histogram,
                "verify_steps": sum(s.meta.verify_ct or 0 for s in self.samples), "estimate": self.live_source}]
        for c in self.candidates:
            dp = self.offline[c.spec].decode_path
            out.append({"what": f"offline {c.spec}", "accept_length": dp["accept_length"],
                        "histogram": [int(x) for x in dp["histogram"]], "verify_steps": dp["n_verify_steps"],
                        "engines": c.engines, "trained": c.trained})
        return out

    def to_dict(self) -> dict:
        return jsonable({
            "schema_version": SCHEMA_VERSION, "url": self.url, "K": self.K, "setting": self.setting.to_dict(),
            "convention": f"{self.setting.describe()}; accept length = mean A + 1 (bonus counted); offline = the "
            "server's decode of each request (prompt + the server's output), judged against the server's tokens",
            "mode": self.mode, "counting": self.counting, "adaptive": self.adaptive, "sampling_params": self.sampling,
            "settings": self.settings, "trained": self.trained, "tolerance": self.tolerance,
            "verdict": {"code": self.verdict_code, "wiring": self.matched, "text": self.verdict},
            "ranking": self.ranking(), "separation": self.separation() if self.mode == "per-request" else None,
            "totals": self.totals(), "samples": self.per_sample(), "notes": self.notes,
            "variants": sorted({s.meta.variant for s in self.samples})})

    def to_json(self, path=None) -> dict:
        out = self.to_dict()
        if path is not None:
            write_json(path, out, indent=2)
        return out

    def summary(self) -> str:
        f = lambda x: "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"  # noqa: E731
        lines = [f"live server {self.url}: {len(self.samples)} samples, {self.setting.shape} steps={self.K}, "
                 f"meta_info variant(s) {', '.join(sorted({s.meta.variant for s in self.samples}))}, "
                 f"comparison {self.mode}" + (f" (last-step counting {self.counting})" if self.mode == "per-request"
                                              else ""),
                 f"setting: {self.setting.describe()}"]
        if self.adaptive:
            lines.append("the server runs --speculative-adaptive: draft steps change at run time")
        if self.mode == "per-request":          # columns as wide as their longest name: nothing is cut
            ranked = [(d['wiring'] + (' (trained)' if d['trained'] else ''), d) for d in self.ranking()]
            w = max([len("wiring")] + [len(n) for n, _ in ranked])
            lines.append(f"{'wiring':{w}s} {'identical':>9s} {'near-tie':>8s} {'differs':>7s}")
            for n, d in ranked:
                lines.append(f"{n:{w}s} {d['identical']:>9d} {d['tie']:>8d} {d['differs']:>7d}")
        named = [(t["what"] + (" (trained)" if t.get("trained") else "") +
                  (f" [fed by {'/'.join(e for e in t['engines'] if e != 'trained')}]" if t.get("engines") and
                   any(e != "trained" for e in t["engines"]) else ""), t) for t in self.totals()]
        w = max(len(n) for n, _ in named)
        lines.append(f"{'':{w}s} {'accept len':>10s}  {'verify steps':>12s}  histogram H[0..K]")
        for name, t in named:
            lines.append(f"{name:{w}s} {f(t['accept_length']):>10s}  {t['verify_steps']:>12d}  {t['histogram']}")
        if self.settings.get("avg_spec_accept_length") is not None:
            lines.append(f"server's avg_spec_accept_length (all requests it served): "
                         f"{self.settings['avg_spec_accept_length']:.3f}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)


def offline_results(requests: dict, samples: list[LiveSample], K: int, setting: Setting) -> dict:
    """{spec: AcceptanceResult} of the per-request decodes (every step on the decode path)."""
    from workbench.statistics import AcceptanceResult

    out = {}
    for spec, per in requests.items():
        sample = [s.row for s, st in zip(samples, per) for _ in st.accepts]
        acc = [a for st in per for a in st.accepts]
        src = [s.source for s, st in zip(samples, per) for _ in st.accepts]
        out[spec] = AcceptanceResult.from_arrays(spec, K, sample=sample, t=list(range(len(acc))), accepted=acc,
                                                 source=src, on_path=[True] * len(acc), setting=setting)
    return out


def compare(url, target, draft, data, *, limit: int | None = None, K: int | None = None, trained=None,
            wirings=None, concurrency: int = 4, timeout: float = 120.0, retries: int = 3, backoff: float = 0.5,
            tolerance: float = 0.25, engine: str = "sglang", device: str | None = "cpu", dtype=None,
            batch_size: int = 8, trust_remote_code: bool = False, progress: bool = True, counting: str = "auto",
            served_dtype: str | None = None, temperature: float = 0.0, top_p: float = 1.0, top_k: int = -1,
            seed: int | None = None) -> Comparison:
    """Run the live comparison (module docstring). ``target``/``draft``/``data``: paths or loaded objects
    (:class:`~workbench.capture.Target`, :class:`~workbench.draft.Eagle3Draft`, a Dataset or row list).

    ``K``: draft steps; default the server's ``speculative_num_steps`` (``/server_info``), else the
    histogram length - 1. Tree or chain, topk and draft tokens come from the server's info. ``trained``:
    the taps the draft was trained on (default: its config's ``workbench.trained_taps``, else what the
    draft's own format engine feeds: :func:`workbench.engines.default_wiring`). ``wirings``: extra specs
    to try. ``engine``: the server's record (``sglang`` current, ``sglang-2026.04`` older): the offline
    side computes what it computes (:func:`workbench.wiring.apply_engine`, the draft changed in place).
    ``tolerance``: the aggregate fallback's accept-length tolerance. ``counting``: "v1", "v2" or "auto"
    (the one more requests agree with). ``served_dtype``: the server's dtype for near-ties (default: its
    info's ``dtype``, else bfloat16).

    ``temperature``/``top_p``/``top_k`` (-1 = off)/``seed``: the sampling parameters sent with every
    request (explicitly, also at temperature 0; with ``seed``, each row's ``sampling_seed``) and
    recorded in the result's :class:`~workbench.setting.Setting`. At temperature > 0 the offline side
    matches each request's trees against the server's sampled output (``fingerprint.offline_requests``
    with ``sampled=True``): exact for SGLang's default (lossless) verification thresholds.
    """
    from workbench.sampling import Sampling

    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    client = Client(url, timeout=timeout, retries=retries, backoff=backoff, concurrency=concurrency)
    if not (isinstance(tolerance, (int, float)) and tolerance > 0):
        raise WorkbenchError(f"--tolerance {tolerance!r}: expected a positive accept-length difference, e.g. 0.25")
    if counting not in ("auto",) + fp.COUNTING:
        raise WorkbenchError(f"counting {counting!r}: expected auto, v1 or v2")
    notes: list[str] = []
    try:
        settings = server_settings(client.server_info())
    except WorkbenchError as e:
        if str(e).startswith("cannot reach"):
            raise
        settings = {}
        notes.append(f"no usable /server_info or /get_server_info ({e}); K from --steps or the histograms")
    algo = settings.get("speculative_algorithm")
    if settings and not algo:
        raise WorkbenchError(f"{client.url}{client.info_endpoint}: speculative_algorithm is null: the server runs "
                             "without speculative decoding (launch it with --speculative-algorithm EAGLE3)")
    if algo and str(algo).upper() not in ("EAGLE3",):
        notes.append(f"the server runs --speculative-algorithm {algo}, not EAGLE3 (an EAGLE-3 draft under EAGLE "
                     "has its fc skipped: expect accept length ~1)")
    if settings.get("speculative_adaptive"):
        notes.append("the server runs --speculative-adaptive: its draft steps change at run time")
    topk = settings.get("speculative_eagle_topk")
    topk = topk if isinstance(topk, int) and topk >= 1 else 1
    n_draft = settings.get("speculative_num_draft_tokens") if topk > 1 else None

    target, draft, data = inputs.load(target, draft, data, device=device, dtype=dtype,
                                      trust_remote_code=trust_remote_code, progress=progress)
    rows = inputs.rows(data, limit)
    if not rows:
        raise WorkbenchError("compare: the data has no rows")
    try:
        samples = generate_samples(client, rows, vocab_size=target.vocab_size, progress=progress,
                                   require_spec=not algo, sampling=sampling)
    except WorkbenchError as e:
        if seed is not None and ": HTTP 4" in str(e) and "sampling_seed" in str(e):
            raise WorkbenchError(f"{e} (this server's SamplingParams has no sampling_seed: run without --seed)") from None
        raise
    short = [s.where for s in samples if len(s.output_ids) < s.max_new_tokens]
    if short:
        notes.append(f"{len(short)} replies stopped before max_new_tokens (EOS?), e.g. {short[0]}: their last "
                     "verify step is modelled as if the output went on" + ("" if sampling.greedy else
                                                                          " (at temperature > 0: open when it "
                                                                          "matched every token left)"))
    if any(not s.meta.has_spec for s in samples):
        notes.append(f"{sum(not s.meta.has_spec for s in samples)} replies without speculative fields were left "
                     "out of the live totals")
        if not any(s.meta.has_spec for s in samples) and settings:
            try:                                   # the aggregate fallback: the server's own running average
                settings["avg_spec_accept_length"] = server_settings(client.server_info())["avg_spec_accept_length"]
            except WorkbenchError as e:
                notes.append(f"could not re-read the server info after the requests ({e})")

    set_aside = [s.meta.note for s in samples if s.meta.note]
    if set_aside:
        notes.append(f"{len(set_aside)} replies had an inconsistent accept histogram, e.g. {set_aside[0]}")

    server_k = settings.get("speculative_num_steps")
    hist_k = {len(s.meta.histogram) - 1 for s in samples if s.meta.histogram}
    if K is None:
        K = server_k if isinstance(server_k, int) else (max(hist_k) if hist_k else None)
        if not isinstance(server_k, int) and K is not None:
            notes.append(f"K={K} guessed from the longest accept histogram: SGLang grows it only up to the largest "
                         "count accepted, so this is a lower bound; pass --steps K for a firm comparison")
        if K is None:
            raise WorkbenchError(f"{client.url}: cannot tell the server's draft steps K (no speculative_num_steps in "
                                 "/server_info, no histogram in meta_info): pass --steps K")
    elif isinstance(server_k, int) and server_k != K:
        notes.append(f"--steps {K} differs from the server's speculative_num_steps {server_k}")
    if int(K) < 1:
        raise WorkbenchError(f"steps K={K}: expected K >= 1")
    K = int(K)

    n = target.n_layers
    dcfg = draft.raw_config
    tw = wmod.Wiring.parse(trained, n) if trained is not None else \
        (wmod.trained_wiring_from_config(dcfg, n) if dcfg is not None else None)
    if tw is None:
        r = engines.default_wiring(dcfg, target.config)
        tw = wmod.Wiring.parse(r.taps, n)
        notes.append(f"trained taps unknown (no workbench.trained_taps in the draft config): assumed {tw.spec} "
                     f"({r.explanation}); pass --trained-wiring")
    cands = candidates(target.config, dcfg, tw, wirings)
    eng = engines.get(engine).name
    wmod.apply_engine(target, draft, engine, tw.spec)          # the engine's computation (rotary offset, options)
    sampled = not sampling.greedy
    temp = dict(temperature=sampling.temperature, top_p=sampling.top_p,
                top_k=None if sampling.top_k == -1 else sampling.top_k) if sampled else {}
    if topk > 1:
        setting = Setting(steps=K, shape="tree", eagle_topk=topk, num_draft_tokens=n_draft, engine=eng,
                          estimator="decode-path", **temp)
    else:
        setting = Setting(steps=K, engine=eng, estimator="decode-path", **temp)
    dt = served_dtype or (settings.get("dtype") if settings.get("dtype") not in (None, "auto") else "bfloat16")
    reqs = fp.offline_requests(target, draft, [(s.prompt_ids, s.output_ids) for s in samples],
                               [c.spec for c in cands], steps=K, topk=topk, num_draft_tokens=n_draft,
                               served_dtype=dt, batch_size=batch_size, sampled=sampled, progress=progress)
    offline = offline_results(reqs, samples, K, setting)
    cmp = Comparison(url=client.url, K=K, samples=samples, offline=offline, candidates=cands, trained=tw.spec,
                     settings=settings, tolerance=float(tolerance), notes=notes, setting=setting, requests=reqs,
                     sampling=sampling_params(sampling))       # as sent (sampling_seed differs per row)
    if counting == "auto" and cmp.mode == "per-request":
        tops = {c: _with(cmp, c).ranking()[0] for c in fp.COUNTING}
        score = {c: (d["identical"] + d["tie"], d["identical"]) for c, d in tops.items()}
        cmp.counting = max(fp.COUNTING, key=lambda c: score[c])          # ties: v2 (listed first)
        if score["v1"] != score["v2"]:
            notes.append(f"the server counts its last verify step as the {cmp.counting} worker does "
                         f"({'raw A' if cmp.counting == 'v2' else 'A after the cut at the finish'}): more requests agree")
    elif counting != "auto":
        cmp.counting = counting
    if sampled:
        n_open = sum(st.last_max is not None for st in reqs[tw.spec])
        notes.append("temperature > 0: each request's trees are matched against the server's own sampled tokens "
                     "(SGLang's lossless target-only verification, default thresholds 1.0); no near-ties (the "
                     "target's logits do not decide A)")
        if n_open:
            notes.append(f"{n_open}/{len(samples)} requests (trained wiring) end on a verify step that matched every "
                         f"token left to it: its raw A past the output is open (the server cut tokens it sampled); "
                         f"any value in range counts as identical, and the offline totals take the value the "
                         f"server's own fields imply (else the lower bound)")
            resolved = {c.spec: [st.resolved(fp.fields_of(s.meta), cmp.counting) for s, st in zip(samples, reqs[c.spec])]
                        for c in cands}
            cmp.offline = offline_results(resolved, samples, K, setting)
    else:
        notes.append(f"near-ties judged at the resolution of {dt} (the target's top two logits)")
    return cmp


def _with(cmp: Comparison, counting: str) -> Comparison:
    from dataclasses import replace

    return replace(cmp, counting=counting)
