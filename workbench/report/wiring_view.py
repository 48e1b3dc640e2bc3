"""Notebook 02's part of a run: which target hidden states each engine feeds the draft, and how unlike the taps are.

    >>> import workbench as wb
    >>> # run = wb.diagnose("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl")
    >>> # w = run.wiring_view()
    >>> # w.draft(); w.engines(); w.taps(limit=32).plot(); w.fidelity().plot()

The target's summary, the draft's config in words, what every engine record feeds it (with warnings where that
differs from what it was trained on), per-tap feature statistics, and the engine's own features where a
``workbench vllm capture --fidelity`` file is at hand.
"""

from __future__ import annotations

from workbench.engines import records
from workbench.engines.trainers import trained_wiring_from_config
from workbench.engines.wiring import table as wiring_table
from workbench.live import engine_fidelity
from workbench.model.capture import extract
from workbench.model.draft import describe_draft
from workbench.report import evidence, plots, serving_figures
from workbench.report.export import show as show_one
from workbench.report.sections import absent
from workbench.report.tables import table
from workbench.stats.tap_stats import tap_statistics


TAP_COLUMNS = {"norm_mean": "mean norm", "norm_median": "median norm", "norm_std": "norm spread",
               "mean_cos_to_others": "mean cosine to the other taps"}


class TapView:
    """Per-tap feature statistics over the rows (norms, cosines between taps at the same token)."""

    def __init__(self, stats, highlight: dict):
        self.stats, self.highlight = stats, highlight

    def plot(self):
        return plots.tap_stats_figure(self.stats, highlight=self.highlight)

    def table(self):
        """One row per tap: its feature norm and its mean cosine with the other taps."""
        frame = self.stats.to_frame().reset_index().rename(columns=TAP_COLUMNS)
        return table(frame, {"tap": "embed, L k (output of decoder layer k), final (after the final norm)",
                             "mean norm": "mean Euclidean length of the tap's feature per token",
                             "median norm": "median of the same", "norm spread": "standard deviation of the same",
                             "mean cosine to the other taps": "at the same token, averaged over the other taps"})


class FidelityView:
    """The taps a real vLLM captured against the HF hooks' (or why not measured)."""

    def __init__(self, fid):
        self.fid = fid

    def show(self) -> None:
        if self.fid is None:
            absent("Features from the serving engine", engine_fidelity.HOW)
            return
        print("\n".join(self.fid.lines()))

    def plot(self):
        return serving_figures.engine_fidelity(self.fid) if self.fid is not None else None


class WiringView:
    """What each engine feeds the run's draft (``run.wiring_view()`` makes one)."""

    def __init__(self, run):
        self.run = run
        tgt, drf = run.target, run.draft
        self.info = describe_draft(drf)
        self.fed = wiring_table(tgt.config, drf.raw_config)
        self.trained = trained_wiring_from_config(drf.raw_config, tgt.n_layers)
        self.served = next(r for r in self.fed if r.engine == records.get(run.engine).name)
        self.tap_view = None

    def target(self) -> None:
        print(self.run.target.summary())

    def draft(self):
        """The draft's config and weights in words (a table), its notes printed under it."""
        for note in self.info["notes"]:
            print("note:", note)
        return evidence.draft(self.info)

    def engines(self):
        """What each engine record feeds the draft (a table); the warnings printed above it."""
        for r in self.fed:
            for w in r.warnings:
                print(f"{records.get(r.engine).label}: {w}")
        for note in self.fed.notes:
            print(note)
        return evidence.engines_fed(self.fed, records.get)

    def show(self) -> None:
        """What every engine feeds the draft, its warnings printed above the table."""
        show_one(self.engines())

    def plot(self, limit: int | None = 32):
        """The figure of this part: every tap's feature norms and cosines, trained and served taps marked."""
        return (self.tap_view or self.taps(limit)).plot()

    def taps(self, limit: int | None = 32) -> TapView:
        """Feature statistics of every tap over the first ``limit`` rows, highlighting the trained and served taps."""
        tgt, n = self.run.target, self.run.target.n_layers
        all_taps = ["embed"] + [f"L{k}" for k in range(n)] + ["final"]
        stats = tap_statistics(extract(tgt, self.run.data, all_taps, limit=limit or None, progress=False), all_taps)
        highlight = {f"{records.get(self.run.engine).label} feeds": list(self.served.taps)}
        if self.trained is not None:
            highlight = {"trained on": list(self.trained.taps), **highlight}
        self.tap_view = TapView(stats, highlight)
        return self.tap_view

    def fidelity(self, path: str = "") -> FidelityView:
        return FidelityView(engine_fidelity.find(path, self.run.paths.get("draft", "")))

    def headline(self) -> dict:
        tgt, engine = self.run.target, self.run.engine
        out = {"answer": self.run.answer.to_dict(), "target layers": tgt.n_layers,
               "target hidden size": tgt.hidden_size,
               "draft trained on": self.trained.spec if self.trained is not None else "unknown (not in the draft config)",
               "SGLang feeds" if engine == "sglang" else f"{records.get(engine).label} feeds": self.served.spec,
               "engines that disagree with training": sum(1 for r in self.fed if self.trained is not None
                                                          and r.taps != self.trained.taps)}
        if self.tap_view is not None:
            cos = self.tap_view.stats.cosine_frame()
            layer = [t for t in cos.columns if str(t).startswith("L")]
            out["mean cos(embed, layer taps)"] = float(cos.loc["embed", layer].mean())
            if "L1" in layer:
                out["mean cos(L1, other layer taps)"] = float(cos.loc["L1", [t for t in layer if t != "L1"]].mean())
        return out


__all__ = ["WiringView", "TapView", "FidelityView"]
