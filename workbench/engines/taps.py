"""Tap names, wirings and draft configs: the vocabulary every module (and ``engines``) shares.

    >>> from workbench.engines.taps import Wiring, tap_to_hf
    >>> Wiring.parse("hf:0,4,32", n_layers=32).taps      # HF output_hidden_states indices
    ('embed', 'L3', 'final')
    >>> tap_to_hf("L31", 32) is None                     # the last layer's raw output: only a hook sees it
    True

Tap names (see ARCHITECTURE.md): ``embed`` (= HF ``hidden_states[0]``), ``L{k}`` the output of
decoder layer k, 0-based, before the final norm (= ``hidden_states[k+1]`` for k < N-1), and
``final`` (after the final norm = ``hidden_states[N]``). What an engine feeds lives in
``engines.py``; ``wiring.py`` re-exports this module and adds the engine-backed helpers.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.core.files import is_path

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


def hinted_wiring(draft_config, n_layers: int) -> "Wiring | None":
    """The taps a draft was trained on, when its config names them (our trainer writes
    ``"workbench": {"trained_taps": [...]}``); None when absent. A foreign trainer's taps:
    :func:`workbench.engines.trainers.trained_wiring_from_config`.

        >>> hinted_wiring({"workbench": {"trained_taps": ["embed", "L3", "L31"]}}, 32).spec
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
