"""Output heads in position chunks: argmax, top-k and log-normalisers without a [T, V] logits tensor.

    >>> import torch
    >>> from workbench.model.chunks import head_chunks
    >>> _ = torch.manual_seed(0)
    >>> hidden, weight = torch.randn(2, 7, 16), torch.randn(50, 16)
    >>> head = lambda h: h @ weight.T                          # norm -> lm_head in a real model
    >>> out = head_chunks(hidden, head, topk=3, max_memory=2000)   # a tiny budget: many chunks
    >>> out.ids.shape, out.topk_ids.shape, out.chunk_rows < 14
    (torch.Size([2, 7]), torch.Size([2, 7, 3]), True)
    >>> bool((out.ids == head(hidden).argmax(-1)).all())
    True

The target's and the draft's heads map a hidden state [.., H] to logits [.., V]; at a real
vocabulary (Llama 3: 128,256) and a long row the fp32 logits of all positions are T·V·4 bytes
(4 GB at T=8192). :func:`head_chunks` runs the head over chunks of (batch × position) rows sized
from a memory budget (:func:`memory_budget`: ``--max-memory``, else a share of the free device
memory) and keeps per position only what is asked for: the argmax, the top-k log-probabilities,
the log-normaliser at a temperature. Each row's numbers are those of the unchunked head (a row's
logits do not depend on the other rows of the chunk), so ids are equal and logits agree to
rounding (tests/test_chunks.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from workbench.core.errors import WorkbenchError

# The default budget: this share of the free device memory, at most DEFAULT_CAP bytes. A bigger
# chunk buys nothing once a chunk has a few hundred rows (the matmuls are already efficient).
FREE_SHARE = 0.25
DEFAULT_CAP = 512 * 2 ** 20
_UNITS = {"": 1, "B": 1, "K": 2 ** 10, "KB": 10 ** 3, "KIB": 2 ** 10, "M": 2 ** 20, "MB": 10 ** 6, "MIB": 2 ** 20,
          "G": 2 ** 30, "GB": 10 ** 9, "GIB": 2 ** 30, "T": 2 ** 40, "TB": 10 ** 12, "TIB": 2 ** 40}


def parse_memory(text) -> int:
    """Bytes from ``"512MiB"``, ``"2GB"``, ``"1.5G"`` or an int (``--max-memory``).

        >>> parse_memory("2GB"), parse_memory("512MiB"), parse_memory("1.5G"), parse_memory(4096)
        (2000000000, 536870912, 1610612736, 4096)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
        unit = m.group(2).upper() if m else None
        if m is None or unit not in _UNITS:
            raise WorkbenchError(f"--max-memory {text!r}: expected a size like 512MiB, 2GB or 1.5G")
        value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise WorkbenchError(f"--max-memory {text!r}: expected a positive size")
    return value


def free_memory(device) -> int:
    """Free bytes on ``device``: CUDA ``mem_get_info``, CPU ``MemAvailable`` (Linux), else 4 GiB."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 * 2 ** 30


def memory_budget(device="cpu", max_memory=None) -> int:
    """Bytes one chunk's temporaries may take: ``max_memory`` when given (bytes or ``"2GB"``), else
    ``FREE_SHARE`` of the free memory of ``device``, at most ``DEFAULT_CAP``.

        >>> memory_budget("cpu", "64MiB")
        67108864
        >>> 0 < memory_budget("cpu") <= DEFAULT_CAP
        True
    """
    if max_memory is not None:
        return parse_memory(max_memory)
    return max(1, min(int(free_memory(device) * FREE_SHARE), DEFAULT_CAP))


def rows_per_chunk(n_rows: int, bytes_per_row: int, budget: int, minimum: int = 1) -> int:
    """How many rows of ``bytes_per_row`` fit ``budget`` (at least ``minimum``, at most ``n_rows``).

        >>> rows_per_chunk(1000, 4000, 1_000_000), rows_per_chunk(10, 4000, 1_000_000), rows_per_chunk(9, 10**9, 1)
        (250, 10, 1)
    """
    return max(1, min(int(n_rows), max(int(minimum), int(budget) // max(1, int(bytes_per_row)))))


@dataclass
class HeadOutput:
    """What :func:`head_chunks` keeps per position (leading shape = the hidden's, without H)."""

    ids: torch.Tensor                              # argmax ids (LongTensor), the head's own vocab
    topk_ids: torch.Tensor | None = None           # [.., k] ids, best first
    topk_logprobs: torch.Tensor | None = None      # [.., k] fp32 log-softmax values
    log_normaliser: torch.Tensor | None = None     # [..] fp32 logsumexp(logits / temperature)
    logits: torch.Tensor | None = None             # [.., V] fp32, only when asked (keep_logits)
    chunk_rows: int = 0                            # rows per chunk used
    reduced: torch.Tensor | None = None            # [.., m] fp32: ``reduce`` of each row's fp32 logits, if asked


def head_chunks(hidden: torch.Tensor, head, *, topk: int = 0, temperature: float | None = None,
                keep_logits: bool = False, max_memory=None, vocab: int | None = None, reduce=None) -> HeadOutput:
    """Run ``head`` ([n, H] → [n, V] logits) over ``hidden`` [..., H] in row chunks; keep argmax,
    top-k log-probs (fp32 log-softmax), the log-normaliser at ``temperature`` and, only when
    ``keep_logits``, the fp32 logits.

        >>> import torch
        >>> w = torch.randn(30, 8)
        >>> h = torch.randn(4, 8)
        >>> out = head_chunks(h, lambda x: x @ w.T, temperature=0.7, max_memory=100)   # one row a chunk
        >>> out.chunk_rows, torch.allclose(out.log_normaliser, torch.logsumexp(h @ w.T / 0.7, -1))
        (1, True)

    The argmax is taken on the head's own dtype (as ``logits.argmax()`` on the unchunked tensor);
    probabilities are fp32. The chunk size comes from :func:`memory_budget` of the hidden's device:
    one row costs about 4 fp32 copies of a [V] logit row. What the sampling work needs later (the
    probability of any token at a temperature, top-p/top-k cutoffs) is a per-row reduction like
    ``log_normaliser``: add it in ``_reduce`` and it never stores [T, V]. ``reduce``: any such
    per-row reduction, a function of the fp32 logits ``[n, V]`` returning ``[n, m]`` (e.g.
    ``sampled.served_stats``: the served distribution's normaliser and top-k/top-p cutoff).
    """
    if hidden.dim() < 2:
        raise WorkbenchError(f"head_chunks: hidden has shape {list(hidden.shape)}, expected [..., H]")
    if temperature is not None and not float(temperature) > 0:
        raise WorkbenchError(f"temperature must be > 0, got {temperature!r}")
    lead = hidden.shape[:-1]
    flat = hidden.reshape(-1, hidden.shape[-1])
    n = flat.shape[0]
    if vocab is None:                               # one row tells the vocabulary size
        vocab = int(head(flat[:1]).shape[-1]) if n else 1
    budget = memory_budget(hidden.device, max_memory)
    rows = rows_per_chunk(n, 4 * 4 * int(vocab), budget)
    ids, tki, tkl, lse, logs, red = [], [], [], [], [], []
    for s in range(0, n, rows):
        logits = head(flat[s: s + rows])
        ids.append(logits.argmax(-1))
        if topk or temperature is not None or keep_logits or reduce is not None:
            f = logits.float()
            if reduce is not None:
                red.append(reduce(f).float())
            if topk:
                lp, ix = torch.log_softmax(f, dim=-1).topk(min(int(topk), f.shape[-1]), dim=-1)
                tki.append(ix)
                tkl.append(lp)
            if temperature is not None:
                lse.append(torch.logsumexp(f / float(temperature), dim=-1))
            if keep_logits:
                logs.append(f)
        del logits

    def cat(parts, *tail):
        return torch.cat(parts).reshape(*lead, *tail) if parts else None

    k = min(int(topk), int(vocab))
    return HeadOutput(ids=cat(ids), topk_ids=cat(tki, k), topk_logprobs=cat(tkl, k), log_normaliser=cat(lse),
                      logits=cat(logs, int(vocab)), chunk_rows=rows,
                      reduced=cat(red, red[0].shape[-1]) if red else None)


__all__ = ["HeadOutput", "head_chunks", "memory_budget", "parse_memory", "free_memory", "rows_per_chunk"]
