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
    "record_headline": "workbench.report.export", "table": "workbench.report.export",
}


def __getattr__(name):
    """``workbench.<name>`` of :data:`FACE`, imported on first use (``import workbench`` stays free of torch)."""
    if name not in FACE:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    module, _, attr = FACE[name].partition(":")
    return getattr(_importlib.import_module(module), attr or name)


def __dir__():
    return sorted(set(globals()) | set(FACE))


_install_old_paths()
