"""A live SGLang server against the offline simulation: HTTP client, ``meta_info`` parsing, compare.

    >>> from workbench.live.sglang_live import parse_meta_info
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
   wiring would decode it (:mod:`workbench.live.fingerprint`), chain or tree as the server is configured.
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

from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.core.sampling import Sampling
from workbench.live import fingerprint as fp
from workbench.live import precision as prec
from workbench.live.comparison import (
    Comparison,
    LiveSample,
    ServerKind,
    SpecMeta,
    assemble,
    collect,
    count_list,
    number_field,
)
from workbench.live.http import HttpClient
from workbench.live.samples import local_inputs

# meta_info keys of speculative runs, by SGLang generation (facts page, section 4)
SPEC_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_accept_token_num",
             "spec_draft_token_num", "spec_accept_histogram", "spec_accepted_drafts", "spec_proposed_drafts",
             "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_correct_drafts_histogram")


# ─────────────────────────────── meta_info ───────────────────────────────


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
    m = SpecMeta(variant="none", completion_tokens=number_field(meta, "completion_tokens", where),
                 verify_ct=number_field(meta, "spec_verify_ct", where),
                 reported_accept_length=number_field(meta, "spec_accept_length", where, float),
                 reported_accept_rate=number_field(meta, "spec_accept_rate", where, float))
    newest = number_field(meta, "spec_num_correct_drafts", where)
    renamed = number_field(meta, "spec_accepted_drafts", where)
    old_new = number_field(meta, "spec_accept_token_num", where)
    m.accepted_drafts = next((x for x in (newest, renamed, old_new) if x is not None), None)
    m.proposed_drafts = next((x for x in (number_field(meta, "spec_num_proposed_drafts", where),
                                          number_field(meta, "spec_proposed_drafts", where),
                                          number_field(meta, "spec_draft_token_num", where)) if x is not None), None)
    m.histogram = count_list(meta, "spec_correct_drafts_histogram", where) or count_list(meta, "spec_accept_histogram", where)
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


@dataclass
class Client(HttpClient):
    """An SGLang server's ``/generate`` and ``/server_info`` over :class:`~workbench.live.http.HttpClient`."""

    KIND = "SGLang"
    ARTICLE = "an"
    PATH = "/generate"                    # where :meth:`generate` asks (named in errors)
    info_endpoint: str | None = field(default=None, repr=False)

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

    def served_model(self) -> str | None:
        """The server's ``model_path`` (``/server_info``; None when it does not answer: an older or proxied
        server), as ``generation.model`` records it."""
        try:
            return self.server_info().get("model_path")
        except WorkbenchError:
            return None

    @staticmethod
    def params(sampling=None, row: int | None = None) -> dict:
        """The ``sampling_params`` of a request for data row ``row``: :func:`sampling_params`."""
        return sampling_params(sampling, row)

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


def sampling_params(sampling=None, row: int | None = None) -> dict:
    """The ``sampling_params`` every ``/generate`` request carries, explicitly (a server otherwise takes
    the model's generation_config.json defaults): :meth:`workbench.sampling.Sampling.sglang_params`,
    plus, when sampling with a seed, ``sampling_seed`` = :func:`workbench.sampling.row_seed` of the
    data row (as ``workbench regenerate --url`` sends it: the same row gets the same seed; SGLang
    ``sampling/sampling_params.py``, honoured with ``--enable-deterministic-inference``).

        >>> from workbench.core.sampling import Sampling, row_seed
        >>> sampling_params()["temperature"], "sampling_seed" in sampling_params(Sampling(0.7, seed=3))
        (0.0, False)
        >>> sampling_params(Sampling(0.7, top_p=0.9, seed=3), row=5)["sampling_seed"] == row_seed(3, 5)
        True
    """
    return (Sampling() if sampling is None else sampling).request_params("sglang", row)


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

def generate_samples(client: Client, rows: list[dict], *, vocab_size: int | None = None,
                     progress: bool = False, require_spec: bool = True, sampling=None) -> list[LiveSample]:
    """Send each row's prompt to ``/generate`` (max_new_tokens = response length) with the explicit
    :func:`sampling_params` of ``sampling`` (a :class:`workbench.sampling.Sampling`; default greedy).

    WorkbenchError when no reply carries speculative fields and ``require_spec`` (the server is not
    speculating; pass False when its server info says it is) or a returned token id falls outside
    ``vocab_size``.
    """
    def ask(prompt, n_new, row, where):
        out, meta = client.generate(prompt, n_new, where=where, sampling=sampling_params(sampling, row))
        return out, parse_meta_info(meta, where=f"{client.url}/generate ({where})")

    samples = collect(client, rows, ask, vocab_size=vocab_size, progress=progress, path="/generate")
    if require_spec and samples and not any(s.meta.has_spec for s in samples):
        raise WorkbenchError(f"{client.url}: no /generate reply has speculative fields in meta_info "
                             f"({', '.join(SPEC_KEYS[:3])}, ...): the server runs without speculative decoding "
                             "(launch it with --speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT)")
    return samples


# ─────────────────────────────── comparison ───────────────────────────────



def compare(url, target, draft, data, *, limit: int | None = None, K: int | None = None, trained=None,
            wirings=None, concurrency: int = 4, timeout: float = 120.0, retries: int = 3, backoff: float = 0.5,
            tolerance: float = 0.25, engine: str = "sglang", device: str | None = "cpu", dtype=None,
            batch_size: int = 8, trust_remote_code: bool = False, progress: bool = True, counting: str = "auto",
            served_dtype: str | None = None, temperature: float = 0.0, top_p: float = 1.0, top_k: int = -1,
            seed: int | None = None, dtype_source: str = "--served-dtype") -> Comparison:
    """Run the live comparison (module docstring). ``target``/``draft``/``data``: paths or loaded objects
    (:class:`~workbench.capture.Target`, :class:`~workbench.draft.Eagle3Draft`, a Dataset or row list).

    ``K``: draft steps; default the server's ``speculative_num_steps`` (``/server_info``), else the
    histogram length - 1. Tree or chain, topk and draft tokens come from the server's info. ``trained``:
    the taps the draft was trained on (default: its config's ``workbench.trained_taps``, else what the
    draft's own format engine feeds: :func:`workbench.engines.default_wiring`). ``wirings``: extra specs
    to try. ``engine``: the server's record (``sglang`` current, ``sglang-2026.04`` older): the offline
    side computes what it computes (:func:`workbench.wiring.apply_engine`, the draft changed in place).
    ``tolerance``: the aggregate fallback's accept-length tolerance. ``counting``: "v1", "v2" or "auto"
    (the one more requests agree with). ``served_dtype``: the server's dtype for near-ties (default, or
    "infer": its info's ``dtype``, else inferred from the requests, :mod:`workbench.live.precision`);
    ``dtype_source``: who gave it. Local inputs are checked and loaded before the first request to the server.

    ``temperature``/``top_p``/``top_k`` (-1 = off)/``seed``: the sampling parameters sent with every
    request (explicitly, also at temperature 0; with ``seed``, each row's ``sampling_seed``) and
    recorded in the result's :class:`~workbench.setting.Setting`. At temperature > 0 the offline side
    matches each request's trees against the server's sampled output (``fingerprint.offline_requests``
    with ``sampled=True``): exact for SGLang's default (lossless) verification thresholds.
    """

    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    if not (isinstance(tolerance, (int, float)) and tolerance > 0):
        raise WorkbenchError(f"--tolerance {tolerance!r}: expected a positive accept-length difference, e.g. 0.25")
    if counting not in ("auto",) + fp.COUNTING:
        raise WorkbenchError(f"counting {counting!r}: expected auto, v1 or v2")
    served_dtype = prec.served_dtype(served_dtype)
    target, draft, rows = local_inputs(target, draft, data, limit, device=device, dtype=dtype,     # before the network
                                       trust_remote_code=trust_remote_code, progress=progress)
    client = Client(url, timeout=timeout, retries=retries, backoff=backoff, concurrency=concurrency)
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

    try:
        samples = generate_samples(client, rows, vocab_size=target.vocab_size, progress=progress,
                                   require_spec=not algo, sampling=sampling)
    except WorkbenchError as e:
        if seed is not None and ": HTTP 4" in str(e) and "sampling_seed" in str(e):
            raise WorkbenchError(f"{e} (this server's SamplingParams has no sampling_seed: run without --seed)") from None
        raise
    if any(not s.meta.has_spec for s in samples):
        notes.append(f"{sum(not s.meta.has_spec for s in samples)} replies without speculative fields were left "
                     "out of the live totals")
        if not any(s.meta.has_spec for s in samples) and settings:
            try:                                   # the aggregate fallback: the server's own running average
                settings["avg_spec_accept_length"] = server_settings(client.server_info())["avg_spec_accept_length"]
            except WorkbenchError as e:
                notes.append(f"could not re-read the server info after the requests ({e})")

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

    info_dtype = prec.served_dtype(settings.get("dtype")) if str(settings.get("dtype")).lower().replace(
        "torch.", "") in prec.ALIASES else None
    dt = served_dtype or info_dtype
    src = dtype_source if served_dtype else "the server's info (dtype)"
    return assemble(client.url, target, draft, samples, K=K, server=ServerKind(engine=engine), settings=settings,
                    notes=notes,
                    sampling=sampling, sent=sampling_params(sampling), trained=trained, wirings=wirings, topk=topk,
                    num_draft_tokens=n_draft, served_dtype=dt, dtype_source=src, batch_size=batch_size,
                    progress=progress,
                    tolerance=tolerance, counting=counting)
