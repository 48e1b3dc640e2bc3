"""Statistics of accepted counts: counting rules, intervals, the AcceptanceResult object, tap statistics, and the one cost model of every speed-up projection.

    >>> from workbench.stats import wilson
    >>> [round(x, 3) for x in wilson(8, 10)]
    [0.49, 0.943]

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('context_length', 'cost', 'counts', 'statistics', 'tap_stats')

# public name -> the module of this package that defines it
_WHERE = {
    'VERIFY_PROBES': 'cost',
    'LANE_PROBES': 'cost',
    'PREFIX': 'cost',
    'REPEATS': 'cost',
    'COST_SCHEMA': 'cost',
    'QUANTILE': 'cost',
    'WARMUP': 'cost',
    'TOO_WIDE': 'cost',
    'CostModel': 'cost',
    'as_cost_model': 'cost',
    'projection': 'cost',
    'verdict': 'cost',
    'slowdown_reason': 'cost',
    'measure': 'cost',
    'Z95': 'counts',
    'accepted_counts': 'counts',
    'counted_starts': 'counts',
    'bootstrap_ratio': 'counts',
    'decode_path': 'counts',
    'reply_starts': 'counts',
    'batch_reply_starts': 'counts',
    'wilson': 'counts',
    'chain_statistics': 'counts',
    'coverage_counts': 'counts',
    'CONVENTION': 'statistics',
    'convention': 'statistics',
    'CHAIN_COLUMNS': 'statistics',
    'SAMPLE_COLUMNS': 'statistics',
    'AGREEMENT_DEFAULTS': 'statistics',
    'AcceptanceResult': 'statistics',
    'PositionTable': 'context_length',
    'by_position': 'context_length',
    'by_position_reference': 'context_length',
    'TapStats': 'tap_stats',
    'tap_statistics': 'tap_stats',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
