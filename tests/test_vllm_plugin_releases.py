"""The CPU patches for old vLLM releases (``vllm_plugin/``, one module per release range) change what they say and
never the release's id reading or tap capture (issue 55).

- Statically: no patch module assigns, wraps or defines any of the functions that read ids or capture taps.
- Against the release's own code, where ``make vllm-versions`` installed it (``.venv-vllm-versions/0.21.0``): after
  the patch is installed, those functions are still the release's own (defined in vLLM's files, code unchanged), and
  the CPU runner's ``load_model`` calls the release's own set-up.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "vllm_plugin" / "workbench_vllm_cpu_fix"
sys.path.insert(0, str(ROOT / "vllm_plugin"))

from workbench_vllm_cpu_fix import cpu_eagle3_aux  # noqa: E402

ID_READING = set(cpu_eagle3_aux.UNTOUCHED) | {"get_eagle3_aux_layers_from_config", "forward"}


def test_the_patch_is_for_0_20_and_0_21_only():
    assert [cpu_eagle3_aux.applies(v) for v in ("0.19.1", "0.20.0", "0.21.0", "0.22.0", "0.32.0", "x")] == \
        [False, True, True, False, False, False]


@pytest.mark.parametrize("module", sorted(p.name for p in PLUGIN.glob("*.py")))
def test_no_patch_replaces_id_reading_or_tap_capture(module):
    """No assignment to, and no definition of, a function that reads ids or captures taps (the patch may call them)."""
    tree = ast.parse((PLUGIN / module).read_text())
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else None
            assert name not in ID_READING, f"{module}:{node.lineno} assigns {name}"
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant):
            assert node.args[1].value not in ID_READING, f"{module}:{node.lineno} setattr {node.args[1].value}"
        if isinstance(node, ast.FunctionDef):
            assert node.name not in ID_READING - {"forward"}, f"{module}:{node.lineno} defines {node.name}"


_PROBE = r"""
import json, inspect
import workbench_vllm_cpu_fix as plugin
from workbench_vllm_cpu_fix import cpu_eagle3_aux
from vllm.v1.worker import cpu_model_runner as cmr, gpu_model_runner as gmr
from vllm.model_executor.models import interfaces, llama
before = {n: getattr(gmr.GPUModelRunner, n).__code__ for n in ("_get_eagle3_aux_layers_from_config",)}
before["_maybe_add_hidden_state"] = interfaces.EagleModelMixin._maybe_add_hidden_state.__code__
before["forward"] = llama.LlamaModel.forward.__code__
said = []
applied = cpu_eagle3_aux.install(said.append)
after = {n: getattr(gmr.GPUModelRunner, n).__code__ for n in ("_get_eagle3_aux_layers_from_config",)}
after["_maybe_add_hidden_state"] = interfaces.EagleModelMixin._maybe_add_hidden_state.__code__
after["forward"] = llama.LlamaModel.forward.__code__
same = {k: before[k] is after[k] and "site-packages/vllm/" in after[k].co_filename for k in before}
wrapped = cmr.CPUModelRunner.load_model
print(json.dumps({"applied": applied, "same": same, "said": said,
                  "original_is_release": "site-packages/vllm/" in wrapped.__wrapped__.__code__.co_filename,
                  "calls": sorted(set(cpu_eagle3_aux.set_aux_layers.__code__.co_names))}))
"""


def test_on_the_release_the_patch_leaves_its_own_id_reading():
    py = ROOT / ".venv-vllm-versions" / "0.21.0" / "bin" / "python"
    if not py.exists():
        pytest.skip("vllm-cpu 0.21.0 is not installed (make vllm-versions)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT / "vllm_plugin")
    out = subprocess.run([str(py), "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert line, out.stderr[-2000:]
    got = json.loads(line[-1])
    assert got["applied"] and got["original_is_release"], got
    assert all(got["same"].values()), got["same"]
    assert {"_get_eagle3_aux_layers_from_config", "get_eagle3_default_aux_hidden_state_layers",
            "set_aux_hidden_state_layers"} <= set(got["calls"])


def test_a_stand_in_lacking_a_keyword_gets_it_dropped_and_nothing_else():
    """vllm-cpu 0.24.0: the rejection sampler passes USE_FP64_GUMBEL=, its CPU stand-in has no such parameter."""
    import types

    from workbench_vllm_cpu_fix import kernel_signatures as ks

    def old(output, cu, draft, dprobs, tprobs, inv_q, vocab, BLOCK_SIZE=None, NO_DRAFT_PROBS=False):
        return ("called", NO_DRAFT_PROBS)

    def new(output, cu, draft, dprobs, tprobs, inv_q, vocab, BLOCK_SIZE=None, NO_DRAFT_PROBS=False,
            USE_FP64_GUMBEL=False):
        return "called"

    call_site = "sample_recovered_tokens_kernel[(b, s)](x, NO_DRAFT_PROBS=True, USE_FP64_GUMBEL=use_fp64_gumbel)"
    assert ks.needed(types.SimpleNamespace(_sample_recovered_tokens_kernel_impl=old), call_site) == {
        "sample_recovered_tokens_kernel": ("USE_FP64_GUMBEL",)}
    assert ks.needed(types.SimpleNamespace(_sample_recovered_tokens_kernel_impl=new), call_site) == {}
    assert ks.needed(types.SimpleNamespace(_sample_recovered_tokens_kernel_impl=old), "no such keyword") == {}
