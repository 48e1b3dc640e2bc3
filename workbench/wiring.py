"""Wirings: which target taps, in which order, are concatenated into the draft's ``fc`` input.

    >>> from workbench.wiring import Wiring
    >>> w = Wiring.parse("embed,L3,L31", n_layers=32)
    >>> w.taps
    ('embed', 'L3', 'L31')
    >>> Wiring.parse("hf:0,4,32", n_layers=32).taps      # HF output_hidden_states indices
    ('embed', 'L3', 'final')

    >>> from workbench.wiring import resolve, table
    >>> resolve("sglang", {"num_hidden_layers": 32}).spec      # what SGLang feeds by default
    'L1,L15,L28'

Engine presets (``resolve``/``table``) follow the engines' source: SGLang (``python/sglang/srt/models/llama.py``,
``model_runner.py``) reads only ``eagle_config.eagle_aux_hidden_state_layer_ids`` and adds +1 (capture
*before* layer id+1 = output of layer id); vLLM (``v1/worker/gpu_model_runner.py``,
``_get_eagle3_aux_layers_from_config``) reads the top-level key, then ``eagle_config``, as is (id k =
output of layer k-1); SpecForge/ModelOpt ids are layer outputs; ``hf`` ids are ``output_hidden_states``
indices.

Tap names (see ARCHITECTURE.md): ``embed`` (= HF ``hidden_states[0]``), ``L{k}`` the output of
decoder layer k, 0-based, before the final norm (= ``hidden_states[k+1]`` for k < N-1), and
``final`` (after the final norm = ``hidden_states[N]``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from workbench.errors import WorkbenchError
from workbench.files import is_path
from workbench.render import Rendered

_LAYER = re.compile(r"^L(\d+)$")
_KEY = "eagle_aux_hidden_state_layer_ids"


def parse_tap(name: str, n_layers: int) -> str:
    """Check one tap name against a target with ``n_layers`` decoder layers; return it normalised."""
    raw = str(name).strip()
    tap = raw.lower() if raw.lower() in ("embed", "final") else raw.upper() if raw[:1] in "lL" else raw
    if tap in ("embed", "final"):
        return tap
    m = _LAYER.match(tap)
    if not m:
        raise WorkbenchError(
            f"unknown tap {raw!r} (expected embed, final or L0..L{n_layers - 1}; use hf:I,J,K for HF indices)")
    k = int(m.group(1))
    if not 0 <= k < n_layers:
        raise WorkbenchError(f"tap {raw!r} is out of range: the target has N={n_layers} decoder layers, "
                             f"valid layer taps are L0..L{n_layers - 1}")
    return f"L{k}"


def hf_to_tap(index: int, n_layers: int) -> str:
    """HF ``output_hidden_states`` index → tap: 0 → embed, i in 1..N-1 → L{i-1}, N → final."""
    if not 0 <= index <= n_layers:
        raise WorkbenchError(f"HF hidden_states index {index} is out of range: the target has N={n_layers} "
                             f"layers, valid indices are 0..{n_layers}")
    if index == 0:
        return "embed"
    if index == n_layers:
        return "final"
    return f"L{index - 1}"


def tap_to_hf(tap: str, n_layers: int) -> int | None:
    """Tap → HF ``output_hidden_states`` index, or None for ``L{N-1}`` (only a hook sees it)."""
    tap = parse_tap(tap, n_layers)
    if tap == "embed":
        return 0
    if tap == "final":
        return n_layers
    k = int(tap[1:])
    return None if k == n_layers - 1 else k + 1


def tap_sort_key(tap: str) -> int:
    """Order taps by depth: embed < L0 < L1 < ... < final."""
    return -1 if tap == "embed" else 10**9 if tap == "final" else int(tap[1:])


@dataclass(frozen=True)
class Wiring:
    """An ordered list of taps. ``note`` says how it was obtained (e.g. translated from HF indices)."""

    taps: tuple[str, ...]
    note: str = field(default="", compare=False)

    @classmethod
    def parse(cls, spec: "str | Wiring | list[str] | tuple[str, ...]", n_layers: int) -> "Wiring":
        """``"embed,L3,L31"``, ``"hf:0,4,32"``, a list of taps, or a Wiring (re-checked)."""
        if isinstance(spec, Wiring):
            return cls(tuple(parse_tap(t, n_layers) for t in spec.taps), spec.note)
        if isinstance(spec, (list, tuple)):
            return cls(tuple(parse_tap(t, n_layers) for t in spec))
        text = str(spec).strip()
        if not text:
            raise WorkbenchError("empty wiring spec (expected e.g. 'embed,L3,L31' or 'hf:0,4,32')")
        if text.lower().startswith("hf:"):
            parts = [p.strip() for p in text[3:].split(",") if p.strip()]
            try:
                idx = [int(p) for p in parts]
            except ValueError:
                raise WorkbenchError(f"wiring {text!r}: HF indices must be integers (e.g. hf:0,4,32)") from None
            taps = tuple(hf_to_tap(i, n_layers) for i in idx)
            note = f"HF hidden_states indices {idx} → taps {','.join(taps)}"
            return cls(taps, note)
        return cls(tuple(parse_tap(t, n_layers) for t in text.split(",") if t.strip()))

    @property
    def spec(self) -> str:
        return ",".join(self.taps)

    def hf_indices(self, n_layers: int) -> list[int | None]:
        return [tap_to_hf(t, n_layers) for t in self.taps]

    def __str__(self) -> str:
        return self.spec


# ─────────────────────────────── configs ───────────────────────────────

def load_config(source, what: str = "config") -> dict:
    """A config as a plain dict: a dict, a transformers ``PretrainedConfig``, or a path to a directory
    holding ``config.json`` (or to the json file itself). No weights are needed.

        >>> load_config({"num_hidden_layers": 4})["num_hidden_layers"]
        4
    """
    if isinstance(source, dict):
        return source
    if hasattr(source, "to_dict") and not is_path(source):
        return source.to_dict()
    if is_path(source):
        path = os.fspath(source)
        file = os.path.join(path, "config.json") if os.path.isdir(path) else path
        if not os.path.isfile(file):
            where = f"no config.json in {path}" if os.path.isdir(path) else f"{path} does not exist"
            raise WorkbenchError(f"{what}: {where} (expected a model directory with config.json)")
        try:
            with open(file, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"{what}: {file} line {e.lineno}: invalid JSON ({e.msg})") from None
        except (OSError, UnicodeDecodeError) as e:
            raise WorkbenchError(f"{what}: cannot read {file}: {e}") from None
        if not isinstance(data, dict):
            raise WorkbenchError(f"{what}: {file} must hold a JSON object, got {type(data).__name__}")
        return data
    raise WorkbenchError(f"{what}: expected a dict, a PretrainedConfig or a directory path, "
                         f"got {type(source).__name__}")


def num_layers(target_config) -> int:
    """Decoder-layer count N of a target (``num_hidden_layers``, or ``text_config`` for multimodal).
    An int is returned as is.

        >>> num_layers({"text_config": {"num_hidden_layers": 48}})
        48
    """
    if isinstance(target_config, int) and not isinstance(target_config, bool):
        n = target_config
    else:
        cfg = load_config(target_config, "target config")
        n = cfg.get("num_hidden_layers")
        if n is None and isinstance(cfg.get("text_config"), dict):
            n = cfg["text_config"].get("num_hidden_layers")
        if n is None:
            raise WorkbenchError("target config: no 'num_hidden_layers' (nor 'text_config.num_hidden_layers'); "
                                 "expected the target model's config.json")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise WorkbenchError(f"target config: 'num_hidden_layers' must be a positive integer, got {n!r}")
    return n


def id_list(value, key: str):
    """A config value as a list of integer layer ids (None stays None); anything else is a one-line error."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                        for v in value):
        raise WorkbenchError(f"draft config: '{key}' must be a list of integers, got {value!r}")
    return [int(v) for v in value]


def draft_layer_ids(draft_config) -> dict:
    """The aux layer ids a draft config carries: ``{"nested": [...]|None, "top": [...]|None}``
    (``eagle_config.eagle_aux_hidden_state_layer_ids`` and the top-level key).

        >>> draft_layer_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})
        {'nested': [1, 15, 28], 'top': None}
    """
    if draft_config is None:
        return {"nested": None, "top": None}
    cfg = load_config(draft_config, "draft config")
    eagle = cfg.get("eagle_config")
    nested = None
    if isinstance(eagle, dict):
        nested = id_list(eagle.get(_KEY), f"eagle_config.{_KEY}")
    return {"nested": nested, "top": id_list(cfg.get(_KEY), _KEY)}


def trained_wiring_from_config(draft_config, n_layers: int) -> "Wiring | None":
    """The taps a draft was trained on, when its config says so (our trainer writes
    ``"workbench": {"trained_taps": [...]}``); None when absent.

        >>> trained_wiring_from_config({"workbench": {"trained_taps": ["embed", "L3", "L31"]}}, 32).spec
        'embed,L3,L31'
    """
    if draft_config is None:
        return None
    cfg = load_config(draft_config, "draft config")
    hint = cfg.get("workbench")
    if hint is None:
        return None
    if not isinstance(hint, dict):
        raise WorkbenchError(f"draft config: 'workbench' must be an object, got {type(hint).__name__}")
    taps = hint.get("trained_taps")
    if taps is None:
        return None
    if isinstance(taps, str):
        w = Wiring.parse(taps, n_layers)
    elif isinstance(taps, (list, tuple)) and taps:
        w = Wiring.parse([str(t) for t in taps], n_layers)
    else:
        raise WorkbenchError(f"draft config: 'workbench.trained_taps' must be a list of taps, got {taps!r}")
    return Wiring(w.taps, "from the draft config (workbench.trained_taps)")


# ─────────────────────────────── engine presets ───────────────────────────────

ENGINES = ("sglang", "vllm", "eagle", "specforge", "modelopt", "hf")
SGLANG_RULES = ("classic", "first-id-1")


@dataclass
class Resolution:
    """What one engine feeds the draft's ``fc`` for a given target (and draft config).

    ``taps`` are what reaches ``fc`` in concatenation order; ``feasible`` is False when the engine would
    crash or capture fewer than the draft expects (see ``warnings``).
    """

    engine: str
    taps: tuple[str, ...]
    hf_indices: list
    explanation: str
    warnings: list[str] = field(default_factory=list)
    feasible: bool = True

    @property
    def wiring(self) -> Wiring:
        return Wiring(self.taps, self.explanation)

    @property
    def spec(self) -> str:
        return ",".join(self.taps)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "taps": list(self.taps), "hf_indices": list(self.hf_indices),
                "explanation": self.explanation, "warnings": list(self.warnings), "feasible": self.feasible}


def _fmt(ids) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def _before_layers(engine: str, before: list[int], n: int, warnings: list[str]):
    """Capture-before-layer engines: the loop visits layers in ascending order, once each."""
    taps, feasible = [], True
    wanted = sorted(set(before))
    if len(wanted) < len(before):
        warnings.append(f"{engine}: duplicate capture points {_fmt(before)} are captured once each "
                        f"(the draft's fc expects {len(before)} states, gets {len(wanted)})")
        feasible = False
    if list(before) != wanted and len(wanted) == len(before):
        warnings.append(f"{engine}: concatenates in layer order {_fmt(wanted)}, not list order {_fmt(before)}")
    for b in wanted:
        if b == 0:
            taps.append("embed")
            warnings.append(f"{engine}: capture before layer 0 would be the embedding, which {engine} cannot "
                            f"feed (residual is None before layer 0: crash)")
            feasible = False
        elif 1 <= b <= n - 1:
            taps.append(f"L{b - 1}")
        else:
            warnings.append(f"{engine}: capture point {b} is past the last layer (valid 1..{n - 1} for N={n}): "
                            f"never captured, fc gets fewer states than it expects (crash or garbage)")
            feasible = False
    return tuple(taps), feasible


def _layer_outputs(engine: str, ids: list[int], n: int, warnings: list[str]):
    """Layer-output engines (SpecForge, ModelOpt): id k means the output of layer k, list order."""
    taps, feasible = [], True
    for k in ids:
        if 0 <= k < n:
            taps.append(f"L{k}")
            if k == n - 1:
                warnings.append(f"{engine}: id {k} is the last layer's raw output L{k}: an HF "
                                f"output_hidden_states read gets the post-norm 'final' instead")
        else:
            warnings.append(f"{engine}: id {k} is not a layer of the target (valid 0..{n - 1} for N={n})")
            feasible = False
    return tuple(taps), feasible


def resolve(engine: str, target_config, draft_config=None, *, sglang_rule: str = "classic") -> Resolution:
    """The taps ``engine`` feeds for this target (N layers) and draft config (facts page, section 1).

        >>> r = resolve("sglang", {"num_hidden_layers": 32},
        ...             {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
        >>> r.taps, r.explanation
        (('L1', 'L3', 'L4'), 'sglang: eagle_config ids [1,3,4] +1 → capture before layers [2,4,5] → L1,L3,L4')
        >>> resolve("vllm", 32).spec          # default (2, N//2, N-3), before-layer capture
        'L1,L15,L28'

    engines: sglang, vllm, eagle, specforge, modelopt, hf. ``sglang_rule``: "classic" (+1 always) or
    "first-id-1" (SGLang PR #25454: +1 only when the first id is 1).
    """
    engine = str(engine).lower()
    if engine not in ENGINES:
        raise WorkbenchError(f"unknown engine {engine!r} (expected one of {', '.join(ENGINES)})")
    if sglang_rule not in SGLANG_RULES:
        raise WorkbenchError(f"unknown sglang rule {sglang_rule!r} (expected one of {', '.join(SGLANG_RULES)})")
    n = num_layers(target_config)
    ids = draft_layer_ids(draft_config)
    nested, top = ids["nested"], ids["top"]
    default_before = [2, n // 2, n - 3]
    default_out = [1, n // 2 - 1, n - 4]
    w: list[str] = []

    if engine == "sglang":
        rule = "" if sglang_rule == "classic" else " (rule: +1 only when the first id is 1)"
        if top is not None and nested is None:
            w.append(f"sglang: ignores the top-level {_KEY} {_fmt(top)} (it reads only eagle_config.{_KEY}) "
                     f"and silently uses its default")
        elif top is not None and nested is not None and top != nested:
            w.append(f"sglang: reads eagle_config ids {_fmt(nested)}; the top-level ids {_fmt(top)} differ "
                     f"and are ignored")
        if nested is not None:
            shift = 1 if sglang_rule == "classic" or (nested and nested[0] == 1) else 0
            before = [i + shift for i in nested]
            how = f"eagle_config ids {_fmt(nested)} {'+1' if shift else 'as is (first id is not 1)'}"
        else:
            before = default_before
            how = "no eagle_config ids → default" if top is None else "top-level ids ignored → default"
        taps, ok = _before_layers("sglang", before, n, w)
        expl = f"sglang: {how} → capture before layers {_fmt(before)} → {','.join(taps) or '(nothing)'}{rule}"
    elif engine == "vllm":
        chosen, src = (top, "top-level ids") if top else (nested, "eagle_config ids") if nested else (None, "")
        if chosen is None:
            before, how = default_before, "no ids → default"
        else:
            before, how = chosen, f"{src} {_fmt(chosen)} as is (no +1)"
            if src == "eagle_config ids":
                w.append("vllm: older vLLM releases read only the top-level key and would use the default "
                         f"{_fmt(default_before)}")
        if top and nested and top != nested:
            w.append(f"vllm: uses the top-level ids {_fmt(top)}; eagle_config ids {_fmt(nested)} differ and are ignored")
        taps, ok = _before_layers("vllm", before, n, w)
        expl = f"vllm: {how} → capture before layers {_fmt(before)} → {','.join(taps) or '(nothing)'}"
    elif engine == "eagle":
        before = default_before
        if nested is not None or top is not None:
            w.append("eagle: the official EAGLE repo ignores the draft config's layer ids (fixed {2, N//2, N-3})")
        taps, ok = _before_layers("eagle", before, n, w)
        expl = f"eagle: fixed capture before layers {_fmt(before)} → {','.join(taps)}"
    elif engine in ("specforge", "modelopt"):
        if nested is not None:
            chosen, how = nested, f"eagle_config ids {_fmt(nested)} = layer outputs"
        elif engine == "modelopt" and top is not None:
            chosen, how = top, f"top-level ids {_fmt(top)} = layer outputs"
        else:
            chosen, how = default_out, f"default layer outputs {_fmt(default_out)}"
            if top is not None:
                w.append(f"{engine}: ignores the top-level {_KEY} {_fmt(top)}")
        taps, ok = _layer_outputs(engine, chosen, n, w)
        expl = f"{engine}: {how} → {','.join(taps) or '(nothing)'}"
    else:  # hf: plain output_hidden_states indices
        chosen = nested if nested is not None else top
        if chosen is None:
            chosen, how = default_before, f"default hidden_states indices {_fmt(default_before)}"
        else:
            how = f"ids {_fmt(chosen)} read as hidden_states indices"
        taps, ok = [], True
        for i in chosen:
            if 0 <= i <= n:
                taps.append(hf_to_tap(i, n))
            else:
                w.append(f"hf: hidden_states index {i} is out of range (valid 0..{n} for N={n})")
                ok = False
        taps = tuple(taps)
        if "final" in taps:
            w.append(f"hf: hidden_states[{n}] is the post-norm 'final', not the raw output of layer L{n - 1}")
        expl = f"hf: {how} → {','.join(taps) or '(nothing)'}"

    if "embed" in taps and engine in ("specforge", "modelopt", "hf"):
        w.append(f"{engine}: feeds the embedding; no serving engine (sglang, vllm) can feed 'embed'")
    if len(taps) != 3:   # an EAGLE-3 fc takes exactly three target states (low, mid, high)
        w.append(f"{engine}: feeds {len(taps)} hidden states ({','.join(taps) or 'none'}); an EAGLE-3 draft's fc "
                 f"expects exactly 3 (expected 3 layer ids)")
        ok = False
    return Resolution(engine, taps, [tap_to_hf(t, n) for t in taps], expl, w, ok)


def ids_for(engine: str, taps, n_layers: int, *, sglang_rule: str = "classic") -> list[int] | None:
    """The ``eagle_aux_hidden_state_layer_ids`` that make ``engine`` feed exactly ``taps``, or None.

    Tries layer-output ids (``L{k}`` → k), before-layer ids (k+1) and HF indices, and keeps the first
    that :func:`resolve` confirms (written under ``eagle_config`` and, for vLLM, top-level too).

        >>> ids_for("sglang", ["L1", "L3", "L4"], 8), ids_for("vllm", ["L1", "L3", "L4"], 8)
        ([1, 3, 4], [2, 4, 5])
        >>> ids_for("sglang", ["L2", "L3", "L4"], 8, sglang_rule="first-id-1")   # ids not starting at 1: as is
        [3, 4, 5]
        >>> ids_for("sglang", ["embed", "L3", "L4"], 8) is None                   # SGLang cannot feed embed
        True
    """
    taps = tuple(parse_tap(t, n_layers) for t in taps)
    cands = []
    if all(t.startswith("L") for t in taps):
        out = [int(t[1:]) for t in taps]
        cands += [out, [k + 1 for k in out]]
    hf = [tap_to_hf(t, n_layers) for t in taps]
    if None not in hf:
        cands.append(hf)
    for ids in cands:
        cfg = {"eagle_config": {_KEY: ids}} | ({_KEY: ids} if engine == "vllm" else {})
        r = resolve(engine, n_layers, cfg, sglang_rule=sglang_rule)
        if r.feasible and r.taps == taps:
            return list(ids)
    return None


def table(target_config, draft_config=None, *, sglang_rule: str = "classic",
          trained: "Wiring | str | None" = None) -> "WiringTable":
    """Every engine preset for this target/draft, with cross-engine warnings.

        >>> rows = table({"num_hidden_layers": 32}, {"eagle_aux_hidden_state_layer_ids": [0, 4, 32]})
        >>> [(r.engine, r.spec) for r in rows][:2]
        [('sglang', 'L1,L15,L28'), ('vllm', 'embed,L3')]

    ``trained`` (a Wiring or spec; default: the draft config's ``workbench.trained_taps``) adds a
    warning to each engine that would feed something else.
    """
    n = num_layers(target_config)
    rows = [resolve(e, n, draft_config, sglang_rule=sglang_rule) for e in ENGINES]
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
    if len(groups) > 1:
        for r in rows:
            others = "; ".join(f"{'/'.join(es)} feed{'s' if len(es) == 1 else ''} {','.join(t) or '(nothing)'}"
                               for t, es in groups.items() if t != r.taps)
            r.warnings.append(f"engines disagree: {others}")
    return WiringTable(rows)


# ------------------------------------------------------------------------------------------------
# Choosing the wiring of a run
# ------------------------------------------------------------------------------------------------

def as_wirings(wirings, n_layers: int) -> list:
    """Wiring specs / Wiring / Resolution objects (or one of them) → list of unique Wiring.

        >>> [w.spec for w in as_wirings(["L1,L3,L4", "hf:2,4,5", "embed,L1,L3"], 8)]
        ['L1,L3,L4', 'embed,L1,L3']
    """
    if isinstance(wirings, (str, Wiring)) or hasattr(wirings, "taps") and not isinstance(wirings, (list, tuple)):
        wirings = [wirings]
    out, seen = [], set()
    for w in wirings:
        w = Wiring.parse(tuple(w.taps) if hasattr(w, "taps") and not isinstance(w, Wiring) else w, n_layers)
        if w.spec not in seen:
            seen.add(w.spec)
            out.append(w)
    if not out:
        raise WorkbenchError("no wiring given (expected e.g. ['embed,L1,L3'] or an engine's Resolution)")
    return out


def choose_wiring(target, draft, wiring=None, engine: str | None = None, *, sglang_rule: str = "classic"):
    """The wiring to evaluate and a one-line note on where it came from.

        >>> # choose_wiring(target, draft, engine="sglang")   # what SGLang would feed this draft
        >>> # choose_wiring(target, draft)                     # what the draft was trained on

    ``wiring`` (a spec) wins; else ``engine`` through ``wiring.resolve``; else the draft config's
    ``workbench.trained_taps``; else SpecForge's reading of its layer ids (layer outputs).
    """
    if wiring is not None and engine is not None:
        raise WorkbenchError("give either a wiring spec or an engine, not both")
    if wiring is not None:
        w = Wiring.parse(wiring, target.n_layers)
        return w, w.note or f"given: {w.spec}"
    cfg = draft.config
    if engine is not None:
        r = resolve(engine, target.config, cfg, sglang_rule=sglang_rule)
        if not r.taps or not getattr(r, "feasible", True):
            raise WorkbenchError(f"engine {engine}: cannot feed this draft ({r.explanation}; "
                                 f"{'; '.join(r.warnings) or 'no taps'})")
        note = r.explanation + ("" if not r.warnings else " [" + "; ".join(r.warnings) + "]")
        return Wiring.parse(r.taps, target.n_layers), note
    trained = trained_wiring_from_config(cfg, target.n_layers) if cfg is not None else None
    if trained is not None:
        return trained, f"trained taps from the draft config: {trained.spec}"
    r = resolve("specforge", target.config, cfg)
    if not r.taps:
        raise WorkbenchError(f"cannot tell which taps to feed the draft ({r.explanation}); pass --wiring or --engine")
    return Wiring.parse(r.taps, target.n_layers), f"no --wiring/--engine: {r.explanation}"


class WiringTable(Rendered, list):
    """What :func:`table` returns: a list of :class:`Resolution`, one per engine, that renders as text."""

    def summary(self) -> str:
        """Plain-text table (what ``workbench wiring`` prints)."""
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
        return "\n".join(lines)
