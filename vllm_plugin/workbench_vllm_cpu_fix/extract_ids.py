"""Fix for vLLM 0.32's ``extract_hidden_states``: it sizes its buffers from the top-level ids only.

The bug (vLLM 0.32.x, any platform): the V1 runner resolves the aux layer ids of a draft config with
``GPUModelRunner._get_eagle3_aux_layers_from_config`` (top-level ``eagle_aux_hidden_state_layer_ids``, else
``dflash_config.target_layer_ids`` + 1, else ``eagle_config.eagle_aux_hidden_state_layer_ids``), else the
model's default ``(2, N//2, N-3)``. That is how an ``eagle3`` draft is served. But the ``extract_hidden_states``
proposer (``v1/spec_decode/extract_hidden_states.py``) raises "eagle_aux_hidden_state_layer_ids must be set
in the draft model config" unless the *top-level* key is set, and ``ExtractHiddenStatesModel`` sizes its
cache from ``len()`` of that key. So a SpecForge-style config (nested ids) or one with no ids, which vLLM
serves, cannot be extracted as served.

The fix: while those two constructors run, and only when the top-level key is empty, the config carries a
placeholder list of the right *length* (the number of ids vLLM's own reader resolves, or 3, the length of
every model default in 0.32); it is removed right after, so the runner then resolves the ids itself, exactly
as for an ``eagle3`` draft. Which layers are captured is never decided here.
"""

from __future__ import annotations

import functools
import inspect
from types import SimpleNamespace

__all__ = ["APPLIED_LINE", "install", "reads_top_level_only", "resolved_ids"]

KEY = "eagle_aux_hidden_state_layer_ids"
DEFAULT_COUNT = 3          # (2, N//2, N-3): every get_eagle3_default_aux_hidden_state_layers of 0.32
APPLIED_LINE = ("workbench-vllm-cpu-fix: extract-ids fix applied (vllm 0.32 extract_hidden_states reads only "
                "top-level ids; nested, dflash and default ids now extracted as the runner resolves them)")
_MISSING = object()


def resolved_ids(hf_config):
    """The ids vLLM's V1 runner resolves from this config (its own function), or None (the model default)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    shim = SimpleNamespace(speculative_config=SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf_config)))
    return GPUModelRunner._get_eagle3_aux_layers_from_config(shim)


def _counted(init):
    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        hf = vllm_config.speculative_config.draft_model_config.hf_config
        old = getattr(hf, KEY, _MISSING)
        if old is not _MISSING and old:
            return init(self, *args, **kwargs)
        ids = resolved_ids(hf)
        setattr(hf, KEY, [0] * (len(ids) if ids else DEFAULT_COUNT))     # only its length is read here
        try:
            return init(self, *args, **kwargs)
        finally:
            if old is _MISSING:
                delattr(hf, KEY)
            else:
                setattr(hf, KEY, old)
    wrapper.workbench_fix = True
    return wrapper


PROPOSER = "vllm.v1.spec_decode.extract_hidden_states"
MODEL = "vllm.model_executor.models.extract_hidden_states"


def reads_top_level_only(init) -> bool:
    """The probe: this constructor sizes the states from the top-level key and never looks further."""
    src = inspect.getsource(init)
    return f'"{KEY}"' in src and "eagle_config" not in src and "_get_eagle3_aux_layers" not in src


def _patch(cls, say, what: str) -> None:
    if getattr(cls.__init__, "workbench_fix", False):
        return
    if not reads_top_level_only(cls.__init__):
        say(f"workbench-vllm-cpu-fix: extract-ids fix not needed ({what} reads more than the top-level key)")
        return
    cls.__init__ = _counted(cls.__init__)
    say(f"{APPLIED_LINE}; probe: {what}.__init__ reads only the top-level key")


def install(say) -> None:
    """Patch the proposer and the model when (and if) their modules are imported in this process."""
    from workbench_vllm_cpu_fix.on_import import when_imported

    when_imported(PROPOSER, lambda m: _patch(m.ExtractHiddenStatesProposer, say, "ExtractHiddenStatesProposer"))
    when_imported(MODEL, lambda m: _patch(m.ExtractHiddenStatesModel, say, "ExtractHiddenStatesModel"))
