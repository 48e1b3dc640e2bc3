"""CPU shims for ModelOpt 0.47.0 EAGLE-3 training and export (torch 2.13.0 CPU, transformers 5.14.0).

No monkeypatch is needed. ``PATCHES`` is empty on purpose: convert, the training forward and backward
(sdpa attention, fp32), HF Trainer checkpoint save and resume, and ``export_speculative_decoding`` all
run on CPU unmodified once the recipe's switches below are set (train.py sets them as recipe overrides).
``apply(names=None)`` is kept so that a patch, should a later version need one, is added here as
``PATCHES[name] = fn`` with a comment naming the exact error it fixes, and can be shown to be needed
by running train.py with ``--shims none``.

The switches, and what happens without each one (checked with train.py ``--set KEY=VALUE`` on the tiny target):

- ``training.tf32=false`` (the recipe says true): **required**. Without it ``transformers.TrainingArguments``
  raises ``ValueError: --tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7``
  (transformers/training_args.py, ``__post_init__``).
- ``eagle.eagle_use_torch_compile=false`` (the recipe says true): for time, not correctness.
  With it on, ``HFEagleModel._activate_torch_compile`` compiles ``_eagle_forward`` with
  ``mode="max-autotune"``: Inductor autotunes C++ GEMM kernels on CPU, and the first step of the
  tiny target took 167 s (1 thread) against 0.3 s eager; the losses were identical.
- ``training.bf16=false`` (the recipe says true): a choice, for fp32 arithmetic. With it on, training
  runs on CPU under bf16 autocast (the losses then differ from fp32 in the 3rd decimal).
- ``training.ar_validate_steps=-1``: already the recipe's value. Acceptance-rate validation is
  upstream's ``EagleTrainingPlot`` callback (not in the wheel, not used here); its
  ``HFARValidation.get_ground_truth`` calls ``torch.cuda.current_device()`` (plugins/hf_eagle.py:955).

Not switches but facts that keep CPU working without patches:
- ``HFEagleModel.modify`` sets the draft's ``_attn_implementation`` to ``sdpa`` when unset
  (plugins/hf_eagle.py:377-378), so FlexAttention (no CPU backward in torch 2.13) is never used;
  the TTT masks are dense tensors for non-flex attention (``_compute_ttt_attention_mask``).
- ``load_vlm_or_llm(..., device_map="cpu")`` and ``dtype=torch.float32`` keep the target on CPU in fp32.
"""

from __future__ import annotations

from collections.abc import Callable

PATCHES: dict[str, Callable[[], None]] = {}

# recipe dotlist overrides train.py always sets on CPU, with the reason (see the module docstring)
CPU_SWITCHES: dict[str, str] = {
    "training.tf32=false": "required: TrainingArguments raises ValueError for tf32 without CUDA",
    "eagle.eagle_use_torch_compile=false": "time: max-autotune compile takes minutes on CPU",
    "training.bf16=false": "choice: fp32 arithmetic",
    "training.ar_validate_steps=-1": "already the recipe's value; AR validation needs CUDA",
}


def apply(names=None) -> list[str]:
    """Apply the named patches (all when ``names`` is None); return the names applied."""
    chosen = list(PATCHES) if names is None else [n for n in names if n]
    unknown = [n for n in chosen if n not in PATCHES]
    if unknown:
        raise KeyError(f"unknown cpu shim(s) {unknown}; known: {sorted(PATCHES) or 'none'}")
    for name in chosen:
        PATCHES[name]()
    return chosen
