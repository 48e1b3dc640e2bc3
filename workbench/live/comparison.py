"""Live versus offline, engine-neutral: the requests a server answered, decoded offline per candidate wiring.

    >>> # cmp = sglang_live.compare(url, target, draft, data)      # a client builds the Comparison
    >>> # cmp.verdict_code, cmp.matched, print(cmp.summary())

:class:`LiveSample` is one request and its reply (the client's per-request fields in ``meta``);
:func:`offline_results` decodes each request as a server on each candidate wiring would
(:mod:`workbench.live.fingerprint`); :class:`Comparison` compares request by request (fingerprints, exact
sign test against the runner-up, near-ties, the open last step) or, without per-request fields, in
aggregate, and says "undecided" with what would decide. Engine clients (``sglang_live``) build it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.core.files import jsonable, write_json
from workbench.core.render import Rendered
from workbench.core.setting import SCHEMA_VERSION, Setting
from workbench.engines.candidates import Candidate
from workbench.live import fingerprint as fp
from workbench.stats.statistics import AcceptanceResult

VERDICTS = ("match-trained", "match-other", "undecided", "below-all", "no-match")



ALPHA = 0.05                 # the sign test's level for "separated"



@dataclass
class LiveSample:
    """One sample as the server answered it."""

    row: int
    where: str
    source: str
    prompt_ids: list[int]
    output_ids: list[int]
    max_new_tokens: int
    meta: object                          # the client's per-request fields (sglang_live.SpecMeta, ...)
    seconds: float

    def as_row(self) -> dict:
        """The offline row: prompt + the server's output, loss_mask 1 on the output."""
        ids = list(self.prompt_ids) + list(self.output_ids)
        return {"input_ids": ids, "loss_mask": [0] * len(self.prompt_ids) + [1] * len(self.output_ids),
                "seq_len": len(ids), "n_prompt_tokens": len(self.prompt_ids),
                "n_response_tokens": len(self.output_ids), "source": self.source, "_row": self.row,
                "_where": self.where}



def prompt_of(row: dict, i: int) -> tuple[list[int], int, str]:
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

    out = {}
    for spec, per in requests.items():
        sample = [s.row for s, st in zip(samples, per) for _ in st.accepts]
        acc = [a for st in per for a in st.accepts]
        src = [s.source for s, st in zip(samples, per) for _ in st.accepts]
        out[spec] = AcceptanceResult.from_arrays(spec, K, sample=sample, t=list(range(len(acc))), accepted=acc,
                                                 source=src, on_path=[True] * len(acc), setting=setting)
    return out



def with_counting(cmp: Comparison, counting: str) -> Comparison:
    from dataclasses import replace

    return replace(cmp, counting=counting)
