"""The ground floor: errors, atomic files, the Setting every result carries, text rendering, devices, and the served sampling rule. Imports nothing of workbench.


The face is lazy: a name is imported from its module the first time it is used, so importing
the package costs nothing (light commands stay free of torch).
"""

import importlib

MODULES = ('compat', 'devices', 'errors', 'files', 'render', 'sampling', 'setting')

# public name -> the module of this package that defines it
_WHERE = {
    'OLD_PATHS': 'compat',
    'MOVED': 'compat',
    'moved_name': 'compat',
    'OldPathFinder': 'compat',
    'install': 'compat',
    'resolve_device': 'devices',
    'default_dtype': 'devices',
    'parse_dtype': 'devices',
    'WorkbenchError': 'errors',
    'is_path': 'files',
    'input_fingerprint': 'files',
    'atomic_write': 'files',
    'jsonable': 'files',
    'write_json': 'files',
    'check_output': 'files',
    'Rendered': 'render',
    'GREEDY_EPS': 'sampling',
    'Sampling': 'sampling',
    'row_seed': 'sampling',
    'row_generator': 'sampling',
    'served_probs': 'sampling',
    'draw': 'sampling',
    'as_sampling': 'sampling',
    'apply_sampling': 'sampling',
    'sampled_name': 'sampling',
    'SCHEMA_VERSION': 'setting',
    'SHAPES': 'setting',
    'ESTIMATORS': 'setting',
    'Setting': 'setting',
    'resolve_setting': 'setting',
    'chain': 'setting',
}

__all__ = sorted(set(MODULES) | set(_WHERE))


def __getattr__(name):
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return __all__
