"""Statistics of accepted counts: counting rules, intervals, the AcceptanceResult object, tap statistics, and the one cost model of every speed-up projection.


The face is lazy: a name is imported from its module the first time it is used, so importing
the package costs nothing (light commands stay free of torch).
"""

import importlib

MODULES = ('cost', 'counts', 'statistics', 'tap_stats')

# public name -> the module of this package that defines it
_WHERE = {
    'reply_starts': 'counts',
    'batch_reply_starts': 'counts',
    'VERIFY_PROBES': 'cost',
    'LANE_PROBES': 'cost',
    'PREFIX': 'cost',
    'REPEATS': 'cost',
    'COST_SCHEMA': 'cost',
    'CostModel': 'cost',
    'as_cost_model': 'cost',
    'projection': 'cost',
    'measure': 'cost',
    'Z95': 'counts',
    'accepted_counts': 'counts',
    'counted_starts': 'counts',
    'bootstrap_ratio': 'counts',
    'decode_path': 'counts',
    'wilson': 'counts',
    'chain_statistics': 'counts',
    'coverage_counts': 'counts',
    'CONVENTION': 'statistics',
    'convention': 'statistics',
    'CHAIN_COLUMNS': 'statistics',
    'SAMPLE_COLUMNS': 'statistics',
    'AGREEMENT_DEFAULTS': 'statistics',
    'AcceptanceResult': 'statistics',
    'TapStats': 'tap_stats',
    'tap_statistics': 'tap_stats',
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
