"""SGLang: lint a server's speculative-decoding flags against the draft and target (no GPU, no sglang).

    >>> from workbench.engines.sglang_lint import lint_command
    >>> res = lint_command("python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
    ...                    "--speculative-draft-model-path D --speculative-num-steps 1 "
    ...                    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 16")
    >>> res.settings["speculative_num_draft_tokens"], [p.code for p in res.problems if p.severity == "error"]
    (2, ['topk1-draft-tokens'])

The rules follow SGLang's ``server_args.py``
(``_handle_speculative_decoding`` / ``_handle_eagle_family``), ``model_runner.py`` (aux layer ids read only
from ``eagle_config`` in a bare try/except) and ``eagle_worker.py`` (token map ignored for EAGLE3).
The live ``/generate`` comparison lives beside this lint (added separately).
"""

from __future__ import annotations

import json
import os
import shlex
import struct
from dataclasses import dataclass, field
from pathlib import Path

from workbench import engines
from workbench.core.errors import WorkbenchError
from workbench.core.files import is_path
from workbench.core.render import Rendered
from workbench.core.setting import SCHEMA_VERSION
from workbench.engines import options
from workbench.engines import families, positions
from workbench.engines.wiring import (
    Resolution,
    Wiring,
    load_config,
    num_layers,
    trained_wiring_from_config,
)

SEVERITIES = ("error", "warning", "info")
_SPEC_KEYS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
              "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_token_map")
_INT_KEYS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
_ALIASES = {"model": "model_path", "speculative_draft_model": "speculative_draft_model_path",
            "speculative_draft": "speculative_draft_model_path"}


@dataclass
class Problem:
    """One finding: what is wrong, why it hurts acceptance/speed, and the fix."""

    code: str
    severity: str
    message: str
    why: str = ""
    fix: str = ""

    def to_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message, "why": self.why,
                "fix": self.fix}


@dataclass
class LintResult(Rendered):
    """Effective speculative settings plus every problem found (``errors`` decide the exit code)."""

    settings: dict
    problems: list[Problem] = field(default_factory=list)
    source: str = "command"
    wiring: Resolution | None = None
    trained: Wiring | None = None

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "source": self.source, "settings": dict(self.settings),
                "wiring": self.wiring.to_dict() if self.wiring else None,
                "trained_wiring": self.trained.spec if self.trained else None,
                "problems": [p.to_dict() for p in self.problems], "ok": self.ok}

    def summary(self) -> str:
        lines = [f"effective speculative settings (from {self.source}):"]
        for k, v in self.settings.items():
            lines.append(f"  {k:34s} {v}")
        if self.wiring is not None:
            lines.append(f"  {'wiring fed to the draft':34s} {self.wiring.spec or '(nothing)'}"
                         f"   ({self.wiring.explanation})")
        if self.trained is not None:
            lines.append(f"  {'wiring the draft was trained on':34s} {self.trained.spec}")
        if not self.problems:
            lines.append("no problems found")
        for p in sorted(self.problems, key=lambda p: SEVERITIES.index(p.severity)):
            lines.append(f"{p.severity.upper()} [{p.code}] {p.message}")
            if p.why:
                lines.append(f"    why: {p.why}")
            if p.fix:
                lines.append(f"    fix: {p.fix}")
        n_err = len(self.errors)
        lines.append(f"{n_err} error(s), {len(self.problems) - n_err} other finding(s)")
        return "\n".join(lines)


# ─────────────────────────────── inputs ───────────────────────────────

def parse_command(text: str, release: str | None = None) -> dict:
    """Server args from a launch command (``python -m sglang.launch_server ...`` or ``sglang serve ...``), read by
    the parser of SGLang ``release`` where its table is stored (else the newest: :func:`options.parser_release`).

        >>> parse_command("python -m sglang.launch_server --model-path m --speculative-num-steps=3 --enable-metrics")
        {'model_path': 'm', 'speculative_num_steps': 3, 'enable_metrics': True}
        >>> parse_command("python3 -m sglang.launch_server --model m --speculative-algo NEXTN --speculative-draft-model d")
        {'model_path': 'm', 'speculative_algorithm': 'NEXTN', 'speculative_draft_model_path': 'd'}

    Flags are read as SGLang's own parser reads them (:func:`workbench.engines.options.resolve`: an exact option, else
    the one it is a unique prefix of), from its table (``engines/data/flags.json``).
    """
    text = str(text).replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as e:
        raise WorkbenchError(f"server command: cannot split it like a shell would ({e})") from None
    start = None
    for i, tok in enumerate(tokens):
        base = os.path.basename(tok)
        if tok in ("sglang.launch_server", "sglang.launch_server.py") or base == "launch_server.py":
            start = i + 1
        elif base == "sglang" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            start = i + 2
        if start is not None:
            break
    if start is None:
        raise WorkbenchError("server command: no 'sglang.launch_server' or 'sglang serve' found "
                             "(expected e.g. 'python -m sglang.launch_server --model-path ...')")
    args: dict = {}
    rest = tokens[start:]
    i = 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("--"):
            raise WorkbenchError(f"server command: unexpected argument {tok!r} (expected --flag [value])")
        name, eq, value = tok[2:].partition("=")
        known = options.resolve("sglang", "--" + name, release)   # SGLang's own parser: exact, else a unique prefix
        key, takes = known if known is not None else (_ALIASES.get(name.replace("-", "_"), name.replace("-", "_")),
                                                      None)
        if not eq:
            if takes is not False and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                value = rest[i + 1]
                i += 1
            else:
                value = True
        if key in _INT_KEYS:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise WorkbenchError(f"server command: --{name} expects an integer, got {value!r}") from None
        args[key] = value
        i += 1
    return args


def server_args_from_info(info) -> dict:
    """Server args from ``GET /get_server_info`` output (a dict or a path to its JSON)."""
    if not isinstance(info, dict):
        path = os.fspath(info)
        try:
            with open(path, encoding="utf-8") as f:
                info = json.load(f)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"server info: {path} line {e.lineno}: invalid JSON ({e.msg})") from None
        except OSError as e:
            raise WorkbenchError(f"server info: cannot read {path}: {e}") from None
        if not isinstance(info, dict):
            raise WorkbenchError(f"server info: {path} must hold a JSON object (the /get_server_info reply)")
    args = dict(info.get("server_args") or {}) if isinstance(info.get("server_args"), dict) else {}
    args.update({k: v for k, v in info.items() if k not in ("server_args", "internal_states")})
    if "model_path" not in args and "speculative_algorithm" not in args:
        raise WorkbenchError("server info: no 'model_path' or 'speculative_algorithm' key "
                             "(expected the JSON of GET /get_server_info)")
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        acc = states[0].get("avg_spec_accept_length")
        if acc is not None:
            args["_avg_spec_accept_length"] = acc
    for k in _INT_KEYS:
        v = args.get(k)
        if v is not None and not isinstance(v, int):
            raise WorkbenchError(f"server info: '{k}' must be an integer or null, got {v!r}")
    return args


def draft_weight_names(draft_dir) -> list[str] | None:
    """Tensor names in a draft's weights (safetensors headers, sharded index, or ``.bin`` via
    ``torch.load(weights_only=True)``); None when the directory holds no weights."""
    d = os.fspath(draft_dir)
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                return sorted(json.load(f)["weight_map"])
        except (json.JSONDecodeError, KeyError, TypeError, OSError) as e:
            raise WorkbenchError(f"draft: {index}: cannot read its 'weight_map' ({e})") from None
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    if files:
        names: list[str] = []
        for fn in files:
            path = os.path.join(d, fn)
            try:
                with open(path, "rb") as f:
                    (n,) = struct.unpack("<Q", f.read(8))
                    header = json.loads(f.read(n))
            except (struct.error, json.JSONDecodeError, UnicodeDecodeError, OSError, MemoryError) as e:
                raise WorkbenchError(f"draft: {path} is not a valid safetensors file ({e})") from None
            names += [k for k in header if k != "__metadata__"]
        return sorted(names)
    bins = sorted(f for f in os.listdir(d) if f.endswith(".bin"))
    if bins:
        import torch

        names = []
        for fn in bins:
            path = os.path.join(d, fn)
            try:
                sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except Exception as e:  # torch raises many types for a bad/unsafe pickle
                raise WorkbenchError(f"draft: cannot load {path} with weights_only=True ({type(e).__name__})") from None
            if not isinstance(sd, dict):
                raise WorkbenchError(f"draft: {path} does not hold a state dict")
            names += list(sd)
        return sorted(names)
    return None


def is_eagle3_draft(cfg: dict) -> bool | None:
    archs = [str(a) for a in cfg.get("architectures") or []]
    if any("eagle3" in a.lower() for a in archs):
        return True
    if cfg.get("speculators_model_type") == "eagle3":
        return True
    if isinstance(cfg.get("eagle_config"), dict) or "draft_vocab_size" in cfg:
        return True
    if any("eagle" in a.lower() for a in archs):
        return False
    return None


# ─────────────────────────────── shared with the vLLM lint ───────────────────────────────

def resolve_inputs(add, draft, target, paths: dict):
    """(draft, target, draft config, target config, N): ``draft``/``target`` as given, else the command's
    own paths (``paths``: name -> (path, where it came from)) when a config.json is there (an info each)."""
    for name, (path, where) in paths.items():
        if (draft if name == "draft" else target) is None and isinstance(path, str) and \
                os.path.isfile(os.path.join(path, "config.json")):
            if name == "draft":
                draft = path
            else:
                target = path
            add(f"{name}-from-command", "info", f"checked the {name} at {path} (from {where})")
    dcfg = load_config(draft, "draft config") if draft is not None else None
    tcfg = load_config(target, "target config") if target is not None else None
    return draft, target, dcfg, tcfg, (num_layers(tcfg) if tcfg is not None else None)


def check_target_hidden_size(add, dcfg: dict, tcfg) -> None:
    """Error ``target-hidden-size`` when the draft's fc expects another target width."""
    if tcfg is None:
        return
    layer = dcfg.get("transformer_layer_config") if isinstance(dcfg.get("transformer_layer_config"), dict) else dcfg
    th = tcfg.get("hidden_size") or (tcfg.get("text_config") or {}).get("hidden_size")
    dth = dcfg.get("target_hidden_size") or layer.get("hidden_size")
    if isinstance(th, int) and isinstance(dth, int) and th != dth:
        add("target-hidden-size", "error", f"draft expects target hidden size {dth}, the target has {th}",
            "fc's input width (3·H_target) does not match: load fails or features are garbage",
            "use the draft trained for this target")


# ─────────────────────────────── lint ───────────────────────────────

def _resolve_block_drafting(add, algo: str, a: dict, settings: dict, dcfg) -> None:
    """The (steps, topk, draft tokens) SGLang resolves itself for DFLASH and NGRAM after parsing, whatever was given
    (``arg_groups/speculative_hook.py``: ``_handle_dflash``, ``_handle_ngram``; the same in 0.5.14 and 0.5.23), written
    into ``settings``, with an info where it overrides a value the command gave.

    - DFLASH: steps 1 and topk 1; draft tokens = ``--speculative-dflash-block-size``, else the given number, else the
      draft config's ``block_size`` (``dflash_config`` first), else 16. A block size and a number that differ: SGLang
      refuses to start.
    - NGRAM: topk = ``--speculative-ngram-max-bfs-breadth`` (default 10); draft tokens default to 12; steps to
      draft tokens // topk.
    """
    steps, topk, ndt = (a.get(k) for k in _INT_KEYS)

    def number(key, default=None):
        v = a.get(key)
        try:
            return default if v is None else int(v)
        except (TypeError, ValueError):
            raise WorkbenchError(f"server command: --{key.replace('_', '-')} expects an integer, got {v!r}") from None

    if algo == "DFLASH":
        block = number("speculative_dflash_block_size")
        if block is not None and ndt is not None and block != ndt:
            add("dflash-block-size", "error", f"--speculative-dflash-block-size {block} and "
                f"--speculative-num-draft-tokens {ndt} differ", "SGLang refuses to start (ValueError)",
                "give one of them")
        cfg = dcfg or {}
        from_cfg = (cfg.get("dflash_config") or {}).get("block_size") if isinstance(cfg.get("dflash_config"), dict) \
            else None
        from_cfg = from_cfg if from_cfg is not None else cfg.get("block_size")
        new = (1, 1, block if block is not None else ndt if ndt is not None else
               from_cfg if from_cfg is not None else (16 if dcfg is not None else "auto (the draft's block_size, else 16)"))
    else:
        k = number("speculative_ngram_max_bfs_breadth", 10)
        n = ndt if ndt is not None else 12
        new = (steps if steps is not None else n // k, k, n)
    given = (steps, topk, ndt)
    changed = [f"{name} {g} → {v}" for name, g, v in zip(("steps", "topk", "draft tokens"), given, new)
               if g is not None and g != v]
    if changed:
        add(f"{algo.lower()}-resolved", "info", f"SGLang resolves {algo}'s drafting itself: " + ", ".join(changed),
            "its speculative hook overrides these for block/n-gram drafting", "")
    settings.update(zip(_INT_KEYS, new))


def adaptive_candidates(rec, config_path=None) -> tuple[tuple, str]:
    """The steps ``--speculative-adaptive`` chooses among (the union over batch sizes), and where they come from:
    ``config_path`` (``--speculative-adaptive-config``) when it is readable here, else the record's default."""
    if config_path:
        try:
            cfg = json.loads(Path(config_path).read_text())
            steps = sorted({int(x) for e in cfg.values() for x in e["candidate_steps"]})
            if steps:
                return tuple(steps), f"--speculative-adaptive-config {config_path}"
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            pass
        return tuple(rec.adaptive_steps or ()), (f"{rec.label}'s default ({config_path} is not a readable adaptive "
                                                  "config here)")
    return tuple(rec.adaptive_steps or ()), f"{rec.label}'s default config"


def _resolve_adaptive(add, rec, algo, a: dict, steps, topk, settings: dict) -> tuple:
    """``--speculative-adaptive`` as SGLang's speculative hook resolves it (``_maybe_disable_adaptive``, then
    ``_init_adaptive_speculative_params``): off, with a warning, outside EAGLE/EAGLE3 chains; else topk 1, the
    middle candidate as the first steps, draft tokens steps + 1, and an error for steps outside the candidates."""
    off = (f"--speculative-algorithm {algo}" if algo not in ("EAGLE", "EAGLE3") else
           f"--speculative-eagle-topk {topk}" if topk not in (None, 1) else None)
    if off or not rec.adaptive_steps:
        add("adaptive-off", "warning", f"--speculative-adaptive is switched off: {off or rec.label + ' has no adaptive'}",
            "SGLang adapts only EAGLE/EAGLE3 chains (topk 1); it logs 'speculative_adaptive disabled' and serves the "
            "static settings", "drop --speculative-adaptive, or serve a chain (--speculative-eagle-topk 1)")
        return steps, topk
    cands, source = adaptive_candidates(rec, a.get("speculative_adaptive_config"))
    topk = 1 if topk is None else topk
    first = cands[len(cands) // 2] if steps is None else steps
    if first not in cands:
        add("adaptive-steps", "error", f"--speculative-num-steps {first} is not among the adaptive candidate steps "
            f"{list(cands)} ({source})", "SGLang raises ValueError at start: the server does not come up",
            f"pass one of {list(cands)}, or drop --speculative-adaptive")
    settings.update(speculative_eagle_topk=topk, speculative_num_steps=first, speculative_num_draft_tokens=first + 1)
    add("adaptive", "info", f"--speculative-adaptive: SGLang starts at {first} draft step(s) and moves among "
        f"{list(cands)} at run time with the batch size and the acceptance ({source})",
        "the served accept length mixes depths; the workbench's offline accept length is for one fixed K",
        f"compare at the steps it serves, or drop --speculative-adaptive to pin K={first}")
    return first, topk


def lint(server_args: dict, *, draft=None, target=None, trained_wiring=None, engine: str = "sglang",
         source: str = "command", trained_state: str | None = None) -> LintResult:
    """Lint parsed server args. ``draft``/``target``: directories (config.json; draft weights for ``d2t``).
    ``trained_wiring``: the taps the draft was trained on (spec or Wiring; default: the draft's hint).
    ``engine``: the server's record in :mod:`workbench.engines.records` (``sglang`` = current, ``sglang-2026.04``
    = releases before 2026-05): its id rule, auto flags and embedding/lm_head source.
    ``source="server"`` means the values are the server's effective ones (already adjusted)."""
    a = dict(server_args)
    rec = engines.get(engine)
    P: list[Problem] = []

    def add(code, sev, msg, why="", fix=""):
        P.append(Problem(code, sev, msg, why, fix))

    live = source == "server"
    algo_raw = a.get("speculative_algorithm")
    algo = str(algo_raw).upper() if algo_raw not in (None, False, True) else None
    if algo == "NEXTN":
        add("nextn-alias", "info", "NEXTN is an alias: SGLang runs it as EAGLE")
        algo = "EAGLE"
    steps, topk, ndt = (a.get(k) for k in _INT_KEYS)
    settings = {"model_path": a.get("model_path"), "speculative_algorithm": algo,
                "speculative_draft_model_path": a.get("speculative_draft_model_path"),
                "speculative_num_steps": steps, "speculative_eagle_topk": topk,
                "speculative_num_draft_tokens": ndt, "speculative_token_map": a.get("speculative_token_map")}
    if "_avg_spec_accept_length" in a:
        settings["avg_spec_accept_length"] = a["_avg_spec_accept_length"]

    draft, target, dcfg, tcfg, n = resolve_inputs(add, draft, target, {
        "draft": (a.get("speculative_draft_model_path"), "speculative_draft_model_path"),
        "target": (a.get("model_path"), "model_path")})
    if not live and algo in ("DFLASH", "NGRAM"):
        _resolve_block_drafting(add, algo, a, settings, dcfg)

    if algo is None:
        add("no-speculation", "error", "no --speculative-algorithm: the server runs without speculative decoding",
            "the draft is never used; every token costs one full target forward",
            "add --speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFT")
    elif algo not in ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH"):
        add("unknown-algorithm", "warning", f"--speculative-algorithm {algo_raw}: not one this lint knows "
            "(EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH)", "", "check the value against your SGLang version")
    # draft families beyond EAGLE-3 (P-EAGLE, EAGLE-3.1, DFlash/DSpark, the target's own MTP heads): docs/families.md
    fam = families.lint_sglang(add, dcfg, tcfg if (dcfg is None and algo == "EAGLE") else None, algorithm=algo,
                               k=steps, n=n, trained_state=trained_state) if algo is not None else None
    if fam is not None and fam.name != "eagle3":
        settings["draft family"] = f"{fam.label} ({fam.evidence})"
    if fam is not None and fam.name in ("dflash", "dspark"):
        return LintResult(settings, P, "server info" if live else source)

    eagle3_draft = is_eagle3_draft(dcfg) if dcfg is not None else None
    if eagle3_draft is None and algo == "EAGLE" and "eagle3" in str(a.get("speculative_draft_model_path", "")).lower():
        eagle3_draft = True
        by_name = " (judged by its path name; pass --draft to confirm)"
    else:
        by_name = ""
    if algo == "EAGLE" and eagle3_draft:
        add("eagle-with-eagle3-draft", "error" if not by_name else "warning",
            f"--speculative-algorithm EAGLE with an EAGLE-3 draft{by_name}",
            "EAGLE (v2) skips the draft's fc over the 3 target taps (SGLang PR #21272): the draft sees the "
            "wrong features and accept length collapses to ~1.00",
            "use --speculative-algorithm EAGLE3")
    if algo == "EAGLE3" and eagle3_draft is False:
        add("eagle3-with-eagle-draft", "error", "--speculative-algorithm EAGLE3 with a draft whose "
            f"architectures {dcfg.get('architectures')} is not an EAGLE-3 model",
            "EAGLE3 feeds 3 concatenated taps into fc; an EAGLE (v2) draft expects one hidden state",
            "use --speculative-algorithm EAGLE, or point --speculative-draft-model-path at the EAGLE-3 draft")

    if a.get("speculative_adaptive") not in (None, False) and not live:
        steps, topk = _resolve_adaptive(add, rec, algo, a, steps, topk, settings)

    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        if not a.get("speculative_draft_model_path"):
            add("no-draft-path", "warning", "no --speculative-draft-model-path",
                "only MTP targets (DeepSeek, GLM-4 MoE, ...) reuse the target as the draft; others fail to start",
                "add --speculative-draft-model-path DRAFT_DIR")
        if not live and steps is None:
            if topk is not None or ndt is not None:
                add("steps-unset", "error", "--speculative-num-steps unset while topk/num-draft-tokens are set",
                    "SGLang asserts that topk and num_draft_tokens are unset when steps is unset: the server "
                    "fails to start", "set --speculative-num-steps K explicitly")
            else:
                arch = _architecture(tcfg)
                # SGLang's _auto_choose_speculative_params: STANDALONE is (3, 1, 4) whatever the target
                auto = (3, 1, 4) if algo == "STANDALONE" else engines.auto_flags(rec, arch)
                rule = "; ".join(f"{k}: {v}" for k, v in (rec.auto_flags or {}).items()).replace("*:", "other:")
                picked = (f"for {arch or 'this target'} that is (steps, topk, draft tokens) = {auto}" if auto and arch
                          else f"({rule})" if auto else "")
                add("steps-unset", "warning", "--speculative-num-steps/-eagle-topk/-num-draft-tokens unset: "
                    f"{rec.label} picks a per-model default {picked}".rstrip(),
                    "the draft depth and tree are not what you measured offline, and change with SGLang versions "
                    "(before 2026-05: (5, 4, 8) for most architectures; now (5, 4, 8) only for Llama and Grok)",
                    "set --speculative-num-steps K --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1")
                default = auto if auto and (arch or algo == "STANDALONE") else None
                settings["speculative_num_steps"] = f"auto ({default[0]})" if default else "auto (per model)"
                settings["speculative_eagle_topk"] = f"auto ({default[1]})" if default else "auto (per model)"
                settings["speculative_num_draft_tokens"] = f"auto ({default[2]})" if default else "auto (per model)"
        elif not live and topk is None:
            add("topk-unset", "error", "--speculative-eagle-topk unset while --speculative-num-steps is set",
                "SGLang's speculative hook compares the unset topk with 1 and the server fails at start (TypeError; "
                "SGLang 0.5.14 and 0.5.23 checked by tests/test_commands.py)",
                "set --speculative-eagle-topk 1 (chain) explicitly")
        if isinstance(steps, int) and isinstance(topk, int):
            if topk == 1:
                want = steps + 1
                if ndt is not None and ndt != want and not live:
                    sev = "error" if ndt > want else "warning"
                    add("topk1-draft-tokens", sev,
                        f"--speculative-eagle-topk 1 forces num_draft_tokens = steps + 1 = {want} "
                        f"(you asked for {ndt}); the server drafts {steps} token(s) per verify",
                        "SGLang warns 'speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                        "speculative_eagle_topk == 1' and silently drafts a chain of depth steps",
                        f"to draft {ndt - 1} tokens set --speculative-num-steps {ndt - 1} "
                        f"--speculative-num-draft-tokens {ndt}" if ndt > want else
                        f"set --speculative-num-draft-tokens {want}")
                settings["speculative_num_draft_tokens"] = want
                if steps == 1:
                    add("one-step", "warning" if ndt is None or ndt <= want or live else "info",
                        "a chain of 1 draft step: at most 2 tokens per target forward",
                        "accept length can never exceed 2", "raise --speculative-num-steps (3-5 is typical)")
            else:
                add("tree-drafting", "info", f"tree drafting (topk {topk}): offline chain acceptance "
                    "(topk 1) is a lower bound of the served accept length", "", "")
            settings["tokens_drafted_per_verify"] = (
                steps if topk == 1 else f"tree of {settings['speculative_num_draft_tokens']} (depth {steps})")
        elif live and isinstance(steps, int) and steps == 1 and topk == 1:
            add("one-step", "warning", "a chain of 1 draft step: at most 2 tokens per target forward",
                "accept length can never exceed 2", "raise --speculative-num-steps (3-5 is typical)")

    if a.get("speculative_token_map") and algo == "EAGLE3":
        add("token-map-ignored", "warning", f"--speculative-token-map {a['speculative_token_map']} is ignored "
            "for EAGLE3", "SGLang logs 'Speculative token map specified, but EAGLE3 models already have this. "
            "Ignoring the specified token map.'; EAGLE-3 uses the draft's own d2t",
            "drop --speculative-token-map; ship d2t in the draft checkpoint")

    acc = a.get("_avg_spec_accept_length")
    if isinstance(acc, (int, float)) and algo and acc < 1.1:
        add("accept-length-one", "error", f"the live server reports avg_spec_accept_length {acc:.2f}",
            "almost every drafted token is rejected: wiring, algorithm or vocab mapping is wrong",
            "check the problems above; run `workbench diagnose` on the draft")

    # ---- the draft itself ----
    wiring = trained = None
    if dcfg is not None and algo in (None, "EAGLE3", "EAGLE") and eagle3_draft is not False:
        ids = engines.config_ids(dcfg)
        if ids["top"] is not None and ids["nested"] is None and "top" not in rec.keys and rec.keys:
            add("top-level-ids", "error" if n is None or ids["top"] != rec.default_ids(n) else "warning",
                f"the draft config has top-level eagle_aux_hidden_state_layer_ids {ids['top']}: {rec.name} ignores it",
                f"{rec.label} reads only eagle_config.eagle_aux_hidden_state_layer_ids (bare try/except) and "
                "silently feeds its default taps instead",
                'move the ids into "eagle_config": {"eagle_aux_hidden_state_layer_ids": [...]} in SGLang\'s '
                "convention (`workbench rewire` writes both engines' ids)")
        dvs, vs = dcfg.get("draft_vocab_size"), dcfg.get("vocab_size")
        if isinstance(dvs, int) and isinstance(vs, int) and dvs < vs:
            names = draft_weight_names(draft) if is_path(draft) and os.path.isdir(draft) else None
            if names is None:
                add("d2t-unchecked", "info", f"draft vocab {dvs} < target vocab {vs}: d2t not checked "
                    "(no draft weights found)", "", "")
            elif not any(k == "d2t" or k.endswith(".d2t") or k.endswith("draft_id_to_target_id") for k in names):
                add("no-d2t", "error", f"draft vocab {dvs} < target vocab {vs} but the draft weights hold no d2t",
                    "without d2t SGLang maps draft ids to target ids as identity: nearly every drafted token is "
                    "a different word and gets rejected", "save the draft with its d2t tensor (SpecForge format)")
        check_target_hidden_size(add, dcfg, tcfg)
        names = draft_weight_names(draft) if is_path(draft) and os.path.isdir(draft) else None
        if names is not None:
            ships = any(k.endswith("embed_tokens.weight") for k in names)
            _, why = engines.embed_source(rec, dcfg, ships)
            if why:
                add("embed-replaced", "warning", f"the draft ships its own embed_tokens: {why}",
                    "the draft computes with the target's input embedding, not the one it ships; if it was "
                    "trained with its own (e.g. vLLM keeps it) its inputs differ under SGLang",
                    "evaluate it as served: `workbench accept --engine " + rec.name + "`; or drop embed_tokens "
                    "from the checkpoint if it equals the target's")
            ships_head = any(k.endswith("lm_head.weight") for k in names)
            _, why = engines.lm_head_source(rec, dcfg, ships_head)
            if why and ships_head:
                add("lm-head-replaced", "warning", f"{why} (the draft ships its own lm_head)",
                    "the draft's trained lm_head is not used: its logits differ from what was trained",
                    'add "draft_vocab_size" to the draft config.json')
        if n is not None:
            wiring = engines.wiring_for(rec, dcfg, tcfg)
            if not wiring.feasible:
                add("wiring-infeasible", "error", "; ".join(x for x in wiring.warnings if x.startswith(rec.name)),
                    f"{rec.label} captures the wrong number of states or crashes (cf. SGLang #32226: ids shifted "
                    "past the last layer)", "fix eagle_config.eagle_aux_hidden_state_layer_ids: three ascending ids "
                    f"({engines.id_meaning(rec)}; default {rec.default_ids(n)} for N={n})")
            trained = (Wiring.parse(trained_wiring, n) if trained_wiring is not None
                       else trained_wiring_from_config(dcfg, n))
            if trained is not None and wiring.feasible and trained.taps != wiring.taps:
                add("wiring-mismatch", "error", f"{_short_name(rec)} feeds {wiring.spec} but the draft was trained on "
                    f"{trained.spec}", "the draft's fc sees features from different layers than in training: "
                    "served acceptance collapses while offline validation looks fine", _fix_for(rec, trained, tcfg))
        served = positions.served_context(a, "sglang")
        settings.update(positions.check(
            add, dcfg, tcfg, engine="sglang", served=served,
            served_from="server_args.context_length" if live else "--context-length",
            draft_file=positions.config_file(draft, "draft config"),
            target_file=positions.config_file(target, "target config")))
    elif trained_wiring is not None and (dcfg is None or n is None):
        add("wiring-unchecked", "info", "--trained-wiring given without both --draft and --target: cannot tell "
            "what SGLang feeds", "", "pass --target DIR and --draft DIR")
    if dcfg is None and algo in ("EAGLE", "EAGLE3"):
        add("draft-unchecked", "info", "no --draft: layer ids, d2t and the wiring were not checked", "",
            "pass --draft DRAFT_DIR (and --target TARGET_DIR for the wiring)")
    return LintResult(settings, P, "server info" if live else source, wiring, trained)


def _architecture(tcfg) -> str | None:
    if tcfg is None:
        return None
    arch = (tcfg.get("architectures") or [None])[0]
    if arch is None and isinstance(tcfg.get("text_config"), dict):
        arch = (tcfg["text_config"].get("architectures") or [None])[0]
    return arch


def _fix_for(rec, trained: Wiring, tcfg) -> str:
    f = engines.ids_for_taps(rec, trained.taps, tcfg)
    if f.feasible:
        return (f'set "eagle_config": {{"eagle_aux_hidden_state_layer_ids": {f.ids}}} in the draft config.json '
                f"(checked: {rec.name} then feeds {trained.spec})")
    v = engines.ids_for_taps("vllm", trained.taps, tcfg)
    alt = (f"; vLLM can feed {trained.spec}: set eagle_aux_hidden_state_layer_ids (top level, the key vLLM's V2 runner reads) to {v.ids}" if v.feasible and rec.name != "vllm" else "")
    return (f"{f.reason}: {_short_name(rec)} cannot feed {trained.spec}; rewire the draft for taps it can feed "
            f"(`workbench rewire`) or retrain{alt}")


def _short_name(rec) -> str:
    return rec.label.split(" (")[0]


def lint_command(text: str, **kw) -> LintResult:
    """Lint a launch command line (text)."""
    return lint(parse_command(text), source="command", **kw)


def lint_server_info(info, **kw) -> LintResult:
    """Lint a live server's ``/get_server_info`` output (dict or JSON path)."""
    return lint(server_args_from_info(info), source="server", **kw)
