"""Draft families beyond EAGLE-3: which one a config is, and what each engine feeds it (no torch, no weights).

    >>> from workbench.engines.families import family_of, feeds
    >>> family_of({"architectures": ["DFlashDraftModel"], "dflash_config": {"target_layer_ids": [1, 9, 17]}}).name
    'dflash'
    >>> [(f.engine, f.states) for f in feeds({"architectures": ["DFlashDraftModel"],
    ...                                       "dflash_config": {"target_layer_ids": [1, 9, 17]}}, 36)][:2]
    [('sglang', 'L1,L9,L17'), ('vllm', 'L1,L9,L17')]

The families (docs/families.md, one page each under docs/families/):

* ``eagle3``: an EAGLE-3 draft (three taps into ``fc``); its engine rules are the records of
  :mod:`workbench.engines.records`.
* ``eagle3.1``: EAGLE-3 with ``norm_before_fc`` (one RMSNorm over the concatenated taps), ``fc_norm`` (one per
  tap, SGLang's alias ``use_aux_norm``) or ``norm_output`` (the post-norm hidden fed to the next step).
* ``p-eagle``: parallel drafting: a ``mask_hidden`` and a mask token fill the K-1 later slots, so one draft pass
  drafts all K tokens (vLLM ``parallel_drafting``, PR #32887; speculators ``peagle``).
* ``dflash`` / ``dspark``: block drafters: ``dflash_config.target_layer_ids`` are 0-based layer OUTPUTS (id t =
  ``L{t}``: SGLang captures before layer t+1, vLLM adds 1 and captures before layer t+1); the context enters the
  draft only as keys and values; one non-causal pass over [token, mask x K]. DSpark adds a low-rank Markov head
  and runs on vLLM's V2 runner only.
* ``mtp``: multi-token-prediction heads (DeepSeek NextN, Qwen3.5, GLM, MiMo): fed the target's LAST hidden
  state; the engines feed it after the final norm; multi-layer heads differ by runner.

Every rule below names the engine file it was read from (vLLM 0.32.0 as installed by ``make vllm``; SGLang from
its repository; see the family pages). ``feeds`` never guesses: a family or engine it does not know is said so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.engines import records as engines
from workbench.engines.tables import table
from workbench.engines.taps import load_config, num_layers

FAMILIES = ("eagle3", "eagle3.1", "p-eagle", "dflash", "dspark", "mtp")
LABELS = {"eagle3": "EAGLE-3", "eagle3.1": "EAGLE-3.1", "p-eagle": "P-EAGLE (parallel drafting)",
          "dflash": "DFlash (block drafter)", "dspark": "DSpark (block drafter + Markov head)",
          "mtp": "MTP / NextN"}
EAGLE_ARCHS = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator")
NORM_KEYS = ("norm_before_fc", "fc_norm", "use_aux_norm", "norm_output")
# vLLM 0.32 llm_base_proposer._init_parallel_drafting_params: the first key found names the mask token
MASK_TOKEN_KEYS = ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id", "pard_token",
                   "ptd_token_id")
DSPARK_KEYS = ("dspark_noise_token_id", "markov_rank", "markov_head_type", "dspark_block_size",
               "dspark_target_layer_ids")
MTP_TARGET_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")

_V_SRC = "vllm/"
VLLM_SOURCES = {
    "p-eagle": ("vllm/config/speculative.py (parallel_drafting)", "vllm/v1/spec_decode/llm_base_proposer.py "
                "(_init_parallel_drafting_params, propose, load_model)", "vllm/model_executor/models/llama_eagle3.py "
                "(mask_hidden, load_weights)", "vllm/config/vllm.py (V2 runner: parallel drafting unsupported)"),
    "dflash": ("vllm/v1/worker/gpu_model_runner.py (_get_eagle3_aux_layers_from_config: target_layer_ids + 1)",
               "vllm/v1/spec_decode/dflash.py (DFlashProposer)", "vllm/model_executor/models/qwen3_dflash.py"),
    "dspark": ("vllm/config/vllm.py (V1: 'Model Runner V1 does not support: dspark')",
               "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py", "vllm/model_executor/models/qwen3_dspark.py"),
    "mtp": ("vllm/v1/worker/gpu_model_runner.py (the target's returned, post-norm hidden_states)",
            "vllm/v1/spec_decode/llm_base_proposer.py (propose: no spec_step_idx on V1)",
            "vllm/model_executor/models/deepseek_mtp.py (spec_step_idx % num_mtp_layers)",
            "vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py (V2: module k at step k)"),
}
SGLANG_SOURCES = {
    "p-eagle": ("issue #23171 and PR #27498 (open): no SGLang code reads parallel_drafting",
                "python/sglang/srt/models/llama_eagle3.py"),
    "dflash": ("python/sglang/srt/speculative/dflash_utils.py (parse_dflash_draft_config)",
               "python/sglang/srt/models/dflash.py", "python/sglang/srt/speculative/dflash_worker.py"),
    "dspark": (),
    "mtp": ("python/sglang/srt/layers/logits_processor.py (the captured hidden: post-norm unless "
            "hidden_states_before_norm)", "python/sglang/srt/models/deepseek_nextn.py"),
}


@dataclass(frozen=True)
class Family:
    """What a config is: ``name`` (one of :data:`FAMILIES`) and the keys that said so (``evidence``)."""

    name: str
    evidence: str
    target_carries_heads: bool = False      # MTP heads inside the target's own checkpoint (no separate draft)

    @property
    def label(self) -> str:
        return LABELS[self.name]


@dataclass
class Feed:
    """What one engine feeds a draft of one family: ``states`` (taps like ``L1,L9,L17``, or a description),
    whether it ``serves`` the family (``yes``, ``no`` or ``refuses``), how, and the engine files behind it."""

    engine: str
    family: str
    serves: str
    states: str
    how: str
    sources: tuple = ()
    warnings: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "family": self.family, "serves": self.serves, "states": self.states,
                "how": self.how, "sources": list(self.sources), "warnings": list(self.warnings)}


def _get(cfg: dict, dotted: str):
    if "." in dotted:
        head, key = dotted.split(".", 1)
        sub = cfg.get(head) if isinstance(cfg.get(head), dict) else {}
        return sub.get(key)
    return cfg.get(dotted)


def model_facts(cfg: dict) -> dict:
    """The model-specific facts of a config (``engines/data/models.json``), found by its exact ``model_type`` (top
    level or ``text_config``) or an exact architecture, never by a substring; {} for any other model.

        >>> model_facts({"model_type": "deepseek_v41"})["dspark_ids_are_layer_inputs"]
        True
        >>> model_facts({"architectures": ["Step3p5ForCausalLM"]})["mtp_state"], model_facts({"model_type": "deepseek_v3"})
        ({'sglang': 'pre-norm'}, {})
    """
    models = table("models")["models"]
    types = [str(t) for t in (cfg.get("model_type"), _text(cfg).get("model_type")) if t]
    for t in types:
        if t in models:
            return models[t]
    archs = set(map(str, cfg.get("architectures") or []))
    return next((m for m in models.values() if archs & set(m["architectures"])), {})


def _text(cfg: dict) -> dict:
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def mixed_conventions(cfg: dict, where: str) -> None:
    """Refuse, in one line naming both keys, a draft config that mixes two families' conventions: the
    engines would each read a different one, so any answer would be a guess.

        >>> mixed_conventions({"eagle_config": {}, "dflash_config": {}}, "d/config.json")
        Traceback (most recent call last):
        ...
        workbench.core.errors.WorkbenchError: d/config.json: both eagle_config and dflash_config: an EAGLE-3 draft (eagle_config, its ids read with EAGLE's +1 capture rule) or a DFlash/DSpark block drafter (dflash_config.target_layer_ids, 0-based, shifted differently by vLLM), not both (expected one of them)
    """
    if isinstance(cfg.get("eagle_config"), dict) and isinstance(cfg.get("dflash_config"), dict):
        raise WorkbenchError(f"{where}: both eagle_config and dflash_config: an EAGLE-3 draft (eagle_config, its ids read "
                             f"with EAGLE's +1 capture rule) or a DFlash/DSpark block drafter "
                             f"(dflash_config.target_layer_ids, 0-based, shifted differently by vLLM), not both "
                             f"(expected one of them)")
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    per_tap = next((k for k in ("fc_norm", "use_aux_norm") if cfg.get(k)), None)
    concat = ("eagle_config.norm_before_fc" if eagle.get("norm_before_fc") else
              "norm_before_fc" if cfg.get("norm_before_fc") and "norm_before_fc" not in eagle else None)
    if per_tap and concat:
        raise WorkbenchError(f"{where}: {per_tap} and {concat} are both true: EAGLE-3.1's per-tap norm and its norm of "
                             f"the concatenated taps are two conventions (SGLang reads {per_tap}, vLLM reads "
                             f"norm_before_fc; speculators refuses both at once): expected at most one of them")


def family_of(config, where: str = "config.json") -> Family | None:
    """The family a draft (or target) config belongs to, or None when it is none of :data:`FAMILIES`.

        >>> family_of({"speculators_model_type": "peagle"}).name, family_of({"architectures": ["LlamaForCausalLMEagle3"],
        ...                                                                  "norm_output": True}).name
        ('p-eagle', 'eagle3.1')
        >>> family_of({"architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": 1}).evidence
        'num_nextn_predict_layers 1 in a target config: MTP heads inside the target checkpoint'
    """
    cfg = load_config(config, "config")
    mixed_conventions(cfg, where)
    arch = " ".join(str(a) for a in cfg.get("architectures") or [])
    low = arch.lower()
    smt = cfg.get("speculators_model_type")
    model_type = str(_text(cfg).get("model_type") or "")
    if smt is not None:
        name = {"eagle3": None, "peagle": "p-eagle", "dflash": "dflash", "dflash2": "dflash", "dspark": "dspark",
                "mtp": "mtp"}.get(smt, "unknown")
        if name == "unknown":
            return None
        if name is not None:
            return Family(name, f"speculators_model_type {smt!r}")
    if "dspark" in low or any(k in cfg for k in DSPARK_KEYS) or (
            isinstance(cfg.get("dflash_config"), dict) and cfg["dflash_config"].get("projector_type") == "dspark"):
        return Family("dspark", f"architectures {arch!r}" if "dspark" in low else "DSpark keys")
    if "dflash" in low or isinstance(cfg.get("dflash_config"), dict):
        return Family("dflash", f"architectures {arch!r}" if "dflash" in low else "dflash_config")
    eagle = "eagle3" in low or smt == "eagle3"            # vLLM registers Eagle3{Llama,Qwen3,DeepseekV3,...}
    if "peagle" in low or cfg.get("parallel_drafting") is True or any(k in cfg for k in ("pard_token", "ptd_token_id")) \
            or (eagle and cfg.get("mask_token_id") is not None):
        return Family("p-eagle", f"architectures {arch!r}" if "peagle" in low else
                      "parallel_drafting" if cfg.get("parallel_drafting") is True else "a mask token key")
    if model_type.endswith("_mtp") or "mtp" in low or "nextn" in low:
        return Family("mtp", f"model_type {model_type!r}" if model_type.endswith("_mtp") else f"architectures {arch!r}")
    if eagle:
        set_keys = [k for k in NORM_KEYS if cfg.get(k) or _get(cfg, f"eagle_config.{k}")]
        if set_keys:
            return Family("eagle3.1", ", ".join(set_keys))
        return Family("eagle3", f"architectures {arch!r}" if arch else f"speculators_model_type {smt!r}")
    text = _text(cfg)
    for key in MTP_TARGET_KEYS:
        v = text.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return Family("mtp", f"{key} {v} in a target config: MTP heads inside the target checkpoint",
                          target_carries_heads=True)
    return None


def mask_token(cfg: dict, where: str = "config.json", vocab: int | None = None) -> tuple[int | None, str | None]:
    """(id, key): the parallel-drafting mask token a draft config names, in vLLM's read order, or (None, None).

        >>> mask_token({"pard_token": 7, "ptd_token_id": 9})
        (7, 'pard_token')
    """
    for key in MASK_TOKEN_KEYS:
        v = _get(cfg, key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (vocab is not None and v >= vocab):
            raise WorkbenchError(f"{where}: {key} is {v!r} (expected a token id in [0, {vocab or 'vocab_size'}))")
        return v, key
    return None, None


def has_mask_token(cfg: dict) -> bool:
    """Whether a config names a parallel-drafting mask token under any key vLLM reads (valid or not)."""
    return any(_get(cfg, key) is not None for key in MASK_TOKEN_KEYS)


def mtp_layers(cfg: dict) -> int | None:
    """How many MTP layers a config declares (target or draft), or None."""
    text = _text(cfg)
    for key in MTP_TARGET_KEYS + ("n_predict",):
        v = text.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _ints(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)


def block_ids(cfg: dict) -> tuple[list | None, str | None]:
    """A block drafter's trained target layer ids (0-based layer outputs) and the key they came from, in vLLM V2's
    order. DeepSeek-V4.1's ``dspark_target_layer_ids`` name layer inputs (id t = L{t-1}) and are returned shifted."""
    for key in ("dflash_config.target_layer_ids", "dspark_target_layer_ids", "target_layer_ids"):
        v = _get(cfg, key)
        if _ints(v):
            if key == "dspark_target_layer_ids" and model_facts(cfg).get("dspark_ids_are_layer_inputs"):
                return [i - 1 for i in v], key
            return v, key
    return None, None


def vllm_block_ids(cfg: dict, runner: str) -> tuple[list | None, str]:
    """The ids vLLM 0.32 feeds a block drafter, in its own convention (id k = the input of layer k = L{k-1}, 0 the
    embeddings), and how it read them; None: its default taps. V1 (the CPU build's; gpu_model_runner
    ``_get_eagle3_aux_layers_from_config``): the top-level EAGLE key, else dflash ids +1, replaced by
    ``eagle_config``'s EAGLE key whenever an ``eagle_config`` dict is there. V2 (eagle3_utils
    ``get_eagle3_aux_layers_from_config``): the top-level EAGLE key, dflash ids +1, DSpark ids +1 (as they are for
    DeepSeek-V4.1), top-level ``target_layer_ids`` +1, then ``layer_ids`` of dflash_config or eagle_config as they are.

        >>> vllm_block_ids({"dflash_config": {"target_layer_ids": [1, 3]}}, "V1")
        ([2, 4], 'dflash_config.target_layer_ids [1, 3] +1')
        >>> vllm_block_ids({"target_layer_ids": [1, 3]}, "V1")[0], vllm_block_ids({"target_layer_ids": [1, 3]}, "V2")[0]
        (None, [2, 4])
    """
    def read(key):             # vLLM skips a missing or empty value; anything else must be a list of layer ids
        v = _get(cfg, key)
        if v and not _ints(v):
            raise WorkbenchError(f"draft config: {key} is {v!r}; expected a list of layer ids (integers)")
        return list(v) if v else None

    top = read("eagle_aux_hidden_state_layer_ids")
    if top:
        return top, f"top-level eagle_aux_hidden_state_layer_ids {top} read first, as vLLM ids"
    dflash = read("dflash_config.target_layer_ids")
    first = [i + 1 for i in dflash] if dflash else None
    if runner == "V1":
        ids, how = first, f"dflash_config.target_layer_ids {dflash} +1"
        if isinstance(cfg.get("eagle_config"), dict) and cfg["eagle_config"]:
            ids = read("eagle_config.eagle_aux_hidden_state_layer_ids")
            how = "eagle_config.eagle_aux_hidden_state_layer_ids (the V1 runner reads it over dflash_config)"
        return (ids, how) if ids else (None, "no ids the V1 runner reads: vLLM's default (2, N//2, N-3)")
    if first:
        return first, f"dflash_config.target_layer_ids {dflash} +1"
    ds = read("dspark_target_layer_ids")
    if ds:
        if model_facts(cfg).get("dspark_ids_are_layer_inputs"):
            return ds, f"dspark_target_layer_ids {ds} as they are (DeepSeek-V4.1: layer inputs)"
        return [i + 1 for i in ds], f"dspark_target_layer_ids {ds} +1"
    tl = read("target_layer_ids")
    if tl:
        return [i + 1 for i in tl], f"target_layer_ids {tl} +1"
    for name in ("dflash_config", "eagle_config"):
        sub = read(f"{name}.layer_ids")
        if sub:
            return sub, f"{name}.layer_ids {sub} as they are"
    return None, "no ids the V2 runner reads: vLLM's default (2, N//2, N-3)"


def fc_width(cfg: dict) -> int | None:
    """How many taps a vLLM DFlash drafter's fc is sized for: the V2 reader's ids even under V1 (qwen3_dflash.py
    ``_get_dflash_fc_input_size``), else the draft's num_hidden_layers. Fed another count, the first forward fails."""
    vids, _ = vllm_block_ids(cfg, "V2")
    return len(vids) if vids else cfg.get("num_hidden_layers")


def fc_mismatch(fam: str, cfg: dict, vids) -> tuple[int, int] | None:
    """(taps fed, taps the fc takes) when a DFlash drafter is fed ``vids`` (None: vLLM's 3 default taps) and its
    fc is sized for another count (:func:`fc_width`); None when they match."""
    width, fed = fc_width(cfg), len(vids) if vids else 3
    return (fed, width) if fam == "dflash" and width is not None and width != fed else None


def _served_taps(vids, n) -> str:
    """vLLM ids (id k = L{k-1}, 0 the embeddings) as the states they name."""
    return ",".join("embed" if i == 0 else _taps([i - 1], n) for i in vids)


def _taps(ids, n: int | None) -> str:
    if n is None:
        return ",".join("embed" if i == -1 else f"L{i}" for i in ids) + " (no target: range unchecked)"
    return ",".join("embed" if i == -1 else f"L{i}" if 0 <= i < n else f"(id {i}: none)" for i in ids)


def feeds(draft_config, target=None) -> list[Feed]:
    """What SGLang, vLLM's V1 runner (the CPU build's) and its V2 runner (the GPU default) feed this draft.

    EAGLE-3 and EAGLE-3.1 drafts: their taps and options through :mod:`workbench.engines.records` (``workbench
    wiring`` has every record); the families beyond: the rules of the family pages.
    """
    cfg = load_config(draft_config, "draft config")
    fam = family_of(cfg)
    n = num_layers(target) if target is not None else None
    if fam is None:
        raise WorkbenchError("draft config: not a draft of a family the workbench reads (expected one of "
                             f"{', '.join(FAMILIES)}: docs/families.md)")
    out = []
    if fam.name in ("eagle3", "eagle3.1", "p-eagle") and n is not None:
        for eng in ("sglang", "vllm", "vllm-v2"):
            r = engines.wiring_for(eng, cfg, target)
            opts, warn = engines.options_for(eng, cfg)
            on = [k for k, v in opts.items() if v]
            how = r.explanation + ("; computes with " + ", ".join(on) if on else "")
            f = Feed(eng, fam.name, "yes", r.spec or "(nothing)", how, engines.get(eng).sources[:2],
                     list(r.warnings) + warn)
            if fam.name == "eagle3.1" and eng != "sglang" and cfg.get("use_aux_norm") and not cfg.get("fc_norm"):
                f.warnings.append(f"{eng} reads fc_norm only, never its alias use_aux_norm: it computes without the "
                                  "per-tap norm (llama_eagle3.py: config.fc_norm)")
            if fam.name == "p-eagle":
                _p_eagle(f, eng)
            out.append(f)
        return out
    if fam.name in ("eagle3", "eagle3.1", "p-eagle"):
        return [Feed(e, fam.name, "yes", "(give the target)", "EAGLE-3 ids need the target's layer count")
                for e in ("sglang", "vllm", "vllm-v2")]
    if fam.name in ("dflash", "dspark"):
        ids, key = block_ids(cfg)
        top = cfg.get("eagle_aux_hidden_state_layer_ids")
        for eng in ("sglang", "vllm", "vllm-v2"):
            out.append(_block(fam.name, eng, cfg, ids, key, top, n))
        return out
    return [_mtp(eng, cfg, fam, target) for eng in ("sglang", "vllm", "vllm-v2")]


def _p_eagle(f: Feed, eng: str) -> None:
    if eng == "sglang":
        f.serves = "no"
        f.how += "; no parallel drafting (issue #23171): the draft is run as a sequential EAGLE-3 chain"
        f.sources = SGLANG_SOURCES["p-eagle"]
        f.warnings.append("SGLang does not serve P-EAGLE: each step k >= 1 feeds the previous step's token and "
                          "hidden, which a P-EAGLE draft never trained on (mask_hidden is ignored)")
    elif eng == "vllm":
        f.how += ('; one draft pass over [bonus token, mask token x (K-1)] with fc(mask_hidden) in the masked slots, '
                  'only when the speculative config sets "parallel_drafting": true')
        f.sources = VLLM_SOURCES["p-eagle"][:3]
    else:
        f.serves = "refuses"
        f.how += "; the V2 runner does not support parallel drafting: vLLM 0.32 falls back to V1 (auto) or refuses"
        f.sources = VLLM_SOURCES["p-eagle"][3:]


def _block(fam: str, eng: str, cfg: dict, ids, key, top, n) -> Feed:
    src = SGLANG_SOURCES[fam] if eng == "sglang" else VLLM_SOURCES[fam]
    if fam == "dspark" and eng == "sglang":
        return Feed(eng, fam, "unknown", "(not read)", "no DSpark drafter was found in the SGLang source read for "
                    "this page (docs/families/dflash.md)", ())
    if fam == "dspark" and eng == "vllm":
        return Feed(eng, fam, "refuses", "(not served)", "vLLM 0.32's V1 runner (the CPU build's) refuses DSpark: "
                    "'Model Runner V1 does not support: dspark speculative decoding'", src[:1])
    warnings = []
    if eng == "sglang":
        if ids is None:
            return Feed(eng, fam, "yes", "(default)", "no dflash_config.target_layer_ids: SGLang's default "
                        "(N//2 for one layer, else spread over 1..N-3)", src)
        how = f"{key} {ids} (0-based layer outputs) +1 → capture before layers {[i + 1 for i in ids]}"
        if n is not None and any(i >= n - 1 for i in ids):
            warnings.append(f"id {max(ids)} = the last layer: SGLang captures inside the layer loop, so L{n - 1}'s "
                            "output is never captured")
        return Feed(eng, fam, "yes", _taps(ids, n), how, src, warnings)
    # vLLM V1 / V2: each runner's own reading order (vllm_block_ids); vLLM ids k = L{k-1}
    vids, how = vllm_block_ids(cfg, "V2" if eng == "vllm-v2" else "V1")
    bad_fc = fc_mismatch(fam, cfg, vids)
    if bad_fc:
        fed_n, width = bad_fc
        return Feed(eng, fam, "refuses", "(fails)", f"{how}: {fed_n} taps fed to an fc sized for {width} (qwen3_dflash.py "
                    "_get_dflash_fc_input_size reads the V2 ids even under V1): the first forward fails on the shapes",
                    src, [f"vLLM reads {how}; the drafter's fc takes {width} taps"])
    if vids is None:
        states = _taps([1, n // 2 - 1, n - 4], n) if n else "(default)"
        if ids is not None:
            warnings.append(f"vLLM feeds its default taps {states}, the block drafter was trained on "
                            f"{_taps(ids, n)} ({key} {ids}, a key this runner does not read)")
    else:
        how += f" → vLLM ids {vids} (id k = L{{k-1}})"
        states = _served_taps(vids, n)
        if ids is not None and vids != [i + 1 for i in ids]:
            warnings.append(f"vLLM feeds {states}, the block drafter was trained on {_taps(ids, n)} ({key} {ids})"
                            + (" (DFlash ids read in the EAGLE convention)" if top else ""))
    serves = "yes"
    if eng == "vllm-v2" and fam == "dflash":
        how += "; the V2 DFlash speculator (GPU)"
    return Feed(eng, fam, serves, states, how, src, warnings)


def mtp_fed_state(cfg: dict, engine: str) -> tuple[str, str]:
    """The target state an engine feeds this model's MTP head (one of :data:`STATES`, or "model-specific") and why:
    post-norm, except where the model table (:func:`model_facts`) says otherwise for that engine: DeepSeek-V4 and
    V4.1 (both engines: the pre-hc_head residual stream, before the final norm), Step3.5 on SGLang
    (``hidden_states_before_norm``) and Qwen4-exp on vLLM only (its own multi-stream state).

        >>> mtp_fed_state({"model_type": "deepseek_v3"}, "vllm")[0], mtp_fed_state({"model_type": "deepseek_v4"}, "vllm")[0]
        ('post-norm', 'pre-norm')
    """
    facts = model_facts(cfg)
    state = facts.get("mtp_state", {}).get(engine)
    if state is not None:
        return state, facts["mtp_state_why"]
    if engine == "sglang":
        return "post-norm", "SGLang's LogitsProcessor captures the hidden after the final norm"
    return "post-norm", "vLLM feeds the target's returned (post-norm) hidden_states"


def _mtp(eng: str, cfg: dict, fam: Family, target) -> Feed:
    k = mtp_layers(cfg) or (mtp_layers(load_config(target, "target config")) if isinstance(target, (dict, str)) else None)
    src = SGLANG_SOURCES["mtp"] if eng == "sglang" else VLLM_SOURCES["mtp"]
    fed, why = mtp_fed_state(cfg, "sglang" if eng == "sglang" else "vllm")
    states = (f"a model-specific state ({why})" if fed not in STATES else
              f"the target's last hidden state, {'after' if fed == 'post-norm' else 'before'} its final norm"
              + (" (the pre-hc_head residual stream)" if fed == "pre-norm" and eng != "sglang" else ""))
    warnings = []
    if eng == "sglang":
        how = ("LogitsProcessor captures the post-norm hidden (a model passing hidden_states_before_norm, e.g. "
               "Step3.5 or DeepSeek-V4, is fed its pre-norm state); multi-layer heads: every layer k is fed the "
               "target's state and embed(token t+k) (chained only for Step3p5MTP)")
    elif eng == "vllm":
        how = ("the target's returned hidden_states (post-norm); V1 never passes spec_step_idx, so every step runs "
               "MTP layer 0, fed its own previous output")
        if k and k > 1:
            warnings.append(f"{k} MTP layers: vLLM's V1 runner (the CPU build's) drafts every step with the first "
                            "layer only; layers 1..{} are never used".format(k - 1))
    else:
        how = ("the target's returned hidden_states (post-norm); multi-module MTP: step k runs module k, fed the "
               "previous module's hidden (chained), the module index wrapping past the last layer")
    return Feed(eng, "mtp", "yes", states, how, src, warnings)


def describe(draft_config, target=None) -> str:
    """Plain text: the family (and what said so), then one block per engine: serves, states fed, how, sources.

        >>> print(describe({"architectures": ["DFlashDraftModel"], "dflash_config": {"target_layer_ids": [1, 9]}},
        ...                36).splitlines()[0])
        family: DFlash (block drafter) (architectures 'DFlashDraftModel')
    """
    cfg = load_config(draft_config, "draft config")
    fam = family_of(cfg)
    if fam is None:
        return "family: none of " + ", ".join(FAMILIES) + " (docs/families.md)"
    lines = [f"family: {fam.label} ({fam.evidence})"]
    for f in feeds(cfg, target):
        lines.append(f"  {f.engine:<8} serves {f.serves:<8} feeds {f.states}")
        lines.append(f"  {'':<8} how: {f.how}")
        if f.sources:
            lines.append(f"  {'':<8} read from: {'; '.join(f.sources)}")
        lines += [f"  {'':<8} ! {w}" for w in f.warnings]
    if fam.name in ("dflash", "dspark", "mtp"):
        lines.append(f"acceptance: not simulated for {fam.label} (the workbench simulates EAGLE-3, EAGLE-3.1 and "
                     "P-EAGLE drafts only; docs/families.md)")
    return "\n".join(lines)


# ─────────────────────────────── lint rules: the silent fallbacks ───────────────────────────────

STATES = ("pre-norm", "post-norm")


def _served_family(dcfg, tcfg, add):
    """(family, config it came from) of the served draft (the target's own MTP heads only when there is no draft)."""
    for cfg in (dcfg, tcfg if dcfg is None else None):
        if cfg is None:
            continue
        try:
            fam = family_of(cfg)
        except WorkbenchError as e:
            add("mixed-conventions", "error", str(e).split(": ", 1)[-1],
                "vLLM 0.32's V1 runner lets an eagle_config dict override the dflash ids (with None when it has no "
                "ids: the default taps, silently); SGLang reads another key: the engines wire it differently",
                "keep one family's keys")
            return None, None
        if fam is not None and (cfg is dcfg or fam.name == "mtp"):
            return fam, cfg
    return None, None


def lint_vllm(add, dcfg, tcfg, spec: dict, *, method: str | None, runner: str, k, n, trained_state=None):
    """The family rules of ``workbench vllm lint`` (vLLM 0.32; docs/families.md): every silent fallback an error."""
    fam, cfg = _served_family(dcfg, tcfg, add)
    if fam is None:
        return None
    parallel = bool(spec.get("parallel_drafting"))
    if fam.name == "p-eagle":
        has_token = has_mask_token(cfg)
        if not parallel and k != 1:
            add("p-eagle-drafted-sequentially", "error", "a P-EAGLE draft without \"parallel_drafting\": true: vLLM "
                "drafts it as a chain", "llama_eagle3.load_weights only warns 'mask_hidden found in weights but model is "
                "not configured for parallel drafting' and skips it: steps k >= 1 then feed the previous step's token "
                "and hidden, which the draft never trained on (one measurement, the smoke demo's draft: accept length "
                "1.60 instead of 1.70; docs/families/p-eagle.md)", 'add "parallel_drafting": true to --speculative-config'
                + ("" if has_token else ' and the mask token the draft was trained with ("mask_token_id": ID) to its '
                   "config.json"))
        elif parallel and runner == "V2":                    # config/vllm.py: only when it is asked for
            add("p-eagle-v2", "error", "parallel drafting on the V2 model runner",
                "vLLM 0.32's V2 runner does not support EAGLE parallel drafting (config/vllm.py): forced with "
                "VLLM_USE_V2_MODEL_RUNNER=1 it refuses to start", "unset VLLM_USE_V2_MODEL_RUNNER (auto picks V1)")
    if fam.name == "p-eagle" and cfg.get("speculators_model_type") == "peagle":
        why = ("vLLM 0.32 converts speculators P-EAGLE configs with update_peagle (transformers_utils/configs/"
               "speculators/algos.py), which copies norm_before_fc and norm_before_residual but not fc_norm or "
               "norm_output; speculators' own P-EAGLE computes with them (models/peagle/core.py)")
        if cfg.get("fc_norm"):
            add("p-eagle-fc-norm-refused", "error", "fc_norm set in a speculators P-EAGLE config: vLLM does not "
                "start", why + ": the draft has no fc_norm module, so its fc_norm.* tensors fail to load "
                "(AutoWeightsLoader: 'There is no module or parameter named')", "serve a P-EAGLE trained without "
                "fc_norm")
        if cfg.get("norm_output"):
            add("p-eagle-norm-output-dropped", "error", "norm_output set in a speculators P-EAGLE config: vLLM "
                "computes without it, silently", why + " (norm_output has no weights, so nothing fails)",
                "serve a P-EAGLE trained without norm_output; `workbench accept --engine vllm` measures what "
                "dropping it costs")
    if fam.name == "eagle3.1":
        if cfg.get("use_aux_norm") and not cfg.get("fc_norm"):
            add("use-aux-norm-ignored", "error", "use_aux_norm is set but fc_norm is not: vLLM computes without the "
                "per-tap norms", "vLLM 0.32 reads config.fc_norm only (llama_eagle3.py); use_aux_norm is SGLang's "
                "alias, read nowhere in vLLM", 'write "fc_norm": true beside it')
        _nested_options(add, cfg, "vLLM", "llama_eagle3.py reads {key} from the top level only")
    if fam.name in ("dflash", "dspark"):
        _lint_block(add, fam.name, cfg, n, k, "vllm", method=method, runner=runner)
    if fam.name == "mtp":
        _lint_mtp(add, cfg, k, "vllm", runner=runner, trained_state=trained_state)
    return fam


def _nested_options(add, cfg: dict, engine: str, why: str) -> None:
    """``fc_norm`` / ``norm_output`` set only under ``eagle_config``: both engines read them at the top level only."""
    for key in ("fc_norm", "norm_output"):
        if _get(cfg, f"eagle_config.{key}") and not cfg.get(key):
            add(f"{key.replace('_', '-')}-nested-ignored", "error", f"eagle_config.{key} is set but the top-level "
                f"{key} is not: {engine} ignores it", why.format(key=key), f'write "{key}": true at the top level')


def lint_sglang(add, dcfg, tcfg, *, algorithm: str | None, k, n, trained_state=None):
    """The family rules of ``workbench sglang lint`` (docs/families.md)."""
    fam, cfg = _served_family(dcfg, tcfg, add)
    if fam is None:
        return None
    if fam.name == "p-eagle":
        add("p-eagle-not-served", "error", "a P-EAGLE draft on SGLang: SGLang does not serve parallel drafting",
            "no SGLang code reads parallel_drafting or mask_hidden (issue #23171, PR #27498 open): the draft runs as "
            "a sequential EAGLE-3 chain, its steps k >= 1 fed inputs it never trained on",
            "serve it on vLLM with \"parallel_drafting\": true, or use an EAGLE-3 draft")
    if fam.name == "eagle3.1":
        _nested_options(add, cfg, "SGLang", "llama_eagle3.py reads {key} with getattr(config) at the top level only")
    if fam.name in ("dflash", "dspark"):
        _lint_block(add, fam.name, cfg, n, k, "sglang", method=algorithm)
    if fam.name == "mtp":
        _lint_mtp(add, cfg, k, "sglang", trained_state=trained_state)
    return fam


def _lint_block(add, fam: str, cfg: dict, n, k, engine: str, *, method=None, runner: str = "V1"):
    ids, key = block_ids(cfg)
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    want = "dspark" if fam == "dspark" else "dflash"
    if engine == "vllm" and method not in (None, want):
        add(f"method-not-{want}", "error", f"method {method!r} with a {LABELS[fam]} draft",
            f"only method {want!r} runs the block drafter (one pass over [token, mask x K], the context as keys and "
            "values); EAGLE methods feed it as a chain", f'set "method": "{want}"')
    if engine == "sglang" and method not in (None, "DFLASH"):
        add("algorithm-not-dflash", "error", f"--speculative-algorithm {method} with a {LABELS[fam]} draft",
            "only DFLASH runs a block drafter in SGLang (speculative/dflash_worker.py)",
            "use --speculative-algorithm DFLASH")
    if fam == "dspark" and engine == "vllm" and runner == "V1":
        add("dspark-v1", "error", "DSpark on vLLM's V1 model runner (the CPU build's)", "vLLM 0.32 refuses: 'Model "
            "Runner V1 does not support: dspark speculative decoding' (config/vllm.py); its V2 runner needs Triton",
            "serve it on a GPU (the V2 runner)")
    if fam == "dspark" and engine == "sglang":
        add("dspark-unknown", "warning", "no DSpark drafter was found in the SGLang source read for "
            "docs/families/dflash.md", "", "check your SGLang version serves DSpark before trusting this lint")
    vids, how = vllm_block_ids(cfg, runner) if engine == "vllm" else (None, "")
    if (vids is None if engine == "vllm" else ids is None and not top):
        add("block-default-ids", "warning", f"no {('dflash_config.' if fam == 'dflash' else '')}target_layer_ids: "
            "each engine takes its own default taps", "vLLM: (2, N//2, N-3) as EAGLE ids; SGLang: N//2 for one "
            "layer, else spread over 1..N-3: not what the drafter was trained on unless by chance",
            "write dflash_config.target_layer_ids (0-based layer outputs) as trained")
    if engine == "vllm" and top:
        if ids is not None and list(top) != [i + 1 for i in ids]:
            add("block-ids-eagle-convention", "error", f"top-level eagle_aux_hidden_state_layer_ids {top} and "
                f"{key} {ids} disagree: vLLM feeds {_served_taps(top, n)}, the drafter was trained on {_taps(ids, n)}",
                "vLLM reads the top-level EAGLE key first, as vLLM ids (id k = input of layer k = L{k-1}), and adds "
                "+1 only to dflash ids: DFlash ids written in the EAGLE convention are each one layer early (vLLM "
                "#40727: +2 instead of +1 took mt-bench acceptance from 4.11 to 3.95)",
                f"drop the top-level key (vLLM then reads {key} +1) or write {[i + 1 for i in ids]} there")
        elif ids is None:
            add("block-ids-top-level", "warning", f"only top-level eagle_aux_hidden_state_layer_ids {top}: vLLM reads "
                f"them as vLLM ids ({_served_taps(top, n)}); SGLang reads dflash_config.target_layer_ids only",
                "a DFlash drafter's ids are 0-based layer outputs (id t = L{t}); written in the EAGLE key they are "
                "read one layer early unless they were written +1", "write dflash_config.target_layer_ids instead")
    elif engine == "vllm" and ids is not None and vids != [i + 1 for i in ids] and not (fam == "dspark"
                                                                                     and runner == "V1"):
        fed = _served_taps(vids, n) if vids else "its default taps (2, N//2, N-3)"
        crash = fc_mismatch(fam, cfg, vids)
        add("block-ids-not-read", "error", f"{key} {ids}: vLLM's {runner} runner feeds "
            + (f"{crash[0]} taps to an fc sized for {crash[1]}: the server fails at its first forward" if crash else
               f"{fed}, the drafter was trained on {_taps(ids, n)}"),
            f"the {runner} runner reads {how}" + ("; the fc is sized by the V2 reader's ids even under V1 "
                                                   "(qwen3_dflash.py _get_dflash_fc_input_size)" if crash else ""),
            "write the trained ids in dflash_config.target_layer_ids (0-based layer outputs), which both runners "
            "read +1")
    if ids is not None and n is not None:
        lo = -1 if key == "dspark_target_layer_ids" and model_facts(cfg).get("dspark_ids_are_layer_inputs") else 0
        bad = [i for i in ids if not lo <= i < n]
        if bad:
            add("block-ids-range", "error", f"{key} {ids}: id {bad[0]} is outside 0..{n - 1} for N={n}",
                "SGLang refuses ids >= N (dflash_utils.py); vLLM captures nothing there", "fix the ids")
        elif engine == "sglang" and max(ids) == n - 1:
            add("block-last-layer", "warning", f"{key} includes {n - 1}, the last layer",
                "SGLang captures inside the layer loop (before layer id+1): the last layer's output is never captured",
                "check the served acceptance, or pick an earlier layer")
    bs = cfg.get("block_size")
    if isinstance(k, int) and isinstance(bs, int) and engine == "vllm" and k > bs:
        add("beyond-block-size", "warning", f"num_speculative_tokens {k} > the drafter's block_size {bs}",
            "vLLM's V1 DFlash ignores block_size (K mask slots whatever the trained block): slots past the block "
            "were never trained", f"set num_speculative_tokens <= {bs}")


def _lint_mtp(add, cfg: dict, k, engine: str, *, runner: str = "V1", trained_state=None):
    layers = mtp_layers(cfg)
    if engine == "vllm" and layers and isinstance(k, int) and k > layers and k % layers:
        add("mtp-k-multiple", "error", f"num_speculative_tokens {k} with {layers} MTP layers",
            "vLLM refuses K > n_predict unless it is a multiple of it (SpeculativeConfig.__post_init__)",
            f"set num_speculative_tokens to {layers} or a multiple")
    step35 = bool(model_facts(cfg).get("mtp_every_layer_on_v1"))
    if engine == "vllm" and runner == "V1" and layers and layers > 1 and isinstance(k, int) and k > 1 and not step35:
        add("mtp-first-layer-only", "error", f"{layers} MTP layers on vLLM's V1 runner (the CPU build's): every step "
            "runs the first layer", "V1's proposer never passes spec_step_idx (llm_base_proposer.propose), so "
            f"deepseek_mtp.py picks layer 0 for all {k} steps, fed its own output: layers 1..{layers - 1} are never "
            "used (V2 runs module k at step k)", "serve on the V2 runner (GPU), or set num_speculative_tokens 1")
    fed, why = mtp_fed_state(cfg, engine)
    who = "vLLM" if engine == "vllm" else "SGLang"
    if trained_state is not None:
        if trained_state not in STATES:
            raise WorkbenchError(f"--trained-state {trained_state!r}: expected one of {', '.join(STATES)}")
        if fed not in STATES:
            add("mtp-state-undecided", "warning", f"{who} feeds this MTP head a model-specific state: the "
                f"{trained_state} state it was trained on cannot be compared", why, "compare the served acceptance "
                "with the trained one")
        elif trained_state != fed:
            add("mtp-state-mismatch", "error", f"the MTP head was trained on the target's {trained_state} last hidden "
                f"state; {who} feeds it {fed}", why + " (llama.cpp #24025 fixed the same kind of mismatch for "
                "Qwen3.6 MTP)", f"retrain on the {fed} state, or serve where the state matches")
    elif layers:
        add("mtp-state", "info", f"{who} feeds the MTP head " + ("a model-specific state" if fed not in STATES else
            f"the target's last hidden state {'after' if fed == 'post-norm' else 'before'} the final norm"), why, "pass --trained-state "
            "pre-norm|post-norm to check it against what the head was trained on")


__all__ = ["FAMILIES", "Family", "Feed", "LABELS", "MASK_TOKEN_KEYS", "STATES", "block_ids", "describe", "fc_mismatch", "fc_width", "mtp_fed_state", "vllm_block_ids", "family_of", "feeds",
           "has_mask_token", "lint_sglang", "lint_vllm", "mask_token", "mixed_conventions", "mtp_layers"]
