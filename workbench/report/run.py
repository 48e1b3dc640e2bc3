"""The one face (issue 35): three calls from a fresh kernel answer "why is my accept length low?".

    >>> import workbench as wb
    >>> # run = wb.diagnose("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl", engine="sglang")
    >>> # run.show()          # the answer first: what the server feeds, what it costs, the fix, the evidence
    >>> # run.plot()          # the picture behind it

:func:`diagnose` loads the three inputs (paths or loaded objects), ranks every candidate wiring
(:func:`workbench.analysis.diagnose.diagnose`), and, when the cheapest fix is ``workbench rewire`` and training
data is at hand, measures the rewire, so the answer cites a measured fix and never a stale "not measured yet".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workbench.analysis import cached, diagnose as dxm
from workbench.analysis.answer import Answer, Markdown, answer_for
from workbench.engines.candidates import engine_label
from workbench.live import vllm_speed
from workbench.load import inputs
from workbench.report import plots
from workbench.report.sections import absent
from workbench.report.after_fix import AfterFix
from workbench.report.candidates_view import Candidates
from workbench.report.data_view import DataView
from workbench.report.foreign import ForeignDrafts
from workbench.report.wiring_view import WiringView

#: the probes of the run's cost model (notebook 03): every K' up to K+1, and the tree sizes
LANE_PROBES = (1, 2, 4)


@dataclass
class Run:
    """What :func:`diagnose` found: ``diagnosis`` (every wiring, ranked), ``rewired`` (a measured rewire or None),
    ``answer`` (:class:`workbench.analysis.answer.Answer`), and the loaded ``target``, ``draft``, ``data``."""

    target: object = field(repr=False)
    draft: object = field(repr=False)
    data: object = field(repr=False)
    diagnosis: object = field(repr=False)
    rewired: object = field(default=None, repr=False)
    answer: Answer | None = None
    rewire_status: str = ""              # "reused" (from the cache beside the draft), "computed", or ""
    limit: int | None = None             # the rows the diagnosis read (None: all)
    _cost: object = field(default=None, repr=False)

    @property
    def paths(self) -> dict:
        """The paths the run was given (target, draft, data), where they were paths."""
        return self.diagnosis.paths

    def again(self, draft, *, engine: str | None = None, **kw) -> "Run":
        """Diagnose another ``draft`` on the same target and rows (``kw``: :func:`diagnose`'s)."""
        return diagnose(self.target, draft, self.data, engine=engine or self.engine, **kw)

    def cost_model(self, *, repeats: int = 9):
        """The cost model of this target and draft on this machine: measured once (``repeats`` applies to that
        first measurement), cached beside the draft."""
        if self._cost is None:
            K = self.diagnosis.setting.steps
            self._cost, _ = cached.cost_model(self.target, self.draft, self.paths.get("draft"),
                                              verify_probes=tuple(sorted({*range(1, K + 2), 6, 8})),
                                              lane_probes=LANE_PROBES, repeats=repeats)
        return self._cost

    # the parts of the answer's evidence, each showing itself (notebooks 01-03)
    def data_view(self, *, data=None, tokenizer=None, demo: str = "") -> DataView:
        """The rows of ``data`` (default: the run's data file) seen through the target: notebook 01."""
        return DataView(self, data or self.paths.get("data", ""), tokenizer, demo)

    def wiring_view(self) -> WiringView:
        """What each engine feeds the draft, and the taps' features: notebook 02."""
        return WiringView(self)

    def foreign_drafts(self) -> ForeignDrafts:
        """The drafts real trainers made for the same target, beside the draft (``make foreign-drafts``)."""
        return ForeignDrafts(self)

    def candidates(self, wirings: str = "", *, limit: int | None = None, ratio: float = 0.0) -> Candidates:
        """Every candidate wiring (or the ``;``-separated ``wirings``) measured side by side: notebook 03."""
        return Candidates(self, wirings, limit=limit, ratio=ratio)

    def after_fix(self, *, limit: int | None = None, cost_model=None) -> AfterFix:
        """The wiring served once the fix is applied, in the chain and the engine's tree: notebook 03."""
        return AfterFix(self, limit=limit, cost_model=cost_model)

    @property
    def engine(self) -> str:
        return self.diagnosis.engine

    @property
    def fixed(self) -> tuple:
        """(draft, wiring, words): what the server runs once the fix is applied, for the analysis that follows the
        answer. The rewired draft fed the engine's taps when a rewire was measured; the trained taps when the fix
        is new ids (or retraining, which the trained taps stand in for); the engine's taps when nothing needs fixing."""
        dx, E = self.diagnosis, engine_label(self.engine)
        e, t = dx.engine_wiring, dx.trained_wiring
        if dx.fix in ("none", "undecided") or t is None:
            return self.draft, e or dx.best, f"what {E} feeds, `{e or dx.best}`"
        if self.rewired is not None and self.rewired.draft is not None and dx.fix == "rewire":
            return self.rewired.draft, e, f"the rewired draft fed what {E} feeds, `{e}`"
        return self.draft, t, f"the taps the draft was trained on, `{t}` (what the fix restores)"

    def show(self):
        """Display the answer (markdown in a notebook; its text in a terminal)."""
        try:
            from IPython.display import Markdown, display
        except ImportError:        # pragma: no cover - IPython ships with the notebooks' extra
            print(self.answer.text())
            return
        display(Markdown(self.answer.markdown()))

    def plot(self):
        """The figure behind the answer: before / after / reference of the measured rewire, else the engine's and
        the trained taps, every position against the decode path."""
        if self.rewired is not None:
            return plots.rewire_bars(self.rewired)
        dx = self.diagnosis
        shown = {s: dx.results[s] for s in dict.fromkeys((dx.engine_wiring, dx.trained_wiring, dx.best))
                 if s in dx.results}
        return plots.decode_path_comparison(shown)

    def show_rewire(self):
        """The measured rewire (its summary, then before / after / reference), or, when the fix is not a rewire,
        the section left out with the fix it names instead."""
        if self.rewired is None:
            absent("The fix, measured: rewire", f"The fix here is not a rewire: {self.answer.fix.replace('`', '')} "
                                                f"`workbench rewire` measures one where an engine cannot be given "
                                                f"the trained taps.")
            return None
        print(self.rewired.summary())
        return plots.rewire_bars(self.rewired)

    def verdict(self) -> Markdown:
        """The diagnosis' verdict in full (markdown): the ranking's top, each wiring's interval, the fix."""
        return Markdown(self.diagnosis.narrative())

    def summary(self) -> str:
        return self.answer.text() + "\n\n" + self.diagnosis.summary()

    def __str__(self) -> str:
        return self.summary()

    def _repr_markdown_(self) -> str:
        return self.answer.markdown()


def _training_data(train_data, draft) -> str | None:
    """The draft's training data: as given, else ``train.jsonl`` beside the draft's folder (the demo's layout)."""
    if train_data:
        return str(train_data)
    if inputs.is_path(draft):
        beside = Path(inputs.resolve(draft)).parent / "train.jsonl"
        return str(beside) if beside.is_file() else None
    return None


def diagnose(target, draft=None, data=None, *, engine: str = "sglang", K: int = 4, limit: int | None = None,
             train_data=None, rewire: bool = True, rewire_limit: int | None = 64, device: str = "cpu",
             evidence: str = "", speed="", progress: bool = False) -> Run:
    """Diagnose ``draft`` on ``target`` over ``data`` for ``engine``; rewire when that is the fix and the training
    data is there (``train_data``, else ``train.jsonl`` beside the draft); return a :class:`Run`. The rewire is
    computed once per (target, draft, data, engine, settings) and kept beside the draft
    (:mod:`workbench.analysis.cached`): the next page or command that asks reuses it.
    ``evidence``: where the page that shows the answer keeps its evidence (the answer's last line). ``speed``: a
    ``workbench vllm speed`` sweep (a path; empty: ``vllm-speed.json`` beside the draft's folder, if any) whose
    measured tokens/s of this draft the answer quotes, when ``engine`` is a vLLM."""
    tgt, drf, ds = inputs.load(target, draft, data, device=device, progress=progress)
    dx = dxm.diagnose(tgt, drf, ds, engine=engine, K=K, limit=limit, progress=progress)
    dx.paths = {k: str(inputs.resolve(v)) for k, v in (("target", target), ("draft", draft), ("data", data))
                if inputs.is_path(v)}       # as found (relative: from here, else the project root), for every part
    rw, status, train = None, "", _training_data(train_data, draft)
    if rewire and dx.fix == "rewire" and train:
        rw, status = cached.rewire(tgt, drf, dx.paths.get("draft"), train, ds, engine=engine, K=K,
                                   limit=rewire_limit, eval_limit=limit, progress=progress)
    dx.advise(rw)
    return Run(tgt, drf, ds, dx, rw, answer_for(dx, rw, evidence=evidence, speed=_speed(speed, dx, K)), status, limit)


def _speed(speed, dx, K: int) -> str:
    """The measured tokens/s of the diagnosed draft at K, in words, from a sweep of the same target on a vLLM."""
    draft = dx.paths.get("draft")
    if not str(dx.engine).startswith("vllm") or not draft:
        return ""
    return vllm_speed.quote(vllm_speed.find(str(speed or ""), draft), draft, dx.paths.get("target", ""), K)


__all__ = ["Run", "diagnose"]
