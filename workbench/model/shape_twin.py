"""A shape twin of a draft: its own config and tensor shapes, with weights the workbench makes (seeded).

    >>> # folder = make("data/demo-real/draft-mismatched", "speed-twins")   # -> speed-twins/twin-<key>/
    >>> shape_key({"architectures": ["LlamaForCausalLMEagle3"], "eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
    ...           {"fc.weight": ((8, 24), "F32")}) == shape_key({"architectures": ["LlamaForCausalLMEagle3"]},
    ...                                                      {"fc.weight": ((8, 24), "F32")})
    True

A served chain verify step costs the same whatever the draft's weights: the draft runs K forwards of the same
shapes and the target verifies K + 1 tokens. So the cost of one verify step at K (``workbench vllm speed``) can be
measured on a server of the twin, never on the passes of the draft it predicts: an out-of-sample calibration for
a user with one draft (issue 47). The twin keeps every file of the draft but its weights: the same ``config.json``
(so an engine reads it exactly as it reads the draft, format and all), the integer tensors as they are (``d2t``,
``t2d``: the vocabulary map), and every floating tensor replaced by a seeded normal(0, 0.02) draw of its shape and
dtype (norm weights: ones). Its accept length is about 0, which the step cost does not depend on.

Drafts whose configs differ only in their layer ids (which taps they read, not what a step costs) and whose tensors
have the same names, shapes and dtypes share one twin (:func:`shape_key`). Written atomically (a temporary sibling
renamed into place) and reused when it is already there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from workbench.core.errors import WorkbenchError

LAYER_ID_KEYS = ("eagle_aux_hidden_state_layer_ids", "trained_taps")   # anywhere: which taps, not what a step costs
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")
STD = 0.02
MANIFEST = "twin.json"


def _without_layer_ids(cfg):
    if isinstance(cfg, dict):
        return {k: _without_layer_ids(v) for k, v in cfg.items() if k not in LAYER_ID_KEYS}
    if isinstance(cfg, list):
        return [_without_layer_ids(v) for v in cfg]
    return cfg


def shape_key(config: dict, tensors: dict) -> str:
    """A content key for what a verify step costs: the config without its layer ids, and each tensor's name, shape
    and dtype (``tensors``: {name: (shape, dtype)})."""
    body = {"config": _without_layer_ids(config),
            "tensors": {k: [list(s), str(d)] for k, (s, d) in sorted(tensors.items())}}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]


def _read(draft: Path) -> tuple[dict, list[Path], dict]:
    cfg_path = draft / "config.json"
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkbenchError(f"{cfg_path}: no config.json (expected a draft folder)") from None
    except ValueError as e:
        raise WorkbenchError(f"{cfg_path}: not JSON ({e})") from None
    files = sorted(p for p in draft.iterdir() if p.is_file() and p.suffix == ".safetensors")
    if not files:
        others = sorted(p.name for p in draft.iterdir() if p.is_file() and p.suffix in WEIGHTS)
        raise WorkbenchError(f"{draft}: no *.safetensors weights (found {others or 'none'}); a shape twin is made "
                             f"from safetensors only")
    from safetensors import safe_open

    tensors = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for name in sf.keys():
                sl = sf.get_slice(name)
                tensors[f"{f.name}:{name}"] = (tuple(sl.get_shape()), sl.get_dtype())
    return config, files, tensors


def twin_name(draft) -> str:
    """The folder name :func:`make` gives ``draft``'s shape twin (``twin-<key>``), without making it."""
    config, _, tensors = _read(Path(draft))
    return f"twin-{shape_key(config, tensors)}"


def make(draft, root, seed: int = 0) -> Path:
    """The shape twin of ``draft`` under ``root`` (``root/twin-<key>``), made once and reused."""
    import torch
    from safetensors.torch import load_file, save_file

    draft, root = Path(draft), Path(root)
    config, files, tensors = _read(draft)
    key = shape_key(config, tensors)
    out = root / f"twin-{key}"
    if (out / MANIFEST).is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".twin-{key}-", dir=root))
    try:
        for p in draft.iterdir():
            if p.is_file() and p.suffix not in WEIGHTS:
                shutil.copy2(p, tmp / p.name)
        gen = torch.Generator().manual_seed(int(seed))
        for f in files:
            made = {}
            for name, t in sorted(load_file(str(f)).items()):
                if not t.is_floating_point():
                    made[name] = t.clone()
                elif "norm" in name:
                    made[name] = torch.ones_like(t)
                else:
                    made[name] = (torch.randn(t.shape, generator=gen, dtype=torch.float32) * STD).to(t.dtype)
            save_file(made, str(tmp / f.name), metadata={"format": "pt", "workbench": f"shape twin of {draft.name}"})
        (tmp / MANIFEST).write_text(json.dumps({"of": str(draft), "key": key, "seed": int(seed), "std": STD,
                                                "kept": "config.json, non-weight files, integer tensors"}, indent=2))
        try:
            os.replace(tmp, out)
        except OSError:
            if not (out / MANIFEST).is_file():      # not another process that finished the same twin first
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
