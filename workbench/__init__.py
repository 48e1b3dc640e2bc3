"""workbench: tells you why an EAGLE-3 draft underperforms when served, before you serve it.

    >>> import workbench
    >>> workbench.__version__
    '0.1.0'

The library is built in floors, lowest first (ARCHITECTURE.md): ``core`` → ``rows`` → ``engines`` →
``model`` → ``load`` → ``stats`` → ``simulate`` → ``analysis`` | ``live`` → ``report`` → ``demo`` →
``cli``. Each package's ``__init__`` names its public entry points in ``__all__``.

The top-level face (issue 35) is what a notebook needs, and all it imports:

    >>> import workbench as wb
    >>> # run = wb.diagnose(target, draft, data, engine="sglang"); run.show(); run.plot()

``wb.diagnose`` answers the question; ``wb.accept`` (given wirings), ``wb.sweep`` (drafting shapes) and the
figures (``wb.plots``), tables (``wb.table``) and widgets (``wb.widgets``) show the evidence. Each name is
imported on first use (``workbench.core.faces``), so ``import workbench`` stays free of torch.

The flat module paths of release 0.1 (``workbench.acceptance``, ``workbench.data``, ...) still import
for one release, with a ``FutureWarning`` naming the new path (docs/migration.md).
"""

import importlib as _importlib

from workbench.core.compat import install as _install_old_paths

__version__ = "0.1.0"

# public name -> "module[:name there]": the face a notebook imports from, nothing else (issue 35). No name here is
# a subpackage's (``simulate``, ``load``): once imported, the subpackage would shadow it.
FACE = {
    "diagnose": "workbench.report.run", "Run": "workbench.report.run",
    "setup_notebook": "workbench.report.export", "record_headline": "workbench.report.export",
    "table": "workbench.report.export", "agreement_table": "workbench.report.export",
    "plots": "workbench.report.plots:", "evidence": "workbench.report.evidence:",
    "data_page": "workbench.report.data_page:", "foreign": "workbench.report.foreign:", "widgets": "workbench.report.widgets:",
    "by_temperature": "workbench.report.temperature", "demo_files": "workbench.report.temperature",
    "TEMPERATURES": "workbench.report.temperature",
    "fill_paths": "workbench.demo.build", "load_inputs": "workbench.load.inputs:load", "dataset": "workbench.load.inputs",
    "same_path": "workbench.load.inputs", "resolve": "workbench.load.inputs", "agreement": "workbench.load.agreement:",
    "chat": "workbench.load.chat:", "rows": "workbench.rows:",
    "accept": "workbench.simulate.acceptance:simulate", "cost": "workbench.stats.cost:",
    "tap_statistics": "workbench.stats.tap_stats", "extract": "workbench.model.capture",
    "describe_draft": "workbench.model.draft", "Setting": "workbench.core.setting",
    "sweep": "workbench.analysis.tune", "best_by_accept_length": "workbench.analysis.tune",
    "rank_tied": "workbench.analysis.diagnose", "regenerate_rows": "workbench.live.regenerate:regenerate",
    "engine": "workbench.engines.records:get", "auto_flags": "workbench.engines.records",
    "serving_candidates": "workbench.engines.candidates", "target_architecture": "workbench.engines.flags",
    "trained_wiring": "workbench.engines.trainers:trained_wiring_from_config",
    "wiring_table": "workbench.engines.wiring:table",
    "sglang_live": "workbench.live.sglang_live:", "vllm_live": "workbench.live.vllm_live:",
    "vllm_server": "workbench.live.vllm_server:", "fidelity": "workbench.live.engine_fidelity:",
    "speed": "workbench.live.vllm_speed:", "serve_stand_in": "workbench.testing.fake_sglang:serve",
    "check_live": "workbench.report.live_check:check", "live_answer": "workbench.report.live_check",
}


def __getattr__(name):
    """``workbench.<name>`` of :data:`FACE`, imported on first use (``import workbench`` stays free of torch)."""
    if name not in FACE:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    module, _, attr = FACE[name].partition(":")
    mod = _importlib.import_module(module)
    return mod if FACE[name].endswith(":") else getattr(mod, attr or name)


def __dir__():
    return sorted(set(globals()) | set(FACE))


_install_old_paths()
