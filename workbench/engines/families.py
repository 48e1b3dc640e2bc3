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
    if "peagle" in low or cfg.get("parallel_drafting") is True or any(k in cfg for k in ("pard_token", "ptd_token_id")) \
            or (smt == "eagle3" and cfg.get("mask_token_id") is not None):
        return Family("p-eagle", f"architectures {arch!r}" if "peagle" in low else
                      "parallel_drafting" if cfg.get("parallel_drafting") is True else "a mask token key")
    if model_type.endswith("_mtp") or "mtp" in low or "nextn" in low:
        return Family("mtp", f"model_type {model_type!r}" if model_type.endswith("_mtp") else f"architectures {arch!r}")
    eagle = any(a in arch for a in EAGLE_ARCHS) or smt == "eagle3"
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


def mtp_layers(cfg: dict) -> int | None:
    """How many MTP layers a config declares (target or draft), or None."""
    text = _text(cfg)
    for key in MTP_TARGET_KEYS + ("n_predict",):
        v = text.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def block_ids(cfg: dict) -> tuple[list | None, str | None]:
    """A block drafter's target layer ids (0-based layer outputs) and the key they came from."""
    for key in ("dflash_config.target_layer_ids", "target_layer_ids", "dspark_target_layer_ids"):
        v = _get(cfg, key)
        if isinstance(v, list) and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            return v, key
    return None, None


def _taps(ids, n: int | None) -> str:
    if n is None:
        return ",".join(f"L{i}" for i in ids) + " (no target: range unchecked)"
    return ",".join(f"L{i}" if 0 <= i < n else f"(id {i}: none)" for i in ids)


def feeds(draft_config, target=None) -> list[Feed]:
    """What SGLang, vLLM's V1 runner (the CPU build's) and its V2 runner (the GPU default) feed this draft.

    EAGLE-3 and EAGLE-3.1 drafts: their taps and options through :mod:`workbench.engines.records` (``workbench
    wiring`` has every record); the families beyond: the rules of the family pages.
    """
    from workbench import engines

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
    # vLLM V1 / V2: gpu_model_runner reads the top-level EAGLE key first (as is: id k = L{k-1}), else dflash ids + 1
    if top:
        how = f"top-level eagle_aux_hidden_state_layer_ids {top} read first, as vLLM ids (id k = L{{k-1}})"
        states = _taps([i - 1 for i in top], n) if all(i >= 1 for i in top) else "embed," + _taps(
            [i - 1 for i in top if i >= 1], n)
        if ids is not None and [i + 1 for i in ids] != list(top):
            warnings.append(f"the top-level ids {top} override {key} {ids}: vLLM feeds {states}, the block drafter "
                            f"was trained on {_taps(ids, n)} (DFlash ids read in the EAGLE convention)")
    elif ids is not None:
        how = f"{key} {ids} +1 → vLLM ids {[i + 1 for i in ids]} (id k = L{{k-1}})"
        states = _taps(ids, n)
    else:
        how = "no ids: vLLM's default (2, N//2, N-3)"
        states = _taps([1, n // 2 - 1, n - 4], n) if n else "(default)"
    serves = "yes"
    if eng == "vllm-v2" and fam == "dflash":
        how += "; the V2 DFlash speculator (GPU)"
    return Feed(eng, fam, serves, states, how, src, warnings)


def _mtp(eng: str, cfg: dict, fam: Family, target) -> Feed:
    k = mtp_layers(cfg) or (mtp_layers(load_config(target, "target config")) if isinstance(target, (dict, str)) else None)
    src = SGLANG_SOURCES["mtp"] if eng == "sglang" else VLLM_SOURCES["mtp"]
    states = "the target's last hidden state, after its final norm"
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


__all__ = ["FAMILIES", "Family", "Feed", "LABELS", "MASK_TOKEN_KEYS", "block_ids", "family_of", "feeds",
           "mixed_conventions", "mtp_layers"]
