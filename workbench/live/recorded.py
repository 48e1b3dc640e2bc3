"""A recorded vLLM server: its real replies, answered again without a server (the decision-rule tests, issue 47).

    >>> # rec = load("tests/data/recordings/vllm-smoke-float32.json")
    >>> # cmp = vllm_live.compare(rec["url"], target, draft, rows, client=Replay(rec))

A recording (``bench/record_vllm_replies.py``) is every HTTP exchange a real server had with the client, in order:
``GET /v1/models``, ``GET /version``, ``POST /v1/completions`` (request body and the whole reply) and ``GET /metrics``
(its ``vllm:spec_decode_*`` lines) read before the first request and after each one, the requests sent one at a
time. :class:`Replay` is a :class:`~workbench.live.vllm_live.Client` whose ``request`` answers from it, so
everything above the HTTP layer (parsing the replies, the greedy check, K, the offline decode, the verdict) runs
exactly as against the server:

- ``/v1/completions``: the recorded reply to the identical request body (a body never recorded is a one-line
  error: re-record); with ``strip_per_request`` the reply loses its ``metrics`` object, as a server started
  without ``--per-request-spec-decode-metrics`` sends it;
- ``/metrics``: the counters of a quiet server that has answered exactly the requests replayed so far: the first
  reading, plus each replayed request's own increments (the reading after it minus the one before it), so any
  subset of the recorded requests has its real pooled counters;
- ``/v1/models`` and ``/version``: as recorded.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.live.samples import local_inputs
from workbench.live.vllm_live import Client

_LINE = re.compile(r"^(\S+?(?:\{[^}]*\})?)\s+(\S+)$")
RERECORD = "python -m bench.record_vllm_replies"


def load(path) -> dict:
    """A recording (JSON) with ``url`` added (the server's address in its first exchange, or a placeholder)."""
    rec = json.loads(Path(path).read_text())
    if not isinstance(rec, dict) or not isinstance(rec.get("exchanges"), list):
        raise WorkbenchError(f"{path}: not a vLLM recording (expected an object with 'exchanges'; {RERECORD})")
    rec.setdefault("url", "http://127.0.0.1:8000")
    return rec


def request_rows(target, draft, data, n: int | None = None, *, root=".") -> list[dict]:
    """The rows a recording's requests were made from: the files ``data`` in order (prompts and lengths are what
    matter), the first ``n``, each with ``_row`` = its index (the per-row seed of a sampled request is drawn from
    it, so a subset of these rows asks exactly what was recorded)."""

    rows = []
    for name in [data] if isinstance(data, (str, Path)) else data:
        rows += local_inputs(target, draft, Path(root) / name)[2]
    return [{**r, "_row": i} for i, r in enumerate(rows[:n] if n is not None else rows)]


def counters(text: str) -> dict:
    """{series: value} of Prometheus sample lines (``name{labels} value``)."""
    out = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m and not line.startswith("#"):
            out[m.group(1)] = float(m.group(2))
    return out


def _key(body: dict) -> str:
    return json.dumps({k: v for k, v in body.items() if k != "model"}, sort_keys=True)


@dataclass
class Replay(Client):
    """A :class:`~workbench.live.vllm_live.Client` answering from a recording (module docstring)."""

    recording: dict = field(default_factory=dict, repr=False)
    strip_per_request: bool = False
    served: list = field(default_factory=list, repr=False)        # the bodies answered, in order

    def __post_init__(self):
        super().__post_init__()
        ex = self.recording["exchanges"]
        self._lock = threading.Lock()
        self._replies, self._steps, self._static = {}, {}, {}
        reading, first = None, None
        pending = None
        for e in ex:
            if e["path"] == "/metrics":
                now = counters(e["reply"])
                if first is None:
                    first = now
                if pending is not None and reading is not None:
                    self._steps[pending] = {k: now.get(k, 0.0) - reading.get(k, 0.0) for k in now}
                reading, pending = now, None
            elif e["path"] == "/v1/completions":
                key = _key(e["body"])
                self._replies[key] = e["reply"]
                pending = key
            else:
                self._static[e["path"]] = e["reply"]
        self._now = dict(first or {})

    @classmethod
    def of(cls, recording, *, strip_per_request: bool = False) -> "Replay":
        rec = load(recording) if isinstance(recording, (str, Path)) else recording
        return cls(rec.get("url", "http://127.0.0.1:8000"), recording=rec, strip_per_request=strip_per_request,
                   concurrency=1)

    def request(self, path: str, payload: dict | None = None, *, raw: bool = False):
        with self._lock:
            if path == "/v1/completions" and payload is not None:
                key = _key(payload)
                if key not in self._replies:
                    raise WorkbenchError(f"recorded vLLM: no reply recorded for this request ({key[:120]}...): the "
                                         f"comparison sends other requests than were recorded; re-record ({RERECORD})")
                for k, v in self._steps.get(key, {}).items():
                    self._now[k] = self._now.get(k, 0.0) + v
                self.served.append(payload)
                reply = json.loads(json.dumps(self._replies[key]))
                if self.strip_per_request:
                    reply.pop("metrics", None)
                return reply
            if path == "/metrics":
                return "".join(f"{k} {v}\n" for k, v in self._now.items())
            if path in self._static:
                return self._static[path]
            raise WorkbenchError(f"{self.url}{path}: HTTP 404 Not Found (not in the recording)")


__all__ = ["Replay", "load", "counters", "request_rows"]
