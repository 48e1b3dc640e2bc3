"""The ground floor: errors, atomic files, the Setting every result carries, text rendering, devices, and the served sampling rule. Imports nothing of workbench.

    >>> from workbench.core import Setting
    >>> Setting(steps=4).label
    'chain K=4'

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('compat', 'devices', 'errors', 'faces', 'files', 'render', 'sampling', 'setting')

# public name -> the module of this package that defines it
_WHERE = {
    'OLD_PATHS': 'compat',
    'MOVED': 'compat',
    'moved_name': 'compat',
    'OldPathFinder': 'compat',
    'install': 'compat',
    'resolve_device': 'devices',
    'cpu_model': 'devices',
    'default_dtype': 'devices',
    'parse_dtype': 'devices',
    'WorkbenchError': 'errors',
    'lazy': 'faces',
    'is_path': 'files',
    'atomic_write': 'files',
    'jsonable': 'files',
    'write_json': 'files',
    'check_output': 'files',
    'input_fingerprint': 'files',
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
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
