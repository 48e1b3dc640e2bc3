"""Which trainer wrote a draft checkpoint, read from its ``config.json``: the trainer, its format, its layer-id
convention and the taps it trained on. Light: no torch.

    >>> from workbench.engines.trainers import provenance
    >>> p = provenance({"architectures": ["LlamaForCausalLMEagle3"],
    ...                 "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26],
    ...                                  "use_last_layernorm": True}}, 30)
    >>> p.trainer, p.trained.spec
    ('modelopt', 'L1,L14,L26')
    >>> provenance({"speculators_model_type": "eagle3", "eagle_aux_hidden_state_layer_ids": [2, 15, 27]}, 30).trained.spec
    'L1,L14,L26'

A trainer is known by what its export writes (checked against each trainer's own export code):

* **workbench**: a ``workbench`` object with ``trained_taps`` (its own trainer records the taps by name);
* **speculators** (vllm-project/speculators): ``speculators_model_type``; ids top-level, vLLM's convention
  (id k = the input of layer k = ``L{k-1}``), taken from vLLM's hidden-state extraction;
* **NVIDIA ModelOpt**: ``LlamaForCausalLMEagle3`` with ModelOpt's own ``eagle_config`` keys
  (``use_input_layernorm_in_first_layer``, ``use_last_layernorm``, ``parallel_draft_step``, ...); ids nested,
  output-of-layer (id k = ``L{k}``: forward hooks on the layers' outputs);
* **SpecForge / EAGLE**: any other ``LlamaForCausalLMEagle3``; ids nested, output-of-layer (SpecForge's
  ``resolve_eagle_capture_layers``). SpecForge and the EAGLE reference write the same format: the config does not
  tell them apart.

The trained taps are what the trainer's own capture fed the draft (its record in :mod:`workbench.engines.records`
reading the ids it wrote). They are a statement about the trainer, not about any server: ``workbench wiring``
compares them with what each engine feeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.errors import WorkbenchError
from workbench.core.render import Rendered
from workbench.engines.records import EAGLE3_ARCHS, get, wiring_for
from workbench.engines.taps import Wiring, hinted_wiring, load_config, num_layers

# ModelOpt's exported eagle_config (modelopt/torch/speculative/eagle/default_config.py, written by
# export/plugins/hf_spec_export.py): keys no other trainer writes
MODELOPT_KEYS = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm",
                 "next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers")


@dataclass(frozen=True)
class Trainer:
    """One trainer's export: how to recognise it and how to read the ids it wrote."""

    name: str
    label: str
    format: str               # the checkpoint format it writes
    engine: str               # the record (workbench.engines.records) whose id rule is the trainer's capture
    convention: str           # what an id means to it, in words


TRAINERS = {t.name: t for t in (
    Trainer("workbench", "workbench (this project's trainer)", "LlamaForCausalLMEagle3 + workbench.trained_taps",
            "specforge", "taps recorded by name (workbench.trained_taps)"),
    Trainer("speculators", "vllm-project/speculators", "speculators eagle3 (Eagle3Speculator)", "speculators",
            "top-level ids, vLLM's: id k = the input of layer k = L{k-1} (id 0 = embed)"),
    Trainer("modelopt", "NVIDIA ModelOpt", "LlamaForCausalLMEagle3 (layers.0.*, ModelOpt eagle_config)", "modelopt",
            "eagle_config ids, output of layer k: id k = L{k} (forward hooks)"),
    Trainer("specforge", "SpecForge or EAGLE (same format)", "LlamaForCausalLMEagle3 (midlayer.*)", "specforge",
            "eagle_config ids, output of layer k: id k = L{k}"),
)}


@dataclass
class Provenance(Rendered):
    """Who wrote a draft and what it trained on; ``summary()`` is what ``workbench inspect DRAFT`` prints."""

    trainer: str
    label: str
    format: str
    convention: str
    version: str | None
    evidence: str
    ids: list | None
    trained: Wiring | None
    why_not: str | None = None

    def to_dict(self) -> dict:
        return {"trainer": self.trainer, "label": self.label, "version": self.version, "format": self.format,
                "convention": self.convention, "evidence": self.evidence, "ids": self.ids,
                "trained_taps": self.trained.spec if self.trained is not None else None,
                "why_not": self.why_not}

    def summary(self) -> str:
        lines = [f"trainer: {self.label}" + (f" {self.version}" if self.version else "") + f" ({self.evidence})",
                 f"format: {self.format}",
                 f"ids: {self.ids if self.ids is not None else '(none: the trainer default)'}; {self.convention}"]
        if self.trained is not None:
            lines.append(f"trained taps: {self.trained.spec}")
        else:
            lines.append(f"trained taps: unknown ({self.why_not})")
        return "\n".join(lines)


def identify(draft_config) -> tuple[Trainer, str, str | None]:
    """(trainer, the evidence, its version if the export records it) for a draft config."""
    cfg = load_config(draft_config, "draft config")
    hint = cfg.get("workbench")
    if isinstance(hint, dict) and hint.get("trained_taps") is not None:
        return TRAINERS["workbench"], "config key workbench.trained_taps", None
    if "speculators_model_type" in cfg:
        version = cfg.get("speculators_version")
        return TRAINERS["speculators"], f"speculators_model_type {cfg['speculators_model_type']!r}", \
            str(version) if version is not None else None
    arch = cfg.get("architectures") or []
    if not any(a in EAGLE3_ARCHS for a in arch):
        raise WorkbenchError(f"draft config: architectures {arch!r} is neither a speculators config nor "
                             f"{EAGLE3_ARCHS[0]} (not an EAGLE-3 draft)")
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    mo = [k for k in MODELOPT_KEYS if k in eagle]
    if mo:
        return TRAINERS["modelopt"], f"eagle_config.{mo[0]}" + (f" (+{len(mo) - 1} more ModelOpt keys)"
                                                                  if len(mo) > 1 else ""), None
    return TRAINERS["specforge"], f"architectures {arch[0]!r}, no ModelOpt or workbench keys", None


def provenance(draft_config, target) -> Provenance:
    """The trainer of a draft config and the taps it trained on, for a target (N, a config or its folder)."""
    cfg = load_config(draft_config, "draft config")
    t, evidence, version = identify(cfg)
    n = num_layers(target)
    if t.name == "workbench":
        w = hinted_wiring(cfg, n)
        ids = None
    else:
        key = "top" if "top" in get(t.engine).keys[:1] else "nested"
        eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
        ids = cfg.get("eagle_aux_hidden_state_layer_ids") if key == "top" else \
            eagle.get("eagle_aux_hidden_state_layer_ids")
        r = wiring_for(t.engine, cfg, n)
        if not r.taps or not r.feasible:
            return Provenance(t.name, t.label, t.format, t.convention, version, evidence, ids, None,
                              why_not=f"{r.explanation}; {'; '.join(r.warnings)}")
        w = Wiring(tuple(r.taps), f"trained by {t.label}: {r.explanation}")
    return Provenance(t.name, t.label, t.format, t.convention, version, evidence, ids, w)


def trained_wiring_from_config(draft_config, n_layers) -> "Wiring | None":
    """The taps a draft was trained on, when its config says so: ``workbench.trained_taps``, else the capture of a
    trainer its export identifies (ModelOpt, speculators); None for a format several trainers write (SpecForge/EAGLE).

        >>> trained_wiring_from_config({"workbench": {"trained_taps": ["embed", "L3", "L31"]}}, 32).spec
        'embed,L3,L31'
        >>> trained_wiring_from_config({"speculators_model_type": "eagle3",
        ...                             "eagle_aux_hidden_state_layer_ids": [2, 16, 29]}, 32).spec
        'L1,L15,L28'
    """
    if draft_config is None:
        return None
    cfg = load_config(draft_config, "draft config")
    w = hinted_wiring(cfg, num_layers(n_layers))
    if w is not None:
        return w
    try:
        t, _, _ = identify(cfg)
    except WorkbenchError:
        return None
    if t.name not in ("modelopt", "speculators"):
        return None
    p = provenance(cfg, n_layers)
    return p.trained


__all__ = ["MODELOPT_KEYS", "Provenance", "TRAINERS", "Trainer", "identify", "provenance", "trained_wiring_from_config"]
