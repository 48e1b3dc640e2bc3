"""Engine knowledge kept as data: one readable table per engine (``engines/data/<engine>.json``), read here only.

    >>> from workbench.engines.tables import table
    >>> list(table("vllm")["records"])[:2], table("vllm")["releases"][-1]["record"]
    (['vllm', 'vllm-v2'], 'vllm')

Each table holds the engine's records (how a release reads a draft config: id keys, what an id means, the EAGLE-3.1
options, with the source lines each fact was read from) and its release ranges (which record holds for which
release, the release's features, its live evidence, and how it installs on a CPU). :mod:`workbench.engines.records`
builds its records from the first, :mod:`workbench.engines.releases` answers from the second.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from workbench.core.errors import WorkbenchError

DATA = Path(__file__).resolve().parent / "data"
ENGINES = ("vllm", "models", "flags")


@functools.lru_cache(maxsize=None)
def table(engine: str = "vllm") -> dict:
    """The table of ``engine`` (``engines/data/<engine>.json``; ``models``: the model-specific facts the family rules
    need), parsed once."""
    if engine not in ENGINES:
        raise WorkbenchError(f"no table for engine {engine!r} (tables: {', '.join(ENGINES)})")
    return json.loads((DATA / f"{engine}.json").read_text())


__all__ = ["DATA", "ENGINES", "table"]
