"""Wiring diagnosis: which target taps does this draft really want, and what does the engine feed it?

    >>> # from workbench import capture, checkpoint, data
    >>> # from workbench.diagnose import diagnose
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

import math
from dataclasses import dataclass, field

from workbench import acceptance, engines, inputs
from workbench.agreement import warn_once
from workbench import wiring as wm
from workbench.devices import resolve_device
from workbench.errors import WorkbenchError
from workbench.files import jsonable, write_json
from workbench.render import Rendered
from workbench.setting import SCHEMA_VERSION, Setting, resolve_setting
from workbench.statistics import wilson

ENGINE_NAMES = {e.name: e.label.split(" (")[0].split(",")[0] for e in engines.RECORDS.values()}
SERVING = tuple(e.name for e in engines.RECORDS.values() if e.serving)
COLUMNS = ["rank", "spec", "reasons", "feasible", "alpha1", "alpha1_low", "alpha1_high", "accept_length",
           "accept_length_low", "accept_length_high", "decode_path_accept_length", "n_chains", "stage"]


def engine_name(engine: str) -> str:
    return ENGINE_NAMES.get(str(engine).lower(), str(engine))


# ------------------------------------------------------------------------------------------------
# Candidates
# ------------------------------------------------------------------------------------------------

def cannot_feed(engine: str, taps, target) -> str | None:
    """Why ``engine`` (a record of :mod:`workbench.engines`) cannot feed ``taps`` (None when it can);
    ``target``: N or the target config (GPT-OSS targets follow their own rule).

        >>> cannot_feed("sglang", ("embed", "L1", "L3"), 8)
        'SGLang cannot feed the embedding (residual is None before layer 0)'
        >>> cannot_feed("sglang", ("L1", "L3", "L4"), 8) is None, cannot_feed("vllm", ("embed", "L3", "L7"), 8)
        (True, None)
    """
    f = engines.ids_for_taps(engine, taps, target)
    return None if f.feasible else f.reason


def config_ids(engine: str, taps, target) -> list[int] | None:
    """The ids (in ``engine``'s convention) that make it feed ``taps`` (None if none do).

        >>> config_ids("sglang", ("L1", "L3", "L4"), 8), config_ids("vllm", ("L1", "L3", "L4"), 8)
        ([1, 3, 4], [2, 4, 5])
    """
    return engines.ids_for_taps(engine, taps, target).ids


def where_ids_go(engine: str) -> str:
    """The config key ``engine`` reads first, as a user would write it."""
    keys = engines.get(engine).keys
    return ("eagle_aux_hidden_state_layer_ids (top level)" if keys[:1] == ("top",) else
            "eagle_config.eagle_aux_hidden_state_layer_ids")


def who_can_feed(taps, target, *, exclude=()) -> list[str]:
    """``"vLLM can feed embed,L3,L31 with ids [0,4,32]"`` for each serving record that can (but ``exclude``).

        >>> who_can_feed(("embed", "L3", "L31"), 32, exclude=("sglang",))
        ['vLLM V1 can feed embed,L3,L31 with ids [0, 4, 32]']
    """
    out = []
    for name in SERVING:
        if name in exclude:
            continue
        f = engines.ids_for_taps(name, taps, target)
        if f.feasible:
            out.append(f"{engine_name(name)} can feed {','.join(taps)} with ids {f.ids}")
    return out


@dataclass
class Candidate:
    """One wiring to try, with every reason it is a candidate. Unpacks as ``(wiring, reasons)``.
    Shared by the diagnosis and the live comparison (``sglang_live``)."""

    wiring: object                      # workbench.wiring.Wiring
    reasons: list[str] = field(default_factory=list)
    feasible: bool = True               # the diagnosis engine can feed it
    why_not: str = ""                   # when not feasible
    engines: list[str] = field(default_factory=list)    # engine records that feed it as configured
    trained: bool = False               # the taps the draft was trained on

    @property
    def spec(self) -> str:
        return self.wiring.spec

    def __iter__(self):
        return iter((self.wiring, self.reasons))


def _shifted(taps: tuple, order: list[str], which, delta: int):
    out = list(taps)
    for i in which:
        if taps[i] not in order:
            return None
        j = order.index(taps[i]) + delta
        if not 0 <= j < len(order):
            return None
        out[i] = order[j]
    return tuple(out)


def candidates(target_config, draft, *, engine: str | None = None, n_slots: int = 3) -> list[Candidate]:
    """Every wiring worth trying for this target and draft, deduplicated, in discovery order.

        >>> cs = candidates({"num_hidden_layers": 8},
        ...                 {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
        ...                  "workbench": {"trained_taps": ["embed", "L1", "L3"]}}, engine="sglang")
        >>> [(c.spec, c.feasible) for c in cs][:2], cs[0].reasons[0]
        ([('L1,L3,L4', True), ('L0,L2,L3', False)], 'fed by SGLang, SGLang before 2026-05, vLLM before PR #42764, SpecForge, speculators, EAGLE, NVIDIA ModelOpt')
        >>> next(c for c in cs if c.spec == "embed,L1,L3").reasons[0]
        'trained taps (draft config workbench.trained_taps)'

    Sources: every engine record (``wiring.table``: the draft config's ids under each engine and
    version of :mod:`workbench.engines`), each record's default, the trained-taps hint of the draft config,
    ±1 shifts of each tap of those (each tap alone and all together) and variants with ``embed`` in
    the first slot. ``draft`` is an Eagle3Draft (its ``raw_config`` is read) or a config dict.
    Wirings an engine cannot feed are kept with ``feasible=False`` (for ``engine``; without one:
    when no serving engine record can feed them). Only wirings of ``n_slots`` distinct taps are returned.
    """
    n = wm.num_layers(target_config)
    cfg = getattr(draft, "raw_config", None) or getattr(draft, "config", None) if not isinstance(draft, dict) \
        else draft
    found: dict[tuple, Candidate] = {}

    def add(taps, reason):
        taps = tuple(taps)
        if len(taps) != n_slots or len(set(taps)) != len(taps):
            return
        if taps not in found:
            found[taps] = Candidate(wm.Wiring(taps), [])
        if reason not in found[taps].reasons:
            found[taps].reasons.append(reason)

    seeds = []
    rows = [(r, "") for r in wm.table(target_config, cfg)]
    # the engine asked about goes first, so that ties in the ranking favour what it feeds
    rows.sort(key=lambda rr: rr[0].engine != str(engine or "").lower())
    fed: dict[tuple, list[str]] = {}
    for r, tag in rows:
        add(r.taps, "")
        fed.setdefault(tuple(r.taps), []).append(engine_name(r.engine) + tag)
        seeds.append(tuple(r.taps))
        if tuple(r.taps) in found and r.feasible:
            found[tuple(r.taps)].engines.append(r.engine)
    trained = wm.trained_wiring_from_config(cfg, n) if cfg is not None else None
    if trained is not None:
        add(trained.taps, "trained taps (draft config workbench.trained_taps)")
        seeds.append(trained.taps)
        if trained.taps in found:
            found[trained.taps].trained = True
    defaults: dict[tuple, list[str]] = {}
    for e in wm.ENGINES:
        r = wm.resolve(e, target_config, None)
        add(r.taps, "")
        defaults.setdefault(tuple(r.taps), []).append(engine_name(e))
        seeds.append(tuple(r.taps))
    order = ["embed"] + [f"L{k}" for k in range(n)]
    uniq = [s for i, s in enumerate(seeds) if len(s) == n_slots and s not in seeds[:i]]
    for s in uniq:
        for i in range(n_slots):
            for delta in (-1, 1):
                t = _shifted(s, order, [i], delta)
                if t is not None:
                    add(t, f"{','.join(s)} with {s[i]} {'+' if delta > 0 else '-'}1")
        for delta in (-1, 1):
            t = _shifted(s, order, range(n_slots), delta)
            if t is not None:
                add(t, f"{','.join(s)} all taps {'+' if delta > 0 else '-'}1")
    for s in uniq:
        if s[0] != "embed":
            add(("embed",) + s[1:], f"{','.join(s)} with embed in the first slot")
            add(("embed",) + s[:-1], f"embed then {','.join(s[:-1])} (off by one through HF indices)")
    out = list(found.values())
    for c in out:
        head = []
        if c.wiring.taps in fed:
            head.append("fed by " + ", ".join(dict.fromkeys(fed[c.wiring.taps])))
        if c.wiring.taps in defaults:
            head.append("default of " + ", ".join(defaults[c.wiring.taps]))
        c.reasons = head + [r for r in c.reasons if r]
        if engine is not None:
            why = cannot_feed(engine, c.wiring.taps, target_config)
        else:
            whys = [cannot_feed(e, c.wiring.taps, target_config) for e in SERVING]
            why = None if any(w is None for w in whys) else whys[0]
        c.feasible, c.why_not = why is None, why or ""
    return out


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

    def __post_init__(self):
        if self.setting is None:
            self.setting = Setting(steps=int(self.steps), engine=self.engine)

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
               "verdict": self.verdict, "exit_code": self.exit_code, "engine_ok": self.engine_ok,
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

    def summary(self, max_rows: int = 12) -> str:
        """The ranked table as text, then the verdict."""
        t = self.table.head(max_rows)
        w = max([len("wiring")] + [len(s) for s in t["spec"]])
        lines = [f"wiring diagnosis for {engine_name(self.engine)}: screened on {self.n_screen_samples} samples, "
                 f"full curves on {self.n_samples}",
                 f"setting: {self.setting.describe()}",
                 f"{'#':>2}  {'wiring'.ljust(w)}  {'α1':>5}  {'accept':>6}  {'95% interval':>13}  "
                 f"{'path':>5}  {'chains':>6}  feasible  reasons"]
        for r in t.to_dict("records"):
            iv = ("" if math.isnan(r["accept_length_low"]) else
                  f"{_fmt(r['accept_length_low'])}–{_fmt(r['accept_length_high'])}")
            mark = "*" if r["spec"] == self.engine_wiring else " "
            lines.append(f"{r['rank']:>2}{mark} {r['spec'].ljust(w)}  {_fmt(r['alpha1']):>5}  "
                         f"{_fmt(r['accept_length']):>6}  {iv:>13}  {_fmt(r['decode_path_accept_length']):>5}  "
                         f"{r['n_chains']:>6}  {'yes' if r['feasible'] else 'NO ':<8}  {'; '.join(r['reasons'])}")
        if len(self.table) > max_rows:
            lines.append(f"    ... {len(self.table) - max_rows} more (see to_frame())")
        lines.append(f"* = what {engine_name(self.engine)} feeds ({self.engine_explanation})")
        lines.append(f"verdict: {self.verdict}")
        if self.agreement is not None:               # the data's greedy agreement, under the setting line
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
           "accept_length_high": math.nan, "decode_path_accept_length": math.nan}
    if stage == 2:
        iv = res.intervals(n_boot=500)
        out.update(accept_length=_nan(res.accept_length), accept_length_low=_nan(iv["accept_length"][0]),
                   accept_length_high=_nan(iv["accept_length"][1]),
                   decode_path_accept_length=_nan(res.decode_path["accept_length"]))
    return out


def diagnose(target, draft, dataset, *, engine: str = "sglang", K: int = 4, screen_chains: int = 300,
             top: int = 4, limit: int | None = None, progress: bool = True,
             batch_size: int = 8, ctx=None, shard_dir=None, cost_ratio: float | None = None,
             eagle_topk: int | None = None, num_draft_tokens: int | None = None,
             sampling=None) -> Diagnosis | None:
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
    (the drafts matched against the data's tokens: ``workbench.sampled``).
    """
    from workbench.sampled import apply_sampling

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

    def key2(spec):
        st = s2[spec]
        return (-_key(st["accept_length"]), -_key(st["alpha1"]), chosen.index(spec))

    ranked2 = sorted(chosen, key=key2)
    final = ranked2 + [s for s in ranked1 if s not in s2]
    recs = []
    for rank, spec in enumerate(final, 1):
        c = by_spec[spec]
        st = s2.get(spec, s1[spec])
        recs.append({"rank": rank, "spec": spec, "reasons": list(c.reasons)
                     + ([c.why_not] if not c.feasible else []), "feasible": c.feasible, **st})
    table = pd.DataFrame(recs, columns=COLUMNS)

    best = ranked2[0]
    best_feasible = next((s for s in ranked2 if by_spec[s].feasible), None)
    if eng_spec is None or not eng.feasible:
        engine_ok = False
    else:
        b, e = s2[best], s2[eng_spec]
        engine_ok = not (e["accept_length_high"] < b["accept_length_low"])
    verdict = _verdict(engine, eng, eng_spec, s2, best, best_feasible, trained, engine_ok, by_spec, target.config)
    warn_once(results[best].agreement, setting)     # once per run, in plain words (workbench.agreement)
    return Diagnosis(engine=engine, steps=K, table=table, results=results, screen=screen, best=best,
                     best_feasible=best_feasible, engine_wiring=eng_spec, engine_explanation=eng.explanation,
                     engine_warnings=list(eng.warnings), trained_wiring=trained, engine_ok=engine_ok,
                     verdict=verdict, n_screen_samples=len(screen_rows), n_samples=n_samples, candidates=cands,
                     setting=setting)


def _key(x) -> float:
    return -1.0 if x is None or math.isnan(x) else float(x)


def _fix(engine: str, spec: str, target) -> str:
    ids = config_ids(engine, tuple(spec.split(",")), target)
    return f"set {where_ids_go(engine)} to {ids}" if ids is not None else ""


def _verdict(engine, eng, eng_spec, s2, best, best_feasible, trained, engine_ok, by_spec, target) -> str:
    E = engine_name(engine)
    a = lambda s: _fmt(s2[s]["alpha1"])            # noqa: E731
    al = lambda s: _fmt(s2[s]["accept_length"])    # noqa: E731
    if eng_spec is None or not eng.feasible:
        why = "; ".join(eng.warnings) or eng.explanation
        alt = f"; the best wiring found is {best} (α1 {a(best)}, accept length {al(best)})"
        return f"{E} cannot serve this draft as configured ({eng.explanation}): {why}{alt}"
    if engine_ok:
        if eng_spec == best:
            return (f"{E} feeds {eng_spec}, the best wiring found (α1 {a(eng_spec)}): expect accept length "
                    f"{al(eng_spec)} (decode path {_fmt(s2[eng_spec]['decode_path_accept_length'])})")
        return (f"{E} feeds {eng_spec} (α1 {a(eng_spec)}), as good as the best wiring found {best} "
                f"(α1 {a(best)}) within the 95% intervals: expect accept length {al(eng_spec)} "
                f"(decode path {_fmt(s2[eng_spec]['decode_path_accept_length'])})")
    ref = trained if trained is not None and trained != eng_spec and trained in s2 else best
    head = (f"the draft was trained on {ref}" if ref == trained else f"the best wiring found is {ref}")
    text = (f"{head} (α1 {a(ref)}); {E} feeds {eng_spec} (α1 {a(eng_spec)}): expect accept length "
            f"{al(eng_spec)} instead of {al(ref)}")
    c = by_spec[ref]
    if c.feasible:
        fix = _fix(engine, ref, target)
        return f"{text}; fix the draft config: {fix} so that {E} feeds {ref}" if fix else \
            f"{text}; serve it with the wiring {ref}"
    why = c.why_not or f"{E} cannot feed {ref}"
    others = who_can_feed(tuple(ref.split(",")), target, exclude=(engine,))
    tail = f"retrain on {eng_spec} or serve with an engine that can" + (f" ({'; '.join(others)})" if others else "")
    if best_feasible is not None and best_feasible != eng_spec and best_feasible in s2 \
            and s2[best_feasible]["accept_length"] > s2[eng_spec]["accept_length"]:
        fix = _fix(engine, best_feasible, target)
        tail += f" (or {fix} so that {E} feeds {best_feasible}: accept length {al(best_feasible)})"
    return f"{text}; {why}: {tail}"


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
    return diagnose(target, d, ds, engine=engine, K=K, screen_chains=screen_chains, top=top, limit=limit,
                    progress=progress, batch_size=batch_size, ctx=ctx,
                    shard_dir=shard_dir, cost_ratio=cost_ratio, eagle_topk=eagle_topk,
                    num_draft_tokens=num_draft_tokens, sampling=sampling)


__all__ = ["Candidate", "Diagnosis", "SERVING", "candidates", "cannot_feed", "config_ids", "diagnose", "diagnose_files",
           "where_ids_go", "who_can_feed"]
