"""Candidate wirings: the taps to try against a draft, each with every reason it is a candidate.

    >>> [c.spec for c in serving_candidates({"num_hidden_layers": 8},
    ...                                     {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}},
    ...                                     trained="embed,L1,L3")]
    ['embed,L1,L3', 'L1,L3,L4', 'L0,L2,L3']

The diagnosis (``analysis.diagnose.candidates``) and every live client (``live``) share the
:class:`Candidate` type; :func:`serving_candidates` is the live clients' list: the trained taps and what every
engine record feeds as configured, so a live verdict can name any engine's reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.engines import records as engines
from workbench.engines import wiring as wm
from workbench.engines.trainers import identify


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


def serving_candidates(target, draft_config, trained=None, extra=None) -> list[Candidate]:
    """The trained taps, every wiring an engine record feeds as configured (``wiring.table``) and
    ``extra`` specs, unique, as :class:`workbench.diagnose.Candidate` (``engines`` lists who feeds it).

        >>> [c.spec for c in serving_candidates({"num_hidden_layers": 8},
        ...                                     {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}},
        ...                                     trained="embed,L1,L3")]
        ['embed,L1,L3', 'L1,L3,L4', 'L0,L2,L3']
    """
    n = wm.num_layers(target)
    tw = wm.Wiring.parse(trained, n) if trained is not None else None
    out: dict[str, Candidate] = {}
    if tw is not None:
        out[tw.spec] = Candidate(tw, ["trained taps"], engines=["trained"], trained=True)
    for r in wm.table(target, draft_config, trained=tw):
        if r.feasible and r.taps:
            out.setdefault(r.spec, Candidate(r.wiring, ["fed as configured"])).engines.append(r.engine)
    for spec in extra or []:
        w = wm.Wiring.parse(spec, n)
        out.setdefault(w.spec, Candidate(w, ["given"], engines=["given"]))
    return list(out.values())


ENGINE_NAMES = {e.name: e.label.split(" (")[0].split(",")[0] for e in engines.RECORDS.values()}



SERVING = tuple(e.name for e in engines.RECORDS.values() if e.serving)



def engine_name(engine: str) -> str:
    return ENGINE_NAMES.get(str(engine).lower(), str(engine))



def cannot_feed(engine: str, taps, target) -> str | None:
    """Why ``engine`` (a record of :mod:`workbench.engines.records`) cannot feed ``taps`` (None when it can);
    ``target``: N or the target config (GPT-OSS targets follow their own rule).

        >>> cannot_feed("sglang", ("embed", "L1", "L3"), 8)
        'SGLang cannot feed the embedding (it records taps inside decoder layers only, so never the embedding output)'
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



def engine_label(engine: str) -> str:
    """The engine and version of a record, as the reason strings name it.

        >>> engine_label("sglang"), engine_label("vllm-legacy")
        ('SGLang (current)', 'vLLM before 0.22')
    """
    return engines.get(engine).label.replace("'s ", " ")



def _derived(reason: str) -> bool:
    """A reason that names the wiring as a neighbour (shifted, embed-first) of another one."""
    return any(k in reason for k in (" with ", " all taps ", "embed then "))



def where_ids_go(engine: str) -> str:
    """The config key ``engine`` reads first, as a user would write it."""
    e = engines.get(engine)
    keys = e.keys
    if e.ids_arg:
        return f"{e.ids_arg} (its server argument; the draft config's ids are not read)"
    return ("eagle_aux_hidden_state_layer_ids (top level)" if keys[:1] == ("top",) else
            "eagle_config.eagle_aux_hidden_state_layer_ids")



def set_ids(engine: str, ids) -> str:
    """The one-line fix: ``"set eagle_aux_hidden_state_layer_ids (top level) to [2, 15, 27]"`` for ``engine``."""
    return f"set {where_ids_go(engine)} to {ids}"


def who_can_feed(taps, target, *, exclude=()) -> list[str]:
    """``"vLLM ... can feed embed,L3,L31: set eagle_aux_hidden_state_layer_ids (top level) to [0, 4, 32]"`` for each
    serving record that can (but ``exclude``): the ids and the config key that engine reads them from.

        >>> who_can_feed(("embed", "L3", "L31"), 32, exclude=("sglang",))[1]
        'vLLM V2 runner (GPU default) can feed embed,L3,L31: set eagle_aux_hidden_state_layer_ids (top level) to [0, 4, 32]'
    """
    out = []
    for name in SERVING:
        if name in exclude:
            continue
        f = engines.ids_for_taps(name, taps, target)
        if f.feasible:
            out.append(f"{engine_label(name)} can feed {','.join(taps)}: {set_ids(name, f.ids)}")
    return out



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
        ([('L1,L3,L4', True), ('L0,L2,L3', False)], 'fed by SGLang (current); SGLang before 2026-05; vLLM V2 runner (GPU default); vLLM before 0.22; vLLM 0.17 and older; TensorRT-LLM (PyTorch backend); SpecForge (training); speculators (vLLM training library); EAGLE (SafeAILab, official); NVIDIA ModelOpt (training)')
        >>> next(c for c in cs if c.spec == "embed,L1,L3").reasons[0]
        'trained taps (draft config workbench.trained_taps)'

    Sources: every engine record (``wiring.table``: the draft config's ids under each engine and
    version of :mod:`workbench.engines.records`), each record's default, the trained-taps hint of the draft config,
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
    has_ids = any(v is not None for v in engines.config_ids(cfg).values())
    for r, tag in rows:
        add(r.taps, "")
        if r.feasible:
            fed.setdefault(tuple(r.taps), []).append(engine_label(r.engine) + tag)
        seeds.append(tuple(r.taps))
        if tuple(r.taps) in found and r.feasible:
            found[tuple(r.taps)].engines.append(r.engine)
    trained = wm.trained_wiring_from_config(cfg, n) if cfg is not None else None
    if trained is not None:
        trainer = identify(cfg)[0]
        add(trained.taps, "trained taps (draft config workbench.trained_taps)" if trainer.name == "workbench" else
            f"trained taps (trained by {trainer.label}: its capture of the config's ids)")
        seeds.append(trained.taps)
        if trained.taps in found:
            found[trained.taps].trained = True
    defaults: dict[tuple, list[str]] = {}
    for e in wm.ENGINES:
        r = wm.resolve(e, target_config, None)
        add(r.taps, "")
        defaults.setdefault(tuple(r.taps), []).append(engine_label(e))
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
            head.append("fed by " + "; ".join(dict.fromkeys(fed[c.wiring.taps])))
        if c.wiring.taps in defaults:
            # an engine's default for a config WITHOUT ids: say so, and never as if it fed this draft
            nofeed = [e for e in dict.fromkeys(defaults[c.wiring.taps]) if e not in fed.get(c.wiring.taps, [])]
            if nofeed:
                head.append(f"what {'; '.join(nofeed)} would feed a draft whose config names no layer ids "
                            f"({'this draft names ids' if has_ids else 'this draft names none'})")
        # the trained taps are a fact of the draft, not a neighbour of some other wiring
        c.reasons = head + [r for r in c.reasons if r and (not c.trained or not _derived(r))]
        if engine is not None:
            why = cannot_feed(engine, c.wiring.taps, target_config)
        else:
            whys = [cannot_feed(e, c.wiring.taps, target_config) for e in SERVING]
            why = None if any(w is None for w in whys) else whys[0]
        c.feasible, c.why_not = why is None, why or ""
    return out
