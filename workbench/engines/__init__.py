"""Engine rules in one place: per-engine/version records (ids <-> taps), the tap vocabulary, wiring resolution, drafting flags and the servers' flag lints. Light: no torch.

    >>> from workbench import engines
    >>> engines.get("vllm").name, engines.Wiring.parse("hf:0,2,4", 8).spec
    ('vllm', 'embed,L1,L3')

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('candidates', 'flags', 'records', 'sglang_lint', 'taps', 'vllm_lint', 'wiring')

# public name -> the module of this package that defines it
_WHERE = {
    'EAGLE3_ARCHS': 'records',
    'OPTION_NAMES': 'records',
    'Option': 'records',
    'Engine': 'records',
    'RECORDS': 'records',
    'ENGINE_NAMES': 'records',
    'get': 'records',
    'config_ids': 'records',
    'taps_for_ids': 'records',
    'wiring_for': 'records',
    'Feasibility': 'records',
    'ids_for_taps': 'records',
    'is_speculators': 'records',
    'options_for': 'records',
    'Reading': 'records',
    'embed_source': 'records',
    'lm_head_source': 'records',
    'read': 'records',
    'auto_flags': 'records',
    'default_engine': 'records',
    'default_wiring': 'records',
    'id_meaning': 'records',
    'engine_table': 'records',
    'format_engine_table': 'records',
    'Candidate': 'candidates',
    'serving_candidates': 'candidates',
    'SERVING': 'candidates',
    'engine_name': 'candidates',
    'cannot_feed': 'candidates',
    'engine_label': 'candidates',
    'where_ids_go': 'candidates',
    'who_can_feed': 'candidates',
    'DEFAULT_STEPS': 'flags',
    'DraftingShape': 'flags',
    'target_architecture': 'flags',
    'auto_notice': 'flags',
    'drafting_shape': 'flags',
    'SEVERITIES': 'sglang_lint',
    'Problem': 'sglang_lint',
    'LintResult': 'sglang_lint',
    'parse_command': 'sglang_lint',
    'server_args_from_info': 'sglang_lint',
    'draft_weight_names': 'sglang_lint',
    'is_eagle3_draft': 'sglang_lint',
    'resolve_inputs': 'sglang_lint',
    'check_target_hidden_size': 'sglang_lint',
    'lint': 'sglang_lint',
    'lint_command': 'sglang_lint',
    'lint_server_info': 'sglang_lint',
    'parse_tap': 'taps',
    'hf_to_tap': 'taps',
    'tap_to_hf': 'taps',
    'tap_sort_key': 'taps',
    'Wiring': 'taps',
    'load_config': 'taps',
    'num_layers': 'taps',
    'id_list': 'taps',
    'draft_layer_ids': 'taps',
    'trained_wiring_from_config': 'taps',
    'Resolution': 'taps',
    'as_wirings': 'taps',
    'ENGINE': 'vllm_lint',
    'SPEC_KEYS': 'vllm_lint',
    'TREE_KEYS': 'vllm_lint',
    'METHODS': 'vllm_lint',
    'DRAFT_SAMPLE_METHODS': 'vllm_lint',
    'REJECTION_SAMPLE_METHODS': 'vllm_lint',
    'CPU_HEAD_SIZES': 'vllm_lint',
    'MASK_TOKEN_KEYS': 'vllm_lint',
    'parse_spec_config': 'vllm_lint',
    'read_source': 'vllm_lint',
    'head_dim': 'vllm_lint',
    'trained_depth': 'vllm_lint',
    'closest_key': 'vllm_lint',
    'ENGINES': 'wiring',
    'resolve': 'wiring',
    'ids_for': 'wiring',
    'table': 'wiring',
    'WiringTable': 'wiring',
    'apply_engine': 'wiring',
    'choose_wiring': 'wiring',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
