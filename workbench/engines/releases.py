"""Which engine record holds for which engine release: the release table (``engines/data/vllm.json``), read here.

    >>> from workbench.engines.releases import record_for, predict
    >>> record_for("0.32.0")
    ('vllm', None)
    >>> record_for("0.21.0")[0]
    'vllm-legacy'
    >>> record_for("0.40.1")[1]
    'vLLM 0.40.1 is newer than every release in the table (checked up to 0.32): using record vllm, the nearest (>=0.29,<0.33)'
    >>> predict("0.21.0", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}, 8)["taps"]
    'L1,L3,L4'

The table (:func:`workbench.engines.tables.table`) is data with its sources: one row per release range (``versions``, a PEP 440-like range such as
``>=0.22,<0.29``), the record that holds there (``record``, a name in :mod:`workbench.engines.records`), the
release's features (``features``: what its server reports and serves), the source lines each fact was read from
(``sources``), its live evidence (``evidence``: cells of ``bench/engine-matrix.json``), and how it installs on a CPU
(``install``, read by ``bench/vllm_versions.py``). A release outside every row gets the nearest row's record, and
says so (:func:`record_for`); nothing here guesses silently.
"""

from __future__ import annotations

import re

from workbench.core.errors import WorkbenchError
from workbench.engines.records import refusal, wiring_for
from workbench.engines.tables import table


def parse_version(version) -> tuple[int, int, int]:
    """``"0.21.0"``, ``"v0.22.1+cpu"``, ``"0.29.0rc1"``, ``"0.30"`` → (major, minor, patch).

        >>> parse_version("v0.22.1+cpu"), parse_version("0.29.0rc1"), parse_version("0.30")
        ((0, 22, 1), (0, 29, 0), (0, 30, 0))
    """
    m = re.match(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(version))
    if not m:
        raise WorkbenchError(f"engine version {version!r}: expected a release number such as 0.21.0")
    return tuple(int(g or 0) for g in m.groups())


def in_range(version, spec: str) -> bool:
    """Whether ``version`` lies in ``spec`` (comma-separated ``>=``, ``<``, ``<=``, ``>``, ``==`` bounds).

        >>> in_range("0.21.0", ">=0.18,<0.22"), in_range("0.22.0", ">=0.18,<0.22")
        (True, False)
    """
    v = parse_version(version)
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
           "<": lambda a, b: a < b, ">": lambda a, b: a > b}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        op = next(o for o in (">=", "<=", "==", "<", ">") if part.startswith(o))
        if not ops[op](v, parse_version(part[len(op):])):
            return False
    return True


def _bounds(spec: str) -> tuple[tuple, tuple]:
    lo, hi = (0, 0, 0), (999, 0, 0)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if part.startswith(">="):
            lo = parse_version(part[2:])
        elif part.startswith("<"):
            hi = parse_version(part.lstrip("<="))
    return lo, hi


def row_for(version, engine: str = "vllm") -> tuple[dict, str | None]:
    """(the table row for ``version``, None) when a row holds it; else (the nearest row, a one-line note)."""
    rows = table(engine)["releases"]
    for row in rows:
        if in_range(version, row["versions"]):
            return row, None
    v = parse_version(version)
    name = table(engine)["label"]
    vs = ".".join(map(str, v))
    spans = [(_bounds(r["versions"]), r) for r in rows]
    newest = max(spans, key=lambda s: s[0][1])
    oldest = min(spans, key=lambda s: s[0][0])
    if v >= newest[0][1]:
        row = newest[1]
        top = table(engine)["checked_up_to"]
        return row, (f"{name} {vs} is newer than every release in the table (checked up to {top}): using record "
                     f"{row['record']}, the nearest ({row['versions']})")
    if v < oldest[0][0]:
        row = oldest[1]
        return row, (f"{name} {vs} is older than every release in the table: using record {row['record']}, the "
                     f"nearest ({row['versions']}); its id reading was not checked")
    row = min(spans, key=lambda s: min(abs(_num(v) - _num(s[0][0])), abs(_num(v) - _num(s[0][1]))))[1]
    return row, f"{name} {vs} is in no row of the table: using record {row['record']}, the nearest ({row['versions']})"


def _num(v: tuple) -> int:
    return v[0] * 1_000_000 + v[1] * 1000 + v[2]


def record_for(version, engine: str = "vllm") -> tuple[str, str | None]:
    """(record name, note): the record that holds for this release; the note (None when a row holds it) says
    which row was used instead and why."""
    row, note = row_for(version, engine)
    return row["record"], note


def has(version, feature: str, engine: str = "vllm") -> bool:
    """Whether the release has ``feature`` (the row's ``features``, e.g. ``per_request_metrics``)."""
    return bool(row_for(version, engine)[0].get("features", {}).get(feature, False))


def predict(version, draft_config, target, engine: str = "vllm") -> dict:
    """What the release's record says the server does with this draft: ``{"record", "taps", "feasible",
    "explanation", "refused", "note"}`` (computed from the config alone). ``refused``: why the release does not start
    with it (:func:`workbench.engines.records.refusal`), else None."""
    record, note = record_for(version, engine)
    r = wiring_for(record, draft_config, target)
    why = refusal(record, draft_config)
    return {"record": record, "taps": ",".join(r.taps), "feasible": bool(r.feasible) and why is None,
            "explanation": r.explanation, "refused": why, "warnings": list(r.warnings), "note": note}


__all__ = ["has", "in_range", "parse_version", "predict", "record_for", "row_for"]
