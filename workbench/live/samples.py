"""One request to a live server and its reply: the speculative fields (:class:`SpecMeta`), the requests a row
makes (:func:`requests_of`: one per reply) and :func:`collect`, which sends them.

    >>> [(p, n, r) for p, n, _, r in requests_of({"input_ids": [1, 2, 3, 4, 5, 6, 7], "loss_mask": [0, 1, 1, 0, 0, 1, 1],
    ...                                           "n_prompt_tokens": 1}, 0)]
    [([1], 2, 0), ([1, 2, 3, 4, 5], 2, 1)]

A server verifies each reply of a conversation in its own request (the history before it is that request's
prompt), so a row with several replies (``workbench prepare --all-turns``: several runs of 1 in ``loss_mask``)
makes one request per reply: prompt = every token of the row before the reply (the history as the row has it),
max tokens = the reply's length (its run of 1s; the last reply runs to the row's end, as a one-reply row's
response does). A one-reply row makes the one request it always made: its prompt, its whole response.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError
from workbench.load import inputs
from workbench.stats.counts import reply_starts


@dataclass
class SpecMeta:
    """The speculative fields of one reply, engine-neutral; any of them may be None.

    ``accept_length`` is the best per-request estimate of tokens per verify step: mean(A)+1 from
    the histogram when there is one, else (accepted drafts + verify steps) / verify steps, else
    ``completion_tokens / verify_ct`` (SGLang's own, which also counts the prefill token).
    ``per_step_accepted``/``per_step_drafted``: A and the drafts per verify step, in order (vLLM's
    ``detailed`` per-request metrics).
    """

    variant: str                          # the client's name of the reply's kind; "none" = no speculative field
    completion_tokens: int | None = None
    verify_ct: int | None = None
    accepted_drafts: int | None = None    # drafted tokens accepted (bonus not counted)
    proposed_drafts: int | None = None
    histogram: list[int] | None = None    # H[a] = verify steps that accepted exactly a drafts
    reported_accept_length: float | None = None   # the server's own accept length
    reported_accept_rate: float | None = None
    note: str | None = None               # why a field was set aside (e.g. an inconsistent histogram)
    per_step_accepted: list[int] | None = None
    per_step_drafted: list[int] | None = None
    spec_tokens: int | None = None        # K as the reply states it (vLLM's num_spec_tokens)

    @property
    def has_spec(self) -> bool:
        return self.variant != "none"

    @property
    def accept_length(self) -> float | None:
        if self.histogram and sum(self.histogram) > 0:
            n = sum(self.histogram)
            return sum((a + 1) * h for a, h in enumerate(self.histogram)) / n
        if self.verify_ct:
            if self.accepted_drafts is not None:
                return (self.accepted_drafts + self.verify_ct) / self.verify_ct
            if self.completion_tokens is not None:
                return self.completion_tokens / self.verify_ct
            if self.reported_accept_length is not None:
                return float(self.reported_accept_length)
        return self.reported_accept_length

    @property
    def source_of_accept_length(self) -> str:
        if self.histogram and sum(self.histogram) > 0:
            return "histogram: mean(A)+1"
        if self.verify_ct and self.accepted_drafts is not None:
            return "(accepted drafts + verify steps) / verify steps"
        if self.verify_ct and self.completion_tokens is not None:
            return "completion_tokens / spec_verify_ct (counts the prefill token)"
        return "server's spec_accept_length" if self.reported_accept_length is not None else "none"


def number_field(meta: dict, key: str, where: str, kind=int, prefix: str = "meta_info"):
    """``meta[key]`` as a non-negative int (or float with ``kind=float``), None when absent; a one-line
    WorkbenchError naming ``prefix.key`` otherwise."""
    v = meta.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and float(v) != int(v)) \
            or (isinstance(v, float) and not math.isfinite(v)) or v < 0:
        raise WorkbenchError(f"{where}: {prefix}.{key} = {v!r}: expected a non-negative "
                             f"{'integer' if kind is int else 'number'}")
    return int(v) if kind is int else float(v)


def count_list(meta: dict, key: str, where: str, prefix: str = "meta_info"):
    """``meta[key]`` as a list of non-negative integers, None when absent."""
    v = meta.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise WorkbenchError(f"{where}: {prefix}.{key} = {str(v)[:60]}: expected a list of non-negative integers")
    return list(v)


@dataclass
class LiveSample:
    """One request as the server answered it: data row ``row``, its reply ``reply`` (0-based; 0 for a one-reply
    row)."""

    row: int
    where: str
    source: str
    prompt_ids: list[int]
    output_ids: list[int]
    max_new_tokens: int
    meta: SpecMeta                        # the client's per-request fields, parsed
    seconds: float
    reply: int = 0

    def as_row(self) -> dict:
        """The offline row: prompt + the server's output, loss_mask 1 on the output."""
        ids = list(self.prompt_ids) + list(self.output_ids)
        return {"input_ids": ids, "loss_mask": [0] * len(self.prompt_ids) + [1] * len(self.output_ids),
                "seq_len": len(ids), "n_prompt_tokens": len(self.prompt_ids),
                "n_response_tokens": len(self.output_ids), "source": self.source, "_row": self.row,
                "_where": self.where}


def _ids(row: dict, key: str):
    v = row.get(key)
    return v.tolist() if hasattr(v, "tolist") else v


def prompt_of(row: dict, i: int) -> tuple[list[int], int, str]:
    """A row's leading prompt, its response length (everything after the prompt) and where it is."""
    where = row.get("_where", f"row {row.get('_row', i)}")
    ids = _ids(row, "input_ids")
    if not isinstance(ids, (list, tuple)) or not ids:
        raise WorkbenchError(f"{where}: input_ids must be a non-empty list of token ids")
    n = int(row.get("n_prompt_tokens", 0) or 0)
    resp = row.get("n_response_tokens")
    n_resp = int(resp) if resp is not None else len(ids) - n
    if not 1 <= n < len(ids) or n_resp < 1:
        raise WorkbenchError(f"{where}: n_prompt_tokens={n} of {len(ids)} tokens: expected a prompt of at least 1 "
                             "token and a response (the server is sent the prompt, asked for the response length)")
    return [int(x) for x in ids[:n]], n_resp, where


def requests_of(row: dict, i: int) -> list[tuple[list[int], int, str, int]]:
    """The requests a server answers for ``row`` (module docstring): [(prompt ids, max tokens, where, reply)].
    A row with one reply (or no ``loss_mask``) gives :func:`prompt_of`'s one request."""
    prompt, n_resp, where = prompt_of(row, i)
    mask = _ids(row, "loss_mask")
    starts = reply_starts(mask) if isinstance(mask, (list, tuple)) else []
    if len(starts) < 2:
        return [(prompt, n_resp, where, 0)]
    ids = [int(x) for x in _ids(row, "input_ids")]
    out = []
    for k, s in enumerate(starts):
        end = len(ids) if k == len(starts) - 1 else next(e for e in range(s, len(ids)) if not mask[e])
        out.append((ids[:s], end - s, f"{where} reply {k + 1}/{len(starts)}", k))
    return out


def collect(client, rows: list[dict], ask, *, vocab_size: int | None = None, progress: bool = False,
            path: str = "") -> list[LiveSample]:
    """Every request of every row (:func:`requests_of`: one per reply) sent through
    ``ask(prompt_ids, n_new, row, where) -> (output_ids, SpecMeta)`` (the client's request: n_new = the
    reply's length), ``client.concurrency`` at a time, as :class:`LiveSample` in row and reply order. A
    returned id outside ``vocab_size`` is a WorkbenchError."""
    jobs = []
    for i, row in enumerate(rows):
        for prompt, n_new, where, reply in requests_of(row, i):
            jobs.append((int(row.get("_row", i)), where, str(row.get("source", "") or ""), prompt, n_new, reply))

    def one(job):
        row, where, source, prompt, n_new, reply = job
        t0 = time.perf_counter()
        out, meta = ask(prompt, n_new, row, where)
        if vocab_size is not None:
            bad = [x for x in out if not 0 <= x < vocab_size]
            if bad:
                raise WorkbenchError(f"{client.url}{path} ({where}): returned token id {bad[0]} outside the target "
                                     f"vocab 0..{vocab_size - 1}: the server runs another model or tokenizer")
        return LiveSample(row, where, source, prompt, [int(x) for x in out][:n_new], n_new, meta,
                          time.perf_counter() - t0, reply)

    return client.map(one, jobs, progress=progress, desc="live")


__all__ = ["SpecMeta", "number_field", "count_list", "LiveSample", "prompt_of", "requests_of", "collect"]


def local_inputs(target, draft, data, limit=None, *, device=None, dtype=None, trust_remote_code: bool = False,
                 progress: bool = False):
    """(target, draft, rows): the local inputs of a live comparison, loaded before any request goes to the
    server, so a bad target, draft or data file is reported in one line before the network is tried."""
    target, draft, data = inputs.load(target, draft, data, device=device, dtype=dtype,
                                      trust_remote_code=trust_remote_code, progress=progress)
    rows = inputs.rows(data, limit)
    if not rows:
        raise WorkbenchError("compare: the data has no rows")
    return target, draft, rows
