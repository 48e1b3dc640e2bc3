"""Record a real vLLM's replies for the decision-rule tests (issue 47): ``tests/data/recordings/vllm-smoke-*.json``.

    $ .venv/bin/python -m bench.record_vllm_replies                    # both dtypes (about 2 x 2 minutes, 2 cores)
    $ .venv/bin/python -m bench.record_vllm_replies --dtype bfloat16 --out /tmp/rec

Needs the real vLLM of ``make vllm`` (``.venv-vllm``). For each ``--dtype`` one server (``--enforce-eager``,
``--per-request-spec-decode-metrics detailed``) serves the smoke demo as shipped (``tests/data/smoke-demo``):
target ``target``, draft ``draft-mismatched`` (nested ``eagle_config`` ids [1, 3, 4], no top-level key: vLLM
0.32's V1 runner feeds ``L0,L2,L3``), ``num_speculative_tokens`` 4. The requests are exactly those
``workbench vllm compare`` sends for ``val.jsonl`` (the same :class:`~workbench.live.vllm_live.Client`, the same
bodies), one at a time, with ``/metrics`` read before the first and after each one:

1. ``GET /v1/models``, ``GET /version``;
2. every row at temperature 0 (the comparison's requests): the first ``--rows`` (16) of ``val.jsonl`` then
   ``train.jsonl``;
3. every row at temperature 0.01, seed per row (the greedy probe ``compare`` sends first).

The file holds every exchange in order (method, path, request body, the reply as the server sent it; of
``/metrics`` only its ``vllm:spec_decode_*`` sample lines, the counters the comparison reads) and what was
served (dtype, K, the draft, the wiring fed). :class:`workbench.live.recorded.Replay` answers the same requests
from it without a server, and ``tests/test_decision_rule_recorded.py`` replays subsets through
``vllm_live.compare``. Served one at a time, so each request's counter deltas are its own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = Path("tests/data/smoke-demo")
DRAFT = "draft-mismatched"
SERVED = "L0,L2,L3"          # vLLM 0.32 (V1 runner) reads draft-mismatched's nested ids [1, 3, 4] as L0,L2,L3
K = 4
PROBE_TEMPERATURE = 0.01


def spec_lines(text: str) -> str:
    """The ``vllm:spec_decode_*`` sample lines of a ``/metrics`` text (no comments, no ``_created`` gauges)."""
    keep = [ln for ln in text.splitlines() if ln.startswith("vllm:spec_decode") and "_created" not in ln.split(" ")[0]]
    return "\n".join(keep) + "\n"


def recorder(exchanges: list):
    """A :class:`~workbench.live.vllm_live.Client` class that appends every exchange to ``exchanges`` (the recording
    format of :mod:`workbench.live.recorded`: method, path, body, the reply; of ``/metrics`` its spec-decode lines)."""
    from workbench.live.vllm_live import Client

    class Recorder(Client):
        def request(self, path, payload=None, *, raw=False):
            reply = super().request(path, payload, raw=raw)
            exchanges.append({"method": "GET" if payload is None else "POST", "path": path,
                              **({} if payload is None else {"body": payload}),
                              "reply": spec_lines(reply) if path == "/metrics" else reply})
            return reply

    return Recorder


def record(dtype: str, out: Path, *, demo: Path = DEMO, n_rows: int = 16, say=print) -> Path:
    from workbench.core.sampling import Sampling
    from workbench.live.samples import requests_of
    from workbench.live.vllm_live import request_params
    from workbench.live.recorded import request_rows
    from workbench.live.samples import local_inputs
    from workbench.live.vllm_server import running_server

    exchanges: list[dict] = []
    Recorder = recorder(exchanges)

    target, draft, _ = local_inputs(ROOT / demo / "target", ROOT / demo / DRAFT, ROOT / demo / "val.jsonl")
    rows = request_rows(target, draft, [demo / "val.jsonl", demo / "train.jsonl"], n_rows, root=ROOT)
    with tempfile.TemporaryDirectory() as tmp, \
            running_server(ROOT / demo / "target", ROOT / demo / DRAFT, k=K, dtype=dtype, enforce_eager=True,
                           log=Path(tmp) / "vllm.log", timeout=600) as srv:
        say(f"{dtype}: server ready at {srv.url} after {srv.startup_s} s (fix applied: {srv.fix_applied})")
        client = Recorder(srv.url, timeout=300, concurrency=1)
        client.models()
        client.version()
        for sampling in (Sampling(), Sampling(temperature=PROBE_TEMPERATURE, seed=0)):
            client.request("/metrics", raw=True)
            for i, row in enumerate(rows):
                for prompt, n_new, where, _ in requests_of(row, i):
                    client.complete(prompt, n_new, sampling=request_params(sampling, row["_row"]),
                                    where=where)
                    client.request("/metrics", raw=True)
        command = [str(x).replace(f"{ROOT}/", "") for x in srv.command]
        command[0] = Path(command[0]).name
        started = {"startup_s": srv.startup_s, "fix_applied": srv.fix_applied}
    version = next((e["reply"].get("version") for e in exchanges if e["path"] == "/version"
                    and isinstance(e["reply"], dict)), None)
    doc = {
        "what": ("Real vLLM replies, as the server sent them, for the requests `workbench vllm compare` sends "
                 "(re-record: python -m bench.record_vllm_replies; replay: workbench.live.recorded.Replay; "
                 "tests/test_decision_rule_recorded.py)"),
        "recorded": {"date": datetime.date.today().isoformat(), "vllm": version, "machine": platform.machine(),
                     "cpu": _cpu(), "server_command": command, **started},
        "served": {"engine": "vllm", "target": str(demo / "target"), "draft": str(demo / DRAFT),
                   "draft_ids": "nested eagle_config.eagle_aux_hidden_state_layer_ids [1, 3, 4], no top-level key",
                   "wiring_fed": SERVED, "dtype": dtype, "num_speculative_tokens": K, "method": "eagle3",
                   "per_request_spec_decode_metrics": "detailed", "enforce_eager": True},
        "data": [str(demo / "val.jsonl"), str(demo / "train.jsonl")], "rows": n_rows,
        "requests": "the first `rows` rows of val.jsonl then train.jsonl (row i: `_row` i): every row at temperature "
                    "0, then every row at temperature 0.01 (seed per row), one at a time, /metrics read before the "
                    "first and after each",
        "exchanges": exchanges,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"vllm-smoke-{dtype}.json"
    path.write_text(dump(doc))
    return path


def dump(doc: dict) -> str:
    """The recording as JSON text, one exchange a line (compact, and a re-recording diffs line by line)."""
    head = {k: v for k, v in doc.items() if k != "exchanges"}
    text = json.dumps(head, indent=1)[:-2]
    lines = ",\n".join(" " + json.dumps(e, separators=(",", ":")) for e in doc["exchanges"])
    return f'{text},\n "exchanges": [\n{lines}\n ]\n}}\n'


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", action="append", choices=["float32", "bfloat16"],
                    help="the server's --dtype (repeatable; default: float32 and bfloat16)")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "recordings"))
    ap.add_argument("--rows", type=int, default=None,
                    help="requests per server (val.jsonl, then train.jsonl; default 16)")
    args = ap.parse_args(argv)
    for dtype in args.dtype or ["float32", "bfloat16"]:
        path = record(dtype, Path(args.out), n_rows=args.rows or 16)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
