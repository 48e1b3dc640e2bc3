"""Engine knowledge in one place: one small declarative record per engine and version.

    >>> from workbench.engines.records import get, wiring_for, ids_for_taps, default_engine
    >>> get("vllm").feeds_embed, get("sglang").feeds_embed
    (True, False)
    >>> wiring_for("vllm", {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, 32).spec
    'L1,L15,L28'
    >>> wiring_for("sglang", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}, 32).spec
    'L1,L15,L28'
    >>> ids_for_taps("vllm", ["embed", "L3", "L31"], 32).ids        # vLLM feeds embed (id 0) and id N
    [0, 4, 32]
    >>> ids_for_taps("sglang", ["embed", "L3", "L31"], 32).reason
    'SGLang cannot feed the embedding (it records taps inside decoder layers only, so never the embedding output)'
    >>> default_engine({"speculators_model_type": "eagle3"}), default_engine({"architectures": ["LlamaForCausalLMEagle3"]})
    ('vllm', 'specforge')

A record says, for one engine at one version (see ``docs/engines.md``):

* ``keys``: where it reads the aux layer ids, in order (``top`` = top-level
  ``eagle_aux_hidden_state_layer_ids``, ``nested`` = ``eagle_config.…``, ``dflash`` =
  ``dflash_config.target_layer_ids`` + 1); the first non-empty list wins.
* ``shift``: what an id means. Every engine captures a *capture point* b: b = 0 is the embedding,
  b = k (1..N-1) is the residual stream entering layer k = ``L{k-1}``, b = N is the last layer's output
  ``L{N-1}`` (pre-norm). id k becomes b = k + shift (SGLang +1, vLLM 0; layer-output ids +1).
* ``lowest``/``highest``: the capture points it can feed (feasibility), ``ordered``: concatenation in
  layer order with duplicates captured once (capture-in-the-layer-loop engines) or in list order.
* ``rotary_offset``: extra rotary position of draft decode steps k >= 1 (position p + k + offset).
* ``embed``/``lm_head``: where the draft's input embedding and lm_head come from.
* ``options``: the Eagle-3.1 options it honours, the keys it reads them from, and its default.
* ``auto_flags``: (num_steps, topk, num_draft_tokens) when ``--speculative-*`` flags are unset.

Tap names are the workbench's (``embed``, ``L{k}``, ``final``); see ``wiring.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.engines.tables import table
from workbench.engines.taps import (
    Resolution,
    Wiring,
    load_config,
    num_layers,
    parse_tap,
    tap_to_hf,
)
from workbench.engines.taps import id_list as wiring_ids

_KEY = "eagle_aux_hidden_state_layer_ids"
# EAGLE-3 checkpoint architectures of the SpecForge/EAGLE format (the P-EAGLE names: SpecForge's and vLLM's, both
# mapped to llama_eagle3 by vLLM's registry, #41826)
EAGLE3_ARCHS = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "PEagleDraftModel", "PeagleLlamaForCausalLM")
OPTION_NAMES = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")


@dataclass(frozen=True)
class Option:
    """How an engine reads one Eagle-3.1 option: the config keys it tries in order, and its default.
    ``speculators_default`` is the default when the config is a speculators config (vLLM converts those
    with its own defaults)."""

    keys: tuple[str, ...]
    default: bool = False
    speculators_default: bool | None = None
    speculators_copied: bool = True    # False: the engine's speculators conversion drops it (computes without it)


@dataclass(frozen=True)
class Engine:
    """One engine at one version. Every field is data; the functions below interpret it."""

    name: str
    label: str
    boundary: str                      # the version boundary this record stands for
    serving: bool                      # a serving engine (its wiring is what users get at run time)
    keys: tuple[str, ...]              # id sources in read order: "top", "nested", "dflash"
    shift: int | None                  # capture point = id + shift; None: fixed capture points (EAGLE)
    lowest: int = 1                    # lowest feedable capture point (0 = the embedding)
    highest_is_last: bool = False      # capture point N (the last layer's output) is feedable
    ordered: bool = True               # concatenated in layer order, duplicates once
    first_id_rule: bool = False        # SGLang PR #25454: +1 only when the first id is 1
    gpt_oss_boundary: bool = False     # SGLang PR #32334: GPT-OSS ids are boundaries (no +1, N feedable)
    hf_indices: bool = False           # ids are HF output_hidden_states indices (N = post-norm 'final')
    rotary_offset: int = 0             # extra rotary position at draft decode steps k >= 1
    embed: str = "checkpoint"          # "target-unless-width" | "checkpoint" (shipped, else target) | "target"
    lm_head: str = "checkpoint"        # "target-if-no-draft-vocab" | "checkpoint" (shipped, else target)
    options: dict = field(default_factory=dict)        # option name -> Option (only the honoured ones)
    auto_flags: dict | None = None     # arch -> (steps, topk, draft tokens); key "*" for the rest
    sources: tuple[str, ...] = ()      # engine files the record was checked against
    ids_arg: str | None = None         # the ids come from this server argument, never from the draft config
    parallel_drafting: bool = False    # serves P-EAGLE's one-pass drafting when asked (docs/families.md)
    dflash_shift: int = 1              # dflash_config.target_layer_ids + this (vLLM 0.22 on: +1; 0.21: as is)
    speculators_types: tuple | None = None   # speculators_model_type values it converts (None: any it is given)
    trees: bool = True                 # drafts trees when asked (--speculative-eagle-topk > 1); False: chains only
    adaptive_steps: tuple | None = None   # --speculative-adaptive: the default config's candidate steps (it starts at
                                          # the middle one, topk 1); None: the record's releases have no such flag

    @property
    def feeds_embed(self) -> bool:
        return self.lowest == 0

    def default_ids(self, n: int) -> list[int]:
        """The ids the engine uses when the draft config gives none, in its own convention."""
        before = [2, n // 2, n - 3]           # every engine's default capture points (facts page, sec. 1)
        return [b - (self.shift or 0) for b in before]


_SGLANG_SRC = ("python/sglang/srt/models/llama_eagle3.py", "python/sglang/srt/models/llama.py",
               "python/sglang/srt/speculative/eagle_worker.py", "python/sglang/srt/server_args.py")
# SGLang llama_eagle3.py: fc_norm (alias use_aux_norm, legacy weights aux_norm_{low,mid,high}) and
# norm_output are read from the top level, default False; norm_before_fc (input_norm over the
# concatenated taps) since PR #32334 (2026-07-24); the residual is always the un-normed hidden
# (residual = hidden_states before hidden_norm), so norm_before_residual is not honoured.
_SGLANG_OPTIONS = {"norm_before_fc": Option(("norm_before_fc",)), "fc_norm": Option(("fc_norm", "use_aux_norm")),
                   "norm_output": Option(("norm_output",))}
def _from_table(engine: str) -> tuple[Engine, ...]:
    """The records of ``engine`` kept as data (``engines/data/<engine>.json``, :mod:`workbench.engines.tables`)."""
    out = []
    for name, r in table(engine)["records"].items():
        options = {k: Option(tuple(o["keys"]), o.get("default", False), o.get("speculators_default"),
                             o.get("speculators_copied", True)) for k, o in r.get("options", {}).items()}
        out.append(Engine(name, r["label"], r["boundary"], True, keys=tuple(r["keys"]), shift=r["shift"],
                          lowest=r["lowest"], highest_is_last=r["highest_is_last"], embed=r["embed"],
                          lm_head=r["lm_head"], options=options, sources=tuple(s.split(" ")[0] for s in r["sources"]),
                          parallel_drafting=r.get("parallel_drafting", False), dflash_shift=r.get("dflash_shift", 1),
                          speculators_types=tuple(r["speculators_types"]) if "speculators_types" in r else None,
                          trees=r.get("trees", True)))
    return tuple(out)


RECORDS: dict[str, Engine] = {e.name: e for e in (
    Engine(
        "sglang", "SGLang (current)", "after PR #25015 (2026-05-11), #25454 (2026-05-16), #32334 (2026-07-24)",
        True,
        # eagle_worker / model_runner: only eagle_config.eagle_aux_hidden_state_layer_ids is read
        # (bare try/except: missing or top-level → default); llama.py captures hidden+residual
        # *before* layer i for i in layers_to_capture = [id + 1 ...].
        keys=("nested",), shift=1, lowest=1, first_id_rule=True, gpt_oss_boundary=True,
        # llama.py set_embed: the target's embedding replaces the draft's unless target_hidden_size
        # differs; eagle_worker init_lm_head: set_embed_and_head when load_lm_head_from_target, which
        # llama_eagle3.py sets when draft_vocab_size is missing.
        embed="target-unless-width", lm_head="target-if-no-draft-vocab", options=_SGLANG_OPTIONS,
        # _auto_choose_speculative_params (server_args / arg_groups/speculative_hook.py): (5,4,8) for
        # Llama and Grok, (3,1,4) for every other architecture
        auto_flags={"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8),
                    "Grok1VForCausalLM": (5, 4, 8), "*": (3, 1, 4)},
        # speculative/adaptive_spec_params.py DEFAULT_ADAPTIVE_CONFIG, the union over batch sizes (0.5.23; 0.5.14's
        # lacks 5); speculative_hook.py _init_adaptive_speculative_params starts at the middle one, topk 1
        adaptive_steps=(0, 1, 3, 5, 7),
        sources=_SGLANG_SRC),
    Engine(
        "sglang-2026.04", "SGLang before 2026-05", "before PR #25015 and PR #25454 (releases up to 2026-04)", True,
        keys=("nested",), shift=1, lowest=1,
        # before PR #25015 draft decode step k ran at rotary position t+k+1 (SGLANG_DEBUG_REVERT_PR=25015)
        rotary_offset=1,
        embed="target-unless-width", lm_head="target-if-no-draft-vocab",
        options={},        # the stored pre-2026.05 llama_eagle3.py reads none of the Eagle-3.1 options
        # older server_args.py auto_choose_speculative_params: (3,1,4) only for DeepSeek V2/V3, GPT-OSS and
        # Bailing MoE, (5,4,8) for every other architecture (the oldest releases: (5,4,8) for all)
        auto_flags={"DeepseekV3ForCausalLM": (3, 1, 4), "DeepseekV2ForCausalLM": (3, 1, 4),
                    "GptOssForCausalLM": (3, 1, 4), "BailingMoeForCausalLM": (3, 1, 4),
                    "BailingMoeV2ForCausalLM": (3, 1, 4), "*": (5, 4, 8)},
        sources=_SGLANG_SRC),
    *(_from_table("vllm")),
    Engine(
        "tensorrt-llm", "TensorRT-LLM (PyTorch backend)",
        "2025-08 to 2026 (PR #7012 on): ids only from eagle3_layers_to_capture, never from the draft config", True,
        # _torch/speculative/utils.py _build_spec_metadata: layers_to_capture=spec_config.eagle3_layers_to_capture
        # (llm_args.py EagleDecodingConfig, a Set[int]: sorted); eagle3.py Eagle3SpecMetadata default
        # (1, N//2-1, N-4), N <= 5 refused; modeling_llama.py captures hidden_states + residual after layer
        # layer_idx, so id k = L{k} (id N-1 = the last layer's pre-norm output; -1 = the model's final output);
        # nothing captures the embedding. The draft config's eagle_aux_hidden_state_layer_ids is never read.
        keys=(), shift=1, lowest=1, highest_is_last=True, ids_arg="eagle3_layers_to_capture",
        embed="checkpoint", lm_head="checkpoint",
        # modeling_speculative.py Eagle3DraftModel: eagle_config.norm_before_fc; fc_norm, norm_output top level
        options={"norm_before_fc": Option(("eagle_config.norm_before_fc",)), "fc_norm": Option(("fc_norm",)),
                 "norm_output": Option(("norm_output",))},
        sources=("tensorrt_llm/_torch/speculative/eagle3.py", "tensorrt_llm/_torch/speculative/utils.py",
                 "tensorrt_llm/llmapi/llm_args.py", "tensorrt_llm/_torch/models/modeling_speculative.py",
                 "tensorrt_llm/_torch/models/modeling_llama.py")),
    Engine(
        "specforge", "SpecForge (training)", "after PR #879 (2026-09-15): norm_output is Eagle-3.1's", False,
        # specforge/algorithms/model_providers.py resolve_eagle_capture_layers: eagle_config ids, else
        # [1, N//2-1, N-4]; the ids are layer outputs (id k = L{k}), in list order.
        keys=("nested",), shift=1, lowest=1, highest_is_last=True, ordered=False,
        embed="target", lm_head="checkpoint",
        # specforge/modeling/draft/llama3_eagle.py: fc_norm (per-tap RMSNorm), norm_output; residual is
        # the un-normed hidden; no input_norm
        options={"fc_norm": Option(("fc_norm",)), "norm_output": Option(("norm_output",))},
        sources=("specforge/algorithms/model_providers.py", "specforge/modeling/draft/llama3_eagle.py")),
    Engine(
        "speculators", "speculators (vLLM's training library)", "after PR #610 (Eagle-3.1 options)", False,
        # models/utils.py resolve_target_layer_ids: top-level ids, default [2, N//2, N-3], in vLLM's
        # convention (hidden states extracted by vLLM: id k = L{k-1}); ids must be distinct and within [0, N]
        # ("Layer id num_layers (the final hidden state) is valid"), and its data generation extracts through vLLM,
        # which captures id 0 (the embedding) from 0.18 on (engine matrix, issue 55): so embed is feedable
        keys=("top",), shift=0, lowest=0, highest_is_last=True,
        embed="checkpoint", lm_head="checkpoint",
        # models/eagle3/config.py + core.py + model_definitions.py: all four options, default False
        options={o: Option((o,)) for o in OPTION_NAMES},
        sources=("src/speculators/models/eagle3/config.py", "src/speculators/models/eagle3/core.py",
                 "src/speculators/models/eagle3/model_definitions.py", "src/speculators/models/utils.py")),
    Engine(
        "eagle", "EAGLE (SafeAILab, official)", "any version: fixed capture points", True,
        # eagle/model/modeling_llama_kv.py: capture before layers {2, N//2, N-3}; the config is ignored
        keys=(), shift=None, lowest=1, embed="target", lm_head="checkpoint",
        sources=("eagle/model/modeling_llama_kv.py",)),
    Engine(
        "modelopt", "NVIDIA ModelOpt (training)", "any version: forward hooks on layer outputs", False,
        keys=("nested", "top"), shift=1, lowest=1, highest_is_last=True, ordered=False,
        embed="target", lm_head="checkpoint", sources=("modelopt/torch/speculative/plugins/",)),
    Engine(
        "hf", "HF output_hidden_states indices", "transformers >= 5: hidden_states[N] is post-norm", False,
        keys=("nested", "top"), shift=0, lowest=0, highest_is_last=True, ordered=False, hf_indices=True,
        embed="target", lm_head="checkpoint", sources=("transformers modeling_llama.py",)),
)}

ENGINE_NAMES = tuple(RECORDS)


def get(name) -> Engine:
    """The record of engine ``name`` (case-insensitive); an Engine is returned as is.

        >>> get("SGLang-2026.04").rotary_offset
        1
    """
    if isinstance(name, Engine):
        return name
    key = str(name).strip().lower()
    if key not in RECORDS:
        raise WorkbenchError(f"unknown engine {name!r} (expected one of {', '.join(ENGINE_NAMES)})")
    return RECORDS[key]


def _target(target) -> tuple[int, str | None]:
    """(N, architecture) from an int or a target config."""
    if isinstance(target, int) and not isinstance(target, bool):
        return num_layers(target), None
    cfg = load_config(target, "target config")
    arch = (cfg.get("architectures") or [None])[0]
    if arch is None and isinstance(cfg.get("text_config"), dict):
        arch = (cfg["text_config"].get("architectures") or [None])[0]
    return num_layers(cfg), arch


def _is_gpt_oss(arch: str | None) -> bool:
    return bool(arch) and "gptoss" in arch.lower().replace("-", "").replace("_", "")


def _ids(value, key):
    """wiring's id-list check; an empty list counts as absent (vLLM ``if not layer_ids``: next source)."""
    return wiring_ids(value, key) or None


def config_ids(draft_config) -> dict:
    """Every id list a draft config carries: ``{"top", "nested", "dflash"}`` (None when absent).

        >>> config_ids({"eagle_aux_hidden_state_layer_ids": [2, 16, 29]})["top"]
        [2, 16, 29]
    """
    if draft_config is None:
        return {"top": None, "nested": None, "dflash": None}
    cfg = load_config(draft_config, "draft config")
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    dflash = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else {}
    return {"top": _ids(cfg.get(_KEY), _KEY), "nested": _ids(eagle.get(_KEY), f"eagle_config.{_KEY}"),
            "dflash": _ids(dflash.get("target_layer_ids"), "dflash_config.target_layer_ids")}


def _point_tap(e: Engine, b: int, n: int, arch) -> tuple[str | None, str | None]:
    """Capture point b → (tap, None) or (None, why it cannot be fed)."""
    highest = n if (e.highest_is_last or (e.gpt_oss_boundary and _is_gpt_oss(arch))) else n - 1
    if e.hf_indices:
        if 0 <= b <= n:
            return ("embed" if b == 0 else "final" if b == n else f"L{b - 1}"), None
        return None, f"HF hidden_states index {b} is out of range (valid 0..{n})"
    if b == 0 and e.lowest > 0:
        return None, f"{e.label.split(' (')[0]} cannot feed the embedding (it records taps inside decoder layers only, so never the embedding output)"
    if b < 0 or b > highest:
        return None, (f"capture point {b} is outside {e.lowest}..{highest} for N={n}: never captured, fc gets "
                      f"fewer states than it expects")
    return ("embed" if b == 0 else f"L{b - 1}"), None


def taps_for_ids(engine, ids, target, *, source: str = "ids") -> Resolution:
    """What ``engine`` feeds for these ids (in its own convention) on a target with N layers.

        >>> taps_for_ids("vllm", [0, 4, 32], 32).spec, taps_for_ids("sglang", [1, 3, 30], 32).spec
        ('embed,L3,L31', 'L1,L3,L30')
        >>> taps_for_ids("sglang", [2, 16, 29], 32).spec      # current SGLang: first id not 1 → as is
        'L1,L15,L28'
        >>> taps_for_ids("sglang-2026.04", [2, 16, 29], 32).spec
        'L2,L16,L29'
    """
    e = get(engine)
    n, arch = _target(target)
    return _taps_for_ids(e, ids, n, arch, source)


def _taps_for_ids(e: Engine, ids, n: int, arch, source: str = "ids") -> Resolution:
    ids = [int(i) for i in ids]
    shift = e.shift or 0
    how = f"{source} {_fmt(ids)}"
    if e.gpt_oss_boundary and _is_gpt_oss(arch):
        shift, how = 0, how + " as boundaries (GPT-OSS, PR #32334)"
    elif e.first_id_rule and ids and ids[0] != 1:
        shift, how = 0, how + " as is (first id is not 1, PR #25454)"
    elif shift:
        how += f" +{shift}"
    points = [i + shift for i in ids]
    return _resolve_points(e, points, n, arch, how)


def _fmt(ids) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def _resolve_points(e: Engine, points: list[int], n: int, arch, how: str) -> Resolution:
    warnings, feasible = [], True
    order = points
    if e.ordered:
        order = sorted(set(points))
        if len(order) < len(points):
            warnings.append(f"{e.name}: duplicate capture points {_fmt(points)} are captured once each")
            feasible = False
        elif order != points:
            warnings.append(f"{e.name}: concatenates in layer order {_fmt(order)}, not list order {_fmt(points)}")
    taps = []
    for b in order:
        tap, why = _point_tap(e, b, n, arch)
        if tap is None:
            warnings.append(f"{e.name}: {why}")
            feasible = False
        else:
            taps.append(tap)
    if len(taps) != 3:
        warnings.append(f"{e.name}: feeds {len(taps)} hidden states; an EAGLE-3 fc expects exactly 3")
        feasible = False
    expl = f"{e.name}: {how} → capture points {_fmt(order)} → {','.join(taps) or '(nothing)'}"
    return Resolution(e.name, tuple(taps), [tap_to_hf(t, n) if t != "final" else n for t in taps], expl,
                      warnings, feasible)


def wiring_for(engine, draft_config, n_layers) -> Resolution:
    """The taps ``engine`` feeds a draft with this config (``n_layers``: N or the target config).

        >>> cfg = {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}       # a speculators config
        >>> wiring_for("sglang", cfg, 32).explanation                       # SGLang reads only eagle_config
        'sglang: no eagle_config ids → default [1,15,28] +1 → capture points [2,16,29] → L1,L15,L28'
        >>> wiring_for("vllm-legacy", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}, 8).spec
        'L1,L3,L4'
    """
    e = get(engine)
    n, arch = _target(n_layers)
    found = config_ids(draft_config)
    for key in e.keys:
        if found[key] is not None:
            ids, src = found[key], {"top": "top-level ids", "nested": "eagle_config ids",
                                    "dflash": "dflash_config ids"}[key]
            if key == "dflash":        # gpu_model_runner (0.22 on): "Add 1 to convert DFlash's aux layer id semantics"
                ids = [i + e.dflash_shift for i in ids]
            r = _taps_for_ids(e, ids, n, arch, source=src)
            break
    else:
        if e.shift is None:
            r = _resolve_points(e, [2, n // 2, n - 3], n, arch, "fixed capture points")
        elif e.ids_arg:
            r = _taps_for_ids(e, e.default_ids(n), n, arch,
                              source=f"ids from its {e.ids_arg} argument, unset → default")
        else:
            where = {"nested": "eagle_config", "top": "top-level", "dflash": "dflash_config"}
            miss = " or ".join(where[k] for k in e.keys)
            r = _taps_for_ids(e, e.default_ids(n), n, arch, source=f"no {miss} ids → default")
    ignored = [k for k in ("top", "nested", "dflash") if found[k] is not None and k not in e.keys]
    if ignored and e.keys:
        r.warnings.append(f"{e.name}: ignores the {' and '.join(ignored)} ids (reads only {', '.join(e.keys)})")
    elif ignored and e.ids_arg:
        r.warnings.append(f"{e.name}: ignores the draft config's ids (they go in its {e.ids_arg} argument)")
    if e.ids_arg and draft_config is not None and is_speculators(draft_config):
        r.warnings.append(f"{e.name}: no loader for speculators checkpoints was found in its source "
                          "(no speculators_model_type support)")
    if e.shift is None and any(v is not None for v in found.values()):
        r.warnings.append(f"{e.name}: ignores the draft config's layer ids (fixed capture points)")
    return r


@dataclass(frozen=True)
class Feasibility:
    """``ids`` that make an engine feed the wanted taps, or None with the ``reason``."""

    ids: list | None
    reason: str | None = None

    @property
    def feasible(self) -> bool:
        return self.ids is not None


def ids_for_taps(engine, taps, target) -> Feasibility:
    """The ids (in the engine's own convention) that make ``engine`` feed ``taps``, or why none do.

        >>> ids_for_taps("sglang", ["L1", "L15", "L28"], 32).ids, ids_for_taps("vllm", ["L1", "L15", "L28"], 32).ids
        ([1, 15, 28], [2, 16, 29])
        >>> ids_for_taps("sglang", ["L1", "L15", "L31"], 32).reason
        'sglang: L31 is the last layer: capture point 32 is outside 1..31 for N=32'
    """
    e = get(engine)
    n, arch = _target(target)
    taps = tuple(parse_tap(t, n) for t in taps)
    if e.shift is None:
        fixed = _resolve_points(e, [2, n // 2, n - 3], n, arch, "fixed")
        return Feasibility(None, None if fixed.taps == taps else
                           f"{e.name}: fixed capture points feed {fixed.spec}, not {','.join(taps)}")
    points = []
    for t in taps:
        if t == "final":
            if not e.hf_indices:
                return Feasibility(None, f"{e.name} cannot feed the post-norm 'final' state")
            points.append(n)
        elif t == "embed":
            if e.hf_indices:
                points.append(0)
            elif not e.feeds_embed:
                return Feasibility(None, f"{e.label.split(' (')[0]} cannot feed the embedding "
                                         "(it records taps inside decoder layers only, so never the embedding output)")
            else:
                points.append(0)
        else:
            k = int(t[1:])
            if e.hf_indices and k == n - 1:
                return Feasibility(None, f"hf: L{k} (the last layer's raw output) is not an HF index (only 'final')")
            b = k + 1
            highest = n if (e.highest_is_last or (e.gpt_oss_boundary and _is_gpt_oss(arch))) else n - 1
            if b > highest:
                return Feasibility(None, f"{e.name}: L{k} is the last layer: capture point {b} is outside "
                                         f"{e.lowest}..{highest} for N={n}")
            points.append(b)
    if e.ordered:
        if len(set(points)) != len(points):
            return Feasibility(None, f"{e.name} captures each layer once (duplicate taps {','.join(taps)})")
        if points != sorted(points):
            return Feasibility(None, f"{e.name} concatenates in layer order, not {','.join(taps)}")
    shift = 0 if (e.gpt_oss_boundary and _is_gpt_oss(arch)) else e.shift
    ids = [b - shift for b in points]
    if e.first_id_rule and ids and ids[0] != 1:
        ids = points            # PR #25454: ids not starting at 1 are read as capture points
    r = _taps_for_ids(e, ids, n, arch)
    if not r.feasible or r.taps != taps:          # a rule this search does not model: say so, never guess
        if e.first_id_rule and points and points[0] == 1:
            # PR #25454: ids [0, ...] are read as is (capture point 0 = embed); ids [1, ...] get +1; so the
            # capture point 1 (L0) cannot come first
            return Feasibility(None, f"{e.label.split(' (')[0]} cannot feed {taps[0]} first: ids starting at 1 "
                                     f"get +1, other ids are capture points (PR #25454), so capture point 1 "
                                     f"is unreachable")
        return Feasibility(None, f"{e.name}: no ids found ({r.explanation})")
    return Feasibility(ids)


# ─────────────────────────────── what an engine computes ───────────────────────────────

def _lookup(cfg: dict, key: str):
    if key.startswith("eagle_config."):
        eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
        return eagle.get(key.split(".", 1)[1])
    return cfg.get(key)


def is_speculators(draft_config) -> bool:
    return "speculators_model_type" in load_config(draft_config, "draft config")


def options_for(engine, draft_config) -> tuple[dict, list[str]]:
    """The Eagle-3.1 options ``engine`` computes with for this draft config, and warnings for options
    the config sets but the engine ignores.

        >>> options_for("vllm", {"speculators_model_type": "eagle3"})[0]["norm_before_residual"]
        True
        >>> options_for("sglang", {"norm_before_residual": True})[1]
        ['sglang ignores norm_before_residual (set in the draft config): it computes without it']
        >>> o, w = options_for("vllm", {"speculators_model_type": "peagle", "fc_norm": True})
        >>> o["norm_before_residual"], o["fc_norm"], len(w)
        (False, False, 1)
    """
    e = get(engine)
    cfg = load_config(draft_config, "draft config") if draft_config is not None else {}
    spec = "speculators_model_type" in cfg
    # vLLM converts a speculators P-EAGLE config with update_peagle (algos.py): norm_before_residual default
    # False, and fc_norm / norm_output are not copied at all (speculators' own P-EAGLE computes with them)
    peagle = cfg.get("speculators_model_type") == "peagle" and e.name.startswith("vllm")
    out, warnings = {}, []
    for name in OPTION_NAMES:
        rule = e.options.get(name)
        if peagle and name in ("fc_norm", "norm_output"):
            out[name] = False
            if _lookup(cfg, name):
                warnings.append(f"{e.name} ignores {name} in a speculators P-EAGLE config (algos.py update_peagle "
                                "does not copy it): " + ("its fc_norm.* tensors then fail to load" if name == "fc_norm"
                                                         else "it computes without it"))
            continue
        if rule is None:
            out[name] = False
            set_keys = [k for k in (name, f"eagle_config.{name}") + (("use_aux_norm",) if name == "fc_norm" else ())
                        if _lookup(cfg, k)]
            if set_keys:
                warnings.append(f"{e.name} ignores {name} (set in the draft config): it computes without it")
            continue
        if spec and not rule.speculators_copied:
            out[name] = False
            if _lookup(cfg, name):
                warnings.append(f"{e.name} ignores {name} in a speculators config (algos.py update_eagle3 does not "
                                "copy it before 0.25): it computes without it")
            continue
        value = None
        for k in rule.keys:
            v = _lookup(cfg, k)
            if v is not None:
                value = v
                break
        if value is None:
            value = rule.speculators_default if (spec and not peagle and rule.speculators_default is not None) \
                else rule.default
        out[name] = bool(value)
    return out, warnings


def refusal(engine, draft_config) -> str | None:
    """Why ``engine`` refuses to start with this draft config (None when it loads it): a speculators type it does
    not convert, or an option with weights (``fc_norm``) that its conversion drops, so the tensors have no module.

        >>> refusal("vllm-legacy", {"speculators_model_type": "peagle"})
        "vllm-legacy converts speculators types eagle3, dflash only: a 'peagle' config is refused at start (algos.py)"
        >>> refusal("vllm-0.22", {"speculators_model_type": "eagle3", "fc_norm": True})[:60]
        'vllm-0.22: fc_norm set in a speculators config, which its co'
        >>> refusal("vllm", {"speculators_model_type": "eagle3", "fc_norm": True}) is None
        True
    """
    e = get(engine)
    cfg = load_config(draft_config, "draft config") if draft_config is not None else {}
    kind = cfg.get("speculators_model_type")
    if kind is None:
        return None
    if e.speculators_types is not None and kind not in e.speculators_types:
        return (f"{e.name} converts speculators types {', '.join(e.speculators_types)} only: a {kind!r} config is "
                "refused at start (algos.py)")
    rule = e.options.get("fc_norm")
    if cfg.get("fc_norm") and e.name.startswith("vllm") and (rule is None or not rule.speculators_copied):
        return (f"{e.name}: fc_norm set in a speculators config, which its conversion (algos.py) does not copy: the "
                "draft has no fc_norm module and its fc_norm.* tensors fail to load")
    return None


@dataclass
class Reading:
    """What one engine computes for one draft: taps, Eagle-3.1 options, rotary offset, embedding and
    lm_head source. ``warnings`` collect everything the engine ignores or replaces."""

    engine: str
    resolution: Resolution
    options: dict
    rotary_offset: int
    embed_source: str                  # "target" | "checkpoint"
    lm_head_source: str                # "target" | "checkpoint"
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "taps": list(self.resolution.taps), "feasible": self.resolution.feasible,
                "explanation": self.resolution.explanation, "options": dict(self.options),
                "rotary_offset": self.rotary_offset, "embed_source": self.embed_source,
                "lm_head_source": self.lm_head_source,
                "warnings": list(self.resolution.warnings) + list(self.warnings)}


def embed_source(engine, draft_config, ships_embed: bool) -> tuple[str, str | None]:
    """(source, warning): where ``engine`` takes the draft's input embedding from.

        >>> embed_source("sglang", {"hidden_size": 64}, True)
        ('target', "sglang replaces the draft's own embed_tokens with the target's embedding")
        >>> embed_source("vllm", {"hidden_size": 64}, True)
        ('checkpoint', None)
    """
    e = get(engine)
    cfg = load_config(draft_config, "draft config") if draft_config is not None else {}
    layer = cfg.get("transformer_layer_config") if isinstance(cfg.get("transformer_layer_config"), dict) else cfg
    th, h = cfg.get("target_hidden_size"), layer.get("hidden_size")
    if e.embed == "target-unless-width":
        if th is not None and h is not None and th != h:
            return ("checkpoint", None) if ships_embed else ("target", None)
        return "target", (f"{e.name} replaces the draft's own embed_tokens with the target's embedding"
                          if ships_embed else None)
    if e.embed == "checkpoint":
        return ("checkpoint" if ships_embed else "target"), None
    return "target", (f"{e.name} trains with the target's embedding; the shipped embed_tokens is not "
                      f"what it used" if ships_embed else None)


def lm_head_source(engine, draft_config, ships_lm_head: bool = True) -> tuple[str, str | None]:
    """(source, warning): where ``engine`` takes the draft's lm_head from.

        >>> lm_head_source("sglang", {"vocab_size": 10})
        ('target', "sglang: no draft_vocab_size in the config: it uses the target's lm_head")
        >>> lm_head_source("vllm", {"vocab_size": 10})
        ('checkpoint', None)
    """
    e = get(engine)
    cfg = load_config(draft_config, "draft config") if draft_config is not None else {}
    if e.lm_head == "target-if-no-draft-vocab" and cfg.get("draft_vocab_size") is None:
        return "target", f"{e.name}: no draft_vocab_size in the config: it uses the target's lm_head"
    if not ships_lm_head:
        return "target", None
    return "checkpoint", None


def read(engine, draft_config, target, *, ships_embed: bool = False, ships_lm_head: bool = True,
         wiring=None) -> Reading:
    """Everything ``engine`` computes for this draft on this target. ``wiring`` (a spec or Wiring)
    overrides only the taps: the engine still fixes options, rotary offset and embedding.

        >>> r = read("sglang-2026.04", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]},
        ...                             "draft_vocab_size": 10, "norm_output": True}, 32)
        >>> r.resolution.spec, r.options["norm_output"], r.rotary_offset
        ('L1,L15,L28', False, 1)
    """
    e = get(engine)
    n, arch = _target(target)
    res = wiring_for(e, draft_config, target)
    if wiring is not None:
        w = Wiring.parse(wiring, n)
        res = Resolution(e.name, w.taps, w.hf_indices(n), f"given wiring {w.spec} (engine {e.name} for the rest)")
    opts, warnings = options_for(e, draft_config)
    emb, w1 = embed_source(e, draft_config, ships_embed)
    head, w2 = lm_head_source(e, draft_config, ships_lm_head)
    warnings += [w for w in (w1, w2) if w]
    return Reading(e.name, res, opts, e.rotary_offset, emb, head, warnings)


def auto_flags(engine, target_arch: str | None):
    """(num_steps, topk, num_draft_tokens) the engine picks when the flags are unset, or None.

        >>> auto_flags("sglang", "LlamaForCausalLM"), auto_flags("sglang", "Qwen3ForCausalLM")
        ((5, 4, 8), (3, 1, 4))
        >>> auto_flags("sglang-2026.04", "Qwen3ForCausalLM")
        (5, 4, 8)
    """
    e = get(engine)
    if not e.auto_flags:
        return None
    return e.auto_flags.get(target_arch or "", e.auto_flags.get("*"))


def default_engine(draft_config) -> str:
    """The engine whose reading is a draft's own default, by the checkpoint's format: a speculators
    checkpoint is vLLM's format (its ids are vLLM's convention); an ``LlamaForCausalLMEagle3``
    checkpoint is SpecForge's (its ids are the trained layer outputs)."""
    cfg = load_config(draft_config, "draft config")
    if "speculators_model_type" in cfg:
        return "vllm"
    arch = cfg.get("architectures") or []
    if any(a in EAGLE3_ARCHS for a in arch):
        return "specforge"
    raise WorkbenchError(f"draft config: architectures {arch!r} is neither a speculators config nor "
                         f"{EAGLE3_ARCHS[0]}; give --engine")


def default_wiring(draft_config, target) -> Resolution:
    """The wiring a draft's own format engine feeds (what it was trained on, by its format).

        >>> default_wiring({"speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, 32).spec
        'L1,L15,L28'
    """
    return wiring_for(default_engine(draft_config), draft_config, target)


# ─────────────────────────────── the table behind `workbench wiring` ───────────────────────────────

def id_meaning(e: Engine) -> str:
    if e.hf_indices:
        return "HF hidden_states index (N = post-norm final)"
    if e.shift is None:
        return "ignored (fixed capture before layers 2, N//2, N-3)"
    base = {1: "id k = L{k} (layer output)", 0: "id k = L{k-1} (capture before layer k)"}[e.shift]
    if e.first_id_rule:
        base += "; ids not starting at 1: L{k-1} (#25454)"
    if e.feeds_embed:
        base += "; id 0 = embed"
    if e.highest_is_last and not e.hf_indices:
        base += "; L{N-1} feedable"
    if e.gpt_oss_boundary:
        base += "; GPT-OSS targets: id k = L{k-1}, id N = L{N-1} (boundaries, #32334)"
    return base


def engine_table() -> list[dict]:
    """One row per record, for ``workbench wiring --engines`` and docs/engines.md.

        >>> [r["engine"] for r in engine_table()][:4]
        ['sglang', 'sglang-2026.04', 'vllm', 'vllm-v2']
    """
    rows = []
    for e in RECORDS.values():
        rows.append({
            "engine": e.name, "what": e.label, "version": e.boundary, "serving": e.serving,
            "reads": " > ".join(e.keys) or (f"its {e.ids_arg} argument" if e.ids_arg else "(nothing)"),
            "id": id_meaning(e),
            "rotary": f"+{e.rotary_offset} at steps k>=1" if e.rotary_offset else "p+k",
            "embed": e.embed, "lm_head": e.lm_head,
            "options": ", ".join(f"{k}" + ("=True if missing (speculators)" if o.speculators_default else "")
                                 for k, o in e.options.items()) or "none",
            "auto_flags": "; ".join(f"{a}: {v}" for a, v in (e.auto_flags or {}).items()) or "-",
            "sources": ", ".join(e.sources)})
    return rows


def format_engine_table() -> str:
    """Plain text of :func:`engine_table`: one block per engine."""
    lines = []
    for r in engine_table():
        lines.append(f"{r['engine']:<15} {r['what']}  [{r['version']}]")
        for k in ("reads", "id", "rotary", "embed", "lm_head", "options", "auto_flags"):
            lines.append(f"{'':<15}   {k:<10} {r[k]}")
    return "\n".join(lines)


__all__ = ["Engine", "Feasibility", "Option", "RECORDS", "ENGINE_NAMES", "Reading", "auto_flags", "config_ids", "refusal",
           "default_engine", "default_wiring", "embed_source", "engine_table", "format_engine_table", "get",
           "id_meaning", "ids_for_taps", "lm_head_source", "options_for", "read", "taps_for_ids", "wiring_for"]
