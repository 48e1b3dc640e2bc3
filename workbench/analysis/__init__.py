"""Answers built on simulation: the wiring diagnosis, the rewire, and the flag tuner.

    >>> from workbench.analysis import diagnose_files
    >>> # dx = diagnose_files("data/demo/target", "data/demo/draft-mismatched", "data/demo/val.jsonl")

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('answer', 'diagnose', 'rewire', 'tune')

# public name -> the module of this package that defines it
_WHERE = {
    'Answer': 'answer',
    'answer_for': 'answer',
    'Markdown': 'answer',
    'ids_command': 'answer',
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
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
