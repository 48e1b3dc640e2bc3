"""Wiring diagnosis: which target taps does this draft really want, and what does the engine feed it?

    >>> # from workbench import capture, checkpoint, data
    >>> # from workbench.analysis.diagnose import diagnose
    >>> # target = capture.load_target("data/demo/target")
    >>> # d = checkpoint.load_draft("data/demo/draft-mismatched", target)
    >>> # ds = data.load("data/demo/val.jsonl", tokenizer=target.tokenizer)
    >>> # dx = diagnose(target, d, ds, engine="sglang", K=4)
    >>> # print(dx.verdict)
    >>> # the draft was trained on embed,L1,L3 (α1 0.71); SGLang feeds L1,L3,L4 (α1 0.18): ...

Two stages, each ONE target pass over its samples (``acceptance.simulate`` captures the union of
all taps once per batch and runs the draft once per wiring):

1. screen every candidate (:func:`candidates`) with α1 = P(A >= 1) (step-1 acceptance, chain
   drafting, greedy) on about ``screen_chains`` chains (the first samples of the data);
2. full acceptance curves (K steps) for the best ``top`` candidates, the best one an engine can
   feed, the engine's wiring and the trained wiring, on all samples (``limit``).

The engine's wiring is "clearly worse" when the 95% interval of its accept length (bootstrap over
samples) lies entirely below the interval of the best wiring; that is what ``exit_code`` (and
``workbench diagnose``) turns into 1. Accept length = E[A]+1 (bonus token counted).
"""

from __future__ import annotations

import datetime
import json
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from workbench import engines
from workbench.analysis.rewire import recovered_share
from workbench.core.devices import resolve_device
from workbench.core.errors import WorkbenchError
from workbench.core.files import jsonable, write_json
from workbench.core.render import Rendered
from workbench.core.sampling import apply_sampling
from workbench.core.setting import SCHEMA_VERSION, Setting, resolve_setting
from workbench.engines import wiring as wm
from workbench.engines.candidates import (
    Candidate,
    candidates,
    config_ids,
    engine_label,
    where_ids_go,
    who_can_feed,
)
from workbench.load import inputs
from workbench.load.agreement import warn_once
from workbench.simulate import acceptance
from workbench.stats.counts import wilson

COLUMNS = ["rank", "spec", "reasons", "feasible", "alpha1", "alpha1_low", "alpha1_high", "accept_length",
           "accept_length_low", "accept_length_high", "decode_path_accept_length", "decode_path_low", "decode_path_high",
           "n_chains", "stage", "tied_with_best"]


# ------------------------------------------------------------------------------------------------
# Candidates
# ------------------------------------------------------------------------------------------------

# ------------------------------------------------------------------------------------------------
# The diagnosis
# ------------------------------------------------------------------------------------------------

def _nan(x) -> float:
    return math.nan if x is None else float(x)


def _fmt(x, nd: int = 2) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


@dataclass
class Diagnosis(Rendered):
    """Result of :func:`diagnose`: a ranked table of wirings and a verdict in plain words.

    ``table`` (pandas DataFrame, best first): ``spec``, ``reasons``, ``feasible`` (the engine can
    feed it), ``alpha1`` (+ Wilson 95% bounds), ``accept_length`` (E[A]+1, bonus counted, + bootstrap
    95% bounds; NaN for wirings only screened), ``decode_path_accept_length``, ``n_chains``, ``stage``
    (1 = screened with α1 only, 2 = full curve). ``results``: spec → AcceptanceResult (stage 2);
    ``screen``: spec → AcceptanceResult of stage 1 (K=1).
    """

    engine: str
    steps: int
    table: object
    results: dict
    screen: dict
    best: str
    best_feasible: str | None
    engine_wiring: str | None
    engine_explanation: str
    engine_warnings: list[str]
    trained_wiring: str | None
    engine_ok: bool
    verdict: str
    n_screen_samples: int = 0
    n_samples: int = 0
    candidates: list = field(default_factory=list, repr=False)
    setting: Setting | None = None      # chain K=steps, greedy, the engine judged (default)
    target_config: object = field(default=None, repr=False)   # the target's config or N (ids of a fix)
    engine_feasible: bool = True        # the engine can serve this draft as configured
    fix: str = ""                       # the verdict's suggestion: none | ids | rewire | retrain | undecided | engine
    rewire: dict | None = None          # a measured rewire the verdict cites (rewire_info), None if none
    paths: dict = field(default_factory=dict)   # target/draft/data paths (the suggested rewire command names them)

    def __post_init__(self):
        if self.setting is None:
            self.setting = Setting(steps=int(self.steps), engine=self.engine)

    def advise(self, rewired=None) -> str:
        """(Re)write :attr:`verdict` and :attr:`fix`, citing a measured rewire (``rewired``: a RewireResult, its
        JSON dict, or :func:`rewire_info`'s dict) when it is the rewire of the trained taps to the engine's;
        returns the verdict. The cheapest sufficient fix first (issue 22): ids that make the engine feed the
        trained taps; else ``workbench rewire``; else retrain on the engine's taps. A wiring is suggested
        only when its 95% interval lies entirely above the engine's; otherwise the verdict says "undecided"
        and about how many samples would decide."""
        if rewired is not None and not (isinstance(rewired, dict) and "source" in rewired):
            rewired = rewire_info(rewired, "in this session")
        if rewired is not None and (rewired["from"] != self.trained_wiring or rewired["to"] != self.engine_wiring):
            rewired = None
        self.rewire = rewired
        self.fix, self.verdict = _advice(self)
        return self.verdict

    def narrative(self) -> str:
        """The verdict as markdown for a notebook (notebook 03 shows it): what the engine feeds, the ranking's
        top (ties named), and the cheapest sufficient fix, all from this result.

            >>> # from IPython.display import Markdown; Markdown(dx.narrative())
        """
        st = self.stats()
        E = engine_label(self.engine)
        iv = lambda s: (f"{_fmt(st[s]['decode_path_accept_length'])} [95% {_fmt(st[s]['decode_path_low'])}–"  # noqa: E731
                        f"{_fmt(st[s]['decode_path_high'])}]")
        tied = [s for s in st if self.row(s).get("tied_with_best")]
        lines = [f"**Verdict ({self.setting.accept_label('decode-path')}; wirings ranked by every position).** "
                 f"{_md(self.verdict)}", ""]
        if len(tied) > 1:
            lines.append(f"- Tied for best (the ranking's every-position 95% intervals overlap the leader's): "
                         + ", ".join(f"`{s}` {iv(s)}" for s in tied) + ". The ranking lists "
                         + ("the trained wiring first among them." if self.trained_wiring in tied else
                            "them by accept length."))
        else:
            lines.append(f"- Best wiring: `{self.best}` {iv(self.best)}, clearly ahead of the others.")
        if self.trained_wiring is not None and self.trained_wiring in st:
            lines.append(f"- Trained on `{self.trained_wiring}`: {iv(self.trained_wiring)}.")
        if self.engine_wiring is not None and self.engine_wiring in st:
            lines.append(f"- {E} feeds `{self.engine_wiring}` ({self.engine_explanation}): "
                         f"{iv(self.engine_wiring)}.")
        else:
            lines.append(f"- {E} cannot serve this draft as configured: {self.engine_explanation}.")
        lines.append(f"- Suggested fix: **{FIX_NAMES[self.fix]}**.")
        if self.rewire is not None:
            rw = self.rewire
            lines.append(f"- Rewire measured ({_when(rw)}): before {_fmt(rw['before'])}, "
                         f"after {_fmt(rw['after'])}, reference {_fmt(rw['reference'])}: "
                         f"{_pct(rw['recovered'])} of the gap recovered.")
        return "\n".join(lines)

    def stats(self) -> dict:
        """spec → table row (dict) of the wirings with full curves (stage 2)."""
        t = self.table
        return {r["spec"]: r for r in t[t["stage"] == 2].to_dict("records")}

    @property
    def agreement(self):
        """The data's greedy agreement with the target (from stage 2's target pass, the same for every
        wiring), or None."""
        return next(iter(self.results.values())).agreement if self.results else None

    @property
    def exit_code(self) -> int:
        """0 when the engine's wiring is (within the 95% intervals) the best, else 1 (a CI gate)."""
        return 0 if self.engine_ok else 1

    def row(self, spec: str) -> dict:
        """The table row of one wiring as a dict."""
        t = self.table
        hit = t[t["spec"] == spec]
        if not len(hit):
            raise WorkbenchError(f"wiring {spec!r} is not in the diagnosis (candidates: {', '.join(t['spec'])})")
        return hit.iloc[0].to_dict()

    def to_frame(self):
        """The ranked table (a copy)."""
        return self.table.copy()

    def to_json(self, path=None) -> dict:
        """JSON-ready dict (written atomically when ``path``): engine, steps, verdict, exit_code,
        best / best_feasible / engine_wiring / trained_wiring, ``table`` (rows), ``results``
        (spec → ``AcceptanceResult.to_json()`` for the fully evaluated wirings)."""
        rows = []
        for r in self.table.to_dict("records"):
            r = dict(r)
            r["reasons"] = list(r["reasons"])
            rows.append(r)
        out = {"schema_version": SCHEMA_VERSION, "engine": self.engine, "steps": self.steps,
               "setting": self.setting.to_dict(),
               "convention": "chain drafting (topk 1), greedy; accept_length = E[A]+1 (bonus counted)",
               "verdict": self.verdict, "fix": self.fix, "rewire": self.rewire,
               "accept_length_label": self.setting.accept_label("every-position"),
               "decode_path_accept_length_label": self.setting.accept_label("decode-path"),
               "exit_code": self.exit_code, "engine_ok": self.engine_ok,
               "best": self.best, "best_feasible": self.best_feasible, "engine_wiring": self.engine_wiring,
               "engine_explanation": self.engine_explanation, "engine_warnings": list(self.engine_warnings),
               "trained_wiring": self.trained_wiring, "n_screen_samples": self.n_screen_samples,
               "n_samples": self.n_samples, "table": rows,
               "agreement": None if self.agreement is None else self.agreement.to_dict(self.setting),
               "results": {k: v.to_json() for k, v in self.results.items()}}
        out = jsonable(out)
        if path is not None:
            write_json(path, out, indent=2)
        return out

    def summary(self, max_rows: int = 12, width: int = 100, data: bool = True) -> str:
        """The ranked table as text (each row's reasons on indented lines below it, wrapped at ``width``:
        the table itself never wraps), a key to the columns, then the verdict; ``data``: with the data's greedy
        agreement line (a page that shows it in its own section passes False)."""
        t = self.table.head(max_rows)
        w = max([len("wiring")] + [len(s) for s in t["spec"]])
        E = engine_label(self.engine)
        lines = [f"wiring diagnosis for {E}: screened on {self.n_screen_samples} samples, "
                 f"full curves on {self.n_samples}",
                 f"setting: {self.setting.describe()}",
                 f"{'#':>3} {'wiring'.ljust(w)}  {'α1':>5}  {'path':>5}  {'95% interval':>12}  "
                 f"{'every':>5}  {'95% interval':>12}  {'chains':>6}  {'feeds':>5}"]
        wrap = lambda text: textwrap.wrap(text, width=width, initial_indent=" " * 6,  # noqa: E731
                                          subsequent_indent=" " * 8, break_on_hyphens=False)
        for r in t.to_dict("records"):
            iv = lambda lo, hi: "" if math.isnan(r[lo]) else f"{_fmt(r[lo])}–{_fmt(r[hi])}"  # noqa: E731
            mark = ("*" if r["spec"] == self.engine_wiring else " ") + ("=" if r.get("tied_with_best") else " ")
            lines.append(f"{r['rank']:>2}{mark}{r['spec'].ljust(w)}  {_fmt(r['alpha1']):>5}  "
                         f"{_fmt(r['decode_path_accept_length']):>5}  {iv('decode_path_low', 'decode_path_high'):>12}  "
                         f"{_fmt(r['accept_length']):>5}  {iv('accept_length_low', 'accept_length_high'):>12}  "
                         f"{r['n_chains']:>6}  {'yes' if r['feasible'] else 'NO':>5}")
            for reason in r["reasons"]:
                lines += wrap("· " + reason)
        if len(self.table) > max_rows:
            lines.append(f"    ... {len(self.table) - max_rows} more wirings, lower in the ranking (not shown)")
        key = (f"key: * = what {E} feeds ({self.engine_explanation}); path = "
               f"{self.setting.accept_label('decode-path')}, what a server reports, with its 95% interval; every = "
               f"the same at every position (teacher-forced), which ranks the wirings; = = tied for best (its "
               f"every-position 95% interval overlaps the leader's; the trained wiring first); α1 = P(A≥1), step-1 "
               f"acceptance; chains = counted chains; feeds = {E} can feed this wiring; a row's reasons below it")
        lines += textwrap.wrap(key, width=width, subsequent_indent="  ", break_on_hyphens=False)
        lines.append(f"verdict: {self.verdict}")          # one line: scripts grep it
        if self.agreement is not None and data:      # the data's greedy agreement, under the setting line
            lines.insert(2, self.agreement.headline(self.setting))
        return "\n".join(lines)


def _rows_for_screen(dataset, limit, screen_chains: int) -> list[dict]:
    """The first samples of the data holding about ``screen_chains`` step-1 chains."""
    rows, chains = [], 0
    for row in inputs.rows(dataset, limit):
        if chains >= screen_chains:
            break
        rows.append(row)
        lm = row.get("loss_mask") if isinstance(row, dict) else None
        chains += sum(1 for v in lm[2:] if v) if lm else max(0, len(row.get("input_ids", [])) - 2)
    if not rows:
        raise WorkbenchError("diagnose: the dataset has no rows")
    return rows


def _stats(res, stage: int) -> dict:
    al = res.at_least
    lo, hi = wilson(int(al[1]), int(al[0])) if len(al) > 1 else (math.nan, math.nan)
    out = {"alpha1": _nan(res.cumulative[0]) if res.n_chains else math.nan, "alpha1_low": lo, "alpha1_high": hi,
           "n_chains": res.n_chains, "stage": stage, "accept_length": math.nan, "accept_length_low": math.nan,
           "accept_length_high": math.nan, "decode_path_accept_length": math.nan, "decode_path_low": math.nan,
           "decode_path_high": math.nan}
    if stage == 2:
        iv = res.intervals()
        out.update(accept_length=_nan(res.accept_length), accept_length_low=_nan(iv["accept_length"][0]),
                   accept_length_high=_nan(iv["accept_length"][1]),
                   decode_path_accept_length=_nan(res.decode_path["accept_length"]),
                   decode_path_low=_nan(iv["decode_path_accept_length"][0]),
                   decode_path_high=_nan(iv["decode_path_accept_length"][1]))
    return out


def diagnose(target, draft, dataset, *, engine: str = "sglang", K: int = 4, screen_chains: int = 300,
             top: int = 4, limit: int | None = None, progress: bool = True,
             batch_size: int = 8, ctx=None, shard_dir=None, cost_ratio: float | None = None,
             eagle_topk: int | None = None, num_draft_tokens: int | None = None,
             sampling=None, rewired=None) -> Diagnosis | None:
    """Rank candidate wirings of ``draft`` on ``target`` over ``dataset`` and say what ``engine`` does.

        >>> # dx = diagnose(target, draft, ds, engine="sglang", K=4, limit=200)
        >>> # dx.table[["spec", "alpha1", "accept_length"]].head(), dx.verdict, dx.exit_code

    Stage 1 screens every :func:`candidates` wiring by α1 on the first samples holding about
    ``screen_chains`` chains; stage 2 runs K-step curves for the best ``top``, the best feasible
    one, the engine's wiring and the trained wiring on all samples (``limit``). Each stage is ONE
    target forward per sample, however many wirings (``acceptance.simulate``).

    Under torchrun pass ``ctx`` (:func:`workbench.distributed.init`): each stage's samples are
    sharded over the ranks and merged exactly (every rank gets the stage-1 screen, so all pick the
    same stage-2 wirings); rank 0 returns the Diagnosis, the other ranks None. ``shard_dir`` keeps
    each rank's results (``screen.rank-R-of-W.npz``, ``curves.rank-R-of-W.npz``) for resuming.
    ``cost_ratio``: a fixed draft-step/target-forward cost ratio for the results' speed-up projection
    instead of the measured one (reproducible output). ``eagle_topk``/``num_draft_tokens``: stage 2's
    curves under SGLang's draft tree (steps ``K``); the α1 screen stays a one-step chain. ``sampling``
    (a :class:`workbench.sampling.Sampling` or its fields): both stages at that temperature/top-p/top-k
    (the drafts matched against the data's tokens: ``workbench.simulate.sampled``).
    ``rewired``: a measured rewire of the draft (RewireResult or its JSON) the verdict may cite
    (:meth:`Diagnosis.advise`).
    """

    import pandas as pd

    engine = engines.get(engine).name
    if not isinstance(K, int) or isinstance(K, bool) or K < 1:
        raise WorkbenchError(f"steps K={K!r}: expected an integer >= 1")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise WorkbenchError(f"limit={limit!r}: expected a positive number of samples (or None for all)")
    if int(top) < 1 or int(screen_chains) < 1:
        raise WorkbenchError(f"top={top}, screen_chains={screen_chains}: expected both >= 1")
    if cost_ratio is not None and not (isinstance(cost_ratio, (int, float)) and cost_ratio >= 0):
        raise WorkbenchError(f"cost_ratio={cost_ratio!r}: expected a number >= 0 (draft step / target forward)")
    setting = apply_sampling(resolve_setting(K, eagle_topk=eagle_topk, num_draft_tokens=num_draft_tokens)
                             .replace(engine=engine), sampling)
    n = target.n_layers
    H = int(target.hidden_size)
    width = draft.fc_width
    if H < 1 or width % H:
        raise WorkbenchError(f"the draft's fc reads {width} features, not a multiple of the target hidden size {H}: "
                             f"draft and target do not match")
    n_slots = width // H
    cfg = draft.raw_config

    cands = candidates(target.config, draft, engine=engine, n_slots=n_slots)
    if not cands:
        raise WorkbenchError(f"no candidate wiring of {n_slots} taps for a target with N={n} layers")
    eng = wm.resolve(engine, target.config, cfg)
    eng_spec = eng.spec if len(eng.taps) == n_slots and len(set(eng.taps)) == n_slots else None
    tw = wm.trained_wiring_from_config(cfg, n) if cfg is not None else None
    trained = tw.spec if tw is not None and len(tw.taps) == n_slots else None
    by_spec = {c.spec: c for c in cands}

    # stage 1: α1 of every candidate, one pass over the screening samples
    screen_rows = _rows_for_screen(dataset, limit, int(screen_chains))
    progress = bool(progress) and (ctx is None or ctx.is_main)
    screen = acceptance.simulate(target, draft, screen_rows, [c.wiring for c in cands], batch_size=batch_size,
                                 progress=progress, acc_topk=0, ctx=ctx, out_dir=shard_dir, name="screen",
                                 everywhere=True, setting=apply_sampling(Setting(steps=1, engine=setting.engine),
                                                                         sampling), engine=engine)
    s1 = {spec: _stats(r, 1) for spec, r in screen.items()}
    order = sorted(range(len(cands)), key=lambda i: (-_key(s1[cands[i].spec]["alpha1"]), i))
    ranked1 = [cands[i].spec for i in order]

    # stage 2: full curves for the best few + best feasible + engine + trained, one pass over all samples
    chosen = ranked1[:int(top)]
    feas = [s for s in ranked1 if by_spec[s].feasible]
    for s in (feas[:1] + [eng_spec, trained]):
        if s is not None and s not in chosen:
            chosen.append(s)
    results = acceptance.simulate(target, draft, dataset, [by_spec[s].wiring for s in chosen], limit=limit,
                                  batch_size=batch_size, progress=progress, ctx=ctx, out_dir=shard_dir,
                                  name="curves", setting=setting, engine=engine)
    if results is None:                      # not rank 0: rank 0 reports for everyone
        return None
    if cost_ratio is not None:
        for r in list(results.values()) + list(screen.values()):
            r.cost_ratio, r.cost_model = float(cost_ratio), None
    s2 = {spec: _stats(r, 2) for spec, r in results.items()}
    n_samples = next(iter(results.values())).n_samples

    ranked2 = rank_tied(chosen, s2, trained=trained, engine_wiring=eng_spec)
    final = ranked2 + [s for s in ranked1 if s not in s2]
    lead = ranked2[0]
    recs = []
    for rank, spec in enumerate(final, 1):
        c = by_spec[spec]
        st = s2.get(spec, s1[spec])
        recs.append({"rank": rank, "spec": spec, "reasons": list(c.reasons)
                     + ([c.why_not] if not c.feasible else []), "feasible": c.feasible, **st,
                     "tied_with_best": spec in s2 and not clearly_better(s2, lead, spec)})
    table = pd.DataFrame(recs, columns=COLUMNS)

    best = ranked2[0]
    best_feasible = next((s for s in ranked2 if by_spec[s].feasible), None)
    engine_ok = eng_spec is not None and eng.feasible and not any(clearly_better(s2, x, eng_spec) for x in s2)
    warn_once(results[best].agreement, setting)     # once per run, in plain words (workbench.load.agreement)
    dx = Diagnosis(engine=engine, steps=K, table=table, results=results, screen=screen, best=best,
                   best_feasible=best_feasible, engine_wiring=eng_spec, engine_explanation=eng.explanation,
                   engine_warnings=list(eng.warnings), trained_wiring=trained, engine_ok=engine_ok,
                   verdict="", n_screen_samples=len(screen_rows), n_samples=n_samples, candidates=cands,
                   setting=setting, target_config=target.config, engine_feasible=bool(eng.feasible))
    dx.advise(rewired)
    return dx


def _key(x) -> float:
    return -1.0 if x is None or math.isnan(x) else float(x)


def clearly_better(stats: dict, a: str, b: str) -> bool:
    """Wiring ``a``'s 95% accept-length interval lies entirely above ``b``'s (``stats``: spec → table row).

        >>> st = {"x": {"accept_length_low": 2.5, "accept_length_high": 2.9},
        ...       "y": {"accept_length_low": 2.0, "accept_length_high": 2.6}}
        >>> clearly_better(st, "x", "y"), clearly_better(st, "y", "x")
        (False, False)
        >>> st["y"]["accept_length_high"] = 2.4; clearly_better(st, "x", "y")
        True
    """
    if a == b or a not in stats or b not in stats:
        return False
    lo, hi = stats[a]["accept_length_low"], stats[b]["accept_length_high"]
    return not (math.isnan(_nan(lo)) or math.isnan(_nan(hi))) and lo > hi


def rank_tied(specs, stats: dict, *, trained: str | None = None, engine_wiring: str | None = None) -> list[str]:
    """Stage-2 wirings best first: those NOT clearly worse than the leader (the highest accept length) are tied
    for best and come first, the trained wiring then the engine's before the others; the rest by accept length.

        >>> st = {"a": {"accept_length": 3.0, "accept_length_low": 2.6, "accept_length_high": 3.4, "alpha1": 0.9},
        ...       "t": {"accept_length": 2.9, "accept_length_low": 2.5, "accept_length_high": 3.3, "alpha1": 0.9},
        ...       "e": {"accept_length": 1.5, "accept_length_low": 1.3, "accept_length_high": 1.7, "alpha1": 0.4}}
        >>> rank_tied(["a", "t", "e"], st, trained="t", engine_wiring="e")
        ['t', 'a', 'e']
        >>> rank_tied(["a", "t", "e"], st, trained="t", engine_wiring="t")    # trained = engine's: one row
        ['t', 'a', 'e']

    Every wiring appears once (the trained wiring may also be the engine's, and ``specs`` may repeat one).
    """
    specs = list(dict.fromkeys(specs))
    by_value = sorted(specs, key=lambda s: (-_key(stats[s]["accept_length"]), -_key(stats[s]["alpha1"]),
                                            specs.index(s)))
    lead = by_value[0]
    tied = [s for s in by_value if not clearly_better(stats, lead, s)]
    first = [s for s in dict.fromkeys((trained, engine_wiring)) if s in tied]
    tied = first + [s for s in tied if s not in first]
    return tied + [s for s in by_value if s not in tied]


def _fix(engine: str, spec: str, target) -> str:
    ids = config_ids(engine, tuple(spec.split(",")), target)
    return f"set {where_ids_go(engine)} to {ids}" if ids is not None else ""


RECOVERY_ENOUGH = 0.8     # a rewire that closes at least this share of the gap is a sufficient fix


def rewire_info(result, source: str) -> dict:
    """What :meth:`Diagnosis.advise` needs from a rewire (a :class:`workbench.rewire.RewireResult` or its JSON).

        >>> rewire_info({"from_taps": ["embed", "L1", "L3"], "to_taps": ["L1", "L3", "L4"], "engine": "sglang",
        ...              "recovered": 0.998, "acceptance": {"before": {"accept_length": 1.5},
        ...              "after": {"accept_length": 2.99}, "reference": {"accept_length": 2.993}}}, "x.json")["after"]
        2.99
    """
    d = result if isinstance(result, dict) else result.to_dict()
    try:
        acc = d.get("acceptance") or {}
        # the decode path (what a server reports) where the file has it, its share recomputed from those numbers;
        # an older file's every-position numbers and share as written
        dp = [(acc.get(k) or {}).get("decode_path_accept_length") for k in ("before", "after", "reference")]
        before, after, reference = dp if None not in dp else \
            [(acc.get(k) or {}).get("accept_length") for k in ("before", "after", "reference")]
        recovered = d.get("recovered")
        if None not in dp:
            share = recovered_share(*dp)
            recovered = None if math.isnan(share) else share
        return {"from": ",".join(d["from_taps"]), "to": ",".join(d["to_taps"]), "engine": d.get("engine"),
                "recovered": recovered, "before": before, "after": after,
                "reference": reference, "K": d.get("K"), "source": str(source)}
    except (KeyError, TypeError) as e:
        raise WorkbenchError(f"rewire result {source}: expected keys from_taps, to_taps, recovered, acceptance "
                             f"({type(e).__name__}: {e})") from None


def find_rewire(draft_path, from_spec: str | None, to_spec: str | None) -> dict | None:
    """A measured rewire of this draft from ``from_spec`` to ``to_spec``: the newest ``*rewire*.json`` (what
    ``workbench rewire --json`` writes) in the draft's folder or beside it whose taps match; None when there is none.

        >>> find_rewire("/nonexistent/draft", "embed,L1,L3", "L1,L3,L4") is None
        True
    """
    if draft_path is None or from_spec is None or to_spec is None or not inputs.is_path(draft_path):
        return None
    d = Path(draft_path)
    found = []
    for folder in (d, d.parent):
        for f in sorted(folder.glob("*rewire*.json")) if folder.is_dir() else []:
            try:
                info = rewire_info(json.loads(f.read_text()), f)
            except (OSError, ValueError, WorkbenchError, AttributeError):
                continue
            if info["from"] == from_spec and info["to"] == to_spec and info["recovered"] is not None:
                when = datetime.datetime.fromtimestamp(f.stat().st_mtime, datetime.timezone.utc)
                info["when"] = when.strftime("%Y-%m-%d %H:%M UTC")
                found.append((f.stat().st_mtime, info))
    return max(found, key=lambda x: x[0])[1] if found else None


def rewire_command(paths: dict, engine: str) -> str:
    """The ``workbench rewire`` command line that measures the rewire :func:`find_rewire` then finds.

        >>> rewire_command({"target": "d/target", "draft": "d/draft-x", "data": "d/val.jsonl"}, "sglang")
        'workbench rewire --target d/target --draft d/draft-x --data <training data> --eval-data d/val.jsonl --engine sglang --out d/draft-x-rewired-sglang --json d/draft-x-rewired-sglang.rewire.json'

    The folder names the engine: the SGLang fix and the vLLM fix of one draft never overwrite each other.
    """
    draft = str(paths.get("draft") or "<draft>")
    train = Path(draft).parent / "train.jsonl"
    data = str(train) if paths.get("draft") and train.is_file() else "<training data>"
    out = draft.rstrip("/") + f"-rewired-{engine}"
    return (f"workbench rewire --target {paths.get('target') or '<target>'} --draft {draft} --data {data} "
            f"--eval-data {paths.get('data') or '<held-out data>'} --engine {engine} --out {out} "
            f"--json {out}.rewire.json")


def samples_to_decide(stats: dict, a: str, b: str, n: int) -> int | None:
    """About how many samples in all would separate the 95% intervals of ``a`` and ``b`` (the facing half-widths
    shrink as 1/√n; always more than ``n``); None when their accept lengths are equal (no number of samples tells
    them apart).

        >>> st = {"a": {"accept_length": 3.0, "accept_length_low": 2.6, "accept_length_high": 3.4},
        ...       "b": {"accept_length": 2.8, "accept_length_low": 2.4, "accept_length_high": 3.2}}
        >>> samples_to_decide(st, "a", "b", 100)
        1600
    """
    x, y = stats[a], stats[b]
    if x["accept_length"] < y["accept_length"]:
        x, y = y, x
    gap = x["accept_length"] - y["accept_length"]
    facing = (x["accept_length"] - x["accept_length_low"]) + (y["accept_length_high"] - y["accept_length"])
    if not gap > 0 or math.isnan(facing):
        return None
    return max(int(math.ceil(n * (facing / gap) ** 2)), int(n) + 1)


FIX_NAMES = {"none": "none needed: the engine feeds a wiring as good as the best found",
             "ids": "change the draft config's layer ids", "rewire": "`workbench rewire` (refit fc for the served taps)",
             "retrain": "retrain the draft on the taps the engine feeds",
             "undecided": "undecided: the data cannot tell the wirings apart yet (more samples would decide)",
             "engine": "change the draft config so the engine can serve it"}


def _pct(x) -> str:
    """One rounding for every share the workbench prints (verdicts, rewire summaries, chart titles)."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def _when(rw: dict) -> str:
    return ", ".join(x for x in (rw.get("when"), rw.get("source")) if x)


def _md(text: str) -> str:
    """Markdown-escape ``*`` and ``_`` outside `code spans`."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("*", "\\*").replace("_", "\\_") for i, p in enumerate(parts))


DP = "decode path"      # the estimator every accept length in a verdict is quoted on (Setting.accept_label)


def _advice(dx) -> tuple[str, str]:
    """(fix kind, verdict) of a Diagnosis (see :meth:`Diagnosis.advise`)."""
    st, E, e, t, target = dx.stats(), engine_label(dx.engine), dx.engine_wiring, dx.trained_wiring, dx.target_config
    by = {c.spec: c for c in dx.candidates}
    # every accept length quoted is the decode path's (what a server reports), with its own interval; "tied" and
    # "clearly worse" are the ranking's decisions, on the every-position intervals, and say so
    a = lambda s: _fmt(st[s]["alpha1"])                                                          # noqa: E731
    al = lambda s: _fmt(st[s]["decode_path_accept_length"])                                      # noqa: E731
    iv = lambda s: f"{_fmt(st[s]['decode_path_low'])}–{_fmt(st[s]['decode_path_high'])}"        # noqa: E731
    feedable = lambda s: s in by and by[s].feasible and bool(_fix(dx.engine, s, target))          # noqa: E731
    if e is None or not dx.engine_feasible or e not in st:
        why = "; ".join(dx.engine_warnings) or dx.engine_explanation
        text = f"{E} cannot serve this draft as configured ({dx.engine_explanation}): {why}"
        for s, what in ((t, "the trained taps"), (dx.best_feasible, "the best wiring it can feed")):
            if s is not None and s in st and feedable(s):
                return "engine", (f"{text}; cheapest fix: {_fix(dx.engine, s, target)} so that {E} feeds {what} {s} "
                                  f"(accept length {al(s)}, 95% {iv(s)})")
        return "retrain", f"{text}; no candidate wiring is one {E} can feed: retrain on taps it can feed"
    better = [x for x in st if clearly_better(st, x, e)]
    if not better:
        lead = dx.best
        if lead == e:
            return "none", (f"{E} feeds {e}, the best wiring found (α1 {a(e)}): expect accept length {al(e)} "
                            f"(95% {iv(e)}; {DP})")
        text = (f"{E} feeds {e} (α1 {a(e)}), tied with the best wiring found {lead} (α1 {a(lead)}) within the "
                f"ranking's 95% intervals (every position): expect accept length {al(e)} (95% {iv(e)}; {DP})")
        if st[lead]["accept_length"] > st[e]["accept_length"]:
            need = samples_to_decide(st, lead, e, dx.n_samples)
            text += (f"; no change suggested: undecided whether {lead} ({al(lead)}, 95% {iv(lead)}) is better"
                     + (f"; about {need} samples (now {dx.n_samples}) would decide" if need else "")
                     + (f" (if it is: {_fix(dx.engine, lead, target)} so that {E} feeds it)" if feedable(lead) else ""))
            return "undecided", text
        return "none", text
    ref = t if t in better else max(better, key=lambda x: st[x]["accept_length"])
    head = f"the draft was trained on {ref}" if ref == t else f"the best wiring found is {ref}"
    text = (f"{head} (α1 {a(ref)}); {E} feeds {e} (α1 {a(e)}): expect accept length {al(e)} instead of {al(ref)} "
            f"(95% {iv(e)} vs {iv(ref)}; {DP}; clearly worse by the ranking's every-position intervals)")
    # (a) ids that make the engine feed the trained (or best) taps
    if feedable(ref):
        return "ids", f"{text}; cheapest fix: {_fix(dx.engine, ref, target)} so that {E} feeds {ref}"
    why = (by[ref].why_not if ref in by else "") or f"{E} cannot feed {ref}"
    text = f"{text}; {why}"
    alts = sorted((x for x in better if x != ref and feedable(x)), key=lambda x: -st[x]["accept_length"])
    if alts and not clearly_better(st, ref, alts[0]):
        f = alts[0]
        return "ids", (f"{text}; cheapest fix: {_fix(dx.engine, f, target)} so that {E} feeds {f} (accept length "
                       f"{al(f)}, 95% {iv(f)}: as good as {ref} within the ranking's intervals)")
    partial = (f" (a partial fix: {_fix(dx.engine, alts[0], target)} so that {E} feeds {alts[0]}: accept length "
               f"{al(alts[0])}, 95% {iv(alts[0])})" if alts else "")
    if not alts:      # a feedable wiring as good as the reference but not clearly better than the engine's: say so
        maybe = sorted((x for x in st if x not in (e, ref) and feedable(x) and not clearly_better(st, ref, x)
                        and st[x]["accept_length"] > st[e]["accept_length"]), key=lambda x: -st[x]["accept_length"])
        if maybe:
            need = samples_to_decide(st, maybe[0], e, dx.n_samples)
            partial = (f" (undecided: {_fix(dx.engine, maybe[0], target)} so that {E} feeds {maybe[0]} (accept length "
                       f"{al(maybe[0])}, 95% {iv(maybe[0])}) may do as well, but its ranking interval overlaps {e}'s"
                       + (f"; about {need} samples (now {dx.n_samples}) would decide" if need else "") + ")")
    others = who_can_feed(tuple(ref.split(",")), target, exclude=(dx.engine,))
    aside = f"; or serve it with another engine ({'; '.join(others)})" if others else ""
    # (b) workbench rewire: the trained taps A → the served taps B
    if ref == t:
        rw = dx.rewire
        if rw is not None and rw["recovered"] is not None and rw["recovered"] >= RECOVERY_ENOUGH:
            return "rewire", (f"{text}; cheapest fix: `workbench rewire` {t} → {e} recovered {_pct(rw['recovered'])} "
                              f"of the gap (accept length {_fmt(rw['before'])} → {_fmt(rw['after'])}, reference "
                              f"{_fmt(rw['reference'])}; measured {_when(rw)}"
                              + f"): serve the rewired draft{partial}{aside}")
        if rw is not None and rw["recovered"] is not None:
            return "retrain", (f"{text}; `workbench rewire` {t} → {e} recovered only {_pct(rw['recovered'])} of the "
                               f"gap (measured {_when(rw)}): retrain on {e}{partial}{aside}")
        return "rewire", (f"{text}; cheapest fix to try: `{rewire_command(dx.paths, dx.engine)}` (refits fc for "
                          f"{e}; not measured yet: it measures the recovery, and if it recovers under "
                          f"{RECOVERY_ENOUGH:.0%} of the gap, retrain on {e}){partial}{aside}")
    # (c) retrain on the engine's taps
    return "retrain", f"{text}: retrain on {e}{partial}{aside}"


def diagnose_files(target_path, draft_path, data_path, *, engine: str = "sglang", K: int = 4, limit=None,
                   device: str | None = "cpu", dtype=None, batch_size: int = 8, screen_chains: int = 300,
                   top: int = 4, trust_remote_code: bool = False,
                   progress: bool = True, ctx=None, shard_dir=None, device_map=None,
                   cost_ratio: float | None = None, eagle_topk: int | None = None,
                   num_draft_tokens: int | None = None, sampling=None) -> Diagnosis | None:
    """Everything behind ``workbench diagnose``: load target, draft and data, then :func:`diagnose`.

        >>> # dx = diagnose_files("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl")

    With ``ctx`` (torchrun) the target goes to ``ctx.device`` (``device`` is ignored) and only rank 0
    gets the Diagnosis (None elsewhere); ``device_map`` (e.g. "auto") spreads a large target over the
    visible GPUs, the draft then sits on the device of the target's embedding.
    """
    device = ctx.device if ctx is not None else resolve_device(device)
    target, d, ds = inputs.load(target_path, draft_path, data_path, device=device, dtype=dtype, device_map=device_map,
                                trust_remote_code=trust_remote_code, progress=progress and (ctx is None or ctx.is_main))
    dx = diagnose(target, d, ds, engine=engine, K=K, screen_chains=screen_chains, top=top, limit=limit,
                  progress=progress, batch_size=batch_size, ctx=ctx,
                  shard_dir=shard_dir, cost_ratio=cost_ratio, eagle_topk=eagle_topk,
                  num_draft_tokens=num_draft_tokens, sampling=sampling)
    if dx is not None and inputs.is_path(draft_path):
        dx.paths = {k: str(v) for k, v in (("target", target_path), ("draft", draft_path), ("data", data_path))
                    if inputs.is_path(v)}
        dx.advise(find_rewire(draft_path, dx.trained_wiring, dx.engine_wiring))
    return dx


__all__ = ["Candidate", "Diagnosis", "SERVING", "candidates", "cannot_feed", "clearly_better", "config_ids", "diagnose",
           "diagnose_files", "engine_label", "find_rewire", "rank_tied", "rewire_command", "rewire_info",
           "samples_to_decide",
           "where_ids_go", "who_can_feed"]
