"""Old flat module paths (release 0.1) keep importing for one release, with a warning naming the new one.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     from workbench.acceptance import exact_decode, simulate
    >>> exact_decode.__module__, simulate.__module__
    ('workbench.simulate.exact', 'workbench.simulate.acceptance')
    >>> "workbench.simulate.acceptance" in str(caught[0].message)
    True

An old path is a thin module that answers every public name the old module had: from the module at its new
home, or, for the few names that moved further (:data:`MOVED`), from where they live now. Patch the new
module, not the old path. ``workbench.engines``, ``workbench.demo`` and ``workbench.report`` are packages
now whose faces keep the old modules' public names, so they import without a warning. docs/migration.md
has the same table.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

# old flat module -> its new home (docs/migration.md lists the same table)
OLD_PATHS = {
    "errors": "core.errors", "files": "core.files", "setting": "core.setting", "render": "core.render",
    "devices": "core.devices", "sampling": "core.sampling",
    "data": "rows",
    "taps": "engines.taps", "wiring": "engines.wiring", "flags": "engines.flags", "sglang": "engines.sglang_lint",
    "draft": "model.draft", "attention": "model.attention", "chunks": "model.chunks",
    "checkpoint": "model.checkpoint", "capture": "model.capture", "tree": "model.tree",
    "tree_reference": "model.tree_reference", "train": "model.train",
    "inputs": "load.inputs", "agreement": "load.agreement",
    "statistics": "stats.statistics", "cost": "stats.cost",
    "acceptance": "simulate.acceptance", "tree_verify": "simulate.tree_verify", "sampled": "simulate.sampled",
    "verify_walk": "simulate.verify_walk", "thresholds": "simulate.thresholds", "rejection": "simulate.rejection",
    "distributed": "simulate.distributed",
    "diagnose": "analysis.diagnose", "rewire": "analysis.rewire", "tune": "analysis.tune",
    "sglang_live": "live.sglang_live", "fingerprint": "live.fingerprint",
    "regenerate": "live.regenerate",
    "plots": "report.plots", "widgets": "report.widgets", "temperature": "report.temperature",
    "benchmark": "report.benchmark",
}


# public names of an old module that left its new home: old module -> {name: "package.module[:new name]"}
MOVED = {
    "acceptance": {"exact_decode": "simulate.exact", "exact_simulate": "simulate.exact",
                   "loop_simulate": "simulate.exact", "accept_served": "simulate.acceptance"},
    "sampled": {"as_sampling": "core.sampling", "apply_sampling": "core.sampling", "verify_probs": "model.served",
                "PARTIAL": "model.served", "served_stats": "model.served", "token_probs": "model.served",
                "head_logits": "model.served", "accept_served": "simulate.acceptance"},
    "statistics": {"Z95": "stats.counts", "accepted_counts": "stats.counts", "counted_starts": "stats.counts",
                   "bootstrap_ratio": "stats.counts", "decode_path": "stats.counts", "wilson": "stats.counts",
                   "chain_statistics": "stats.counts", "coverage_counts": "stats.counts",
                   "TapStats": "stats.tap_stats", "tap_statistics": "stats.tap_stats"},
    "diagnose": {"Candidate": "engines.candidates", "ENGINE_NAMES": "engines.candidates",
                 "SERVING": "engines.candidates", "engine_name": "engines.candidates",
                 "cannot_feed": "engines.candidates", "config_ids": "engines.candidates",
                 "engine_label": "engines.candidates", "where_ids_go": "engines.candidates",
                 "who_can_feed": "engines.candidates", "candidates": "engines.candidates"},
    "sglang_live": {"VERDICTS": "live.comparison", "ALPHA": "live.comparison", "LiveSample": "live.comparison",
                    "Comparison": "live.comparison", "offline_results": "live.comparison", "check_url": "live.http",
                    "candidates": "engines.candidates:serving_candidates"},
    "demo": {"sampled_name": "core.sampling"},
}


def moved_name(old: str, name: str):
    """The object an old module's ``name`` is now (AttributeError when it never had it)."""
    where = MOVED.get(old, {}).get(name)
    if where is None:
        raise AttributeError(f"module 'workbench.{old}' has no attribute {name!r}")
    mod, _, new_name = where.partition(":")
    return getattr(importlib.import_module(f"workbench.{mod}"), new_name or name)


class _OldModule(types.ModuleType):
    """``workbench.<old>``: every name of the module at its new home, and the names that moved further."""

    def __init__(self, old: str, new: str):
        super().__init__(f"workbench.{old}", f"moved to {new} (docs/migration.md)")
        self.__dict__["_old"], self.__dict__["_new"] = old, importlib.import_module(new)

    def __getattr__(self, name):
        try:
            return getattr(self.__dict__["_new"], name)
        except AttributeError:
            return moved_name(self.__dict__["_old"], name)

    def __dir__(self):
        return sorted(set(dir(self.__dict__["_new"])) | set(MOVED.get(self.__dict__["_old"], {})))

    def __call__(self, *args, **kwargs):
        """``workbench.diagnose(...)``, the top-level face, even after ``import workbench.diagnose`` (the old path)
        set the package's attribute to this module."""
        face = importlib.import_module("workbench").FACE.get(self.__dict__["_old"])
        if face is None:
            raise TypeError(f"module 'workbench.{self.__dict__['_old']}' is not callable")
        module, _, attr = face.partition(":")
        return getattr(importlib.import_module(module), attr or self.__dict__["_old"])(*args, **kwargs)


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def create_module(self, spec):
        return _OldModule(self.old, self.new)

    def exec_module(self, module):
        pass


class OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds ``workbench.<old>`` and hands back the module at its new path (one object, two names)."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, old = fullname.partition(".")
        if head != "workbench" or old not in OLD_PATHS:
            return None
        new = f"workbench.{OLD_PATHS[old]}"
        warnings.warn(f"{fullname} moved to {new} (the old path goes in the next release; docs/migration.md)",
                      FutureWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _Alias(old, new))


def install() -> None:
    """Put the old-path finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, OldPathFinder) for f in sys.meta_path):
        sys.meta_path.append(OldPathFinder())
