"""``workbench vllm serve`` / ``stop``: the command around ``live.vllm_server.start`` (which the real-engine tests
of tests/test_vllm_real.py and notebook 04 exercise against a real vLLM).

Here the "vLLM python" is a small script (``$WORKBENCH_VLLM_PYTHON``) that answers ``/v1/models`` on the port it
is given and logs the plugin's line, so the command's own behaviour is checked in a second, without a 30-80 s
server start: background start, PID, URL, stop command, the plugin state, ``--no-fix``, a server that dies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FAKE = r'''#!{python}
import http.server, os, sys
args = sys.argv[1:]
assert args[:2] == ["-m", "vllm.entrypoints.openai.api_server"], args
if "--die" in os.environ.get("FAKE_VLLM", ""):
    print("RuntimeError: Unsupported CPU attention configuration: head_dim=12", file=sys.stderr, flush=True)
    sys.exit(1)
port = int(args[args.index("--port") + 1])
fix = os.environ.get("WORKBENCH_VLLM_FIX", "1") != "0"
print("workbench-vllm-cpu-fix: " + ("applied torch expand_kernel fix" if fix else "disabled (WORKBENCH_VLLM_FIX=0)"),
      file=sys.stderr, flush=True)

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{{"object": "list", "data": [{{"id": "t"}}]}}'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def fake_python(tmp_path):
    exe = tmp_path / "python"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(0o755)
    return str(exe)


def _serve(fake_python, tmp_path, *extra, env=None):
    for name in ("target", "draft"):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "config.json").write_text('{"num_hidden_layers": 8}')
    return subprocess.run([sys.executable, "-m", "workbench", "vllm", "serve", "--target", str(tmp_path / "target"),
                           "--draft", str(tmp_path / "draft"), "-k", "3", "--log", str(tmp_path / "srv.log"), "--timeout", "60",
                           *extra], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WORKBENCH_VLLM_PYTHON": fake_python, **(env or {})}, cwd=tmp_path)


def test_serve_starts_in_the_background_prints_how_to_stop_and_stop_stops(fake_python, tmp_path):
    out = _serve(fake_python, tmp_path, "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    try:
        assert info["url"].startswith("http://127.0.0.1:") and info["stop"] == f"workbench vllm stop {info['pid']}"
        assert info["fix"].startswith("applied")
        cmd = Path(f"/proc/{info['pid']}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert '"num_speculative_tokens": 3' in cmd and "--host 127.0.0.1" in cmd
        assert "--per-request-spec-decode-metrics detailed" in cmd
    finally:
        stopped = subprocess.run([sys.executable, "-m", "workbench", "vllm", "stop", str(info["pid"])],
                                 capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not Path(f"/proc/{info['pid']}").exists()


def test_serve_says_when_the_fix_is_disabled(fake_python, tmp_path):
    out = _serve(fake_python, tmp_path, "--no-fix")
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split("(pid ")[1].split(",")[0])
    subprocess.run([sys.executable, "-m", "workbench", "vllm", "stop", str(pid)], capture_output=True, timeout=60)
    assert "CPU fix plugin: not applied" in out.stdout and "workbench vllm stop" in out.stdout


def test_a_server_that_dies_gives_one_line_with_its_log(fake_python, tmp_path):
    out = _serve(fake_python, tmp_path, env={"FAKE_VLLM": "--die"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "head_dim=12" in out.stderr, out.stderr


def test_serve_without_a_vllm_environment_says_make_vllm(tmp_path):
    out = subprocess.run([sys.executable, "-m", "workbench", "vllm", "serve", "--target", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "WORKBENCH_VLLM_PYTHON": str(tmp_path / "nope")})
    assert out.returncode == 2 and "WORKBENCH_VLLM_PYTHON" in out.stderr
