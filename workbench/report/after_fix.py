"""Notebook 03's end: the wiring the server runs once the fix is applied, in the engine's own drafting shape.

    >>> import workbench as wb
    >>> # run = wb.diagnose("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl")
    >>> # fixed = run.after_fix()
    >>> # fixed.show(); fixed.plot(); fixed.sweep().plot(); fixed.temperature().plot()

SGLang drafts a tree when ``--speculative-eagle-topk`` > 1, and picks one by default for Llama targets (steps 5,
topk 4, 8 draft tokens): the chain and the engine's tree are measured from the same samples, then every drafting
shape (:func:`workbench.analysis.tune.sweep`), then the tree at temperature > 0 (the demo's sampled files). An
engine whose record drafts chains only (vLLM: ``trees`` false) is analysed in the one shape it serves, the chain at
the run's K, and its sweep is over K alone.
"""

from __future__ import annotations

from workbench.analysis.tune import best_by_accept_length, sweep as sweep_shapes
from workbench.core.errors import WorkbenchError
from workbench.core.setting import Setting
from workbench.engines.flags import target_architecture
from workbench.engines.records import auto_flags, get as engine_record
from workbench.load.inputs import same_path
from workbench.report import plots, temperature
from workbench.report.sections import absent
from workbench.simulate.acceptance import simulate

#: the tree analysed when the engine's record names no default tree for the target (SGLang's Llama default)
TREE = (5, 4, 8)


class SweepView:
    """Every (steps, eagle_topk, num_draft_tokens) shape for the fixed wiring, ranked by accept length."""

    def __init__(self, sw):
        self.result = sw

    def show(self, max_rows: int = 8) -> None:
        print(self.result.summary(max_rows=max_rows, data=False))      # the page's own section shows it

    def plot(self):
        return plots.tree_sweep(self.result)

    def best(self, n: int = 3) -> list:
        return best_by_accept_length(self.result, n)


class TemperatureView:
    """The tree at T = 0, 0.3, 0.7, 1.0 on the demo's sampled files (or why it is skipped)."""

    def __init__(self, result, skipped: str | None):
        self.result, self.skipped = result, skipped

    def show(self):
        """The table (one row per temperature), or the section left out when the sampled files are absent."""
        if self.result is None:
            absent("Acceptance at temperature > 0, after the fix", f"{self.skipped}.")
            return None
        return self.result.table()

    def plot(self):
        return self.result.plot() if self.result is not None else None

    def per_depth_plot(self):
        return self.result.per_depth_plot() if self.result is not None else None


class AfterFix:
    """The fixed wiring in the chain and in the engine's tree (``run.after_fix(...)`` makes one)."""

    def __init__(self, run, *, limit: int | None = None, cost_model=None):
        self.run, self.limit = run, limit
        self.draft, self.wiring, self.words = run.fixed
        self.cost_model = cost_model if cost_model is not None else run.cost_model()
        engine = run.engine
        self.arch = target_architecture(run.target)
        try:
            self.auto = auto_flags(engine, self.arch)
        except WorkbenchError:                  # an engine without a record: no default drafting shape
            self.auto = None
        self.trees = engine_record(engine).trees
        K = run.diagnosis.setting.steps
        shape = (K, 1, K + 1) if not self.trees else self.auto if self.auto and self.auto[1] > 1 else TREE
        self.tree_setting = Setting(steps=shape[0], eagle_topk=shape[1], num_draft_tokens=shape[2], engine=engine)
        tgt, ds = run.target, run.data
        self.chain = simulate(tgt, self.draft, ds, [self.wiring], K=shape[0], limit=limit, progress=False,
                              cost_model=self.cost_model, engine=engine)[self.wiring]
        # the shape the engine serves: its tree, or (chains only) the chain itself
        self.tree = self.chain if not self.trees else simulate(
            tgt, self.draft, ds, [self.wiring], setting=self.tree_setting, limit=limit, progress=False,
            cost_model=self.cost_model, engine=engine)[self.wiring]
        self.sweep_view = self.temperature_view = None

    @property
    def shape(self) -> str:
        """The drafting shape the engine serves, as every number after the fix names it: ``chain K=4`` or
        ``tree 5×4 N=8``."""
        return self.tree.setting.label

    def show(self) -> None:
        """What is analysed, in which shape, and its accept length on the decode path (one line each)."""
        label = engine_record(self.run.engine).label
        print(f"analysed from here on: {self.words}".replace("`", ""))
        if not self.trees:
            print(f"{label} drafts chains only: the shape it serves is the chain at K={self.chain.setting.steps} "
                  f"(num_speculative_tokens {self.chain.setting.steps})")
        else:
            default = (f"its default drafting shape for {self.arch}: steps {self.auto[0]}, topk {self.auto[1]}, "
                       f"{self.auto[2]} draft tokens" if self.auto else "no default drafting shape on record")
            print(f"{label}: {default}; simulated {self.tree_setting.label}")
        shown = (self.chain,) if not self.trees else (self.chain, self.tree)
        for res in shown:
            lo, hi = res.intervals()["decode_path_accept_length"]
            print(f"{res.setting.label}: accept length {res.decode_path['accept_length']:.2f} [95% {lo:.2f}–{hi:.2f}] "
                  f"on the decode path, {res.decode_path['n_verify_steps']} verify steps")

    def plot(self):
        if not self.trees:
            return plots.acceptance_curves({f"{self.wiring} · {self.chain.setting.label}": self.chain})
        return plots.acceptance_curves({f"{self.wiring} · {self.chain.setting.label}": self.chain,
                                        f"{self.wiring} · {self.tree_setting.label}": self.tree})

    def sweep(self, *, steps=range(1, 7), topks=(1, 2, 4), max_tokens: int = 32) -> SweepView:
        """Every drafting shape from one target pass and one draft run per topk (a reduced grid by default); over K
        alone (topk 1) for an engine that drafts chains only."""
        if not self.trees:
            topks = (1,)
        self.sweep_view = SweepView(sweep_shapes(self.run.target, self.draft, self.run.data, self.wiring,
                                                 steps=steps, topks=topks, max_tokens=max_tokens, limit=self.limit,
                                                 progress=False))
        return self.sweep_view

    def temperature(self) -> TemperatureView:
        files, skip = temperature.demo_files(self.run.paths.get("target", ""), temperature.TEMPERATURES)
        same = not skip and same_path(files.get(0.0, ""), self.run.paths.get("data", ""))
        res = None if skip else temperature.by_temperature(self.run.target, self.draft, files, self.wiring,
                                                           self.tree_setting, limit=self.limit,
                                                           known={0.0: self.tree} if same else None)
        self.temperature_view = TemperatureView(res, skip)
        return self.temperature_view

    def headline(self) -> dict:
        out = {"after the fix, analysed": self.words.replace("`", ""),
               f"after the fix · {self.wiring} · {self.tree.setting.accept_label('decode-path')}":
                   self.tree.decode_path["accept_length"]}
        if self.sweep_view is not None:
            sw = self.sweep_view.result
            out[f"recommended {engine_record(self.run.engine).label.split(' (')[0]} flags"] = sw.recommended_flags or (
                "not recommended here: flags need a cost model measured on the serving GPU "
                "(workbench tune --measure-cost-model)")
            out["best shapes after the fix, by accept length"] = "; ".join(
                f"steps {a}, topk {b}, {c} draft tokens" for a, b, c in self.sweep_view.best(3))
        return out


__all__ = ["AfterFix", "SweepView", "TemperatureView", "TREE"]
