"""The draft's positions against the target's and the served context: ``max_position_embeddings``,
``rope_theta`` and ``rope_scaling`` (no torch, no engine installed).

    >>> from workbench.engines.positions import findings
    >>> out = findings({"max_position_embeddings": 2048, "rope_theta": 500000.0},
    ...                {"max_position_embeddings": 131072, "rope_theta": 500000.0}, engine="sglang", served=8192)
    >>> [(f["code"], f["severity"]) for f in out]
    [('draft-positions-short', 'error')]

How each engine reads the positions (checked against the public source):

* **SGLang** (``hf_transformers_utils.get_context_length``, ``model_config.py``): a model's context is the first of
  ``max_sequence_length``, ``seq_length``, ``max_seq_len``, ``model_max_length``, ``max_position_embeddings``, times
  ``rope_scaling.factor`` unless the scaling has ``original_max_position_embeddings`` or is ``llama3``. The draft
  gets the served ``--context-length`` (default: the target's context); when that is longer than the draft's own,
  SGLang logs "Target model's context_length (N) is greater than the derived context_length (M)", overrides the
  draft's ``max_position_embeddings`` to N and drafts at positions the draft never saw in training: past M tokens
  EAGLE-3 gets slower than no speculation (sgl-project/sglang#6783).
* **vLLM** (0.32, ``config/model.py`` ``_get_and_verify_max_len``, ``config/speculative.py``
  ``_maybe_override_draft_max_model_len``, ``v1/worker/gpu_model_runner.py`` ``_input_fits_in_drafter``): the draft's
  ``max_model_len`` is the smallest of its length keys (``max_position_embeddings`` first), times the factor of a
  ``linear``/``dynamic`` scaling (not ``yarn``/``llama3``/``longrope``), capped by the target's ``--max-model-len``
  (or the speculative config's ``max_model_len``). While any sequence of the batch plus ``num_speculative_tokens``
  is longer, vLLM does not run the draft and verifies token id 0 as every draft of every request of the batch.
* Both load the draft's ``config.json`` through transformers' ``LlamaConfig``: a missing ``max_position_embeddings``
  is 2048 and a missing ``rope_theta`` is 10000 (:data:`HF_DEFAULTS`); the lint says so ("defaulted").
* ``rope_theta`` is read top level, else from ``rope_parameters`` (transformers 5), else from ``rope_scaling``
  (NVIDIA ModelOpt writes it in both); ``rope_scaling`` of type ``default`` is no scaling. ModelOpt's export
  writes ``{"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}`` into the draft by
  default (``EagleConfig.eagle_export_rope_scaling``, injected by ``hf_spec_export.EagleExporter._export_config``
  when training used ``rope_type`` default): :data:`MODELOPT_YARN`.

Rules: the draft's positions ending before the served context is an **error**; a ``rope_theta`` or
``rope_scaling`` that differs from the target's is a **warning** with both values; a missing key is an **info**
naming the default the engines use. docs/context-length.md has the trackers and the numbers.
"""

from __future__ import annotations

import math
import os

from workbench.core.files import is_path
from workbench.engines.taps import load_config

HF_DEFAULTS = {"max_position_embeddings": 2048, "rope_theta": 10000.0}   # transformers LlamaConfig
MODELOPT_YARN = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}
SGLANG_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
VLLM_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
             "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
VLLM_UNSCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
SERVED_FLAG = {"sglang": "--context-length", "vllm": "--max-model-len"}
_SCALING_KEYS = ("rope_type", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor",
                 "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor")


def config_file(source, what: str) -> str:
    """The name a message gives a config: ``DIR/config.json`` for a folder, else ``what``."""
    if is_path(source):
        p = os.fspath(source)
        return os.path.join(p, "config.json") if os.path.isdir(p) else p
    return what


def _text_config(cfg: dict) -> tuple[dict, str]:
    """(the dict holding the positions, its key prefix): speculators' ``transformer_layer_config``, a multimodal
    ``text_config``, else the config itself."""
    for key in ("transformer_layer_config", "text_config"):
        inner = cfg.get(key)
        if isinstance(inner, dict) and not any(k in cfg for k in ("max_position_embeddings", "rope_theta")):
            return inner, f"{key}."
    return cfg, ""


def _kind(scaling) -> str:
    return str(scaling.get("rope_type", scaling.get("type", "default"))) if isinstance(scaling, dict) else "default"


def read(cfg: dict) -> dict:
    """The positions of one config as the engines read them.

        >>> p = read({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
        >>> p["max_position_embeddings"], p["max_positions_key"], p["rope_theta"], p["rope_theta_key"], p["rope_scaling"]
        (2048, None, 1000000.0, 'rope_parameters.rope_theta', None)

    ``*_key`` is the key read (``None``: missing, the default of :data:`HF_DEFAULTS` is used);
    ``rope_scaling`` is ``None`` for no scaling (absent, null or type ``default``); ``thetas`` lists every
    ``rope_theta`` found, to catch a config holding two different values."""
    c, pre = _text_config(cfg)
    mpe = c.get("max_position_embeddings")
    ok = isinstance(mpe, int) and not isinstance(mpe, bool) and mpe > 0
    thetas = []
    for key, holder in (("rope_theta", c), ("rope_parameters.rope_theta", c.get("rope_parameters")),
                        ("rope_scaling.rope_theta", c.get("rope_scaling"))):
        v = holder.get(key.rsplit(".", 1)[-1]) if isinstance(holder, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            thetas.append((pre + key, float(v)))
    scaling, skey = None, None
    for key in ("rope_scaling", "rope_parameters"):
        s = c.get(key)
        if isinstance(s, dict) and _kind(s) != "default":
            scaling = {"rope_type": _kind(s), **{k: s[k] for k in _SCALING_KEYS[1:] if s.get(k) is not None}}
            skey = pre + key
            break
    return {"max_position_embeddings": mpe if ok else HF_DEFAULTS["max_position_embeddings"],
            "max_positions_key": pre + "max_position_embeddings" if ok else None,
            "lengths": {k: c[k] for k in set(SGLANG_KEYS) | set(VLLM_KEYS)
                        if isinstance(c.get(k), int) and not isinstance(c.get(k), bool) and c[k] > 0},
            "rope_theta": thetas[0][1] if thetas else HF_DEFAULTS["rope_theta"],
            "rope_theta_key": thetas[0][0] if thetas else None, "thetas": thetas,
            "rope_scaling": scaling, "rope_scaling_key": skey}


def context(pos: dict, engine: str) -> tuple[int, str]:
    """(the context an engine derives for a model, how): SGLang's ``get_context_length`` or vLLM's
    ``_get_and_verify_max_len`` (module docstring).

        >>> context(read({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}), "vllm")
        (8192, 'max_position_embeddings 4096 × linear factor 2')
    """
    lengths = dict(pos["lengths"]) or {"max_position_embeddings": pos["max_position_embeddings"]}
    defaulted = "" if pos["max_positions_key"] or pos["lengths"] else " (defaulted)"
    sc = pos["rope_scaling"]
    if engine.startswith("vllm"):
        key = ("model_max_length" if "model_max_length" in lengths
               else min((k for k in VLLM_KEYS if k in lengths), key=lambda k: lengths[k]))
        factor = float(sc.get("factor", 1.0)) if sc and sc["rope_type"] not in VLLM_UNSCALED else 1.0
    else:
        key = next(k for k in SGLANG_KEYS if k in lengths)
        factor = (float(sc.get("factor", 1.0)) if sc and "original_max_position_embeddings" not in sc
                  and sc["rope_type"] != "llama3" else 1.0)
    n = int(lengths[key] * factor)
    how = f"{key} {lengths[key]}{defaulted}" + (f" × {sc['rope_type']} factor {factor:g}" if factor != 1 else "")
    return n, how


def served_context(server_args: dict, engine: str) -> int | None:
    """The served context a command line or server info sets: SGLang's ``--context-length``, vLLM's
    ``--max-model-len`` (``1k``/``1K`` forms as vLLM parses them; ``-1``/``auto`` = not set).

        >>> served_context({"max_model_len": "32K"}, "vllm"), served_context({"context_length": "8192"}, "sglang")
        (32768, 8192)
    """
    v = server_args.get("max_model_len" if engine.startswith("vllm") else "context_length")
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v > 0 else None
    text = str(v).strip()
    mult = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    try:
        n = int(float(text[:-1]) * mult[text[-1]]) if text and text[-1] in mult else int(text)
    except ValueError:
        return None
    return n if n > 0 else None


def _scaling_text(sc) -> str:
    if not sc:
        return "none"
    rest = ", ".join(f"{k} {sc[k]:g}" if isinstance(sc[k], float) else f"{k} {sc[k]}" for k in sc if k != "rope_type")
    return f"{sc['rope_type']}" + (f" ({rest})" if rest else "")


def _num(x: float) -> str:
    """A rotary base as written in configs: 500000, not 5e+05.

        >>> _num(500000.0), _num(1e6), _num(10000.5)
        ('500000', '1000000', '10000.5')
    """
    return f"{x:.0f}" if float(x).is_integer() else f"{x:g}"


def yarn_attention_factor(sc) -> float:
    """The factor a YaRN rotary multiplies cos and sin by (1.0 for any other rotary), as transformers
    (``_compute_yarn_parameters``) and vLLM (``YaRNScalingRotaryEmbedding``) compute it: ``attention_factor``,
    else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are given, else
    get_mscale(factor) = 0.1·ln(factor) + 1 (1 for factor <= 1). SGLang's plain ``yarn`` takes get_mscale(factor)
    times its ``attn_factor`` and reads neither ``attention_factor`` nor ``mscale``: the three agree on a config
    without those keys (ModelOpt's default export), not on one that sets them.

        >>> round(yarn_attention_factor(MODELOPT_YARN), 4), yarn_attention_factor({"rope_type": "linear", "factor": 4.0})
        (1.3466, 1.0)
    """
    if not sc or sc.get("rope_type", sc.get("type")) != "yarn":
        return 1.0
    f = float(sc["factor"])

    def mscale(m):
        return 1.0 if f <= 1 else 0.1 * float(m) * math.log(f) + 1.0

    if sc.get("attention_factor") is not None:
        return float(sc["attention_factor"])
    if sc.get("mscale") and sc.get("mscale_all_dim"):
        return mscale(sc["mscale"]) / mscale(sc["mscale_all_dim"])
    return mscale(1.0)


def _yarn_scale(sc) -> float | None:
    """q·k scale of a YaRN rotary (the square of :func:`yarn_attention_factor`), None for no YaRN or factor <= 1.

        >>> round(_yarn_scale(MODELOPT_YARN), 2), _yarn_scale({"rope_type": "yarn", "factor": 4.0, "mscale": 1.0,
        ...                                                     "mscale_all_dim": 1.0})
        (1.81, 1.0)
    """
    if not sc or sc["rope_type"] != "yarn" or float(sc.get("factor", 1.0)) <= 1:
        return None
    return yarn_attention_factor(sc) ** 2


def check(add, dcfg: dict, tcfg: dict | None, *, engine: str | None = None, served: int | None = None,
          served_from: str = "", draft_file: str = "draft config", target_file: str = "target config",
          k: int | None = None, spec_max_model_len: int | None = None) -> dict:
    """Add the position findings of a draft (``add(code, severity, message, why, fix)``, as the flag lints do).

    ``engine``: ``sglang``/``vllm`` (their derivations) or None (``inspect``: no server, the draft's and the target's
    ``max_position_embeddings`` as written). ``served``: the context the server is started with (``--context-length``
    / ``--max-model-len``; None: the target's own, when ``tcfg`` is given). ``k``: vLLM's ``num_speculative_tokens``
    (it stops drafting at the draft's length minus k). Returns the numbers (for the lint's settings)."""
    d = read(dcfg)
    t = read(tcfg) if tcfg is not None else None
    eng = "vllm" if engine and engine.startswith("vllm") else "sglang" if engine else None
    name = {"sglang": "SGLang", "vllm": "vLLM", None: "the engines"}[eng]
    use = "use" if eng is None else "uses"
    out = {}
    if d["max_positions_key"] is None and not d["lengths"]:
        add("draft-positions-defaulted", "info", f"{draft_file} has no max_position_embeddings: {name} {use} "
            f"transformers' LlamaConfig default {HF_DEFAULTS['max_position_embeddings']} (defaulted)", "",
            "write the length the draft was trained at as \"max_position_embeddings\"")
    if d["rope_theta_key"] is None:
        add("draft-theta-defaulted", "info", f"{draft_file} has no rope_theta (top level, rope_parameters or "
            f"rope_scaling): {name} {use} transformers' LlamaConfig default {_num(HF_DEFAULTS['rope_theta'])} (defaulted)",
            "", "write the rope_theta the draft was trained with")
    if len({v for _, v in d["thetas"]}) > 1:
        add("draft-theta-ambiguous", "warning", f"{draft_file} holds different rope_theta values: "
            + ", ".join(f"{key} {_num(v)}" for key, v in d["thetas"]),
            "transformers 5 reads rope_parameters, older readers the top-level key: the draft's rotary base depends "
            "on who loads it", "keep one value: the one the draft was trained with")

    # ---- positions against the served context ----
    if eng is None:
        dn, dhow = d["max_position_embeddings"], f"max_position_embeddings {d['max_position_embeddings']}" + (
            "" if d["max_positions_key"] else " (defaulted)")
    else:
        dn, dhow = context(d, eng)
    out["draft_positions"] = f"{dn} ({dhow})"
    if spec_max_model_len is not None and eng == "vllm":
        if spec_max_model_len > dn:
            add("spec-max-model-len", "error", f"speculative config max_model_len {spec_max_model_len} > the "
                f"draft's {dn} ({draft_file} {dhow})", "vLLM refuses to start: 'speculative_max_model_len=... cannot "
                "be larger than draft_max_model_len' (config/speculative.py _maybe_override_draft_max_model_len)",
                f"set \"max_model_len\" to at most {dn} or drop it")
        else:
            dn, dhow = spec_max_model_len, f"the speculative config's max_model_len {spec_max_model_len}"
    how_served = served_from or "given"
    if served is None and t is not None:
        if eng is None:
            served, how_served = t["max_position_embeddings"], f"{target_file} max_position_embeddings" + (
                "" if t["max_positions_key"] else " (defaulted)")
        else:
            served, how = context(t, eng)
            how_served = (f"no {SERVED_FLAG[eng]}: {name} serves the target's context, {target_file} {how}")
    if served is None:
        add("positions-unchecked", "info", f"the draft's positions end at {dn} ({draft_file} {dhow}); the served "
            "context is unknown", "", f"pass --target DIR or give the server's {SERVED_FLAG.get(eng, '--context-length')}")
        return out
    out["served_context"] = f"{served} ({how_served})"
    if dn < served:
        msg = (f"{draft_file}: the draft's positions end at {dn} ({dhow}) but the served context is {served} "
               f"({how_served})" if eng else f"{draft_file}: the draft's positions end at {dn} ({dhow}), the "
               f"target's at {served} ({how_served})")
        if eng == "vllm":
            stop = dn - (k or 0)
            why = (f"past {stop} tokens (the draft's {dn} minus num_speculative_tokens {k or 0}) vLLM stops running "
                   "the draft for the whole batch and verifies token id 0 as every draft (gpu_model_runner."
                   "_input_fits_in_drafter): one token per target forward for every request while any sequence is "
                   "that long")
        elif eng == "sglang":
            why = (f"SGLang logs 'Target model's context_length ({served}) is greater than the derived "
                   f"context_length ({dn})', overrides the draft's max_position_embeddings and drafts past the "
                   f"length it declares: beyond {dn} tokens EAGLE-3 gets slower than no speculation (sglang #6783)")
        else:
            why = ("a server started at the target's full length drafts past the length the draft declares: SGLang "
                   "overrides the draft's length and gets slower than no speculation (sglang #6783), vLLM stops "
                   "drafting past it")
        add("draft-positions-short", "error" if eng else "warning", msg, why,
            f"serve with {SERVED_FLAG.get(eng, '--context-length / --max-model-len')} {dn}, or use a draft trained "
            f"at {served} tokens (and write that max_position_embeddings)")
    if t is None:
        return out

    # ---- rotary against the target's ----
    if d["rope_theta"] != t["rope_theta"]:
        dk = d["rope_theta_key"] or "rope_theta (defaulted)"
        tk = t["rope_theta_key"] or "rope_theta (defaulted)"
        add("rope-theta-mismatch", "warning", f"{draft_file} {dk} {_num(d['rope_theta'])} but {target_file} {tk} "
            f"{_num(t['rope_theta'])}", "EAGLE-3 trainers (SpecForge, speculators, ModelOpt) copy the target's "
            "rotary base into the draft config; a draft served with another base than it was trained with "
            "mis-rotates every query and key",
            f"write \"rope_theta\": {_num(t['rope_theta'])} in the draft config if it was trained with the target's "
            "base")
    ds, ts = d["rope_scaling"], t["rope_scaling"]
    if ds != ts:
        scale = _yarn_scale(ds) if not ts else None
        modelopt = bool(ds) and all(ds.get(key) == v for key, v in MODELOPT_YARN.items())
        msg = (f"{draft_file} {d['rope_scaling_key'] or 'rope_scaling'} {_scaling_text(ds)} but {target_file} "
               f"{t['rope_scaling_key'] or 'rope_scaling'} {_scaling_text(ts)}")
        if ds and not ts:
            why = (("NVIDIA ModelOpt's export writes this by default (eagle_export_rope_scaling, injected when training "
                    "used plain rotary): " if modelopt else "")
                   + "the server computes the draft's rotary with this scaling"
                   + (f" (YaRN scales q·k by {scale:.2f} at every position and stretches the low frequencies)"
                      if scale and scale != 1 else "") + ", the target has none")
            fix = ("if the draft was trained without scaling write \"rope_scaling\": null"
                   + (" (ModelOpt: train with eagle.eagle_export_rope_scaling={})" if modelopt else "")
                   + "; keep it only where you measured it helps at your served length")
        elif ts and not ds:
            orig = ts.get("original_max_position_embeddings")
            why = ("the target's rotary is scaled" + (f" past {orig} tokens" if orig else "")
                   + ", the draft's is not: at long contexts the draft rotates differently from the target it follows")
            fix = "copy the target's rope_scaling into the draft config if the draft was trained with it"
        else:
            why = "the draft and the target scale their rotary differently"
            fix = "write the rope_scaling the draft was trained with"
        add("rope-scaling-mismatch", "warning", msg, why, fix)
    return out


def findings(draft, target=None, *, engine: str | None = None, served: int | None = None, served_from: str = "",
             k: int | None = None) -> list[dict]:
    """:func:`check` as a list of ``{code, severity, message, why, fix}`` (``draft``/``target``: folders, files
    or config dicts)."""
    out: list[dict] = []

    def add(code, severity, message, why="", fix=""):
        out.append({"code": code, "severity": severity, "message": message, "why": why, "fix": fix})

    check(add, load_config(draft, "draft config"), load_config(target, "target config") if target is not None else None,
          engine=engine, served=served, served_from=served_from, draft_file=config_file(draft, "draft config"),
          target_file=config_file(target, "target config"), k=k)
    return out


__all__ = ["HF_DEFAULTS", "MODELOPT_YARN", "SERVED_FLAG", "check", "config_file", "context", "findings", "read",
           "served_context"]
