"""workbench: tells you why an EAGLE-3 draft underperforms when served, before you serve it.

    >>> import workbench as wb
    >>> sorted(wb.FACE)[:4]
    ['LiveCheck', 'Run', 'Setting', 'accept']

One call answers, and its result shows its own evidence (issue 48), as ``lm_eval.simple_evaluate`` does:

    >>> # run = wb.diagnose("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl", engine="sglang")
    >>> # run.show(); run.plot()                              # the answer, and the figure behind it
    >>> # run.data_view(); run.wiring_view(); run.candidates(); run.after_fix(); run.foreign_drafts()
    >>> # live = wb.check_live(target, draft, data); live.answer; live.plot_requests()

Beside it, for full control: ``wb.Setting`` (the drafting shape and sampling), ``wb.accept`` (acceptance of given
wirings) and ``wb.sweep`` (every drafting shape). Everything else is importable from its package, floor by floor,
lowest first (ARCHITECTURE.md): ``core`` → ``rows`` → ``engines`` → ``model`` → ``load`` → ``stats`` →
``simulate`` → ``analysis`` | ``live`` → ``report`` → ``demo`` → ``cli``; each package's ``__init__`` names its
public entry points in ``__all__``. Each face name is imported on first use, so ``import workbench`` stays free of
torch. No face name is a module, and none is a stand-in server (those live in ``workbench.testing``, for tests).

The flat module paths of release 0.1 (``workbench.acceptance``, ``workbench.data``, ...) still import
for one release, with a ``FutureWarning`` naming the new path (docs/migration.md).
"""

import importlib as _importlib

from workbench.core.compat import install as _install_old_paths

__version__ = "0.1.0"

# public name -> "module[:name there]": all a notebook imports (issue 48: at most 12 names, no module, no stand-in).
FACE = {
    "diagnose": "workbench.report.run", "Run": "workbench.report.run",
    "check_live": "workbench.report.live_check:check", "LiveCheck": "workbench.report.live_check",
    "Setting": "workbench.core.setting", "accept": "workbench.simulate.acceptance:simulate",
    "sweep": "workbench.analysis.tune", "load_inputs": "workbench.load.inputs:load",
    "fill_paths": "workbench.demo.build", "setup_notebook": "workbench.report.export",
    "record_headline": "workbench.report.export", "table": "workbench.report.tables",
}


# names the face offered before issue 48 -> where they live now: they still answer for one release, with a
# FutureWarning naming the new path (docs/migration.md); they are not in the face, ``dir()`` or the notebooks.
# (``wb.rows`` is the subpackage itself, as it always was.)
LEFT_THE_FACE = {
    "plots": "workbench.report.plots:", "evidence": "workbench.report.evidence:",
    "data_page": "workbench.report.data_page:", "foreign": "workbench.report.foreign:",
    "widgets": "workbench.report.widgets:", "agreement_table": "workbench.report.tables",
    "by_temperature": "workbench.report.temperature", "demo_files": "workbench.report.temperature",
    "TEMPERATURES": "workbench.report.temperature", "dataset": "workbench.load.inputs",
    "same_path": "workbench.load.inputs", "resolve": "workbench.load.inputs", "agreement": "workbench.load.agreement:",
    "chat": "workbench.load.chat:", "cost": "workbench.stats.cost:",
    "tap_statistics": "workbench.stats.tap_stats", "extract": "workbench.model.capture",
    "describe_draft": "workbench.model.draft", "best_by_accept_length": "workbench.analysis.tune",
    "rank_tied": "workbench.analysis.diagnose", "regenerate_rows": "workbench.live.regenerate:regenerate",
    "engine": "workbench.engines.records:get", "auto_flags": "workbench.engines.records",
    "serving_candidates": "workbench.engines.candidates", "target_architecture": "workbench.engines.flags",
    "trained_wiring": "workbench.engines.trainers:trained_wiring_from_config",
    "wiring_table": "workbench.engines.wiring:table", "sglang_live": "workbench.live.sglang_live:",
    "vllm_live": "workbench.live.vllm_live:", "vllm_server": "workbench.live.vllm_server:",
    "fidelity": "workbench.live.engine_fidelity:", "speed": "workbench.live.vllm_speed:",
    "live_answer": "workbench.report.live_check",
}


def _import(where: str, name: str):
    module, _, attr = where.partition(":")
    mod = _importlib.import_module(module)
    return mod if where.endswith(":") else getattr(mod, attr or name)


def __getattr__(name):
    """``workbench.<name>`` of :data:`FACE`, imported on first use (``import workbench`` stays free of torch)."""
    if name in FACE:
        return _import(FACE[name], name)
    if name in LEFT_THE_FACE:
        import warnings

        module, _, attr = LEFT_THE_FACE[name].partition(":")
        path = module if LEFT_THE_FACE[name].endswith(":") else f"{module}.{attr or name}"
        where = LEFT_THE_FACE[name]
        warnings.warn(f"workbench.{name} left the face (issue 48): use {path}, or the run's parts "
                      f"(docs/migration.md)", FutureWarning, stacklevel=2)
        return _import(where, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(FACE))


_install_old_paths()
