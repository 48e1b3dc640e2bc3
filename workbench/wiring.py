"""Wirings: which target taps, in which order, are concatenated into the draft's ``fc`` input.

    >>> from workbench.wiring import Wiring
    >>> w = Wiring.parse("embed,L3,L31", n_layers=32)
    >>> w.taps
    ('embed', 'L3', 'L31')
    >>> Wiring.parse("hf:0,4,32", n_layers=32).taps      # HF output_hidden_states indices
    ('embed', 'L3', 'final')

Tap names (see ARCHITECTURE.md): ``embed`` (= HF ``hidden_states[0]``), ``L{k}`` the output of
decoder layer k, 0-based, before the final norm (= ``hidden_states[k+1]`` for k < N-1), and
``final`` (after the final norm = ``hidden_states[N]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from workbench.errors import WorkbenchError

_LAYER = re.compile(r"^L(\d+)$")


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
