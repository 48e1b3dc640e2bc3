"""Notebook 03's middle: every candidate wiring measured side by side with one cost model, each figure a method.

    >>> import workbench as wb
    >>> # run = wb.diagnose("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl")
    >>> # c = run.candidates()
    >>> # c.show(); c.plot_curves(); c.ranking(); c.plot_speed(); c.explore(0)

The candidates are the engine presets, the trained wiring and the given ones
(:func:`workbench.engines.candidates.serving_candidates`); the cost model is the run's
(:meth:`workbench.report.run.Run.cost_model`: measured once per target and draft, cached beside the draft). The
wirings the diagnosis already measured in full (same rows, same chain) are taken from it, not simulated again.
"""

from __future__ import annotations

import copy
import json
import os

import pandas as pd

from workbench.analysis.answer import interval_text
from workbench.engines import records as engine_records
from workbench.engines.candidates import SERVING, engine_label, serving_candidates, where_ids_go
from workbench.engines.trainers import trained_wiring_from_config
from workbench.load import inputs
from workbench.report import evidence, plots, widgets
from workbench.report.context_figure import position_figure
from workbench.report.sections import absent
from workbench.report.tables import agreement_table, table
from workbench.simulate.acceptance import attach_cost_model, simulate
from workbench.stats import cost
from workbench.stats.context_length import PositionTable


def reusable(run, specs, limit) -> dict:
    """The diagnosis' full-curve results of ``specs`` that are exactly what :class:`Candidates` would simulate (the
    same rows, limit and chain at greedy), each a copy: the candidates attach their own cost model to it."""
    dx = run.diagnosis
    if limit != run.limit or dx.setting.shape != "chain" or not dx.setting.greedy:
        return {}
    return {s: copy.copy(dx.results[s]) for s in specs if s in dx.results
            and dx.results[s].setting.steps == dx.setting.steps}


class Candidates:
    """Every candidate wiring's acceptance on the run's rows (``run.candidates(...)`` makes one)."""

    def __init__(self, run, wirings: str = "", *, limit: int | None = None, ratio: float = 0.0):
        tgt, drf = run.target, run.draft
        self.run, self.limit, self.K = run, limit, run.diagnosis.setting.steps
        given = [w.strip() for w in wirings.split(";") if w.strip()]
        self.found = serving_candidates(tgt.config, drf.raw_config,
                                        trained_wiring_from_config(drf.raw_config, tgt.n_layers), given)
        self.specs = [c.spec for c in self.found if not given or "given" in c.engines]
        self.cost_model = (cost.CostModel.fixed(ratio, source="the ratio parameter") if ratio
                           else run.cost_model())
        known = reusable(run, self.specs, limit)
        rest = [s for s in self.specs if s not in known]
        fresh = simulate(tgt, drf, run.data, rest, K=self.K, limit=limit, cost_model=self.cost_model,
                         engine=run.engine, progress=False) if rest else {}
        attach_cost_model(known.values(), self.cost_model)
        self.results = {s: known[s] if s in known else fresh[s] for s in self.specs}
        self.order = None

    @property
    def first(self):
        return next(iter(self.results.values()))

    def show(self):
        """The setting once, then one row per candidate: who feeds it, its accept length on both estimators with
        their 95% intervals, α_k per draft step and step-1 top-1 / top-5 (a table, never a list in prose)."""
        first = self.first
        print(f"setting: {first.setting.describe()}; {first.n_samples} samples, {first.n_chains} chains per wiring")
        K = self.K
        fed = {c.spec: ", ".join(engine_label(e) if e in engine_records.RECORDS else e for e in c.engines)
               for c in self.found}
        rows = []
        for spec, r in self.results.items():
            s, iv = r.statistics(), r.intervals()
            lo, hi = iv["decode_path_accept_length"]
            elo, ehi = iv["accept_length"]
            row = {"wiring": spec, "fed by": fed.get(spec, "given"),
                   "decode path": f"{r.decode_path['accept_length']:.2f} [{lo:.2f}–{hi:.2f}]",
                   "every position": f"{s['accept_length']:.2f} [{elo:.2f}–{ehi:.2f}]"}
            row.update({f"α{k}": s["conditional"][k - 1] for k in range(1, K + 1)})
            row.update({"top-1": s["top1"], "top-5": s["top5"]})
            rows.append(row)
        key = {"wiring": "the taps fed to the draft (L-numbering: 0-based; embed: the embedding output)",
               "fed by": "the engines (records) that feed it as the draft is configured; trained: the taps it was "
                         "trained on",
               "decode path": f"accept length on the decode path (chain K={K}, greedy, bonus counted) [95% interval]: "
                              f"what a server reports",
               "every position": "the same over every counted chain (teacher-forced) [95% interval]: what the "
                                 "diagnosis ranks by",
               **{f"α{k}": f"conditional acceptance of draft step {k}: P(A ≥ {k} | A ≥ {k - 1})" for k in range(1, K + 1)},
               "top-1": "share of chains whose first draft token is the target's greedy token",
               "top-5": "the same within the draft's top 5"}
        return table(pd.DataFrame(rows), key)

    def show_agreement(self):
        """Greedy agreement, counted on the same target pass as the results (the same for every wiring)."""
        print(self.first.agreement.headline(self.first.setting))
        print(self.first.data_note() or "")
        return agreement_table(self.first.agreement)

    def foreign_data(self):
        """The same wirings on the demo's ``val-foreign.jsonl`` (text the target did not write) against the rows
        here (its regenerated twin): a table, or the reason the section is skipped."""
        target = self.run.paths.get("target", "")
        foreign_file = os.path.join(os.path.dirname(target), "val-foreign.jsonl")
        if os.path.basename(target) != "target" or not os.path.exists(foreign_file):
            absent("Data the target did not write: how the estimates move",
                   "no val-foreign.jsonl beside the target. `make demo` builds the demo with it; for your own data, "
                   "compare it with its `workbench regenerate` output (docs/regenerate.md).")
            return None
        tgt, drf = self.run.target, self.run.draft
        other = simulate(tgt, drf, inputs.dataset(foreign_file, tgt), self.specs, K=self.K, limit=self.limit,
                         progress=False, cost_model=self.cost_model)
        print("val-foreign.jsonl:", next(iter(other.values())).agreement.headline().removeprefix("data: "))
        return evidence.foreign(other, self.results)

    def plot_long_context(self):
        """Accept length by position out to 8k tokens, from ``long-context.json`` beside the target (the real demo's,
        written by ``python -m bench.long_context``), or the reason the section is skipped."""
        target = self.run.paths.get("target", "")
        path = os.path.join(os.path.dirname(target), "long-context.json")
        if os.path.basename(target) != "target" or not os.path.exists(path):
            absent("Acceptance at long context", "no long-context.json beside the target: the real demo's is written "
                   "by `python -m bench.long_context --demo data/demo-real` (about 20 minutes; docs/load.md).")
            return None
        state = json.loads(open(path, encoding="utf-8").read())
        tables = {label: PositionTable.from_dict(run["by_position"]) for label, run in state["runs"].items()}
        print(f"{state['rows']} rows, the longest {state['longest_row']} tokens; the drafts' longest training row: "
              f"{state['longest_training_row']} tokens; K={state['k']}, bins of {state['width']} tokens")
        return position_figure(tables, max_positions=None)

    def plot_curves(self):
        return plots.acceptance_curves(self.results)

    def plot(self):
        """The figure of this part: per-position acceptance of every candidate."""
        return self.plot_curves()

    def plot_histograms(self):
        return plots.accept_length_histogram(self.results)

    def plot_decode_path(self):
        return plots.decode_path_comparison(self.results)

    def plot_by_source(self):
        return plots.by_source(self.results)

    def ranking(self):
        """The wirings best first (ties within the 95% intervals, the trained wiring first among them): a table."""
        self.order, tab = evidence.ranking(self.results, self.run.diagnosis.trained_wiring)
        return tab

    def show_speed(self) -> None:
        print(self.cost_model.summary())
        for spec, r in self.results.items():
            print(f"{spec}: {cost.projection(r, self.cost_model, n_boot=200)['text']}")

    def plot_speed(self):
        return plots.speedup_projection(self.results, cost_model=self.cost_model)

    def explore(self, sample: int = 0):
        """One evaluated row, each token coloured by how many of the K draft tokens after it are accepted."""
        if self.order is None:
            self.ranking()
        ds, chains = self.run.data, self.results[self.specs[0]].chains
        evaluated = [r for r in ds.rows(self.limit) if (chains["sample"] == r["_row"]).any()]
        return widgets.acceptance_explorer(self.results, evaluated, self.run.target.tokenizer, wiring=self.order[0],
                                           sample=min(sample, len(evaluated) - 1))

    def other_engines(self) -> list[dict]:
        """One row per serving engine other than the run's: the taps it feeds this draft, their accept length on
        the decode path with its 95% interval (the same results as every figure here), and its fix, each from the
        engine's record (never checked live here: notebook 04 checks the run's engine)."""
        trained = self.run.diagnosis.trained_wiring
        tcfg = self.run.target.config
        rows = []
        for name in SERVING:
            if name == self.run.engine:
                continue
            spec = next((c.spec for c in self.found if name in c.engines), None)
            r = self.results.get(spec) if spec else None
            if r is None:
                rows.append({"engine": engine_label(name), "taps it feeds": spec or "cannot serve it as configured",
                             "accept length": "not measured", "the fix": "", "source": "from the record"})
                continue
            if not trained or spec == trained:
                fix = "none needed: it feeds the trained taps"
            else:
                f = engine_records.ids_for_taps(name, trained.split(","), tcfg)
                fix = (f"one line: {where_ids_go(name).split(' (')[0]} = {f.ids}" if f.feasible else
                       f"rewire or retrain, not measured here (`workbench diagnose --engine {name}` measures it): "
                       f"{f.reason}")
            rows.append({"engine": engine_label(name), "taps it feeds": spec,
                         "accept length": interval_text(r),
                         "the fix": fix, "source": "from the record"})
        return rows

    def show_other_engines(self):
        """:meth:`other_engines` as a table with its key."""
        K = self.run.diagnosis.setting.steps
        return table(pd.DataFrame(self.other_engines()), {
            "engine": "the engine and the releases its record stands for",
            "taps it feeds": "what it feeds this draft as configured (L-numbering: 0-based; embed: the embedding output)",
            "accept length": f"tokens per verify step on the decode path, chain K={K}, greedy, with its 95% interval",
            "the fix": "the cheapest fix for that engine, from its record",
            "source": "from the engine's record (offline); only this page's engine is checked live, on page 04"})

    def headline(self) -> dict:
        return ({f"{spec} · {r.setting.accept_label('decode-path')}": r.decode_path["accept_length"]
                 for spec, r in self.results.items()} | {"samples": self.first.n_samples}
                | {"if you serve with": self.other_engines()})


__all__ = ["Candidates"]
