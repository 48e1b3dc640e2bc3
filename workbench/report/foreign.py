"""Drafts that real trainers made, on the report pages: their configs read, what each engine feeds them, which
engine to judge them under, and the index card with the trainer × engine table (issue 46).

    >>> from workbench.report.foreign import beside
    >>> beside("data/no-such-folder/draft-mismatched")
    []

With ``demo=data/demo-real`` after ``make foreign-drafts`` (docs/foreign-drafts.md): notebook 02 shows
:func:`read` for each folder :func:`beside` finds, notebook 03 diagnoses each under :meth:`Foreign.judge`, and the
index shows :func:`card_html` of ``<demo>/foreign-drafts.json``. Each draft is loaded exactly as its trainer
exported it, by the loader users use.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

from workbench.analysis.answer import interval_text
from workbench.core.errors import WorkbenchError
from workbench.engines.candidates import set_ids
from workbench.engines.records import get as engine_record
from workbench.engines.records import ids_for_taps
from workbench.engines.trainers import Provenance, provenance
from workbench.engines.wiring import table as wiring_table
from workbench.load.inputs import resolve
from workbench.report.export import show as show_one
from workbench.report.sections import absent
from workbench.report.tables import table, wrap_html

FOLDERS = ("draft-modelopt", "draft-modelopt-norope", "draft-speculators")   # `make foreign-drafts` writes them beside the demo's drafts
ENGINES = ("sglang", "sglang-2026.04", "vllm", "vllm-v2", "tensorrt-llm")
RESULT = "foreign-drafts.json"
SKIPPED = ("no draft-modelopt/ or draft-speculators/ beside the draft. `make foreign-drafts` trains them for the real "
           "demo (data/demo-real); docs/foreign-drafts.md")

# the config keys that decide the wiring or the draft's shape, as the engines and the loader read them
KEYS = {
    "architectures": "the loader each engine picks",
    "speculators_model_type": "a speculators export (vLLM reads it natively; SGLang through its top-level ids)",
    "speculators_version": "the speculators release that wrote it",
    "eagle_aux_hidden_state_layer_ids": "top-level ids: what vLLM reads first",
    "eagle_config.eagle_aux_hidden_state_layer_ids": "nested ids: what SGLang reads, and vLLM when no top-level ids",
    "eagle_config.use_last_layernorm": "a ModelOpt key (how the workbench recognises its export)",
    "draft_vocab_size": "the reduced draft vocabulary (d2t maps it to the target's)",
    "norm_before_fc": "EAGLE-3.1 option: RMSNorm on the taps before fc",
    "norm_output": "EAGLE-3.1 option: the draft's final norm on its output",
    "transformer_layer_config.sliding_window": "the draft layer's attention window",
}


@dataclass
class Foreign:
    """One trainer's export as the report reads it: who wrote it, the keys read, and what each engine feeds it."""

    folder: Path
    provenance: Provenance
    manifest: dict | None
    keys: dict
    target_config: dict
    fed: list = field(default_factory=list)         # WiringTable rows, one per engine of ENGINES

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def trainer(self) -> str:
        """Who wrote it and its release (the config's, else its manifest's): ``NVIDIA ModelOpt 0.47.0``."""
        version = self.provenance.version or (self.manifest or {}).get("version")
        return self.provenance.label + (f" {version}" if version else "")

    def header(self) -> str:
        """``draft-modelopt: NVIDIA ModelOpt 0.47.0, trained on L1,L14,L26 (... ids ...)``."""
        p = self.provenance
        trained = p.trained.spec if p.trained is not None else f"unknown ({p.why_not})"
        extra = ""
        if self.manifest and self.manifest.get("wall_s") is not None:
            extra = f"; {self.manifest['wall_s'] / 60:.1f} min of training recorded in its manifest"
        return (f"{self.name}: trained by {self.trainer}"
                f" ({p.format}); ids {p.ids if p.ids is not None else '(none)'} read as {p.convention}; "
                f"trained taps {trained}{extra}")

    def engine_rows(self) -> list[dict]:
        """What each engine of :data:`ENGINES` feeds this draft, against the taps it was trained on, and the fix:
        one dict per engine (engine, taps fed, as trained, fix, warnings)."""
        trained = self.provenance.trained
        rows = []
        for r in self.fed:
            same = trained is not None and tuple(r.taps) == tuple(trained.taps)
            fix = "—"
            if trained is not None and not same:
                f = ids_for_taps(r.engine, trained.taps, self.target_config)
                fix = set_ids(r.engine, f.ids) if f.feasible else f"no ids feed {trained.spec}: {f.reason}"
            rows.append({"engine": engine_record(r.engine).label, "taps fed": r.spec or "(nothing)",
                         "as trained": "yes" if same else ("no" if trained is not None else "unknown"),
                         "fix": fix, "warnings": "; ".join(w for w in r.warnings if "was trained on" not in w) or "—"})
        return rows

    def misfed(self) -> list[str]:
        """The engines (record names) that feed other taps than the trained ones."""
        t = self.provenance.trained
        return [r.engine for r in self.fed if t is not None and r.feasible and tuple(r.taps) != tuple(t.taps)]

    def judge(self, engine: str) -> str:
        """The engine to diagnose this draft under: ``engine`` if it mis-feeds it, else the first that does, else
        ``engine`` (every engine feeds what it was trained on)."""
        wrong = self.misfed()
        return engine if engine in wrong or not wrong else wrong[0]


class ForeignDrafts:
    """The foreign drafts beside the run's draft, as a part of the run (``run.foreign_drafts()``): :meth:`show`
    their configs and what each engine feeds them (notebook 02), :meth:`diagnose` each under the engine that
    mis-feeds it (notebook 03)."""

    def __init__(self, run):
        self.run = run
        self.drafts = [read(f, run.target) for f in beside(run.paths.get("draft", ""))]

    def show(self) -> None:
        """Print who wrote each draft; display its config table and engine table."""
        if not self.drafts:
            absent("Drafts that real trainers made", SKIPPED)
            return
        print("\n".join(f.header() for f in self.drafts))
        for t in (self.config_table(), self.engines_table()):
            show_one(t)

    def config_table(self):
        """The config keys read (:data:`KEYS` present in any export): one row per key, one column per draft with
        the value as its trainer wrote it (— where the export has no such key)."""
        import pandas as pd

        keys = [k for k in KEYS if any(k in f.keys for f in self.drafts)]
        frame = pd.DataFrame([{"key": k, **{f.name: _text(f.keys[k]) if k in f.keys else "—" for f in self.drafts},
                               "what it decides": KEYS[k]} for k in keys])
        return table(frame, {"key": "config.json key (a dot: nested)",
                             **{f.name: f"the value {f.provenance.label} wrote" for f in self.drafts},
                             "what it decides": "why the workbench reads it"},
                     title="config.json of each draft: the keys read")

    def engines_table(self):
        """What each engine feeds the drafts, against the taps each was trained on, and the fix: one row per engine
        and distinct answer, with the drafts it holds for (drafts an engine treats alike share one row)."""
        import pandas as pd

        grouped: dict[tuple, list[str]] = {}
        for f in self.drafts:
            for r in f.engine_rows():
                grouped.setdefault(tuple(r.items()), []).append(f.name)
        order = {engine_record(e).label: i for i, e in enumerate(ENGINES)}
        rows = [{"engine": dict(k)["engine"], "drafts": ", ".join(names), **{c: v for c, v in k if c != "engine"}}
                for k, names in grouped.items()]
        rows.sort(key=lambda r: order.get(r["engine"], len(order)))
        trained = sorted({f.provenance.trained.spec for f in self.drafts if f.provenance.trained is not None})
        return table(pd.DataFrame(rows), {
            "engine": "the serving engine and version (`workbench wiring --engines`)",
            "drafts": "the drafts this row holds for (drafts the engine treats alike share a row)",
            "taps fed": "the target hidden states it concatenates into the draft's fc (L k = output of layer k)",
            "as trained": f"the same taps the trainer captured ({', '.join(trained) or 'unknown'})",
            "fix": "the one-line config change that makes this engine feed the trained taps",
            "warnings": "what the engine ignores or cannot do with this export"},
            title="what each engine feeds the drafts")

    def diagnose(self, *, K: int = 4, limit: int | None = None) -> list:
        """Each draft diagnosed on the run's rows under the engine that mis-feeds it (no rewire); displays one table
        of them (:meth:`diagnosis_table`, the setting said once above it) and returns the runs."""
        if not self.drafts:
            absent("Drafts that real trainers made: their diagnosis", SKIPPED)
            return []
        runs = [(f, self.run.again(str(f.folder), engine=f.judge(self.run.engine), K=K, limit=limit, rewire=False))
                for f in self.drafts]
        dx = runs[0][1].diagnosis
        print(f"each on {dx.n_samples} samples of the page's rows, {dx.setting.accept_label('decode-path')}, with "
              f"its 95% interval")
        show_one(self.diagnosis_table(runs))
        return [fr for _, fr in runs]

    @staticmethod
    def diagnosis_table(runs):
        """One row per (draft, its run): who trained it, the engine judged, the taps it feeds and the trained ones,
        each with its accept length on the decode path, and the answer's fix."""
        import pandas as pd

        def accept(dx, spec):
            r = dx.results.get(spec) if spec else None
            return "not measured" if r is None else interval_text(r)

        rows = []
        for f, fr in runs:
            dx = fr.diagnosis
            rows.append({"draft": f.name, "trainer": f.trainer,
                         "judged under": engine_record(dx.engine).label,
                         "taps fed": dx.engine_wiring or "(cannot serve it)", "accept length fed": accept(dx, dx.engine_wiring),
                         "taps trained": dx.trained_wiring or "unknown",
                         "accept length trained": accept(dx, dx.trained_wiring),
                         "the answer": fr.answer.fix.replace("`", "")})
        return table(pd.DataFrame(rows), {
            "draft": "the export's folder", "trainer": "who wrote it, and its release",
            "judged under": "the engine it is diagnosed under: this page's engine if it mis-feeds the draft, else the "
                            "first that does",
            "taps fed": "what that engine feeds it (L-numbering: 0-based; embed: the embedding output)",
            "accept length fed": "tokens per verify step on the decode path with those taps",
            "taps trained": "the taps its trainer captured",
            "accept length trained": "the same with the trained taps",
            "the answer": "the diagnosis' fix for that engine (its verdict's test: the 95% intervals)"},
            title="the foreign drafts, each diagnosed")

    def headline(self) -> dict:
        return {f"{f.name}: engines that feed other taps than its trainer captured": ", ".join(
            engine_record(e).label for e in f.misfed()) or "none" for f in self.drafts}


def beside(draft) -> list[Path]:
    """The foreign-draft folders (:data:`FOLDERS`) next to ``draft``'s folder, those that hold a ``config.json``."""
    parent = Path(draft).parent
    return [parent / n for n in FOLDERS if (parent / n / "config.json").is_file()]


def read(folder, target) -> Foreign:
    """Read one export unmodified: its trainer (:func:`~workbench.engines.trainers.provenance`), its manifest
    (``<folder>.manifest.json``, if any), the :data:`KEYS` it holds, and what each engine of :data:`ENGINES` feeds.
    ``target``: a loaded target (``n_layers`` and ``config``)."""
    folder = Path(folder)
    path = folder / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{path}: not a readable draft config ({type(e).__name__}: {e})") from None
    man_path = folder.parent / f"{folder.name}.manifest.json"
    manifest = None
    if man_path.is_file():
        try:
            manifest = json.loads(man_path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise WorkbenchError(f"{man_path}: not valid JSON ({e})") from None
    prov = provenance(cfg, target.n_layers)
    keys = {}
    for k in KEYS:
        v = cfg
        for part in k.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if v is not None:
            keys[k] = v
    return Foreign(folder, prov, manifest, keys, target.config,
                   list(wiring_table(target.config, cfg, trained=prov.trained, names=ENGINES)))


def _text(v) -> str:
    return json.dumps(v) if isinstance(v, (list, dict, bool)) else str(v)


# ------------------------------------------------------------------------------ the trainer × engine table

def rows(result: dict) -> list[dict]:
    """One row per draft × engine of a ``foreign-drafts.json`` (``workbench foreign-drafts``): who trained it, the
    taps trained and fed, accept length trained → fed (or why the engine cannot serve it), and the fix."""
    out = []
    for name, d in result["drafts"].items():
        who = d["provenance"]["label"]
        version = d["provenance"].get("version") or (d.get("trained_by") or {}).get("version")
        who += f" {version}" if version else ""
        own = d.get("accept_trained")
        for e in d["engines"].values():
            acc = e.get("accept")
            if not e["feasible"] or any("no loader" in w for w in e.get("warnings", [])):
                cell = "does not run (" + _why_not(e.get("warnings", [])) + ")"
            elif own is None or acc is None:
                cell = "—"
            elif e["taps"] == d["trained_taps"]:
                cell = f"{own:.2f} (as trained)"
            else:
                cell = f"{own:.2f} → {acc:.2f} ({acc / own - 1:+.0%})"
            out.append({"draft": name, "trainer": who, "engine": e["label"], "trained": d["trained_taps"] or "unknown",
                        "fed": e["taps"], "accept": cell, "fix": e.get("fix") or "—"})
    return out


def _why_not(warnings: list) -> str:
    """The warning that says why an engine cannot serve the draft: no loader, then too few taps, then the first."""
    for word in ("no loader", "feeds"):
        hit = [w for w in warnings if word in w]
        if hit:
            return hit[0]
    return warnings[0] if warnings else "?"


def load_result(root) -> dict | None:
    """``<root>/foreign-drafts.json`` if there is one (None otherwise); an unreadable one is a one-line error."""
    path = Path(root) / RESULT
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise WorkbenchError(f"{path}: not valid JSON ({e}); rerun `workbench foreign-drafts --measure-only`") from None
    if not isinstance(result, dict) or not isinstance(result.get("drafts"), dict) or "K" not in result:
        raise WorkbenchError(f"{path}: expected the object `workbench foreign-drafts` writes (keys K, drafts)")
    return result


def cards(parameters: dict) -> list[str]:
    """The index cards for a report run with these parameters: the trainer × engine card when the ``demo`` folder
    holds a ``foreign-drafts.json``, else none (``workbench report`` and ``workbench demo`` pass them on)."""
    demo = parameters.get("demo")
    result = load_result(resolve(str(demo))) if demo else None
    return [card_html(result)] if result is not None else []


def card_html(result: dict) -> str:
    """The index card: the trainer × engine table of ``result``, every text escaped; rows whose fed taps differ from
    the trained ones are marked."""
    e = html.escape
    head = ("draft (trainer)", "engine", "taps trained", "taps fed", f"accept trained → fed (K={result['K']})", "fix")
    body = []
    for r in rows(result):
        mark = ' class="mis"' if r["fed"] != r["trained"] and r["fix"] != "—" else ""
        cells = (f"{r['draft']} ({r['trainer']})", r["engine"], r["trained"], r["fed"], r["accept"], r["fix"])
        body.append(f"<tr{mark}>" + "".join(f"<td>{wrap_html(c)}</td>" for c in cells) + "</tr>")
    metric = result.get("metric", "accept length")
    return ('<div class="card" id="foreign-drafts"><h2>Drafts that real trainers made</h2>'
            f'<p class="desc">Each draft exactly as its trainer exported it, loaded by the loader users use; what '
            f'each engine feeds it, and what that costs: {e(metric)} on {e(str(result.get("n_rows", "?")))} rows '
            f'of {e(str(result.get("data", "val.jsonl")))}. Highlighted: an engine that feeds other taps than the '
            f'trained ones. From <code>workbench foreign-drafts</code> (docs/foreign-drafts.md).</p>'
            '<table class="foreign"><tr>' + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join(body) + "</table></div>")


def markdown(result: dict) -> str:
    """The same table as :func:`card_html`, in Markdown (docs/foreign-drafts.md, ``workbench foreign-drafts``).

        >>> r = {"K": 4, "drafts": {"draft-x": {"provenance": {"label": "NVIDIA ModelOpt", "version": None},
        ...      "trained_taps": "L1,L14,L26", "accept_trained": 1.5, "top1": 0.4, "engines": {"vllm": {
        ...      "label": "vLLM V1", "taps": "L0,L13,L25", "feasible": True, "accept": 1.2,
        ...      "fix": "set x to [2, 15, 27]"}}}}}
        >>> print(markdown(r))
        | draft (trainer) | engine | taps trained | taps fed | accept trained → fed (K=4) | fix |
        |---|---|---|---|---|---|
        | `draft-x` (NVIDIA ModelOpt) | vLLM V1 | `L1,L14,L26` | `L0,L13,L25` | 1.50 → 1.20 (-20%) | set x to [2, 15, 27] |
    """
    lines = [f"| draft (trainer) | engine | taps trained | taps fed | accept trained → fed (K={result['K']}) | fix |",
             "|---|---|---|---|---|---|"]
    for r in rows(result):
        lines.append(f"| `{r['draft']}` ({r['trainer']}) | {r['engine']} | `{r['trained']}` | `{r['fed']}` | "
                     f"{r['accept']} | {r['fix']} |")
    return "\n".join(lines)


__all__ = ["ForeignDrafts", "ENGINES", "FOLDERS", "Foreign", "KEYS", "RESULT", "beside", "card_html", "cards", "load_result", "markdown",
           "read", "rows"]
