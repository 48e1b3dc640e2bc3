"""The drafting shape of a run from the command line: ``--steps/--eagle-topk/--num-draft-tokens`` or an
SGLang launch command (``--sglang-args``), after SGLang's own adjustments.

    >>> from workbench.engines.flags import drafting_shape
    >>> drafting_shape(5, 4, 8).setting.label
    'tree 5×4 N=8'
    >>> s = drafting_shape(3, 1, 16)                  # eagle_topk 1 forces N = steps + 1, as the server does
    >>> s.setting.label, s.notices[0][:45]
    ('chain K=3', 'eagle_topk 1 forces num_draft_tokens = steps ')
    >>> cmd = "python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3"
    >>> drafting_shape(sglang_args=cmd, target_arch="LlamaForCausalLM").setting.label   # flags unset: auto
    'tree 5×4 N=8'
    >>> drafting_shape().setting.label                # nothing given: the workbench default
    'chain K=4'

Rules (SGLang ``server_args``; ``shared/eagle3-facts.md`` §3, ``shared/sglang-tree.md``):

- ``--speculative-eagle-topk 1`` forces ``num_draft_tokens`` = steps + 1 (SGLang logs
  "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk
  == 1"): a chain. The workbench does the same and says so in a notice;
- N − 1 must not exceed k + (S − 1)·k² (the scored nodes): refused in one line;
- all three flags unset in a launch command: SGLang picks the per-architecture auto-defaults
  (``engines.auto_flags``: (5, 4, 8) for Llama and Grok targets, (3, 1, 4) elsewhere in current
  versions); num_steps unset while topk or draft tokens are set: SGLang refuses to start, so do we;
- with plain flags nothing is automatic: the defaults stay a chain of 4 steps; when the command
  names an engine and gives no shape, a notice says which shape that engine would pick by itself.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from workbench import engines
from workbench.core.errors import WorkbenchError
from workbench.core.setting import Setting
from workbench.engines.sglang_lint import parse_command

DEFAULT_STEPS = 4


@dataclass(frozen=True)
class DraftingShape:
    """The setting's shape fields (a :class:`~workbench.setting.Setting`) and what was adjusted, as notices."""

    setting: Setting
    notices: list = field(default_factory=list)
    source: str = "default"            # "flags", "sglang-args", "sglang auto-defaults" or "default"

    @property
    def flags(self) -> str:
        """SGLang's three flags for this shape, as a command-line fragment."""
        t = self.setting.tree
        return (f"--speculative-num-steps {t['steps']} --speculative-eagle-topk {t['topk']} "
                f"--speculative-num-draft-tokens {t['num_draft_tokens']}")


def _int(name, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise WorkbenchError(f"{name}={v!r}: expected a positive integer")
    return v


def _shape(S, k, N, notices, source) -> DraftingShape:
    if k == 1:
        if N is not None and N != S + 1:
            notices.append(f"eagle_topk 1 forces num_draft_tokens = steps + 1 = {S + 1} (got {N}; SGLang adjusts it "
                           f"the same way and drafts a chain of {S})")
        return DraftingShape(Setting(steps=S), notices, source)
    if N is None:
        raise WorkbenchError(f"eagle_topk {k} > 1 needs num_draft_tokens (the verified tokens including the root): "
                             f"2..{k + (S - 1) * k * k + 1} for steps {S}")
    top = k + (S - 1) * k * k
    if not 2 <= N <= top + 1:
        raise WorkbenchError(f"num_draft_tokens {N} does not fit steps {S}, eagle_topk {k}: N-1 must be 1.."
                             f"k + (S-1)*k^2 = {top}")
    return DraftingShape(Setting(steps=S, eagle_topk=k, num_draft_tokens=N), notices, source)


def target_architecture(target) -> str | None:
    """The first ``architectures`` entry of a target folder's config.json (or a loaded target's config), or None."""
    cfg = getattr(target, "config", None)
    if cfg is not None and not isinstance(cfg, dict):
        arch = getattr(cfg, "architectures", None)
        return arch[0] if arch else None
    if isinstance(target, (str, os.PathLike)) and os.path.isfile(os.path.join(target, "config.json")):
        try:
            with open(os.path.join(target, "config.json"), encoding="utf-8") as f:
                arch = json.load(f).get("architectures")
        except (OSError, ValueError):
            return None
        return arch[0] if isinstance(arch, list) and arch else None
    return None


def auto_notice(engine, target_arch) -> str | None:
    """'SGLang would choose ...' for an engine that picks a shape by itself when its flags are unset."""
    if not engine:
        return None
    try:
        auto = engines.auto_flags(engine, target_arch)
    except WorkbenchError:
        return None
    if not auto:
        return None
    S, k, N = auto
    what = "a chain" if k == 1 else "a tree"
    return (f"{engine} with its speculative flags unset drafts {what}: steps {S}, eagle_topk {k}, {N} draft tokens "
            f"(auto-default for {target_arch or 'this target'}); simulated here: the workbench default unless "
            f"you pass --steps {S} --eagle-topk {k} --num-draft-tokens {N} (or --sglang-args)")


def drafting_shape(steps=None, eagle_topk=None, num_draft_tokens=None, *, sglang_args: str | None = None,
                   engine: str | None = None, target_arch: str | None = None) -> DraftingShape:
    """The shape to simulate (module docstring); ``engine``/``target_arch`` for SGLang's auto-defaults."""
    S, k, N = _int("steps K", steps), _int("eagle_topk", eagle_topk), _int("num_draft_tokens", num_draft_tokens)
    notices: list[str] = []
    if sglang_args is not None:
        if (S, k, N) != (None, None, None):
            raise WorkbenchError("--sglang-args and --steps/--eagle-topk/--num-draft-tokens: give one of them")
        a = parse_command(sglang_args)
        S, k, N = (a.get(x) for x in ("speculative_num_steps", "speculative_eagle_topk",
                                      "speculative_num_draft_tokens"))
        if S is None:
            if k is not None or N is not None:
                raise WorkbenchError("--sglang-args: --speculative-num-steps unset while --speculative-eagle-topk/"
                                     "-num-draft-tokens are set: SGLang refuses to start (set all three)")
            eng = engine if engine and str(engine).lower().startswith("sglang") else "sglang"
            auto = engines.auto_flags(eng, target_arch)
            if not auto:
                raise WorkbenchError(f"--sglang-args: the speculative flags are unset and engine {eng!r} has no "
                                     f"auto-defaults on record: set --speculative-num-steps/-eagle-topk/"
                                     f"-num-draft-tokens")
            S, k, N = auto
            notices.append(f"the launch command leaves the speculative flags unset: SGLang picks steps {S}, "
                           f"eagle_topk {k}, {N} draft tokens for {target_arch or 'this target'} "
                           f"(auto-defaults of {eng})")
            return _shape(S, k, N, notices, "sglang auto-defaults")
        if k is None:
            raise WorkbenchError("--sglang-args: --speculative-eagle-topk unset while --speculative-num-steps is set "
                                 "(SGLang versions differ: some refuse to start); set it explicitly (1 = chain)")
        return _shape(S, k, N, notices, "sglang-args")
    if S is None and k is None and N is None:
        note = auto_notice(engine, target_arch)
        return DraftingShape(Setting(steps=DEFAULT_STEPS), [note] if note else [], "default")
    if S is None:
        S = DEFAULT_STEPS
    return _shape(S, k or 1, N, notices, "flags")


__all__ = ["DraftingShape", "drafting_shape", "target_architecture", "auto_notice", "DEFAULT_STEPS"]
