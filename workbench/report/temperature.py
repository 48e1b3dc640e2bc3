"""Accept length against temperature: one result per temperature, each on data sampled at that temperature.

    >>> from workbench.stats.statistics import AcceptanceResult
    >>> from workbench.simulate.sampled import PerDepth
    >>> from workbench.core.setting import Setting
    >>> from workbench.report.temperature import TemperatureSweep
    >>> kw = dict(sample=[0, 0, 1, 1], t=[0, 2, 0, 2], on_path=[True, True, True, True])
    >>> greedy = AcceptanceResult.from_arrays("L1", 2, accepted=[2, 1, 1, 0], setting=Setting(steps=2), **kw)
    >>> hot = AcceptanceResult.from_arrays("L1", 2, accepted=[1, 0, 0, 0],
    ...                                    setting=Setting(steps=2, temperature=0.7), **kw)
    >>> hot.per_depth = PerDepth.from_arrays(2, matched=[1, 0, 0, 0],       # s_k: served mass of the children
    ...                                      s=[[0.6, 0.5], [0.4, 0.3], [0.5, 0.2], [0.3, 0.1]], **kw)
    >>> sw = TemperatureSweep("L1", Setting(steps=2), {0.0: greedy, 0.7: hot})
    >>> [(r["temperature"], r["decode-path accept length"], round(r["per-depth accept length"], 3))
    ...  for r in sw.rows()]
    [(0.0, 2.0, 2.0), (0.7, 1.25, 1.575)]

The server's tokens per verify step at temperature T is the **decode path** on data sampled from the
target at T (``workbench.simulate.sampled``; docs/sampling.md): exact in distribution for SGLang's lossless
verification and vLLM's default chain. Beside it, the **per-depth** (Rao–Blackwellised) estimate of
the same number, lower variance, and P(A >= k) per depth. At T = 0 the per-depth estimate is the
count itself (p is one-hot, each s_k an indicator), so the greedy row shows the counts.

:func:`by_temperature` runs ``acceptance.simulate`` once per temperature (the drafting shape fixed,
only the temperature changes; each file is read as data sampled at its temperature);
:func:`demo_files` finds the demo's sampled files (built by ``workbench demo``, never here).
Figures: :meth:`TemperatureSweep.plot` (:func:`workbench.plots.accept_vs_temperature`) and
:meth:`TemperatureSweep.per_depth_plot` (:func:`workbench.plots.per_depth_compare`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import jsonable
from workbench.core.sampling import sampled_name
from workbench.engines.wiring import as_wirings
from workbench.load import inputs
from workbench.report import plots
from workbench.report.tables import table
from workbench.simulate import acceptance

TEMPERATURES = (0.0, 0.3, 0.7, 1.0)


def demo_files(target, temperatures=TEMPERATURES) -> tuple[dict, str | None]:
    """``({T: file}, None)`` when ``target`` is a demo's target and the demo holds a file sampled at every
    temperature (T = 0: its greedy ``val.jsonl``; T > 0: ``val-T{T}.jsonl``, the same prompts), else
    ``({}, why not)``: the files are built by ``workbench demo``, never here.

        >>> demo_files("/models/llama")[1][:46]
        'the sampled files belong to the demo: /models/'
    """

    folder = Path(str(target)).parent
    if Path(str(target)).name != "target" or not (folder / "manifest.json").is_file():
        return {}, (f"the sampled files belong to the demo: {target} is not a demo's target. Sample your own "
                    f"data at each temperature (workbench regenerate --temperature T) and call by_temperature")
    files = {float(t): str(folder / ("val.jsonl" if float(t) == 0 else sampled_name(t))) for t in temperatures}
    missing = [Path(f).name for f in files.values() if not Path(f).is_file()]
    if missing:
        return {}, (f"the demo in {folder} has no {', '.join(missing)} (an older demo): `make demo` (or "
                    f"`workbench demo --force`) rebuilds it with the sampled files")
    return files, None


def by_temperature(target, draft, files: dict, wiring, setting, *, limit: int | None = None,
                   progress: bool = False, known: dict | None = None) -> "TemperatureSweep":
    """One :class:`~workbench.statistics.AcceptanceResult` per temperature: ``files`` ``{T: data}``, each
    data sampled from the target at T (T = 0: its greedy output), the drafting shape of ``setting``
    (a :class:`~workbench.setting.Setting`; its temperature is replaced by each T, its top_p/top_k kept).
    ``known``: ``{T: AcceptanceResult}`` already simulated on exactly that file, shape and limit (notebook 03's tree
    at T = 0), reused instead of simulated again.

        >>> # sw = by_temperature(tgt, drf, demo_files("data/demo/target")[0], "L1,L3,L4", Setting(steps=4))
        >>> # sw.table(); sw.plot(); sw.per_depth_plot()
    """

    if not files:
        raise WorkbenchError("by_temperature: no files given (expected {temperature: data sampled at it})")
    spec = as_wirings(wiring, target.n_layers)[0].spec
    results, names = {}, {}
    for t in sorted(files, key=float):
        f = files[t]
        if known and float(t) in known:
            results[float(t)] = known[float(t)]
        else:
            ds = f if not isinstance(f, (str, Path)) else inputs.dataset(f, target)
            res = acceptance.simulate(target, draft, ds, [spec], setting=setting.replace(temperature=float(t)),
                                      limit=limit, progress=progress)
            results[float(t)] = res[spec]
        names[float(t)] = Path(f).name if isinstance(f, (str, Path)) else type(f).__name__
    return TemperatureSweep(spec, setting.replace(temperature=0.0), results, names)


def _nan(x) -> float:
    return math.nan if x is None else float(x)


@dataclass
class TemperatureSweep:
    """Accept length against temperature for one wiring and drafting shape (module docstring)."""

    wiring: str
    setting: object                      # the drafting shape (a Setting at temperature 0)
    results: dict                        # {temperature: AcceptanceResult}
    files: dict = field(default_factory=dict)   # {temperature: data file name}
    n_boot: int = 1000
    cache: dict = field(default_factory=dict, repr=False, compare=False)   # {(T, which): intervals}: one bootstrap

    @property
    def temperatures(self) -> list[float]:
        return sorted(self.results)

    def intervals(self, t: float, which: str = "counts") -> dict:
        """The 95% intervals of temperature ``t``'s result (``counts``) or of its per-depth table
        (``per_depth``), bootstrapped once per sweep: the table, the summary and both figures share them."""
        key = (t, which)
        if key not in self.cache:
            r = self.results[t]
            src = r.per_depth if which == "per_depth" else r
            self.cache[key] = src.intervals(n_boot=self.n_boot)
        return self.cache[key]

    def rows(self) -> list[dict]:
        """One dict per temperature: decode path and per-depth accept lengths with 95% intervals."""
        out = []
        for t in self.temperatures:
            r = self.results[t]
            iv = self.intervals(t)
            dp, dp_iv = r.decode_path["accept_length"], iv["decode_path_accept_length"]
            if r.per_depth is not None:
                piv = self.intervals(t, "per_depth")
                pd_al, pd_iv, cum = (r.per_depth.decode_path_accept_length, piv["decode_path_accept_length"],
                                     r.per_depth.cumulative)
            else:                           # T = 0: the per-depth estimate is the count itself
                pd_al, pd_iv, cum = dp, dp_iv, r.cumulative
            out.append({"temperature": t, "data": self.files.get(t, ""),
                        "verify steps": int(r.decode_path["n_verify_steps"]),
                        "decode-path accept length": _nan(dp), "decode-path 95%": [float(x) for x in dp_iv],
                        "per-depth accept length": _nan(pd_al), "per-depth 95%": [float(x) for x in pd_iv],
                        "every-position accept length": float(r.accept_length),
                        "P(A>=k) per depth": [float(x) for x in cum]})
        return out

    def per_depth(self) -> dict:
        """``{T: (P(A>=k) [S], lower [S], upper [S])}``: counts with Wilson intervals at T = 0, the
        Rao–Blackwellised estimate with bootstrap intervals at T > 0 (every counted start)."""
        out = {}
        for t in self.temperatures:
            r = self.results[t]
            if r.per_depth is not None:
                cum, bounds = r.per_depth.cumulative, self.intervals(t, "per_depth")["cumulative"]
            else:
                cum, bounds = r.cumulative, self.intervals(t)["cumulative"]
            b = np.asarray(bounds, float).reshape(-1, 2)
            out[t] = (np.asarray(cum, float), b[:, 0], b[:, 1])
        return out

    def table(self):
        """The rows as a :func:`workbench.report.table` (every column explained; intervals as text)."""
        import pandas as pd


        f = lambda iv: "{:.3f}–{:.3f}".format(*iv)  # noqa: E731
        frame = pd.DataFrame([{**{k: v for k, v in r.items() if k != "P(A>=k) per depth"},
                               "decode-path 95%": f(r["decode-path 95%"]), "per-depth 95%": f(r["per-depth 95%"]),
                               "P(A>=1)": r["P(A>=k) per depth"][0]} for r in self.rows()])
        label = self.setting.accept_label("decode-path", what="E[A]+1")
        key = {"temperature": "T the drafts are verified at (0: greedy)",
               "data": "the file the row is measured on: data sampled from the target at T (T = 0: its greedy output)",
               "verify steps": "decode-path verify steps counted (a server's steps along that data)",
               "decode-path accept length": f"tokens per verify step, {label}: the drafts matched against the "
                                            f"data's own tokens (exact in distribution for SGLang's lossless rule)",
               "decode-path 95%": "95% percentile bootstrap over samples",
               "per-depth accept length": "the same number, Rao–Blackwellised (served mass of the matched node's "
                                          "children from the one target pass); at T = 0 the count itself",
               "per-depth 95%": "95% percentile bootstrap over samples",
               "every-position accept length": "E[A]+1 over every counted start (not only the decode path)",
               "P(A>=1)": "probability the first draft token is accepted (per depth, every counted start)"}
        return table(frame, key, title=f"Accept length against temperature · {self.wiring} · {self.setting.label}")

    def summary(self) -> str:
        lines = [f"accept length against temperature · {self.wiring} · {self.setting.label} (decode path on data "
                 f"sampled at each T; per depth: Rao–Blackwellised, the count at T = 0)"]
        for r in self.rows():
            lo, hi = r["decode-path 95%"]
            plo, phi = r["per-depth 95%"]
            lines.append(f"  T={r['temperature']:<4g} {r['data']:<16} decode path {r['decode-path accept length']:.3f} "
                         f"[95% {lo:.3f}–{hi:.3f}]   per depth {r['per-depth accept length']:.3f} "
                         f"[95% {plo:.3f}–{phi:.3f}]   ({r['verify steps']} verify steps)")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return jsonable({"wiring": self.wiring, "setting": self.setting.to_dict(), "rows": self.rows()})

    def plot(self, *, title: str | None = None):
        """Accept length against temperature (:func:`workbench.plots.accept_vs_temperature`)."""

        return plots.accept_vs_temperature(self, title=title)

    def per_depth_plot(self, *, title: str | None = None):
        """P(A >= k) per depth, greedy against sampled (:func:`workbench.plots.per_depth_compare`)."""

        return plots.per_depth_compare(self, title=title)


__all__ = ["TEMPERATURES", "demo_files", "by_temperature", "TemperatureSweep"]
