"""Wirings: which target taps, in which order, are concatenated into the draft's ``fc`` input.

    >>> from workbench.engines.wiring import Wiring
    >>> w = Wiring.parse("embed,L3,L31", n_layers=32)
    >>> w.taps
    ('embed', 'L3', 'L31')
    >>> Wiring.parse("hf:0,4,32", n_layers=32).taps      # HF output_hidden_states indices
    ('embed', 'L3', 'final')

    >>> from workbench.engines.wiring import resolve, table
    >>> resolve("sglang", {"num_hidden_layers": 32}).spec      # what SGLang feeds by default
    'L1,L15,L28'

Every engine rule (which keys an engine reads, what an id means, what it can feed, by version) lives
in :mod:`workbench.engines.records`; ``resolve``, ``ids_for`` and ``table`` here ask it, and
:func:`choose_wiring` / :func:`apply_engine` make a loaded draft compute what a named engine computes.
The tap vocabulary (``Wiring``, ``parse_tap``, configs) is :mod:`workbench.engines.taps`, re-exported here.

Tap names (see ARCHITECTURE.md): ``embed`` (= HF ``hidden_states[0]``), ``L{k}`` the output of
decoder layer k, 0-based, before the final norm (= ``hidden_states[k+1]`` for k < N-1), and
``final`` (after the final norm = ``hidden_states[N]``).
"""

from __future__ import annotations

from workbench import engines
from workbench.core.errors import WorkbenchError
from workbench.core.render import Rendered
from workbench.engines.taps import (
    Resolution,
    Wiring,
    as_wirings,
    draft_layer_ids,
    hf_to_tap,
    id_list,
    load_config,
    num_layers,
    parse_tap,
    tap_sort_key,
    tap_to_hf,
    hinted_wiring,
)
from workbench.engines.trainers import trained_wiring_from_config

ENGINES = engines.ENGINE_NAMES


def resolve(engine: str, target_config, draft_config=None) -> Resolution:
    """The taps ``engine`` (any record of :mod:`workbench.engines.records`) feeds for this target and draft config.

        >>> r = resolve("sglang", {"num_hidden_layers": 32},
        ...             {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
        >>> r.taps
        ('L1', 'L3', 'L4')
        >>> resolve("vllm", 32).spec          # default (2, N//2, N-3), before-layer capture
        'L1,L15,L28'
    """
    return engines.wiring_for(engine, draft_config, target_config)


def ids_for(engine: str, taps, n_layers) -> list[int] | None:
    """The ids (in ``engine``'s own convention) that make it feed exactly ``taps``, or None.

        >>> ids_for("sglang", ["L1", "L3", "L4"], 8), ids_for("vllm", ["L1", "L3", "L4"], 8)
        ([1, 3, 4], [2, 4, 5])
        >>> ids_for("sglang", ["embed", "L3", "L4"], 8) is None, ids_for("vllm", ["embed", "L3", "L4"], 8)
        (True, [0, 4, 5])

    :func:`workbench.engines.ids_for_taps` says why when there are none.
    """
    return engines.ids_for_taps(engine, taps, n_layers).ids


def table(target_config, draft_config=None, *, trained: "Wiring | str | None" = None,
          names=None) -> "WiringTable":
    """What every engine record (or ``names``) feeds for this target/draft, with cross-engine notes.

        >>> rows = table({"num_hidden_layers": 32}, {"eagle_aux_hidden_state_layer_ids": [0, 4, 32]})
        >>> [(r.engine, r.spec) for r in rows][:3]
        [('sglang', 'L1,L15,L28'), ('sglang-2026.04', 'L1,L15,L28'), ('vllm', 'embed,L3,L31')]

    ``trained`` (a Wiring or spec; default: the draft config's ``workbench.trained_taps``) adds a
    warning to each engine that would feed something else.
    """
    n = num_layers(target_config)
    rows = [resolve(e, target_config, draft_config) for e in (names or ENGINES)]
    if trained is None and draft_config is not None:
        trained = trained_wiring_from_config(draft_config, n)
    if trained is not None:
        tw = Wiring.parse(trained, n)
        for r in rows:
            if r.taps != tw.taps:
                r.warnings.append(f"the draft was trained on {tw.spec}; {r.engine} feeds {r.spec or '(nothing)'}")
    groups: dict[tuple, list[str]] = {}
    for r in rows:
        groups.setdefault(r.taps, []).append(r.engine)
    notes = []
    if len(groups) > 1:
        notes.append("engines disagree: " + "; ".join(f"{'/'.join(es)} feed{'s' if len(es) == 1 else ''} "
                                                      f"{','.join(t) or '(nothing)'}" for t, es in groups.items()))
    return WiringTable(rows, notes)


class WiringTable(Rendered, list):
    """What :func:`table` returns: a list of :class:`Resolution`, one per engine, that renders as text."""

    def __init__(self, rows=(), notes=()):
        super().__init__(rows)
        self.notes = list(notes)

    def summary(self) -> str:
        """Plain-text table (what ``workbench wiring`` prints), then the version each record stands for."""
        rows = list(self)
        width = max(len(r.engine) for r in rows)
        tw = max(len(r.spec or "(nothing)") for r in rows)
        lines = [f"{'engine'.ljust(width)}  {'taps'.ljust(tw)}  hf_indices  explanation"]
        for r in rows:
            hf = ",".join("-" if i is None else str(i) for i in r.hf_indices)
            flag = "" if r.feasible else "  [WILL NOT WORK]"
            lines.append(f"{r.engine.ljust(width)}  {(r.spec or '(nothing)').ljust(tw)}  {hf.ljust(10)}  "
                         f"{r.explanation}{flag}")
            for msg in r.warnings:
                lines.append(f"{' ' * width}  ! {msg}")
        lines += self.notes
        lines.append("versions:")
        for r in rows:
            e = engines.get(r.engine)
            lines.append(f"  {e.name.ljust(width)}  {e.label}: {e.boundary}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Choosing the wiring of a run, and computing what an engine computes
# ------------------------------------------------------------------------------------------------

def apply_engine(target, draft, engine: str, wiring=None):
    """Make ``draft`` compute what ``engine`` computes; return (wiring, note).

        >>> # w, note = apply_engine(target, draft, "sglang-2026.04")      # its taps, options, offset, embed

    The engine fixes the computation (:func:`workbench.engines.read` on the draft's ``raw_config``):
    the Eagle-3.1 options and rotary offset (``draft.set_variant``), the input embedding and the
    lm_head (the target's when the engine replaces them). ``wiring`` (a spec) overrides only the taps.
    The draft is changed in place; a draft whose own embedding was replaced keeps the target's.
    """
    raw = getattr(draft, "raw_config", None) or draft.config
    ships_embed = getattr(draft, "embed_source", "") == "checkpoint"
    r = engines.read(engine, raw, target.config, ships_embed=ships_embed, wiring=wiring)
    res = r.resolution
    if wiring is None and (not res.taps or not res.feasible):
        raise WorkbenchError(f"engine {r.engine}: cannot feed this draft ({res.explanation}; "
                             f"{'; '.join(res.warnings) or 'no taps'})")
    draft.set_variant(rotary_offset=r.rotary_offset, **r.options)
    if r.embed_source == "target" and getattr(draft, "embed_source", "target") != "target":
        draft.set_embedding(target.embed_weight(), source="target")
    if r.lm_head_source == "target" and getattr(draft, "lm_head_source", "target") != "target":
        draft.set_lm_head(target.model.get_output_embeddings().weight, source="target")
    extra = list(res.warnings) + list(r.warnings)
    note = res.explanation + ("" if not extra else " [" + "; ".join(extra) + "]")
    return Wiring.parse(res.taps, target.n_layers), note


def apply_drafting(draft, setting, engine: str | None = None):
    """Make ``draft`` draft as ``setting`` says (``setting.drafting``; None: the draft's own: parallel for a
    P-EAGLE checkpoint) under ``engine``; return (setting with the drafting it ran, note or None).

        >>> # setting, note = apply_drafting(draft, Setting(steps=4), "sglang")   # P-EAGLE on SGLang: a chain

    A tree, or an engine without parallel drafting (SGLang: none; vLLM's V2 runner refuses it), drafts a
    P-EAGLE draft as a chain, and the note says so; asking for parallel drafting there is an error.
    """
    own = draft.own_drafting
    mode, note = setting.drafting or own, None
    rec = engines.get(engine) if engine is not None else None
    if mode == "parallel" and rec is not None and not rec.parallel_drafting:
        if setting.drafting == "parallel":
            raise WorkbenchError(f"engine {rec.name} does not serve parallel drafting (docs/families.md): drop "
                                 "--drafting parallel, or name an engine that serves it (vllm)")
        mode, note = "sequential", (f"{rec.name} does not serve parallel drafting: this P-EAGLE draft is drafted as "
                                    "a chain there (each step feeds the previous token and hidden, never trained)")
    if mode == "parallel" and setting.shape != "chain":
        mode, note = "sequential", "a tree drafts step by step: the P-EAGLE draft is drafted as a chain of trees"
    draft.set_drafting(mode)
    if mode == "parallel" or own == "parallel":
        setting = setting.replace(drafting=mode)
    return setting, note


def choose_wiring(target, draft, wiring=None, engine: str | None = None):
    """The wiring to evaluate and a one-line note on where it came from.

        >>> # choose_wiring(target, draft, engine="sglang")   # what SGLang feeds and computes for this draft
        >>> # choose_wiring(target, draft)                     # what the draft was trained on

    With ``engine``: :func:`apply_engine` (the engine fixes the computation; ``wiring`` overrides only
    the taps). Without: ``wiring`` (a spec) if given; else the draft config's
    ``workbench.trained_taps``; else what the draft's own format engine feeds
    (:func:`workbench.engines.default_wiring` on the config as written: a speculators draft reads as
    vLLM, an ``LlamaForCausalLMEagle3`` draft as SpecForge).
    """
    if engine is not None:
        return apply_engine(target, draft, engine, wiring)
    if wiring is not None:
        w = Wiring.parse(wiring, target.n_layers)
        return w, w.note or f"given: {w.spec}"
    raw = getattr(draft, "raw_config", None) or draft.config
    trained = trained_wiring_from_config(raw, target.n_layers) if raw is not None else None
    if trained is not None and hinted_wiring(raw, target.n_layers) is None:
        return trained, f"no --wiring/--engine: {trained.note}"
    if trained is not None:
        return trained, f"trained taps from the draft config: {trained.spec}"
    r = engines.default_wiring(raw, target.config)
    if not r.taps or not r.feasible:
        raise WorkbenchError(f"cannot tell which taps to feed the draft ({r.explanation}); pass --wiring or --engine")
    return Wiring.parse(r.taps, target.n_layers), f"no --wiring/--engine: {r.explanation}"


__all__ = ["ENGINES", "Resolution", "Wiring", "WiringTable", "apply_drafting", "apply_engine", "as_wirings", "choose_wiring",
           "draft_layer_ids", "hf_to_tap", "hinted_wiring", "id_list", "ids_for", "load_config", "num_layers", "parse_tap",
           "resolve", "table", "tap_sort_key", "tap_to_hf", "trained_wiring_from_config"]
