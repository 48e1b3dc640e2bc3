"""Notebook 01's part of a run: the data the answer rests on, each section a method that shows itself.

    >>> import workbench as wb
    >>> # run = wb.diagnose("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl")
    >>> # page = run.data_view(tokenizer="data/demo/tokenizer")
    >>> # page.schema; page.plot_lengths(); page.explore(0); page.show_agreement(); page.plot_agreement()

Everything is computed from the run's target and the rows of ``data`` (the file itself, re-read with the
tokenizer, so bad rows are named by ``file:line``): the schema, the validation, the lengths by source, greedy
agreement, data the target did not write, and conversations through the chat template.
"""

from __future__ import annotations

import os
import re
from functools import cached_property

from workbench import rows as rows_mod
from workbench.core.errors import WorkbenchError
from workbench.load import agreement as agreement_mod, inputs
from workbench.report import data_page, plots, widgets
from workbench.report.export import show
from workbench.report.tables import agreement_table, table


LENGTH_COLUMNS = {"loss_tokens": "tokens in the loss", "prompt_p50": "prompt median", "prompt_p90": "prompt 90th pct",
                  "prompt_max": "prompt longest", "response_p50": "response median",
                  "response_p90": "response 90th pct", "response_max": "response longest", "seq_p50": "row median",
                  "seq_max": "row longest"}
LENGTH_KEY = {"source": "the rows' source ((all): every row)", "rows": "valid rows", "tokens": "tokens in all",
              "loss_tokens": "response tokens in the loss (loss_mask 1)", "prompt_p50": "median prompt length (tokens)",
              "prompt_p90": "90th percentile of the prompt lengths", "prompt_max": "the longest prompt",
              "response_p50": "median response length (tokens)", "response_p90": "90th percentile of the response lengths",
              "response_max": "the longest response", "seq_p50": "median row length (prompt + response)",
              "seq_max": "the longest row"}


def readable(example: str) -> str:
    """A short example value as a reader reads it: a dict as ``key: value; ...``, no Python quotes.

        >>> readable("{'by': 'target', 'temperature': 0.0}")
        'by: target; temperature: 0.0'
    """
    s = str(example)
    if s.startswith("{"):
        s = re.sub(r"'([^']*)'", r"\1", s.strip("{}")).replace(", ", "; ")
    return s


class DataView:
    """The rows of ``data`` seen through the run's target (``run.data_view(...)`` makes one)."""

    def __init__(self, run, data, tokenizer, demo: str = ""):
        if not data:
            raise WorkbenchError("data_view: the run's data was given as loaded rows, not a file: pass data= (the "
                                 "file to inspect, e.g. data/demo/val.jsonl)")
        self.run, self.data, self.tokenizer = run, str(data), tokenizer
        self.demo_dir = str(inputs.resolve(demo)) if demo else ""
        self.ds = rows_mod.load(self.data, tokenizer=tokenizer, on_error="skip")
        self.inspection = self.ds.inspect()
        self.rows = self.ds.rows()
        self.regenerated = self.chat_cmp = self.agree_chat = None
        self._foreign = self._chat = ""

    def show(self) -> None:
        print(f"{self.data}: {len(self.ds)} rows")

    @property
    def schema(self):
        """Every key of the raw rows, its type(s), how many rows carry it, and an example value (a table)."""
        d = self.inspection.description
        frame = d.to_frame().assign(example=lambda f: f["example"].map(readable))
        for note in d.notices:
            print("notice:", note)
        return table(frame, {"key": "a key of the raw rows", "types": "the value types seen under it",
                             "rows": "rows that carry it (not null)", "example": "the first value seen (shortened)"},
                     title=f"{os.path.basename(self.data)}: {d.format}, {d.n_rows} rows")

    @property
    def validation(self):
        return self.inspection.validation

    @property
    def lengths(self):
        """Prompt and response lengths by source (a table)."""
        frame = self.inspection.summary.reset_index().rename(columns=LENGTH_COLUMNS)
        return table(frame, {LENGTH_COLUMNS.get(c, c): LENGTH_KEY[c] for c in ["source", *self.inspection.summary]})

    def plot_lengths(self):
        return plots.lengths_by_source(self.rows)

    def plot(self):
        """The figure of this part: the rows' greedy agreement with the target, per sample and source."""
        return self.plot_agreement()

    def explore(self, sample: int = 0):
        """One decoded row: prompt grey, response tokens in the loss green, the id on hover."""
        return widgets.sample_explorer(self.ds, sample=sample)

    @cached_property
    def agreement(self):
        """Greedy agreement of the rows with the target (one teacher-forced pass)."""
        return agreement_mod.measure(self.run.target, self.ds)

    def show_agreement(self):
        print(self.agreement.headline())
        print(agreement_mod.data_note(self.ds) or "")
        return agreement_table(self.agreement)

    def plot_agreement(self):
        return plots.agreement_by_sample(self.agreement)

    def foreign(self, foreign: str = ""):
        """Data the target did not write (``foreign``, else the demo's ``val-foreign.jsonl``) against ``data``:
        prints the agreement of each, shows its table and returns its figure, or prints why the section is
        skipped."""
        self._foreign, skipped = data_page.foreign_file(foreign, self.demo_dir)
        if skipped:
            print(skipped)
            return None
        lines, tab, fig = data_page.foreign_agreement(self.run.target, self.data, self.agreement, self._foreign)
        print(lines)
        show(tab)
        return fig

    def regenerate(self, limit: int | None = 64, device: str = "cpu"):
        """The foreign file regenerated by the target (its first ``limit`` rows), before against after."""
        if not self._foreign:
            return None
        lines, before, after, tab = data_page.regenerated(self.run.target, self._foreign, self.demo_dir,
                                                          self.run.paths.get("target", ""), limit=limit or None,
                                                          device=device)
        self.regenerated = (before, after)
        print(lines)
        return tab

    def chat(self, chat: str = "", templates: str = ""):
        """Conversations (``chat``, else the demo's ``val-chat.jsonl``) through each of the tokenizer's chat
        templates: prints what was found and returns the comparison table."""
        self._chat, skipped = data_page.foreign_file(chat, self.demo_dir, "val-chat.jsonl", what="conversations",
                                                     param="chat", holds="conversations (docs/data.md lists the layouts)")
        if skipped:
            print(skipped)
            return None
        lines, tab, self.chat_cmp = data_page.chat_templates(self._chat, self.tokenizer, templates)
        print(lines)
        return tab

    @property
    def chat_rows(self):
        return next(iter(self.chat_cmp.datasets.values())) if self.chat_cmp is not None else None

    def explore_chat(self, sample: int = 0):
        return widgets.sample_explorer(self.chat_rows, sample=sample) if self.chat_rows is not None else None

    def chat_agreement(self) -> None:
        if self.chat_rows is not None:
            lines, self.agree_chat = data_page.chat_agreement(self.run.target, self._chat, self.chat_rows)
            print(lines)

    def headline(self) -> dict:
        """The numbers the report index shows for this page."""
        v, rows = self.inspection.validation, self.rows
        out = {"answer": self.run.answer.to_dict(), "data": self.data, "rows": v.n_rows, "valid rows": v.n_valid,
               "invalid rows": v.n_invalid, "sources": sorted({r["source"] for r in rows}),
               "tokens (all rows, prompt and response)": sum(r["seq_len"] for r in rows),
               "median response length (tokens)": sorted(r["n_response_tokens"] for r in rows)[len(rows) // 2] if rows else None,
               "greedy agreement": self.agreement.share}
        if self.regenerated:
            before, after = self.regenerated
            out["greedy agreement · foreign (before → after regenerate)"] = f"{before.share:.3f} → {after.share:.3f}"
        if self.chat_cmp is not None:
            out.update({"chat file": os.path.basename(self._chat),
                        "chat mask methods": {n: d.chat["methods"] for n, d in self.chat_cmp.datasets.items()},
                        "chat templates agree": self.chat_cmp.agree})
            if self.agree_chat is not None:
                out["chat greedy agreement"] = self.agree_chat.share
        return out


__all__ = ["DataView"]
