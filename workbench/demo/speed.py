"""The demo's tokens/s on the real vLLM it serves: no speculation, each draft as served, and the one-line fix.

    >>> from workbench.demo.speed import measure, SETTINGS
    >>> sorted(SETTINGS)
    ['concurrency', 'max_tokens', 'repeats', 'rows']
    >>> # measure("data/demo", k=4, say=print)        # -> data/demo/vllm-speed.json (a few minutes)

``make demo`` runs this between the diagnosis and the reports (issue 58): one :func:`workbench.live.vllm_speed.sweep`
(the path and the shape-twin calibration of ``workbench vllm speed``) over the demo's ``draft-mismatched`` as
served and its one-line fix (:func:`workbench.engines.ids_fix.drafts`, made beside the sweep), at the answer's K, one request at a time and :data:`SETTINGS` ``concurrency`` in flight. The
sweep is written to ``<demo>/vllm-speed.json``, where every report page finds it beside the drafts; the same key
resumes it (a second ``make demo`` measures nothing again); a sweep of another key (a rebuilt demo, another K)
is kept aside as ``vllm-speed.previous.json`` and measured again. Without a real vLLM here it measures nothing and says
why in one line; the reports then say tokens/s were not measured, and how to measure them.
"""

from __future__ import annotations

from pathlib import Path

from workbench.engines.ids_fix import drafts
from workbench.live import vllm_server, vllm_speed

#: small: prompts x reply tokens x passes, and the requests in flight of the second pass (docs/bench.md says what
#: it adds to ``make demo``)
SETTINGS = {"rows": 4, "max_tokens": 32, "repeats": 3, "concurrency": 4}
DRAFTS = ("draft-mismatched", "fixed:draft-mismatched")   # four servers with the baseline and the shape twin


def measure(demo, k: int, *, say=None, start=None, stop=None) -> Path | None:
    """Measure (or resume) the demo's sweep at K=``k`` into ``<demo>/vllm-speed.json`` and return its path; None,
    after one ``note:`` line, when no real vLLM can run here. ``start``/``stop``: the tests' stand-in servers."""
    say = say or (lambda m: None)
    if start is None:
        ok, why = vllm_server.available()
        if not ok:
            say(f"note: tokens/s not measured: {why}")
            return None
    demo = Path(demo)
    out = demo / vllm_speed.FILE_NAME
    vllm_speed.sweep(demo / "target", drafts(demo, DRAFTS, demo / "vllm-speed-drafts"), demo / "val.jsonl", [int(k)], out=out, in_process=False,
                     say=say, start=start, stop=stop, replace=True, **SETTINGS)
    return out


__all__ = ["measure", "SETTINGS", "DRAFTS"]
