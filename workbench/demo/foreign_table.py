"""The trainer × engine table: each draft as its trainer exported it, what each engine feeds it, what that costs.

    >>> # table = measure_foreign("data/demo-real"); print(markdown(table))

For each draft folder of the real demo (the project's ``draft-aligned``, ``draft-modelopt``, ``draft-speculators``;
those present), loaded unmodified by :func:`workbench.model.checkpoint.load_draft`:

- who trained it, in what format and id convention, and the taps it trained on
  (:func:`workbench.engines.trainers.provenance`);
- for each engine of :data:`ENGINES`, the taps it feeds (:func:`workbench.engines.wiring.resolve`) and, where they
  differ from the trained ones, the fix: the ids that make the engine feed the trained taps and where they go;
- the decode-path accept length (chain K=4, greedy, bonus counted) on ``val.jsonl`` under the trained taps and
  under each fed wiring, and the step-1 top-1 accuracy, from one target pass (:func:`workbench.simulate.acceptance.
  simulate`; the target's pass over val is cached in ``foreign-drafts.cache/``).

Written to ``<root>/foreign-drafts.json``; :func:`workbench.report.foreign.markdown` renders it (docs/foreign-drafts.md)
and :func:`workbench.report.foreign.card_html` puts it on the report's index.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from workbench import rows as data
from workbench.core.files import write_json
from workbench.engines.candidates import set_ids
from workbench.engines.records import get as engine_record
from workbench.engines.records import ids_for_taps
from workbench.engines.trainers import provenance
from workbench.engines.wiring import resolve
from workbench.load import inputs
from workbench.model import checkpoint
from workbench.report.foreign import ENGINES, FOLDERS, RESULT
from workbench.simulate import acceptance

DRAFTS = ("draft-aligned", *FOLDERS)
K = 4


def measure_draft(folder: Path, target, rows, *, cache_dir=None, engines=ENGINES, progress: bool = False) -> dict:
    """One draft's row group of the table (see the module docstring)."""
    d = checkpoint.load_draft(folder, target)
    prov = provenance(d.raw_config, target.n_layers)
    trained = prov.trained.spec if prov.trained is not None else None
    fed = {}
    for e in engines:
        r = resolve(e, target.n_layers, d.raw_config)
        spec = ",".join(r.taps)
        entry = {"engine": e, "label": engine_record(e).label, "taps": spec, "feasible": bool(r.feasible),
                 "explanation": r.explanation, "warnings": list(r.warnings), "fix": None}
        if trained is not None and spec != trained:
            f = ids_for_taps(e, prov.trained.taps, target.n_layers)
            entry["fix"] = set_ids(e, f.ids) if f.feasible else f"no ids feed {trained}: {f.reason}"
        fed[e] = entry
    specs = [trained] if trained else []
    specs += [s["taps"] for s in fed.values() if s["feasible"] and len(s["taps"].split(",")) == 3]
    specs = list(dict.fromkeys(specs))
    res = acceptance.simulate(target, d, rows, specs, K=K, progress=progress, acc_topk=1, cache_dir=cache_dir) \
        if specs else {}
    accept = {s: round(float(r.decode_path["accept_length"]), 4) for s, r in res.items()}
    for entry in fed.values():
        entry["accept"] = accept.get(entry["taps"])
    return {"folder": folder.name, "provenance": prov.to_dict(), "trained_taps": trained,
            "accept_trained": accept.get(trained), "top1": round(float(res[trained].top1), 4) if trained in res else None,
            "accept": accept, "engines": fed, "notes": list(d.notes)}


def measure_foreign(root, drafts=DRAFTS, *, engines=ENGINES, progress: bool = True, write: bool = True) -> dict:
    """The table for every draft folder of ``drafts`` present under ``root``; written to ``root/foreign-drafts.json``."""
    root = Path(root)
    target = inputs.target(root / "target")
    rows = data.load(root / "val.jsonl")
    t0, out = time.time(), {}
    for name in drafts:
        folder = root / name
        if not (folder / "config.json").is_file():
            continue
        if progress:
            print(f"measuring {name} ...", flush=True)
        out[name] = measure_draft(folder, target, rows, cache_dir=root / "foreign-drafts.cache", engines=engines)
        man = root / f"{name}.manifest.json"
        if man.is_file():
            m = json.loads(man.read_text())
            out[name]["trained_by"] = {k: m.get(k) for k in ("title", "version", "seed", "wall_s", "recipe")}
    result = {"format": 1, "K": K, "data": "val.jsonl", "n_rows": len(rows), "n_layers": target.n_layers,
              "metric": f"accept length (decode path, chain K={K}, greedy, bonus counted)",
              "engines": list(engines), "drafts": out, "seconds": round(time.time() - t0, 1)}
    if write:
        write_json(root / RESULT, result)
    return result


def quality(result: dict) -> str:
    """Side by side on the same rows: accept length on the trained taps and step-1 top-1, per draft."""
    lines = [f"| draft | trainer | taps trained | accept (K={result['K']}, own taps) | step-1 top-1 | trained in |",
             "|---|---|---|---|---|---|"]
    for name, d in result["drafts"].items():
        tb = d.get("trained_by") or {}
        wall = f"{tb['wall_s'] / 60:.1f} min" if tb.get("wall_s") else "—"
        acc = d.get("accept_trained")
        top1 = d.get("top1")
        lines.append(f"| `{name}` | {d['provenance']['label']} | `{d['trained_taps']}` | "
                     f"{'—' if acc is None else f'{acc:.2f}'} | {'—' if top1 is None else f'{top1:.2f}'} | {wall} |")
    return "\n".join(lines)
