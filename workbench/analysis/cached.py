"""Computed once: the rewire refit and the cost model, cached beside the draft under a content key (issue 48).

    >>> from workbench.analysis.cached import cache_dir
    >>> str(cache_dir("data/demo/draft-mismatched"))
    'data/demo/.workbench-cache'

Every report page that answers "what does the fix recover?" needs the same rewire (``wb.diagnose`` on pages 01,
02 and 03), and notebook 03's parts the same cost model. Each is computed once per (target, draft, data, engine,
settings):
the key hashes the target's and the draft's weights (each tensor's name, shape, dtype and whole bytes:
:func:`module_fingerprint`) and configs (without the path they were loaded from), the code that computes the result
(:func:`code_version`: the source of every module it runs, so no constant to bump), the rows read
(:func:`rows_fingerprint`), the engine and every setting. A changed input changes the key and recomputes; an
unreadable or stale file is recomputed, never trusted. Files are written atomically, in
``<draft's folder>/../.workbench-cache/``: a rewire as JSON (what it measured), safetensors (the refitted ``fc``)
and npz (the before / after / reference acceptance, no pickle); a cost model as its JSON. The cost model's key
names the machine (CPU model, cores, torch threads and version; the GPU's name and capability on CUDA): timings
are not reused on another kind of machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

from workbench.analysis import rewire as rw
from workbench.core.devices import cpu_model
from workbench.core.files import atomic_write, write_json
from workbench.core.setting import Setting
from workbench.load import inputs
from workbench.simulate.distributed import decode_results, encode_results, module_fingerprint, rows_fingerprint
from workbench.stats import cost

FOLDER = ".workbench-cache"
_PKG = Path(__file__).resolve().parents[1]
#: the code a cached result is computed by: its hash is the key's "code" (:func:`code_version`)
CODE = ("analysis/cached.py", "analysis/rewire.py", "engines", "load", "model", "simulate", "stats", "rows",
        "core/setting.py", "core/sampling.py")


def code_version(files=None) -> str:
    """The hash of the source of every module that computes a cached result (:data:`CODE`: files, or folders read
    whole, data tables included): change one line of ``rewire.py`` or of an engine record and the key changes.

        >>> len(code_version()) == 16 and code_version() == code_version()
        True
    """
    h = hashlib.blake2b(digest_size=8)
    for entry in files if files is not None else CODE:
        path = Path(entry) if Path(entry).is_absolute() else _PKG / entry
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.suffix in (".py", ".json") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(_PKG) if f.is_relative_to(_PKG) else f.name).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def cache_dir(draft_path) -> Path:
    """Where the results for the draft at ``draft_path`` are kept: beside its folder."""
    return Path(str(draft_path).rstrip("/")).parent / FOLDER


def digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _same_key(meta: dict, key: dict) -> bool:
    """Whether a cached file's stored key is ``key`` (compared as JSON, the form it was stored in)."""
    return meta.get("key") == json.loads(json.dumps(key, default=str))


def _rows(ds, limit) -> str:
    return rows_fingerprint(ds.rows(limit))


def _models(tgt, drf) -> dict:
    return {"target": module_fingerprint(tgt.model, tgt.config.to_dict() if hasattr(tgt.config, "to_dict")
                                         else tgt.config),
            "draft": module_fingerprint(drf, drf.raw_config), "dtype": str(drf.fc.weight.dtype)}


def rewire_key(tgt, drf, train, eval_ds, *, engine: str, K: int, limit, eval_limit) -> dict:
    train_ds = train if not isinstance(train, (str, Path)) else inputs.dataset(str(train), tgt)
    return {"what": "rewire", "code": code_version(), **_models(tgt, drf), "train": _rows(train_ds, limit),
            "eval": _rows(eval_ds, eval_limit), "engine": engine, "K": int(K), "limit": limit,
            "eval_limit": eval_limit}


def _load_rewire(stem: Path, key: dict, old):
    """The cached :class:`RewireResult` at ``stem`` for ``key``, or None (missing, stale or unreadable)."""
    from safetensors.torch import load_file

    try:
        meta = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
        if not _same_key(meta, key):
            return None
        fc = load_file(str(stem.with_suffix(".safetensors")))
        results, _ = decode_results(stem.with_suffix(".npz").read_bytes())
        m = meta["result"]
        ridge = rw.RidgeFit(weight=fc["weight"], bias=fc.get("bias"), **m["ridge"])
        new = rw.with_fc(old, ridge.weight, ridge.bias, meta["config"])
        out = rw.RewireResult(from_taps=tuple(m["from_taps"]), to_taps=tuple(m["to_taps"]), engine=m["engine"],
                              resolution=m["resolution"], out=None, ridge=ridge, refit_info=m["refit"], K=m["K"],
                              setting=Setting.from_dict(m["setting"]), seconds=m["seconds"], draft=new)
    except Exception:        # a damaged or foreign file (any kind of damage) is recomputed, never trusted
        return None
    out.before, out.after, out.reference = (results.get(k) for k in ("before", "after", "reference"))
    return out


def _save_rewire(stem: Path, key: dict, res) -> None:
    from safetensors.torch import save

    tensors = {"weight": res.ridge.weight.detach().cpu().contiguous()}
    if res.ridge.bias is not None:
        tensors["bias"] = res.ridge.bias.detach().cpu().contiguous()
    with atomic_write(stem.with_suffix(".safetensors"), "wb", encoding=None) as f:
        f.write(save(tensors))
    acc = {k: v for k, v in (("before", res.before), ("after", res.after), ("reference", res.reference))
           if v is not None}
    with atomic_write(stem.with_suffix(".npz"), "wb", encoding=None) as f:
        f.write(encode_results(acc, key))
    d = res.to_dict()
    ridge = {k: d["ridge"][k] for k in ("lam", "alpha", "r2_heldout", "n_fit", "n_heldout", "grid")}
    write_json(stem.with_suffix(".json"), {   # last: its presence says the other two are complete
        "key": key, "config": res.draft.config,
        "result": {"from_taps": list(res.from_taps), "to_taps": list(res.to_taps), "engine": res.engine,
                   "resolution": res.resolution, "ridge": ridge, "refit": res.refit_info, "K": res.K,
                   "setting": res.setting.to_dict(), "seconds": res.seconds}})


def rewire(tgt, drf, draft_path, train, eval_ds, *, engine: str, K: int, limit=None, eval_limit=None,
           progress: bool = False):
    """``(RewireResult, "reused" | "computed")``: :func:`workbench.analysis.rewire.rewire` of the loaded
    ``drf`` (found at ``draft_path``; None: no cache) for ``engine``, evaluated on ``eval_ds``."""
    def compute():
        return rw.rewire(tgt, drf, train, engine=engine, eval_data=eval_ds, K=K, limit=limit, eval_limit=eval_limit,
                         progress=progress)

    if not draft_path:
        return compute(), "computed"
    key = rewire_key(tgt, drf, train, eval_ds, engine=engine, K=K, limit=limit, eval_limit=eval_limit)
    stem = cache_dir(draft_path) / f"rewire-{digest(key)}"
    hit = _load_rewire(stem, key, drf)
    if hit is not None:
        return hit, "reused"
    res = compute()
    try:
        os.makedirs(stem.parent, exist_ok=True)
        _save_rewire(stem, key, res)
    except OSError:          # a read-only folder: the result stands, it is just not kept
        pass
    return res, "computed"


def machine(device: str = "cpu") -> str:
    """The machine a timing belongs to: CPU model, cores, torch threads and version, and the GPU for CUDA."""
    import torch

    out = (f"{platform.machine()} {cpu_model()}, {os.cpu_count()} cpus, {torch.get_num_threads()} threads, "
           f"torch {torch.__version__}")
    if str(device).startswith("cuda") and torch.cuda.is_available():
        d = torch.device(device)
        out += f", {torch.cuda.get_device_name(d)} (capability {torch.cuda.get_device_capability(d)})"
    return out


def cost_model(tgt, drf, draft_path, *, verify_probes, lane_probes, repeats: int):
    """``(CostModel, "reused" | "computed")``: :func:`workbench.stats.cost.measure` once per target, draft,
    probes and machine."""
    def compute():
        return cost.measure(tgt, drf, verify_probes=tuple(verify_probes), lane_probes=tuple(lane_probes),
                            repeats=repeats)

    if not draft_path:
        return compute(), "computed"
    key = {"what": "cost model", "code": code_version(), **_models(tgt, drf), "device": str(drf.fc.weight.device),
           "machine": machine(str(drf.fc.weight.device)), "verify_probes": list(verify_probes), "lane_probes": list(lane_probes),
           "repeats": int(repeats)}
    path = cache_dir(draft_path) / f"cost-{digest(key)}.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        if _same_key(meta, key):
            return cost.CostModel.from_dict(meta["cost_model"], where=str(path)), "reused"
    except Exception:        # missing, damaged or foreign: measured again
        pass
    cm = compute()
    try:
        os.makedirs(path.parent, exist_ok=True)
        write_json(path, {"key": key, "cost_model": cm.to_dict()})
    except OSError:
        pass
    return cm, "computed"


__all__ = ["cache_dir", "code_version", "digest", "rewire_key", "rewire", "cost_model", "machine", "CODE", "FOLDER"]
