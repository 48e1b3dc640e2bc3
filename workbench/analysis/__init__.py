"""Answers built on simulation: the wiring diagnosis, the rewire, and the flag tuner.


The face is lazy: a name is imported from its module the first time it is used, so importing
the package costs nothing (light commands stay free of torch).
"""

import importlib

MODULES = ('diagnose', 'rewire', 'tune')

# public name -> the module of this package that defines it
_WHERE = {
    'COLUMNS': 'diagnose',
    'Diagnosis': 'diagnose',
    'clearly_better': 'diagnose',
    'rank_tied': 'diagnose',
    'RECOVERY_ENOUGH': 'diagnose',
    'rewire_info': 'diagnose',
    'find_rewire': 'diagnose',
    'rewire_command': 'diagnose',
    'samples_to_decide': 'diagnose',
    'FIX_NAMES': 'diagnose',
    'diagnose_files': 'diagnose',
    'ALPHAS': 'rewire',
    'FINETUNE_PARTS': 'rewire',
    'NormalEquations': 'rewire',
    'RidgeFit': 'rewire',
    'fit_ridge': 'rewire',
    'is_heldout': 'rewire',
    'refit_fc': 'rewire',
    'config_for_taps': 'rewire',
    'with_fc': 'rewire',
    'finetune': 'rewire',
    'recovered_share': 'rewire',
    'RewireResult': 'rewire',
    'resolve_taps': 'rewire',
    'STEPS': 'tune',
    'TOPKS': 'tune',
    'MAX_TOKENS': 'tune',
    'N_GRID': 'tune',
    'shapes': 'tune',
    'SweepResult': 'tune',
    'sweep': 'tune',
    'measure_cost_model': 'tune',
    'best_by_accept_length': 'tune',
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
