"""Capture target hidden-state taps and greedy predictions, one target forward per batch.

    >>> import torch, transformers
    >>> from workbench.model.capture import target_from_model, extract
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <...>
    >>> cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...     num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)
    >>> target = target_from_model(transformers.LlamaForCausalLM(cfg))
    >>> rows = [{"input_ids": [1, 5, 7, 9], "loss_mask": [0, 1, 1, 1]}, {"input_ids": [3, 4], "loss_mask": [1, 1]}]
    >>> batch = next(extract(target, rows, ["embed,L1,L2", "L1,L2,L3"], progress=False))
    >>> sorted(batch.features), tuple(batch.features["L3"].shape), tuple(batch.concat(["L1", "L2", "L3"]).shape)
    (['L1', 'L2', 'L3', 'embed'], (2, 4, 32), (2, 4, 96))
    >>> batch.rows, batch.lengths.tolist()                    # grouped by length: short sample first
    ([1, 0], [2, 4])

Taps (ARCHITECTURE.md): ``embed`` = HF ``hidden_states[0]`` (the input of decoder layer 0),
``L{k}`` = output of decoder layer k before the final norm, ``final`` = output of the final norm.
They are read by forward hooks during the ordinary forward (never ``output_hidden_states=True``,
which keeps all N+1 states alive); the same pass stores the argmax of the logits
(``next_token[b, p]`` predicts position p+1) and, if asked, the top-k log-probabilities.

The optional feature cache (``cache_dir=``) holds one safetensors shard per batch plus a JSON
manifest, in a folder named by a hash of (target, data, taps, batching); every file is written
atomically, so an interrupted run resumes at the first missing shard.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import json
import os
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Iterator

import torch

from workbench.core.devices import default_dtype, parse_dtype, resolve_device
from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, write_json
from workbench.engines.wiring import Wiring, as_wirings, parse_tap, tap_sort_key
from workbench.model.checkpoint import draft_architecture
from workbench.model.chunks import head_chunks
from workbench.model.served import served_stats

CACHE_VERSION = 1

# Where the decoder-layer list and the final norm live, relative to the *ForCausalLM model.
_BODY_PATHS = ("model", "model.language_model", "model.decoder", "transformer", "gpt_neox",
               "language_model.model", "backbone", "model.model")
_LAYER_NAMES = ("layers", "h", "blocks", "decoder_layers")
_NORM_NAMES = ("norm", "final_layernorm", "final_layer_norm", "ln_f", "norm_f")


# ----------------------------------------------------------------------------------------------
# Target


@dataclass
class Target:
    """A loaded target model. ``device`` is where inputs go (the embedding's device)."""

    model: torch.nn.Module
    config: object
    tokenizer: object | None
    path: str | None
    device: str
    dtype: torch.dtype
    n_layers: int
    hidden_size: int
    vocab_size: int
    max_positions: int | None

    def embed_weight(self) -> torch.Tensor:
        """The input embedding matrix ``[V, H]``."""
        return self.model.get_input_embeddings().weight

    def summary(self) -> str:
        """One sentence for a report page (the repr is for a debugger)."""
        return (f"{type(self.model).__name__} from {self.path}: {self.n_layers} decoder layers, hidden size "
                f"{self.hidden_size}, vocabulary {self.vocab_size}, up to {self.max_positions} positions; "
                f"on {self.device} in {str(self.dtype).removeprefix('torch.')}")

    def __repr__(self) -> str:
        return (f"Target({type(self.model).__name__}, path={self.path!r}, N={self.n_layers}, H={self.hidden_size}, "
                f"V={self.vocab_size}, max_positions={self.max_positions}, device={self.device}, dtype={self.dtype})")


def _text_config(config):
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _get_path(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def find_layers(model) -> tuple[str, torch.nn.ModuleList, str | None, torch.nn.Module | None]:
    """Locate the decoder layers and the final norm: ``(layers_path, layers, norm_path, norm)``.

        >>> import transformers
        >>> m = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=8, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=2, num_attention_heads=2))
        >>> find_layers(m)[0], find_layers(m)[2]
        ('model.layers', 'model.norm')
    """
    tried = []
    for body_path in _BODY_PATHS:
        body = _get_path(model, body_path)
        for name in _LAYER_NAMES:
            tried.append(f"{body_path}.{name}")
            layers = getattr(body, name, None) if body is not None else None
            if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
                for norm_name in _NORM_NAMES:
                    norm = getattr(body, norm_name, None)
                    if isinstance(norm, torch.nn.Module):
                        return f"{body_path}.{name}", layers, f"{body_path}.{norm_name}", norm
                return f"{body_path}.{name}", layers, None, None
    raise WorkbenchError(f"model {type(model).__name__} has no recognisable decoder-layer list "
                         f"(tried {', '.join(tried)})")


def target_from_model(model, tokenizer=None, *, path: str | None = None) -> Target:
    """Wrap an in-memory HF causal LM (tests, demo) as a :class:`Target`; puts it in eval mode.

        >>> import transformers
        >>> m = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=8, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=2, num_attention_heads=2))
        >>> t = target_from_model(m); (t.n_layers, t.hidden_size, t.vocab_size, t.device)
        (2, 8, 8, 'cpu')
    """
    _, layers, _, _ = find_layers(model)
    model.eval()
    config = model.config
    text = _text_config(config)
    emb = model.get_input_embeddings()
    if emb is None or getattr(emb, "weight", None) is None:
        raise WorkbenchError(f"model {type(model).__name__} has no input embedding (get_input_embeddings() is None)")
    weight = emb.weight
    hidden = int(getattr(text, "hidden_size", weight.shape[1]))
    vocab = int(weight.shape[0])
    max_pos = getattr(text, "max_position_embeddings", None)
    n_cfg = getattr(text, "num_hidden_layers", None)
    n_layers = min(len(layers), int(n_cfg)) if n_cfg else len(layers)
    if tokenizer is not None:
        n_tok = len(tokenizer)
        if n_tok > vocab:
            raise WorkbenchError(f"tokenizer has {n_tok} tokens but the target's embedding has only {vocab} rows "
                                 f"(vocab_size={vocab}): tokenizer and model do not match")
    device = str(weight.device)
    return Target(model=model, config=config, tokenizer=tokenizer, path=path, device=device, dtype=weight.dtype,
                  n_layers=n_layers, hidden_size=hidden, vocab_size=vocab,
                  max_positions=int(max_pos) if max_pos else None)


@contextlib.contextmanager
def hf_progress(enabled: bool):
    """Within the block, transformers' own progress bars ("Loading weights") follow ``enabled``.

        >>> with hf_progress(False):          # no "Loading weights" bar; the setting is restored after
        ...     pass
    """
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if bool(enabled) == was:
        yield
        return
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def _refuse_draft(path: str) -> None:
    """A one-line error when the folder given as the target holds an EAGLE-3 draft (its config.json says so)."""

    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            arch = draft_architecture(json.load(f))
    except (OSError, ValueError):
        return                                   # unreadable: AutoConfig below names the problem
    if arch:
        raise WorkbenchError(f"target {path!r}: this is an EAGLE-3 draft ({arch}), not a target: "
                             f"pass it as --draft (draft=) and give the target model it was trained for")


def load_target(path, *, device: str = "cpu", dtype=None, device_map=None, trust_remote_code: bool = False,
                progress: bool = True) -> Target:
    """Load an HF decoder-only causal LM (and its tokenizer, if the folder has one).

        >>> # t = load_target("data/demo/target")                      # CPU fp32
        >>> # t = load_target("meta-llama/Llama-3.1-70B", device_map="auto")   # bf16, sharded over GPUs

    ``dtype`` defaults to fp32 on CPU and bf16 on CUDA; ``device_map="auto"`` shards a target that
    is larger than one GPU (inputs then go to the embedding's device). Safetensors weights are
    preferred; ``.bin`` files are read by transformers with ``weights_only=True``. ``progress=False``
    silences transformers' "Loading weights" bar for this call only.
    """
    import transformers

    path = os.fspath(path)
    if not os.path.isdir(path):
        raise WorkbenchError(f"target {path!r}: not a folder (expected an HF model folder with config.json)")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise WorkbenchError(f"target {path!r}: no config.json in the folder")
    _refuse_draft(path)
    if device_map is None:
        device = resolve_device(device)
    dtype_device = device if device_map is None else ("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(dtype, str):
        dtype = parse_dtype(dtype, dtype_device)
    if dtype is None:
        dtype = default_dtype(dtype_device)
    try:
        config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except ValueError as e:
        raise WorkbenchError(f"target {path!r}: config.json is not a known model type "
                             f"({str(e).splitlines()[0]}); pass trust_remote_code=True only if you trust it") from None
    except (OSError, json.JSONDecodeError) as e:
        raise WorkbenchError(f"target {path!r}: cannot read config.json ({str(e).splitlines()[0]})") from None
    kwargs = dict(dtype=dtype, trust_remote_code=trust_remote_code)
    if device_map is not None:
        kwargs["device_map"] = device_map
    try:
        # progress off silences transformers' bars for this call; on, the user's own setting stands
        with hf_progress(False) if not progress else contextlib.nullcontext():
            model = transformers.AutoModelForCausalLM.from_pretrained(path, config=config, **kwargs)
    except ValueError as e:
        raise WorkbenchError(f"target {path!r}: {type(config).__name__} is not a causal LM "
                             f"({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise WorkbenchError(f"target {path!r}: cannot load weights ({str(e).splitlines()[0]})") from None
    if device_map is None:
        model.to(device)
    tokenizer = None
    if any(os.path.isfile(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json",
                                                           "tokenizer.model", "vocab.json")):
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as e:
            raise WorkbenchError(f"target {path!r}: cannot load the tokenizer ({str(e).splitlines()[0]})") from None
    return target_from_model(model, tokenizer, path=path)


def loop_inputs(target: "Target", wiring, width: int, prompt_ids, who: str) -> tuple[list[str], list[int]]:
    """The checked inputs of an exact speculative loop: the taps of its one wiring (their width must be the
    draft fc's ``width``) and the prompt as a list of target ids; one-line errors naming ``who``."""
    w = as_wirings(wiring, target.n_layers)
    if len(w) != 1:
        raise WorkbenchError(f"{who} takes one wiring, got {len(w)}")
    taps = list(w[0].taps)
    check_width(taps, target, width, where="the draft's fc")
    ids = [int(x) for x in (prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else prompt_ids)]
    if not ids:
        raise WorkbenchError(f"{who}: empty prompt (expected at least 1 token)")
    bad = [x for x in ids if not 0 <= x < target.vocab_size]
    if bad:
        raise WorkbenchError(f"{who}: prompt token id {bad[0]} is outside the target vocab 0..{target.vocab_size - 1}")
    return taps, ids


def check_width(taps, target: Target, expected_width: int, where: str = "draft fc") -> None:
    """Raise when ``len(taps) * H_target`` differs from the width ``where`` expects.

        >>> # check_width(["embed", "L3"], target, draft.fc.in_features)
    """
    taps = list(Wiring.parse(taps, target.n_layers).taps)
    width = len(taps) * target.hidden_size
    if width != int(expected_width):
        hint = ""
        if expected_width % target.hidden_size == 0:
            hint = f" = {expected_width // target.hidden_size} taps × H"
        raise WorkbenchError(f"{where} expects input width {expected_width}{hint} but wiring {','.join(taps)} gives "
                             f"{width} ({len(taps)} taps × H={target.hidden_size})")


# ----------------------------------------------------------------------------------------------
# Hooks


def _first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], torch.Tensor):
        return x[0]
    if hasattr(x, "last_hidden_state"):
        return x.last_hidden_state
    raise WorkbenchError(f"cannot read a hidden-state tensor from a layer output of type {type(x).__name__}")


@contextlib.contextmanager
def tap_hooks(model, taps, *, device=None):
    """Forward hooks filling ``{tap: Tensor[B, T, H]}`` on each forward; always removed on exit.

        >>> import torch, transformers
        >>> m = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=16, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=3, num_attention_heads=2))
        >>> with tap_hooks(m, ["embed", "L2"]) as feats:
        ...     _ = m(torch.tensor([[1, 2, 3]]))
        >>> sorted(feats), tuple(feats["L2"].shape)
        (['L2', 'embed'], (1, 3, 8))

    ``embed`` is the input of decoder layer 0 (= HF ``hidden_states[0]``, including any embedding
    scale), ``L{k}`` the raw output of layer k, ``final`` the output of the final norm. With
    ``device=`` every capture is moved there (for ``device_map="auto"`` targets).
    """
    layers_path, layers, norm_path, norm = find_layers(model)
    n_cfg = getattr(_text_config(model.config), "num_hidden_layers", None)
    n_layers = min(len(layers), int(n_cfg)) if n_cfg else len(layers)
    wanted = sorted({parse_tap(t, n_layers) for t in taps}, key=tap_sort_key)
    feats: dict[str, torch.Tensor] = {}
    handles = []

    def store(tap, tensor):
        feats[tap] = tensor if device is None else tensor.to(device)

    try:
        for tap in wanted:
            if tap == "embed":
                def pre(module, args, kwargs, _tap=tap):
                    h = args[0] if args else kwargs.get("hidden_states")
                    store(_tap, _first_tensor(h))
                handles.append(layers[0].register_forward_pre_hook(pre, with_kwargs=True))
            elif tap == "final":
                if norm is None:
                    raise WorkbenchError(f"tap 'final': model {type(model).__name__} has no recognisable final norm "
                                         f"next to {layers_path} (tried {', '.join(_NORM_NAMES)})")
                handles.append(norm.register_forward_hook(lambda m, a, out, _tap=tap: store(_tap, _first_tensor(out))))
            else:
                layer = layers[int(tap[1:])]
                handles.append(layer.register_forward_hook(lambda m, a, out, _tap=tap: store(_tap, _first_tensor(out))))
        yield feats
    finally:
        for h in handles:
            h.remove()


# ----------------------------------------------------------------------------------------------
# Batches


@dataclass
class Batch:
    """One right-padded batch of captured features (see ARCHITECTURE.md, tensor conventions)."""

    rows: list[int]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    features: dict[str, torch.Tensor]
    next_token: torch.Tensor
    n_prompt_tokens: list[int]
    sources: list[str]
    topk_ids: torch.Tensor | None = None
    topk_logprobs: torch.Tensor | None = None
    from_cache: bool = field(default=False, compare=False)
    served: torch.Tensor | None = None         # [B, T, 2] sampled.served_stats of every position (extract(sampling=))
    hidden: torch.Tensor | None = None         # [B, T, H] the lm_head's input (final hidden), with ``served``

    @property
    def lengths(self) -> torch.Tensor:
        return self.attention_mask.sum(dim=1).long()

    def concat(self, taps) -> torch.Tensor:
        """Features of ``taps`` concatenated in the given order: ``[B, T, len(taps)*H]``."""
        taps = list(taps.taps) if isinstance(taps, Wiring) else [t.strip() for t in taps.split(",")] \
            if isinstance(taps, str) else list(taps)
        missing = [t for t in taps if t not in self.features]
        if missing:
            raise WorkbenchError(f"tap(s) {','.join(missing)} were not captured (this batch has "
                                 f"{','.join(sorted(self.features, key=tap_sort_key))}); pass them to extract()")
        return torch.cat([self.features[t] for t in taps], dim=-1)

    def __len__(self) -> int:
        return len(self.rows)


def union_taps(taps, n_layers: int) -> list[str]:
    """The union of the taps of one or more wirings, ordered by depth.

        >>> union_taps(["embed,L3,L31", "L3,L31,L59"], n_layers=64)
        ['embed', 'L3', 'L31', 'L59']
    """
    if isinstance(taps, (str, Wiring)):
        taps = [taps]
    out = set()
    for item in taps:
        out.update(Wiring.parse(item, n_layers).taps)
    if not out:
        raise WorkbenchError("no taps requested (expected e.g. ['embed,L3,L31'] or a Wiring)")
    return sorted(out, key=tap_sort_key)


def _normalise_rows(dataset_or_rows, limit, target: Target) -> list[dict]:
    """Rows as dicts with input_ids, loss_mask, _row, _where, n_prompt_tokens, source (ids checked)."""
    if isinstance(dataset_or_rows, dict):
        raise WorkbenchError("extract() needs a Dataset or a list of rows, got a single row dict (wrap it in a list)")
    it = iter(dataset_or_rows)
    if limit is not None:
        it = itertools.islice(it, int(limit))
    n_ids, what = target.vocab_size, "vocabulary"
    if target.tokenizer is not None and len(target.tokenizer) < n_ids:
        n_ids, what = len(target.tokenizer), f"tokenizer (vocab_size {target.vocab_size}, tokenizer ids)"
    rows = []
    for i, row in enumerate(it):
        if isinstance(row, dict):
            where = row.get("_where", f"row {row.get('_row', i)}")
            ids = row.get("input_ids")
        else:
            where, ids, row = f"row {i}", row, {}
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        if not isinstance(ids, (list, tuple)) or not ids or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                    for x in ids):
            raise WorkbenchError(f"{where}: input_ids must be a non-empty list of ints")
        bad = [x for x in ids if not 0 <= x < n_ids]
        if bad:
            raise WorkbenchError(f"{where}: token id {bad[0]} is outside the target's {what} 0..{n_ids - 1} "
                                 f"(tokenizer/vocab mismatch between the data and the target)")
        mask = row.get("loss_mask")
        if mask is None:
            mask = [1] * len(ids)
        if isinstance(mask, torch.Tensor):
            mask = mask.tolist()
        if len(mask) != len(ids):
            raise WorkbenchError(f"{where}: loss_mask has {len(mask)} entries but input_ids has {len(ids)}")
        rows.append({"input_ids": list(ids), "loss_mask": [int(m) for m in mask], "_row": int(row.get("_row", i)),
                     "_where": where, "n_prompt_tokens": int(row.get("n_prompt_tokens", 0) or 0),
                     "source": str(row.get("source", "") or "")})
    if not rows:
        raise WorkbenchError("extract(): the dataset has no rows")
    return rows


def _truncate(rows: list[dict], max_positions: int | None) -> None:
    if not max_positions:
        return
    long = [r for r in rows if len(r["input_ids"]) > max_positions]
    if long:
        warnings.warn(f"{len(long)} of {len(rows)} sequences are longer than the target's max positions "
                      f"{max_positions}; truncated to {max_positions} tokens", UserWarning, stacklevel=3)
    for r in long:
        r["input_ids"] = r["input_ids"][:max_positions]
        r["loss_mask"] = r["loss_mask"][:max_positions]
        r["n_prompt_tokens"] = min(r["n_prompt_tokens"], max_positions)


def _plan(rows: list[dict], batch_size: int) -> list[list[int]]:
    """Group by length (stable), chunk into batches: a list of index lists into ``rows``."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["input_ids"]))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _pad(rows: list[dict], idx: list[int], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    T = max(len(rows[i]["input_ids"]) for i in idx)
    ids = torch.zeros(len(idx), T, dtype=torch.long)
    att = torch.zeros(len(idx), T, dtype=torch.long)
    lm = torch.zeros(len(idx), T, dtype=torch.long)
    for b, i in enumerate(idx):
        n = len(rows[i]["input_ids"])
        ids[b, :n] = torch.tensor(rows[i]["input_ids"])
        att[b, :n] = 1
        lm[b, :n] = torch.tensor(rows[i]["loss_mask"])
    return ids.to(device), att.to(device), lm.to(device)


# Config keys whose models compute logits other than lm_head(final hidden) (softcapping, scaling):
# split_head refuses them (their head would need its own chunked transform).
_LOGIT_SOFTCAPS = ("final_logit_softcapping", "logit_softcapping")
_LOGIT_SCALES = ("logit_scale", "logits_scaling", "output_multiplier", "output_multiplier_scale")
_SPLITS: "weakref.WeakKeyDictionary" = None          # model -> (body, head), once verified
_PROBING = contextvars.ContextVar("workbench_capture_probing", default=False)


def _body(model):
    """The base model (decoder stack + final norm) that find_layers found, e.g. ``model.model``."""
    layers_path = find_layers(model)[0]
    return _get_path(model, layers_path.rsplit(".", 1)[0])


def split_head(model, probe_ids: torch.Tensor | None = None):
    """``(body, head)``: ``body(input_ids=, attention_mask=)`` returns the final-norm hidden states, ``head``
    (the ``lm_head``) maps them to logits, so logits can be computed in chunks (``workbench.model.chunks``).

        >>> import torch, transformers
        >>> m = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=16, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=2, num_attention_heads=2))
        >>> body, head = split_head(m, torch.tensor([[1, 2, 3]]))
        >>> type(body).__name__, type(head).__name__
        ('LlamaModel', 'Linear')

    Refused (one-line error) when the model has no base model / lm_head, when its config transforms
    the logits (softcapping, logit scales), or when a probe forward of ``probe_ids`` (checked once per
    model) gives logits other than ``head(body(ids))``.
    """
    global _SPLITS

    if _SPLITS is None:
        _SPLITS = weakref.WeakKeyDictionary()
    if model in _SPLITS:
        return _SPLITS[model]
    name = type(model).__name__
    cfgs = [model.config, _text_config(model.config)]
    for key in _LOGIT_SOFTCAPS + _LOGIT_SCALES:
        for c in cfgs:
            val = getattr(c, key, None)
            if val is not None and not isinstance(val, bool) and (key in _LOGIT_SOFTCAPS or float(val) != 1.0):
                raise WorkbenchError(f"model {name}: config {key}={val} transforms the logits after lm_head; "
                                     "workbench computes the head in chunks and does not model that transform")
    body, head = _body(model), model.get_output_embeddings()
    if not isinstance(body, torch.nn.Module) or not isinstance(head, torch.nn.Module):
        raise WorkbenchError(f"model {name}: cannot split into a base model and an lm_head "
                             f"(base model {type(body).__name__}, get_output_embeddings() {type(head).__name__})")
    if probe_ids is not None:
        probe = probe_ids[:1, : min(8, probe_ids.shape[-1])]
        token = _PROBING.set(True)
        try:
            with torch.no_grad():
                full = model(input_ids=probe, use_cache=False)
                full = (full.logits if hasattr(full, "logits") else full[0]).float()
                hid = _first_tensor(body(input_ids=probe, use_cache=False))
                split = head(hid.to(head.weight.device)).float()
        finally:
            _PROBING.reset(token)
        tol = 1e-3 * max(1.0, float(full.abs().max()))
        if split.shape != full.shape or float((split.to(full.device) - full).abs().max()) > tol:
            raise WorkbenchError(f"model {name}: its logits are not lm_head(base model output) (probe of "
                                 f"{probe.shape[-1]} tokens differs); workbench cannot compute its head in chunks")
        _SPLITS[model] = (body, head)
    return body, head


def _forward(target: Target, taps, ids, att, topk: int, max_memory=None, sampling=None):
    """ONE target forward: captured taps, argmax, optional top-k log-probs. The base model runs once;
    its lm_head runs in position chunks (``workbench.chunks.head_chunks``): no [B, T, V] logits.
    ``sampling`` (a non-greedy :class:`workbench.sampling.Sampling`): the same head pass also keeps
    ``sampled.served_stats`` per position, and the final hidden states are kept (``(served, hidden)``
    as a fifth item; else None)."""

    body, lm_head = split_head(target.model, ids)
    hdev = lm_head.weight.device

    def head(h):
        return lm_head(h.to(hdev))

    with torch.no_grad(), tap_hooks(target.model, taps, device=target.device) as feats:
        hidden = _first_tensor(body(input_ids=ids, attention_mask=att, use_cache=False))
        reduce = None if sampling is None else (lambda f: served_stats(f, sampling))
        res = head_chunks(hidden, head, topk=topk, max_memory=max_memory, vocab=target.vocab_size, reduce=reduce)
        extra = None if sampling is None else (res.reduced.to(target.device), hidden)
        del hidden
        next_token = res.ids.to(target.device)
        topk_ids = res.topk_ids.to(target.device) if topk else None
        topk_lp = res.topk_logprobs.to(target.device) if topk else None
        del res
        feats = dict(feats)
    missing = [t for t in taps if t not in feats]
    if missing:
        raise WorkbenchError(f"taps {','.join(missing)} were not reached by the forward of {type(target.model).__name__}")
    pad = (att == 0)
    if bool(pad.any()):  # zero the padding in place (the forward is over, nothing else reads these tensors)
        for t in feats:
            feats[t].masked_fill_(pad.unsqueeze(-1), 0)
        next_token.masked_fill_(pad, 0)
        if topk_ids is not None:
            topk_ids.masked_fill_(pad.unsqueeze(-1), 0)
            topk_lp.masked_fill_(pad.unsqueeze(-1), 0.0)
    return feats, next_token, topk_ids, topk_lp, extra


# ----------------------------------------------------------------------------------------------
# Cache


def target_fingerprint(target: Target) -> str:
    """A cheap hash of the target: config, dtype, parameter names/shapes and a sample of each tensor."""
    h = hashlib.sha256()
    cfg = target.config.to_json_string(use_diff=False) if hasattr(target.config, "to_json_string") else repr(target.config)
    h.update(cfg.encode())
    h.update(str(target.dtype).encode())
    with torch.no_grad():
        for name, p in target.model.named_parameters():
            h.update(f"{name}:{tuple(p.shape)}".encode())
            sample = p.detach().reshape(-1)[:1024].float().cpu()
            h.update(sample.numpy().tobytes())
    return h.hexdigest()[:16]


def _data_fingerprint(rows: list[dict]) -> str:
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r["_row"], r["input_ids"], r["loss_mask"], r["n_prompt_tokens"], r["source"]],
                            separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def _shard_name(i: int) -> str:
    return f"batch-{i:05d}.safetensors"


def _save_shard(path, batch: Batch) -> None:
    from safetensors.torch import save

    tensors = {"rows": torch.tensor(batch.rows, dtype=torch.long), "input_ids": batch.input_ids,
               "attention_mask": batch.attention_mask, "loss_mask": batch.loss_mask, "next_token": batch.next_token,
               "n_prompt_tokens": torch.tensor(batch.n_prompt_tokens, dtype=torch.long)}
    for t, v in batch.features.items():
        tensors[f"feature.{t}"] = v
    if batch.topk_ids is not None:
        tensors["topk_ids"], tensors["topk_logprobs"] = batch.topk_ids, batch.topk_logprobs
    if batch.served is not None:
        tensors["served"], tensors["hidden"] = batch.served, batch.hidden
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    data = save(tensors, metadata={"sources": json.dumps(batch.sources), "format": f"workbench-capture-{CACHE_VERSION}"})
    with atomic_write(path, "wb") as f:
        f.write(data)


def _load_shard(path, device, expect_rows: list[int], taps) -> Batch:
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            t = {k: f.get_tensor(k) for k in f.keys()}
        sources = json.loads(meta["sources"])
    except Exception as e:  # noqa: BLE001 - any unreadable shard is the same user-facing problem
        raise WorkbenchError(f"feature cache shard {path} is unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                             f"delete it to recompute") from None
    missing = [k for k in ["rows", "input_ids", "next_token"] + [f"feature.{x}" for x in taps] if k not in t]
    if missing or t["rows"].tolist() != expect_rows:
        raise WorkbenchError(f"feature cache shard {path} does not match its manifest "
                             f"({'missing ' + ','.join(missing) if missing else 'different rows'}); delete it to recompute")
    return Batch(rows=t["rows"].tolist(), input_ids=t["input_ids"].to(device), attention_mask=t["attention_mask"].to(device),
                 loss_mask=t["loss_mask"].to(device), features={x: t[f"feature.{x}"].to(device) for x in taps},
                 next_token=t["next_token"].to(device), n_prompt_tokens=t["n_prompt_tokens"].tolist(), sources=sources,
                 topk_ids=t["topk_ids"].to(device) if "topk_ids" in t else None,
                 topk_logprobs=t["topk_logprobs"].to(device) if "topk_logprobs" in t else None, from_cache=True,
                 served=t["served"].to(device) if "served" in t else None,
                 hidden=t["hidden"].to(device) if "hidden" in t else None)


def _write_manifest(path, manifest: dict) -> None:
    write_json(path, manifest, indent=1)


def _read_manifest(path, key: str) -> dict | None:
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise WorkbenchError(f"feature cache manifest {path} is unreadable ({e}); delete the folder to recompute") from None
    if not isinstance(m, dict) or m.get("key") != key or m.get("version") != CACHE_VERSION:
        raise WorkbenchError(f"feature cache manifest {path}: key/version does not match this run "
                             f"(expected key {key}, version {CACHE_VERSION}); delete the folder to recompute")
    return m


# ----------------------------------------------------------------------------------------------
# Extract


def extract(target: Target, dataset_or_rows, taps, *, batch_size: int = 8, topk: int = 0, limit: int | None = None,
            cache_dir=None, progress: bool = True, max_memory=None, sampling=None, engine=None) -> Iterator[Batch]:
    """Yield :class:`Batch` objects, one target forward per batch (hooks; never ``output_hidden_states``).

        >>> # for batch in extract(target, ds, ["embed,L3,L31", "L3,L31,L59"], batch_size=8, cache_dir=".cache"):
        >>> #     feats = batch.concat(["L3", "L31", "L59"])       # [B, T, 3H]

    ``taps`` is a tap, a wiring spec ("embed,L3,L31"), a :class:`~workbench.wiring.Wiring`, or a list of
    them: the union is captured in the same pass. Samples are grouped by length (``Batch.rows`` gives
    each sample's dataset ``_row``), right-padded; padded positions hold zeros. Batches are handed off
    one by one (memory stays bounded by one batch). Sequences longer than the target's maximum
    positions are truncated, with one warning. With ``cache_dir``, batches are read from / written to
    a resumable on-disk cache. ``max_memory`` (bytes or "2GB") sizes the chunks of the lm_head
    (default: a share of the free device memory, ``workbench.chunks.memory_budget``). ``sampling`` (a
    :class:`workbench.sampling.Sampling` at T > 0): each batch also carries ``served`` (the served
    distribution's normaliser and cutoff per position, from the same head pass) and ``hidden`` (the
    lm_head's input), what :mod:`workbench.simulate.sampled` needs for any token's probability.
    ``engine``: a serving engine's features instead of the hooks (``workbench.live.vllm_capture``): called as
    ``engine(rows, ids, att) -> (features, next_token)``, its ``source`` goes into the manifest; same cache key,
    so a later HF-side ``extract`` on the same folder reads the engine's shards (never a mix of both).
    """
    if sampling is not None and sampling.greedy:
        sampling = None
    if int(batch_size) < 1:
        raise WorkbenchError(f"batch_size must be >= 1, got {batch_size}")
    if int(topk) < 0:
        raise WorkbenchError(f"topk must be >= 0, got {topk}")
    if engine is not None and (topk or sampling is not None):
        raise WorkbenchError("engine features carry greedy next tokens only (topk=0, no sampling)")
    wanted = union_taps(taps, target.n_layers)
    rows = _normalise_rows(dataset_or_rows, limit, target)
    _truncate(rows, target.max_positions)
    plan = _plan(rows, int(batch_size))
    return _iterate(target, rows, plan, wanted, int(topk), cache_dir, progress, max_memory, sampling, engine)


def _iterate(target, rows, plan, wanted, topk, cache_dir, progress, max_memory=None, sampling=None,
             engine=None) -> Iterator[Batch]:
    from tqdm.auto import tqdm

    folder = manifest_path = manifest = None
    if cache_dir is not None:
        ident = {"version": CACHE_VERSION, "target": target_fingerprint(target), "device": target.device.split(":")[0], "data": _data_fingerprint(rows),
                 "taps": wanted, "topk": topk, "batches": [[rows[i]["_row"] for i in b] for b in plan]}
        if sampling is not None:                 # greedy runs keep their old cache keys
            ident["sampling"] = sampling.to_dict()
        key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]
        folder = os.path.join(os.fspath(cache_dir), f"capture-{key}")
        os.makedirs(folder, exist_ok=True)
        manifest_path = os.path.join(folder, "manifest.json")
        manifest = _read_manifest(manifest_path, key)
        if manifest is None:
            manifest = {"version": CACHE_VERSION, "key": key, "target": {"path": target.path, "fingerprint": ident["target"],
                        "dtype": str(target.dtype), "n_layers": target.n_layers, "hidden_size": target.hidden_size},
                        "data": {"fingerprint": ident["data"], "n_rows": len(rows)}, "taps": wanted, "topk": topk,
                        "batches": ident["batches"], "done": [], "complete": False}
            _write_manifest(manifest_path, manifest)
        mine, theirs = getattr(engine, "source", None), manifest.get("source")
        if manifest["done"] and mine != theirs and (engine is not None or not manifest["complete"]):
            raise WorkbenchError(f"feature cache {folder} holds {theirs or 'HF hook'} features, not {mine or 'HF hook'} "
                                 f"ones (unfinished or another source); delete the folder to recompute")
        if mine:
            manifest["source"] = mine

    bar = tqdm(total=len(plan), desc="capture", unit="batch", disable=not progress)
    try:
        for bi, idx in enumerate(plan):
            row_ids = [rows[i]["_row"] for i in idx]
            shard = os.path.join(folder, _shard_name(bi)) if folder else None
            if shard and bi in manifest["done"] and os.path.exists(shard):
                batch = _load_shard(shard, target.device, row_ids, wanted)
            else:
                ids, att, lm = _pad(rows, idx, target.device)
                if engine is not None:
                    (feats, nxt), tk_ids, tk_lp, extra = engine([rows[i] for i in idx], ids, att), None, None, None
                else:
                    feats, nxt, tk_ids, tk_lp, extra = _forward(target, wanted, ids, att, topk, max_memory, sampling)
                batch = Batch(rows=row_ids, input_ids=ids, attention_mask=att, loss_mask=lm, features=feats,
                              next_token=nxt, n_prompt_tokens=[rows[i]["n_prompt_tokens"] for i in idx],
                              sources=[rows[i]["source"] for i in idx], topk_ids=tk_ids, topk_logprobs=tk_lp,
                              served=None if extra is None else extra[0], hidden=None if extra is None else extra[1])
                if shard:
                    _save_shard(shard, batch)
                    manifest["done"] = sorted(set(manifest["done"]) | {bi})
                    manifest["complete"] = len(manifest["done"]) == len(plan)
                    _write_manifest(manifest_path, manifest)
            bar.update(1)
            yield batch
    finally:
        bar.close()


@contextlib.contextmanager
def count_forwards(model):
    """Count target forwards and the samples they carried (bench, tests).

        >>> # with count_forwards(target.model) as c: list(extract(target, rows, wirings))
        >>> # c == {"calls": n_batches, "samples": len(rows)}      # one forward per sample
    """
    counts = {"calls": 0, "samples": 0}

    def pre(module, args, kwargs):
        if _PROBING.get():                       # split_head's one-time check is not a data forward
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        counts["calls"] += 1
        counts["samples"] += int(ids.shape[0]) if isinstance(ids, torch.Tensor) else 0

    handle = _body(model).register_forward_pre_hook(pre, with_kwargs=True)   # capture calls the base model
    try:
        yield counts
    finally:
        handle.remove()


__all__ = ["Target", "Batch", "load_target", "hf_progress", "target_from_model", "find_layers", "tap_hooks", "extract",
           "union_taps", "check_width", "target_fingerprint", "count_forwards", "split_head"]
