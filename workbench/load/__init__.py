"""The one loader: target, draft and data from paths or objects on one device, and the data's greedy agreement with the target.


The face is lazy: a name is imported from its module the first time it is used, so importing
the package costs nothing (light commands stay free of torch).
"""

import importlib

MODULES = ('agreement', 'inputs')

# public name -> the module of this package that defines it
_WHERE = {
    'THRESHOLD': 'agreement',
    'AgreementWarning': 'agreement',
    'greedy_matches': 'agreement',
    'greedy_matches_reference': 'agreement',
    'generation_settings': 'agreement',
    'is_sampled': 'agreement',
    'sampling_label': 'agreement',
    'sampling_note': 'agreement',
    'data_note': 'agreement',
    'warning_text': 'agreement',
    'Agreement': 'agreement',
    'measure': 'agreement',
    'warn_once': 'agreement',
    'plain_warnings': 'agreement',
    'project_root': 'inputs',
    'resolve': 'inputs',
    'same_path': 'inputs',
    'rows': 'inputs',
    'target': 'inputs',
    'draft': 'inputs',
    'dataset': 'inputs',
    'Inputs': 'inputs',
    'load': 'inputs',
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
