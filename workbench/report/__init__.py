"""Figures and reports: every plot (no pyplot), widgets, notebook export to HTML, temperature sweeps, and benchmark tables.

    >>> from workbench.report import plots, run_report
    >>> # run_report("reports", parameters={"size": "smoke"})

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('benchmark', 'data_page', 'evidence', 'export', 'figure', 'layout', 'live_check', 'plots', 'run',
           'serving_figures', 'temperature', 'widgets', 'data_view', 'wiring_view', 'candidates_view', 'after_fix', 'context_figure')

# public name -> the module of this package that defines it
_WHERE = {
    'ENV_MODE': 'export',
    'ENV_OUT': 'export',
    'NOTEBOOKS': 'export',
    'in_report': 'export',
    'show': 'export',
    'setup_notebook': 'export',
    'check_layout_on_display': 'export',
    'plain_progress_bars': 'export',
    'integral': 'export',
    'cell_text': 'export',
    'Table': 'export',
    'table': 'export',
    'agreement_table': 'export',
    'record_headline': 'export',
    'Page': 'export',
    'Report': 'export',
    'notebook_dir': 'export',
    'select_notebooks': 'export',
    'parse_value': 'export',
    'declared_parameters': 'export',
    'clean_for_export': 'export',
    'export_html': 'export',
    'run_report': 'export',
    'GLOSSARY': 'export',
    'write_index': 'export',
    'keep_lists_together': 'export',
    'SCHEMA': 'benchmark',
    'SECTIONS': 'benchmark',
    'OPT_IN': 'benchmark',
    'TARGETS': 'benchmark',
    'Figure': 'benchmark',
    'add_arguments': 'benchmark',
    'goal_met': 'benchmark',
    'summarize': 'benchmark',
    'not_run': 'benchmark',
    'machine': 'benchmark',
    'markdown_table': 'benchmark',
    'results': 'benchmark',
    'write_results': 'benchmark',
    'ENV_CHECK': 'layout',
    'TOLERANCE': 'layout',
    'layout_problems': 'layout',
    'assert_clean_layout': 'layout',
    'record_layout': 'layout',
    'WIDTH': 'plots',
    'save': 'plots',
    'as_results': 'plots',
    'acceptance_curves': 'plots',
    'accept_length_histogram': 'plots',
    'decode_path_comparison': 'plots',
    'by_source': 'plots',
    'speedup_projection': 'plots',
    'tree_sweep': 'plots',
    'tap_stats_figure': 'plots',
    'TokenHTML': 'plots',
    'tokens_html': 'plots',
    'sample_accepted': 'plots',
    'sample_tokens_html': 'plots',
    'rewire_bars': 'plots',
    'lengths_by_source': 'plots',
    'agreement_by_sample': 'plots',
    'live_comparison': 'plots',
    'live_histograms': 'plots',
    'STATUS_COLORS': 'plots',
    'live_requests': 'plots',
    'accept_vs_temperature': 'plots',
    'per_depth_compare': 'plots',
    'new_figure': 'figure',
    'wrap': 'figure',
    'BRACKETED': 'figure',
    'engine_fidelity': 'serving_figures',
    'speed_sweep': 'serving_figures',
    'TEMPERATURES': 'temperature',
    'demo_files': 'temperature',
    'by_temperature': 'temperature',
    'TemperatureSweep': 'temperature',
    'Run': 'run',
    'acceptance_explorer': 'widgets',
    'sample_explorer': 'widgets',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
