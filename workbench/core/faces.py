"""Lazy package faces: a package names its public entry points, and each is imported on first use.

    >>> import types
    >>> face = types.ModuleType("demo_face")
    >>> face.__getattr__, face.__dir__ = lazy("workbench.core", ("errors",), {"WorkbenchError": "errors"})
    >>> face.__getattr__("WorkbenchError").__name__, face.__dir__()
    ('WorkbenchError', ['WorkbenchError', 'errors'])

Every package's ``__init__.py`` lists its modules and its public names (``__all__``) and takes its
``__getattr__``/``__dir__`` from :func:`lazy`, so ``import workbench.engines`` costs nothing until a name is
used, and the light commands (``--help``, ``wiring``) never import torch.
"""

from __future__ import annotations

import importlib


def lazy(package: str, modules, where: dict):
    """(``__getattr__``, ``__dir__``) for the package ``package``: a module of ``modules``, or a name of
    ``where`` (public name -> the module of the package that defines it)."""
    names = sorted(set(modules) | set(where))

    def getattr_(name):
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_():
        return names

    return getattr_, dir_
