"""EAGLE-3 draft checkpoints on disk: load (strict keys, safetensors first) and save.

    >>> from workbench.model.checkpoint import load_draft, save_draft
    >>> # d = load_draft("data/demo/draft-aligned", target)
    >>> # save_draft(d, "out/my-draft")

Checkpoint format (SafeAILab/EAGLE, SpecForge, SGLang): ``config.json`` with architectures
``["LlamaForCausalLMEagle3"]`` and ``model.safetensors`` (or ``pytorch_model.bin``, read with
``weights_only=True``; sharded ``*.index.json`` too). vLLM ``speculators`` checkpoints
(``speculators_model_type: eagle3``, ``layers.0.*`` keys) are read as well. Keys are strict:
unknown or missing keys are an error that lists them (SGLang would silently skip them).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from workbench.core.devices import default_dtype, resolve_device
from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, write_json
from workbench.engines.families import family_of, mask_token, mixed_conventions
from workbench.engines.taps import draft_layer_ids
from workbench.model.draft import ARCHITECTURE, Eagle3Draft

# vLLM's registry maps all of these to llama_eagle3.Eagle3LlamaForCausalLM (the P-EAGLE names since vLLM #41826)
_ARCH_ALIASES = (ARCHITECTURE, "Eagle3LlamaForCausalLM", "PEagleDraftModel", "PeagleLlamaForCausalLM")


def draft_architecture(raw) -> str | None:
    """The EAGLE-3 draft architecture a raw ``config.json`` dict declares, or None for any other model.

        >>> draft_architecture({"architectures": ["LlamaForCausalLMEagle3"]}), draft_architecture({"architectures": ["LlamaForCausalLM"]})
        ('LlamaForCausalLMEagle3', None)
    """
    if not isinstance(raw, dict):
        return None
    if "speculators_model_type" in raw:
        return f"speculators {raw['speculators_model_type']}"
    return next((a for a in raw.get("architectures") or [] if a in _ARCH_ALIASES), None)


# ----------------------------------------------------------------------------------------- files

_SKIP_ON_SAVE = ("embed_tokens.weight",)


def _read_json(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise WorkbenchError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise WorkbenchError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def _load_tensor_file(path: Path) -> dict:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        try:
            return load_file(str(path), device="cpu")
        except Exception as e:  # safetensors raises its own SafetensorError / OSError
            raise WorkbenchError(f"{path}: not a readable safetensors file ({str(e).splitlines()[0]})") from None
    import pickle
    try:
        sd = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise WorkbenchError(f"{path}: refused, loading it needs unsafe unpickling (torch.load weights_only=True "
                             f"said: {str(e).splitlines()[0][:160]}); convert it to safetensors") from None
    except Exception as e:
        raise WorkbenchError(f"{path}: not a readable torch checkpoint ({str(e).splitlines()[0][:160]})") from None
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise WorkbenchError(f"{path}: expected a flat state dict of tensors")
    return sd


def check_finite(state_dict: dict, where) -> None:
    """One line naming the first tensor that holds a NaN or an infinity, and the first bad index (a diverged training
    run exports such weights; the draft would then accept nothing, silently).

        >>> check_finite({"fc.weight": torch.tensor([[0.0, float("nan")]])}, "d/model.safetensors")
        Traceback (most recent call last):
        ...
        workbench.core.errors.WorkbenchError: d/model.safetensors: tensor fc.weight holds nan at index [0, 1] (shape [1, 2]): the weights are broken (a diverged training run?); expected finite values
    """
    for name, t in state_dict.items():
        if not torch.is_floating_point(t) or bool(torch.isfinite(t).all()):
            continue
        flat = int(torch.nonzero(~torch.isfinite(t.reshape(-1)))[0])
        idx = list(torch.unravel_index(torch.tensor(flat), t.shape)) if t.dim() else []
        value = float(t.reshape(-1)[flat])
        raise WorkbenchError(f"{where}: tensor {name} holds {value} at index {[int(i) for i in idx]} (shape "
                             f"{list(t.shape)}): the weights are broken (a diverged training run?); expected finite "
                             "values")


def _load_weights(folder: Path) -> tuple[dict, str]:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return _load_tensor_file(folder / name), name
    for name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = folder / name
        if index.is_file():
            wmap = _read_json(index).get("weight_map")
            if not isinstance(wmap, dict):
                raise WorkbenchError(f"{index}: missing key 'weight_map' (expected tensor name -> shard file)")
            sd = {}
            for shard in sorted(set(wmap.values())):
                if not (folder / shard).is_file():
                    raise WorkbenchError(f"{index}: shard {shard!r} is listed but not in {folder}")
                sd.update(_load_tensor_file(folder / shard))
            return sd, name
    raise WorkbenchError(f"{folder}: no weights (expected model.safetensors, pytorch_model.bin or a sharded "
                         "*.index.json)")


def _not_simulated(raw: dict) -> str:
    """Why a config of another kind is no draft the simulator runs, in a few words (never a guess)."""
    try:
        fam = family_of(raw)
    except WorkbenchError:
        fam = None
    if fam is not None and fam.name in ("dflash", "dspark", "mtp"):
        return (f" (a {fam.label} draft: its acceptance is not simulated; `workbench wiring --draft` says what each "
                f"engine feeds it, docs/families.md)")
    arch = raw.get("architectures") or []
    if any("Eagle" in str(a) for a in arch):
        return " (an EAGLE-1/2 draft: no fc over three taps)"
    return " (a plain model, not a draft)" if arch else ""


def _speculators_to_llama(cfg: dict, where: str) -> dict:
    """A vLLM ``speculators`` Eagle3 config → the SpecForge/SGLang (Llama) draft config."""
    if cfg.get("speculators_model_type") not in ("eagle3", "peagle"):
        raise WorkbenchError(f"{where}: speculators_model_type is {cfg.get('speculators_model_type')!r}"
                             f"{_not_simulated(cfg)}; only 'eagle3' and 'peagle' (P-EAGLE) speculators are EAGLE-3 "
                             "drafts")
    layer = cfg.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise WorkbenchError(f"{where}: missing key 'transformer_layer_config' (the draft layer's Llama config)")
    if cfg.get("norm_before_fc") and cfg.get("fc_norm"):
        # speculators models/eagle3/config.py _check_norm_flags refuses this combination
        raise WorkbenchError(f"{where}: norm_before_fc and fc_norm are both true; speculators allows one or "
                             "the other (expected at most one of them)")
    out = {k: v for k, v in layer.items() if k not in ("architectures",)}
    out.update(architectures=[ARCHITECTURE], model_type="llama", num_hidden_layers=1)
    # vLLM transformers_utils/configs/speculators/algos.py update_eagle3 converts a speculators config
    # with these defaults: norm_before_residual True when missing, the Eagle-3.1 options False; its update_peagle
    # defaults norm_before_residual to False, as speculators' own P-EAGLE does (models/peagle/core.py).
    peagle = cfg.get("speculators_model_type") == "peagle"
    out["norm_before_residual"] = bool(cfg.get("norm_before_residual", not peagle))
    for key in ("norm_before_fc", "fc_norm", "norm_output"):
        out[key] = bool(cfg.get(key, False))
    for key in ("draft_vocab_size", "target_hidden_size", "tie_word_embeddings", "mask_token_id"):
        if cfg.get(key) is not None:
            out[key] = cfg[key]
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        # speculators ids are vLLM's convention (id k = L{k-1}); keep them top-level as vLLM's conversion
        # does: under eagle_config they would be read with SGLang's/SpecForge's rule (one layer off)
        out["eagle_aux_hidden_state_layer_ids"] = ids
        out.pop("eagle_config", None)
    return out


def _rename(key: str) -> str:
    if key.startswith("model."):
        key = key[len("model."):]
    if key.startswith("layers.0."):
        key = "midlayer." + key[len("layers.0."):]
    # SGLang llama_eagle3.py legacy_name_map: aux_norm_{low,mid,high} are fc_norm.{0,1,2}
    for old, new in (("aux_norm_low.", "fc_norm.0."), ("aux_norm_mid.", "fc_norm.1."),
                     ("aux_norm_high.", "fc_norm.2.")):
        if key.startswith(old):
            key = new + key[len(old):]
    return {"draft_id_to_target_id": "d2t"}.get(key, key)


def _short(names) -> str:
    names = sorted(names)
    return ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")


def _check_id_range(raw: dict, n: int, cfg_path: Path) -> None:
    """Every layer id a config carries lies in [0, N] (N = the target's layers; vLLM's id N is the last layer)."""
    try:
        found = draft_layer_ids(raw)
    except WorkbenchError as e:                  # an id list that is not integers: name the file
        raise WorkbenchError(f"{cfg_path}: {e}") from None
    for key, ids in (("eagle_aux_hidden_state_layer_ids", found["top"]),
                     ("eagle_config.eagle_aux_hidden_state_layer_ids", found["nested"])):
        if ids:
            bad = [i for i in ids if not 0 <= i <= n]
            if bad:
                raise WorkbenchError(f"{cfg_path}: {key} has id {bad[0]} outside [0, {n}] for a target with {n} "
                                     f"layers (ids {ids})")


def load_draft(path, target=None, *, device: str | None = None, dtype=None) -> Eagle3Draft:
    """Load an EAGLE-3 draft checkpoint directory; ``embed_tokens`` comes from ``target`` when absent.

        >>> d = load_draft("data/demo/draft-aligned", target)          # doctest: +SKIP
        >>> describe_draft(d)["draft_vocab_size"]                        # doctest: +SKIP
    """
    folder = Path(path)
    if folder.is_file() and folder.name == "config.json":
        folder = folder.parent
    if not folder.is_dir():
        raise WorkbenchError(f"{folder}: no such draft directory")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise WorkbenchError(f"{folder}: no config.json (expected an EAGLE-3 draft directory: config.json + "
                             "model.safetensors)")
    raw = _read_json(cfg_path)
    if not isinstance(raw, dict):
        raise WorkbenchError(f"{cfg_path}: expected a JSON object")
    fmt = "eagle3"
    if "speculators_model_type" in raw:
        cfg, fmt = _speculators_to_llama(raw, str(cfg_path)), "speculators"
    else:
        mixed_conventions(raw, str(cfg_path))
        arch = raw.get("architectures") or []
        if not any(a in _ARCH_ALIASES for a in arch):
            raise WorkbenchError(f"{cfg_path}: architectures is {arch!r}{_not_simulated(raw)}; "
                                 f"expected ['{ARCHITECTURE}']")
        cfg = raw
    draft = Eagle3Draft(cfg, where=str(cfg_path))
    draft.source_format, draft.path = fmt, str(folder)
    sd_raw, wname = _load_weights(folder)
    check_finite(sd_raw, folder / wname)
    if fmt == "eagle3":
        nested = isinstance(raw.get("eagle_config"), dict) and \
            raw["eagle_config"].get("eagle_aux_hidden_state_layer_ids") is not None
        if not nested and raw.get("eagle_aux_hidden_state_layer_ids") is not None:
            notes = ["eagle_aux_hidden_state_layer_ids is top-level only: SGLang reads only "
                     "eagle_config.eagle_aux_hidden_state_layer_ids and silently uses its default taps"]
        else:
            notes = []
    sd = {}
    for k, v in sd_raw.items():
        if fmt == "speculators" and k in ("verifier_norm.weight", "verifier_lm_head.weight"):
            continue      # speculators core.py: the verifier's own norm/head, kept for training only
        sd[_rename(k)] = v
    mask_hidden = sd.pop("mask_hidden", None)     # P-EAGLE (vLLM llama_eagle3.py load_weights: a buffer)
    wfile = folder / wname
    # fc bias: speculators checkpoints carry one without a config flag; in the EAGLE-3 format an
    # unflagged fc.bias is an unknown key (SGLang would silently drop it), reported by the strict check
    if "fc.bias" in sd and not draft.spec.fc_bias and fmt == "speculators":
        draft = Eagle3Draft(dict(cfg, bias=True), where=str(cfg_path))
        draft.source_format, draft.path = fmt, str(folder)
    draft.raw_config = raw            # config.json as written (engines' id rules read this one)
    window = cfg.get("sliding_window")
    if "sliding_attention" in (cfg.get("layer_types") or []) and isinstance(window, int):
        # speculators writes layer_types ["sliding_attention"] with sliding_window 2048; vLLM's Llama attention
        # then windows the draft layer. The simulator attends to the whole row: equal up to the window.
        draft.notes.append(f"the draft layer attends to a sliding window of {window} tokens (layer_types); "
                           f"workbench attends to the whole row, so rows longer than {window} tokens differ")
    draft.notes += notes if fmt == "eagle3" else []
    expected = {k: v for k, v in draft.state_dict().items()}
    optional = {"embed_tokens.weight", "t2d"} | ({"d2t"} if draft.draft_vocab_size == draft.vocab_size else set())
    if fmt == "speculators" and draft.spec.norm_before_fc and "input_norm.weight" not in sd:
        # speculators core.py lists input_norm.weight in _keys_to_ignore_on_load_missing: it stays ones
        optional.add("input_norm.weight")
        draft.notes.append("norm_before_fc is on but the checkpoint has no input_norm.weight: "
                           "its weight stays ones (as speculators loads it)")
    if not draft.spec.has_draft_vocab_key and target is not None:
        optional.add("lm_head.weight")
    unknown = set(sd) - set(expected)
    missing = set(expected) - set(sd) - optional
    if unknown or missing:
        parts = ([f"unknown keys: {_short(unknown)}"] if unknown else []) + \
                ([f"missing keys: {_short(missing)}"] if missing else [])
        raise WorkbenchError(f"{wfile}: {'; '.join(parts)} (expected EAGLE-3 names like fc.weight, "
                             "midlayer.self_attn.q_proj.weight, lm_head.weight, d2t)")
    fcw = sd["fc.weight"]
    if fcw.dim() == 2 and fcw.shape[1] != 3 * draft.target_hidden_size:
        raise WorkbenchError(f"{wfile}: fc.weight has input width {fcw.shape[1]}, expected 3 x target hidden "
                             f"size = 3 x {draft.target_hidden_size} = {3 * draft.target_hidden_size} "
                             "(set target_hidden_size in config.json if the target is wider than the draft)")
    for k, v in sd.items():
        if k in ("d2t", "t2d"):
            continue
        if tuple(v.shape) != tuple(expected[k].shape):
            raise WorkbenchError(f"{wfile}: {k} has shape {list(v.shape)}, expected {list(expected[k].shape)} "
                                 "from config.json")
    if target is not None and getattr(target, "hidden_size", draft.target_hidden_size) != draft.target_hidden_size:
        raise WorkbenchError(f"draft {folder} expects a target with hidden size {draft.target_hidden_size} "
                             f"(fc input 3 x {draft.target_hidden_size}) but the target has {target.hidden_size}")
    if target is not None and getattr(target, "n_layers", None):
        _check_id_range(raw, int(target.n_layers), cfg_path)
    if target is not None and getattr(target, "vocab_size", draft.vocab_size) != draft.vocab_size:
        raise WorkbenchError(f"draft {folder} has vocab_size {draft.vocab_size} but the target has "
                             f"{target.vocab_size}")
    params = {k: v for k, v in sd.items() if k not in ("d2t", "t2d", "embed_tokens.weight")}
    draft.load_state_dict(params, strict=False)
    if mask_hidden is not None:
        mask_token(cfg, str(cfg_path), draft.vocab_size)         # a P-EAGLE draft needs a valid one: one line if not
        draft.set_mask_hidden(mask_hidden, where=f"{wfile}: mask_hidden")
        draft.set_drafting(draft.own_drafting)  # parallel: what a P-EAGLE draft was trained for (vLLM parallel_drafting)
        if draft.own_drafting != "parallel":
            draft.notes.append("the checkpoint has mask_hidden (P-EAGLE) but the config names no mask token: "
                               "it can only draft a chain")
    elif raw.get("speculators_model_type") == "peagle" or raw.get("parallel_drafting"):
        raise WorkbenchError(f"{wfile}: a P-EAGLE draft config but no mask_hidden in the weights (vLLM refuses: "
                             "'mask_hidden not found in weights'); expected the learned mask_hidden tensor")
    if "d2t" in sd:
        draft.set_vocab_map(sd["d2t"], sd.get("t2d"), where=str(wfile))
    if "embed_tokens.weight" in sd:
        draft.set_embedding(sd["embed_tokens.weight"], source="checkpoint")
        if target is not None:
            # compared in the checkpoint's dtype: speculators saves a copy of the target's table in bf16
            emb = sd["embed_tokens.weight"]
            if not torch.equal(emb, target.embed_weight().detach().cpu().to(emb.dtype)):
                draft.notes.append("the checkpoint's embed_tokens differs from the target's input embedding")
    elif target is not None:
        draft.set_embedding(target.embed_weight(), source="target")
    if not draft.spec.has_draft_vocab_key:
        if "lm_head.weight" not in sd:
            head = target.model.get_output_embeddings().weight
            if tuple(head.shape) != tuple(draft.lm_head.weight.shape):
                raise WorkbenchError(f"{wfile}: no lm_head.weight and the target's lm_head has shape "
                                     f"{list(head.shape)}, expected {list(draft.lm_head.weight.shape)}")
            with torch.no_grad():
                draft.lm_head.weight.copy_(head.detach().to(draft.lm_head.weight))
            draft.notes.append("no draft_vocab_size and no lm_head.weight: lm_head taken from the target")
        else:
            draft.notes.append("config.json has no draft_vocab_size: SGLang then replaces lm_head with the "
                               "target's; workbench uses the checkpoint's lm_head.weight")
    dev = resolve_device(device if device is not None else (getattr(target, "device", None) or "cpu"))
    dt = dtype if dtype is not None else (getattr(target, "dtype", None) or default_dtype(dev))
    draft.to(device=dev, dtype=dt)
    draft.eval()
    return draft


def save_draft(draft: Eagle3Draft, path, *, extra_config: dict | None = None) -> Path:
    """Save in the SpecForge/SGLang format: ``config.json`` + ``model.safetensors`` (no embed_tokens; ``d2t``/``t2d``
    only for a reduced draft vocabulary, as vLLM requires).
    The config's layer ids stay under the keys they came with, each in its engine's convention (a
    speculators draft keeps its vLLM-convention ids top-level; ``rewire`` writes both keys).

        >>> save_draft(draft, "out/my-draft")                          # doctest: +SKIP

    Atomic: a new folder is written under a temporary name next to it and renamed into place, so a
    crash leaves no half checkpoint. Into an existing folder, both files are written to temporary
    files there first (fsync), then renamed over the old ones (weights first, config.json last);
    other files in the folder are kept.
    """
    from safetensors.torch import save

    folder = Path(path)
    cfg = dict(draft.config)
    cfg.update(architectures=[ARCHITECTURE], model_type="llama", num_hidden_layers=1,
               draft_vocab_size=draft.draft_vocab_size, vocab_size=draft.vocab_size,
               hidden_size=draft.hidden_size, bias=draft.spec.fc_bias,
               torch_dtype=str(draft.fc.weight.dtype).replace("torch.", ""))
    cfg.pop("dtype", None)
    if draft.target_hidden_size != draft.hidden_size:
        cfg["target_hidden_size"] = draft.target_hidden_size
    # each key keeps its own engine's convention (vLLM reads the top level as id k = L{k-1}, SGLang only
    # eagle_config with +1): never copy the ids of one key into the other (engines.py, facts page sec. 1)
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else None
    if eagle is not None and eagle.get("eagle_aux_hidden_state_layer_ids") is not None:
        cfg["eagle_config"] = dict(eagle, use_aux_hidden_state=True)
    if extra_config:
        cfg.update(extra_config)
    tensors = {k: v.detach().cpu().contiguous() for k, v in draft.state_dict().items()
               if k not in _SKIP_ON_SAVE}
    if draft.draft_vocab_size == draft.vocab_size and not bool(tensors["d2t"].any()):
        # a full vocabulary maps identically: no d2t/t2d (vLLM has draft_id_to_target_id only for a reduced
        # vocabulary and refuses to load a full-vocab checkpoint that ships them; SGLang and this loader don't need them)
        del tensors["d2t"], tensors["t2d"]
    else:
        tensors["d2t"] = tensors["d2t"].to(torch.int64)
        tensors["t2d"] = tensors["t2d"].to(torch.bool)

    def write_weights(dest: Path) -> None:
        with atomic_write(dest, "wb") as f:        # temp file in dest's folder, fsync, rename
            f.write(save(tensors, metadata={"format": "pt"}))

    if folder.is_dir():
        write_weights(folder / "model.safetensors")
        write_json(folder / "config.json", cfg, indent=2)
        return folder
    if folder.exists():
        raise WorkbenchError(f"{folder}: exists and is not a folder (expected a draft directory to write)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        write_weights(stage / "model.safetensors")
        write_json(stage / "config.json", cfg, indent=2)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(stage, 0o777 & ~umask)            # mkdtemp makes 0700; checkpoints are meant to be shared
        os.rename(stage, folder)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return folder
