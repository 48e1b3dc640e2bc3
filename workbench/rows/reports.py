"""What a pass over the rows found: the description, the validation report and the per-source inspection.

    >>> from workbench import rows
    >>> rep = rows.load([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}]).validate()
    >>> rep.ok, type(rep).__name__
    (True, 'ValidationReport')

``Dataset.describe()``, ``Dataset.validate()`` and ``Dataset.inspect()`` build these; each renders as text
(``summary()``) and, in a notebook, as HTML with every token string escaped.
"""

from __future__ import annotations

import html
from array import array
from dataclasses import dataclass
from typing import Any

from workbench.core.render import Rendered
from workbench.core.setting import SCHEMA_VERSION
from workbench.rows.schema import Problem


@dataclass
class KeyInfo:
    key: str
    types: str          # e.g. "list[int]", "int|str"
    rows: int           # rows where the key is present and not null
    example: str        # short repr of the first value seen



@dataclass
class Description(Rendered):
    """Every key of the raw rows: type, how many rows have it, an example. Notebooks display it as a table."""
    name: str
    format: str
    n_rows: int
    keys: list[KeyInfo]
    notices: list[str]
    n_unparseable: int = 0

    def to_frame(self):
        import pandas as pd
        return pd.DataFrame([vars(k) for k in self.keys], columns=["key", "types", "rows", "example"])

    def to_dict(self) -> dict:
        return {"name": self.name, "format": self.format, "n_rows": self.n_rows,
                "keys": [vars(k) for k in self.keys], "notices": list(self.notices),
                "n_unparseable": self.n_unparseable}

    def summary(self) -> str:
        lines = [f"{self.name}: {self.format}, {self.n_rows} rows"
                 + (f" ({self.n_unparseable} not parseable as JSON objects)" if self.n_unparseable else "")]
        if self.keys:
            lines += ["  " + s for s in self.to_frame().to_string(index=False).splitlines()]
        lines += [f"  notice: {n}" for n in self.notices]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = html.escape(f"{self.name}: {self.format}, {self.n_rows} rows")
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notices)
        return f"<div><b>{head}</b>{self.to_frame().to_html(index=False)}" + (f"<ul>{notes}</ul>" if notes else "") + "</div>"



@dataclass
class ValidationReport(Rendered):
    """Result of :meth:`Dataset.validate`: counts plus the first ``max_problems`` problems."""
    name: str
    n_rows: int
    n_invalid: int
    problems: list[Problem]
    problem_counts: dict[str, int]          # by field
    n_problems: int
    stopped_early: bool = False

    @property
    def ok(self) -> bool:
        return self.n_invalid == 0

    @property
    def n_valid(self) -> int:
        return self.n_rows - self.n_invalid

    def to_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "n_rows": self.n_rows, "n_valid": self.n_valid,
                "n_invalid": self.n_invalid, "n_problems": self.n_problems, "stopped_early": self.stopped_early,
                "problem_counts": dict(self.problem_counts), "problems": [str(p) for p in self.problems]}

    def summary(self) -> str:
        stop = " (stopped at the first bad row)" if self.stopped_early else ""
        lines = [f"validation: {self.n_rows} rows checked{stop}, {self.n_valid} valid, {self.n_invalid} invalid"]
        lines += [f"  {p}" for p in self.problems]
        if self.n_problems > len(self.problems):
            lines.append(f"  ... and {self.n_problems - len(self.problems)} more problems "
                         f"(by field: {', '.join(f'{k} {v}' for k, v in self.problem_counts.items())})")
        return "\n".join(lines)



@dataclass
class Inspection:
    """One pass over the data: :class:`Description`, :class:`ValidationReport` and the summary DataFrame."""
    description: Description
    validation: ValidationReport
    summary: Any  # pandas.DataFrame
    generation: dict = None  # {source: {label: rows}}: how the valid rows were made (their ``generation`` key)

    def to_dict(self) -> dict:
        s = self.summary.reset_index().to_dict(orient="records")
        return {"schema_version": SCHEMA_VERSION, "description": self.description.to_dict(),
                "validation": self.validation.to_dict(), "summary": s, "generation": self.generation or {}}

    def __str__(self) -> str:
        out = [str(self.description), "summary by source (valid rows):"]
        out += ["  " + s for s in self.summary.to_string().splitlines()] if len(self.summary) else ["  (no valid rows)"]
        if self.generation:
            out.append("how the responses were made (the 'generation' key), by source:")
            for src, labels in self.generation.items():
                out.append(f"  {src}: " + "; ".join(f"{lab} ({n} rows)" for lab, n in labels.items()))
        out.append(str(self.validation))
        return "\n".join(out)



def summary_frame(stats: dict):
    import numpy as np
    import pandas as pd

    cols = ["rows", "tokens", "loss_tokens", "prompt_p50", "prompt_p90", "prompt_max",
            "response_p50", "response_p90", "response_max", "seq_p50", "seq_max"]

    def line(s):
        p, r, t = (np.frombuffer(s[k], dtype=np.int64) for k in ("p", "r", "t"))
        q = lambda a, x: int(np.quantile(a, x, method="inverted_cdf"))  # noqa: E731  an observed length
        return [len(t), s["tokens"], s["loss"], q(p, .5), q(p, .9), int(p.max()), q(r, .5), q(r, .9), int(r.max()),
                q(t, .5), int(t.max())]

    data = {src: line(s) for src, s in sorted(stats.items())}
    if len(stats) > 1:
        allv = {"tokens": sum(s["tokens"] for s in stats.values()), "loss": sum(s["loss"] for s in stats.values())}
        for k in ("p", "r", "t"):
            allv[k] = array("q")
            for s in stats.values():
                allv[k].extend(s[k])
        data["(all)"] = line(allv)
    df = pd.DataFrame.from_dict(data, orient="index", columns=cols)
    df.index.name = "source"
    return df
