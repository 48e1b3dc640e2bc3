"""One results table for every benchmark in ``bench/``: figure summaries, machine facts, markdown, JSON.

    >>> from workbench.report.benchmark import summarize, markdown_table
    >>> fig = summarize({"key": "capture_overhead", "figure": "capture vs bare forward", "target": "demo",
    ...                  "unit": "x", "values": [1.04, 1.08, 1.02, 1.05, 1.11], "goal": "<= 1.10"})
    >>> fig.median, fig.min, fig.max, fig.ratio, fig.goal_met
    (1.05, 1.02, 1.11, 1.05, True)
    >>> print(markdown_table([fig]).splitlines()[2])
    | capture vs bare forward | demo | 5 | 1.05 x | 1.02 | 1.11 | 1.05 x | <= 1.10 | yes |  |

Each benchmark module (``bench/<name>.py``) exposes ``measure(...) -> list[dict]``; a dict is one
figure measured over several runs:

- ``key``, ``figure`` (what is measured), ``target`` (which model/setting), ``unit`` of ``values``;
- ``values``: one number per run (at least 5 for a full run); ``median``/``min``/``max`` come from them;
- ``ratio`` (optional): the number the figure is judged by; defaults to the median of ``values``;
- ``goal`` (optional): ``"<= 1.10"``, ``">= 30"``, ``"== 1"`` or ``None`` (reported only);
- ``requires`` (optional): a condition that must hold besides the goal, e.g. identical A values;
- ``detail`` (optional dict of raw medians), ``note`` (optional text).

A benchmark that could not run becomes a row with ``status="not run"`` and the reason
(:func:`not_run`). Numbers are measured, never asserted: tests only check the schema.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench import __version__
from workbench.core.devices import cpu_model
from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

SCHEMA = 1
SECTIONS = ("capture", "acceptance", "pipeline", "distributed", "rewire", "long", "tree", "regenerate", "sampled",
            "vllm", "speed")
OPT_IN = ("long", "tree", "sampled", "vllm", "speed")   # minutes on 2 cores (vllm: real servers): --only NAME runs one
TARGETS = ("demo", "synthetic")
_GOAL = re.compile(r"^\s*(<=|>=|==|<|>)\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")


@dataclass
class Figure:
    """One row of the results table (a figure summarized over its runs, or a benchmark not run)."""

    key: str
    figure: str
    target: str
    unit: str = ""
    runs: int = 0
    median: float | None = None
    min: float | None = None
    max: float | None = None
    ratio: float | None = None
    ratio_unit: str = ""
    goal: str | None = None
    goal_met: bool | None = None
    status: str = "ok"
    values: list = field(default_factory=list)
    detail: dict = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def add_arguments(p) -> None:
    """The options of ``python -m bench.run`` and ``workbench bench`` (one definition for both)."""
    p.add_argument("--device", default="cpu", help="cpu (fp32), cuda or cuda:N (bf16), auto")
    p.add_argument("--demo", help="demo folder (default: data/demo when built, else the smoke demo in data/demo-smoke)")
    p.add_argument("--out", help="results JSON (default: bench/results.json)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds (checks the runner, not the numbers)")
    p.add_argument("--repeats", type=int, help="runs per figure (>= 5; default 5)")
    p.add_argument("--only", help=f"comma list of {','.join(SECTIONS)} (default: all but the opt-in {','.join(OPT_IN)})")
    p.add_argument("--targets", help=f"comma list of {','.join(TARGETS)} (default: both)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is the least noisy on a shared box)")
    p.add_argument("--long-lengths", help="row lengths of the long section (default 1024,4096; 16384 is opt-in)")


def goal_met(goal: str | None, value: float | None) -> bool | None:
    """``goal_met("<= 1.10", 1.04)`` → True; None when there is no goal or no value."""
    if goal is None or value is None:
        return None
    m = _GOAL.match(str(goal))
    if not m:
        raise WorkbenchError(f"benchmark goal {goal!r}: expected '<= X', '>= X', '< X', '> X' or '== X'")
    op, x = m.group(1), float(m.group(2))
    return {"<=": value <= x, ">=": value >= x, "<": value < x, ">": value > x,
            "==": abs(value - x) <= 1e-9 * max(1.0, abs(x))}[op]


def summarize(raw: dict, *, source: str = "measure()") -> Figure:
    """A :class:`Figure` from one dict returned by a benchmark's ``measure``; WorkbenchError if malformed."""
    if not isinstance(raw, dict):
        raise WorkbenchError(f"{source}: each figure must be a dict, got {type(raw).__name__}")
    for k in ("key", "figure", "target", "values"):
        if k not in raw:
            raise WorkbenchError(f"{source}: figure {raw.get('key', '?')!r} has no key {k!r}")
    vals = raw["values"]
    if not isinstance(vals, (list, tuple)) or not vals or not all(isinstance(v, (int, float)) for v in vals):
        raise WorkbenchError(f"{source}: figure {raw['key']!r}: 'values' must be a non-empty list of numbers, "
                             f"got {vals!r}")
    if raw.get("goal") is not None and not _GOAL.match(str(raw["goal"])):
        raise WorkbenchError(f"{source}: figure {raw['key']!r}: goal {raw['goal']!r}: expected '<= X', '>= X', "
                             f"'< X', '> X' or '== X'")
    vals = [float(v) for v in vals]
    med = statistics.median(vals)
    ratio = float(raw["ratio"]) if raw.get("ratio") is not None else med
    met = goal_met(raw.get("goal"), ratio)
    if met is not None and raw.get("requires") is not None:
        met = met and bool(raw["requires"])
    return Figure(key=str(raw["key"]), figure=str(raw["figure"]), target=str(raw["target"]),
                  unit=str(raw.get("unit", "")), runs=len(vals), median=med, min=min(vals), max=max(vals),
                  ratio=ratio, ratio_unit=str(raw.get("ratio_unit", raw.get("unit", ""))), goal=raw.get("goal"),
                  goal_met=met, values=vals, detail=dict(raw.get("detail") or {}), note=str(raw.get("note", "")))


def not_run(key: str, figure: str, reason: str, target: str = "-") -> Figure:
    """A table row for a benchmark that did not run, with the reason."""
    return Figure(key=key, figure=figure, target=target, status="not run", note=reason)


def saved_figures(path, key: str, figure: str, hint: str, figures_of) -> list[Figure]:
    """The rows of a benchmark's saved results (what ``workbench bench`` shows without re-running it):
    ``figures_of(the JSON)`` summarized; one "not run" row with ``hint`` when ``path`` is missing, or with the reason
    when it is unreadable."""
    path = Path(path)
    if not path.is_file():
        return [not_run(key, figure, hint)]
    try:
        return [summarize(f, source=str(path)) for f in figures_of(json.loads(path.read_text(encoding="utf-8")))]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, WorkbenchError) as e:
        return [not_run(key, figure, f"{path}: unreadable ({e})")]


def machine(device: str) -> dict:
    """CPU model, cores, versions and the device the run used (GPU name when CUDA)."""
    import torch
    import transformers

    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "workbench": __version__, "device": device}
    if str(device).startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
        out["dtype"] = "bf16"
    else:
        out["dtype"] = "fp32"
    try:
        out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return out


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or 0.01 <= abs(x) < 1e5:
        return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 1000 else f"{x:.0f}"
    return f"{x:.3g}"


def markdown_table(figures: list[Figure]) -> str:
    """The results as one markdown table (one row per figure and target)."""
    head = ("| figure | target | runs | median | min | max | judged by | goal | met | note |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for f in figures:
        if f.status != "ok":
            lines.append(f"| {f.figure} | {f.target} | 0 | - | - | - | - | {f.goal or '-'} | {f.status} | "
                         f"{f.note} |")
            continue
        unit = f" {f.unit}" if f.unit else ""
        met = "-" if f.goal_met is None else ("yes" if f.goal_met else "no")
        ratio = f"{_num(f.ratio)} {f.ratio_unit}".rstrip()
        lines.append(f"| {f.figure} | {f.target} | {f.runs} | {_num(f.median)}{unit} | {_num(f.min)} | "
                     f"{_num(f.max)} | {ratio} | {f.goal or '-'} | {met} | {f.note} |")
    return "\n".join(lines)


def results(machine_info: dict, figures: list[Figure], settings: dict | None = None) -> dict:
    """The ``bench/results.json`` document."""
    return {"schema": SCHEMA, "machine": machine_info, "settings": settings or {},
            "table": [f.to_dict() for f in figures], "markdown": markdown_table(figures)}


def write_results(path, doc: dict) -> None:
    """Write the results document atomically (``write_json``)."""
    write_json(path, doc, indent=1)
