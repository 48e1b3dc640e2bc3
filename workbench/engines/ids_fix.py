"""A draft with the one-line fix applied: a copy whose config makes the engine feed the taps it was trained on.

    >>> from workbench.engines.ids_fix import fixed_copy
    >>> # fixed_copy("data/demo/draft-mismatched", "data/demo/target", "/tmp/wb")   # -> /tmp/wb/draft-mismatched-fixed

The fix is the one ``workbench wiring`` prints: the ids (in the engine's own convention, ``records.ids_for_taps``)
written where the engine reads them first (its record's ``keys``: top-level ``eagle_aux_hidden_state_layer_ids``
for vLLM, ``eagle_config.…`` for SGLang). The draft it is made from is never touched. The copy is keyed by what it
was made from (the source's content and the ids): made again whenever the source changed, reused otherwise. It is
what the speed sweeps (``make demo``, ``bench/speed.py``, ``bench/load.py``) serve as "fixed".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import content_digest, write_json
from workbench.engines import records
from workbench.engines.taps import load_config
from workbench.engines.trainers import trained_wiring_from_config

SUFFIX = "-fixed"


def fixed_copy(draft, target, folder, engine: str = "vllm") -> Path:
    """``draft`` copied into ``folder``/``<name>-fixed`` with the ids that make ``engine`` feed the taps the draft
    was trained on (its ``workbench.trained_taps``, or its trainer's own record of them). One line names what is
    missing when no fix can be made."""
    draft, target = Path(draft), Path(target)
    cfg = dict(load_config(draft / "config.json", "draft config"))
    tcfg = load_config(target / "config.json", "target config")
    trained = trained_wiring_from_config(cfg, tcfg)
    if trained is None:
        raise WorkbenchError(f"{draft}/config.json: no record of the taps it was trained on "
                             f"(workbench.trained_taps or its trainer's): no one-line fix to make")
    fix = records.ids_for_taps(engine, trained.taps, tcfg)
    if not fix.feasible:
        raise WorkbenchError(f"{draft}: {fix.reason}")
    out = Path(folder) / f"{draft.name}{SUFFIX}"
    made_from = {"source": content_digest(draft), "engine": engine, "ids": fix.ids}
    stamp = out / ".made-from.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == made_from:
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(draft, out, ignore=shutil.ignore_patterns(".*"))
    rec = records.get(engine)
    if rec.ids_arg:
        raise WorkbenchError(f"{engine} reads the ids from its server argument {rec.ids_arg}, not the draft's "
                             f"config: pass {fix.ids} there; no draft copy to make")
    if rec.keys[:1] != ("top",):
        cfg["eagle_config"] = {**(cfg.get("eagle_config") or {}), "eagle_aux_hidden_state_layer_ids": fix.ids}
    else:
        cfg["eagle_aux_hidden_state_layer_ids"] = fix.ids
    write_json(out / "config.json", cfg, indent=2)
    write_json(stamp, made_from)
    return out


def drafts(demo, names, work) -> dict:
    """{name: folder} of a sweep's drafts: each of ``names`` a folder of ``demo``, or ``"fixed:<folder>"`` for that
    folder's one-line fix for vLLM, made in ``work`` (:func:`fixed_copy`; named ``<folder>-fixed``)."""
    demo = Path(demo)
    out = {}
    for name in names:
        if name.startswith("fixed:"):
            made = fixed_copy(demo / name.split(":", 1)[1], demo / "target", work)
            out[made.name] = str(made)
        else:
            out[name] = str(demo / name)
    return out


__all__ = ["fixed_copy", "drafts", "SUFFIX"]
