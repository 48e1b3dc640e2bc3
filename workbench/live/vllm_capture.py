"""Capture the target's taps through a real vLLM into the workbench's own feature cache.

    >>> from workbench.live.vllm_capture import engine_ids
    >>> engine_ids(["embed", "L3", "L7"], 8)           # vLLM's convention: id 0 = embed, id k = L{k-1}
    [0, 4, 8]

    with running_extractor(target_dir, {"eagle_aux_hidden_state_layer_ids": engine_ids(taps, n)}, store) as srv:
        for batch in capture.extract(target, rows, wirings, cache_dir=cache, engine=EngineFeatures(srv, taps, n)):
            ...                         # the same shards + manifest as HF capture; manifest "source" says vLLM

One server captures the union of the candidate wirings' taps (vLLM's ``extract_hidden_states`` takes any
number of ids; it concatenates them in layer order). Each data row is one ``/v1/completions`` request
(``max_tokens`` 1, ``prompt_logprobs`` 1): the engine's states fill the features, and its greedy tokens
(the rank-1 prompt logprob of the next position, the generated token at the last) fill ``next_token``. The
engine's files are removed as they are read. ``capture.extract`` writes each batch atomically, so a killed
server leaves the finished shards and the same call resumes. ``final`` (post-norm) cannot be captured by vLLM.
"""

from __future__ import annotations

import contextlib
import tempfile

import torch

from workbench.core.errors import WorkbenchError
from workbench.engines.taps import parse_tap, tap_sort_key
from workbench.live import vllm_extract, vllm_server
from workbench.model import capture


def engine_ids(taps, n_layers: int) -> list[int]:
    """vLLM ids (capture points) of ``taps``, in layer order; ``final`` is refused."""
    out = []
    for t in sorted({parse_tap(t, n_layers) for t in taps}, key=tap_sort_key):
        if t == "final":
            raise WorkbenchError("tap 'final' (after the final norm) cannot be captured by vLLM: its ids are layer "
                                 "boundaries 0..N (embed .. the last layer's raw output)")
        out.append(0 if t == "embed" else int(t[1:]) + 1)
    return out


def greedy_tokens(reply: dict, n: int) -> list[int]:
    """The target's greedy next token at each of the ``n`` prompt positions, from one completion with
    ``prompt_logprobs`` 1 and ``max_tokens`` 1 at temperature 0."""
    choice = (reply.get("choices") or [{}])[0]
    plp = choice.get("prompt_logprobs")
    gen = choice.get("token_ids") or []
    if not isinstance(plp, list) or len(plp) != n or not gen:
        raise WorkbenchError(f"the vLLM reply lacks prompt_logprobs for {n} positions or the generated token")
    out = []
    for p in range(1, n):
        ranked = [(v.get("rank"), int(k)) for k, v in (plp[p] or {}).items()]
        top = [tok for rank, tok in ranked if rank == 1]
        if not top:
            raise WorkbenchError(f"the vLLM reply's prompt_logprobs at position {p} has no rank-1 token")
        out.append(top[0])
    return out + [int(gen[0])]


class EngineFeatures:
    """``capture.extract(engine=...)``: a batch's taps and greedy tokens from a running extraction server."""

    def __init__(self, server, taps, n_layers: int, *, server_ids=None, version: str = "0.32",
                 timeout: float = 300.0, start=None):
        self.server, self.timeout, self.start = server, timeout, start     # start(): the server, when first needed
        self.taps = sorted({parse_tap(t, n_layers) for t in taps}, key=tap_sort_key)
        self.ids = sorted(server_ids) if server_ids else engine_ids(self.taps, n_layers)
        missing = [t for t, i in zip(self.taps, engine_ids(self.taps, n_layers)) if i not in self.ids]
        if missing:
            raise WorkbenchError(f"the server captures ids {self.ids}, which lack the taps {','.join(missing)}")
        self.slots = [self.ids.index(i) for i in engine_ids(self.taps, n_layers)]
        self.source = f"vLLM {version} extract_hidden_states"

    def one(self, token_ids: list[int]):
        if self.server is None:
            self.server = self.start()
        url = self.server.url
        try:
            reply = vllm_server.complete(url, token_ids, max_tokens=1, prompt_logprobs=1)
        except WorkbenchError as e:
            raise WorkbenchError(f"the vLLM extraction server (pid {getattr(self.server, 'pid', '?')}) failed: {e}; "
                                 f"the finished shards are kept and the same command resumes") from None
        path = (reply.get("kv_transfer_params") or {}).get("hidden_states_path")
        if not path:
            raise WorkbenchError("the vLLM reply has no kv_transfer_params.hidden_states_path (not in extraction mode?)")
        states, _ = vllm_extract.read_states(path, timeout=self.timeout)
        if states.shape[:2] != (len(token_ids), len(self.ids)):
            raise WorkbenchError(f"{path}: hidden_states {tuple(states.shape)}, expected [{len(token_ids)}, "
                                 f"{len(self.ids)}, H] (ids {self.ids})")
        return states, greedy_tokens(reply, len(token_ids))

    def __call__(self, rows, ids, att):
        B, T = ids.shape
        feats, nxt = None, torch.zeros(B, T, dtype=torch.long)
        for b, row in enumerate(rows):
            states, tokens = self.one(row["input_ids"])
            if feats is None:
                feats = {t: torch.zeros(B, T, states.shape[-1]) for t in self.taps}
            n = states.shape[0]
            for j, t in zip(self.slots, self.taps):
                feats[t][b, :n] = states[:, j]
            nxt[b, :n] = torch.tensor(tokens)
        dev = ids.device
        return {t: v.to(dev) for t, v in feats.items()}, nxt.to(dev)


def engine_capture(target, target_dir, rows, wirings, cache_dir, *, batch_size: int = 8, limit=None,
                   server=None, server_ids=None, store=None, tensor_parallel: int = 1, say=None,
                   timeout: float = 400.0) -> dict:
    """Fill ``cache_dir`` with the engine's features of ``wirings`` (the key ``capture.extract`` computes for
    the same target, rows, taps and batch size). ``server``: a running extraction server capturing
    ``server_ids`` (default: exactly these taps' ids); else one is started at the first missing shard and
    stopped at the end (a finished cache starts none). Returns
    ``{"batches", "from_cache", "ids", "source"}``."""
    taps = capture.union_taps(wirings, target.n_layers)
    ids = list(server_ids) if server_ids else engine_ids(taps, target.n_layers)
    # the longest row (as capture truncates it) + the one generated token; never below the server's 512 default
    longest = max((len(r["input_ids"]) for r in (rows[:limit] if limit else rows)), default=0)
    max_len = max(512, min(longest, target.max_positions or longest) + 1)
    with contextlib.ExitStack() as stack:
        def start():                       # only when a shard is missing: a finished cache starts nothing
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="wb-vllm-capture-", dir=store))
            return stack.enter_context(vllm_extract.running_extractor(
                target_dir, {"eagle_aux_hidden_state_layer_ids": ids}, tmp, tensor_parallel=tensor_parallel,
                say=say, timeout=timeout, max_model_len=max_len))
        eng = EngineFeatures(server, taps, target.n_layers, server_ids=server_ids, start=start)
        n = cached = 0
        for batch in capture.extract(target, rows, taps, batch_size=batch_size, limit=limit, cache_dir=cache_dir,
                                     progress=False, engine=eng):
            n += 1
            cached += int(batch.from_cache)
    return {"batches": n, "from_cache": cached, "ids": eng.ids, "source": eng.source}


__all__ = ["engine_ids", "greedy_tokens", "EngineFeatures", "engine_capture"]
