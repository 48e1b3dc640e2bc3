"""Simulation: the chain fast path and exact loop, SGLang trees, T > 0 (verify distribution, per-depth tables, thresholds, rejection sampling), and the one (distributed) run path.

    >>> from workbench.simulate import accept
    >>> # result, note = accept("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl", engine="sglang")

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('acceptance', 'distributed', 'exact', 'loop', 'rejection', 'sampled', 'thresholds', 'tree_verify', 'verify_walk')

# public name -> the module of this package that defines it
_WHERE = {
    'simulate': 'acceptance',
    'attach_cost_model': 'acceptance',
    'draft_counts': 'acceptance',
    'accept': 'acceptance',
    'accept_served': 'acceptance',
    'SHARD_VERSION': 'distributed',
    'FAIL_ENV': 'distributed',
    'TIMEOUT_ENV': 'distributed',
    'DEFAULT_TIMEOUT_S': 'distributed',
    'torchrun_env': 'distributed',
    'rank_device': 'distributed',
    'Context': 'distributed',
    'init': 'distributed',
    'shard_plan': 'distributed',
    'global_rows': 'distributed',
    'shard_rows': 'distributed',
    'encode_results': 'distributed',
    'decode_results': 'distributed',
    'shard_path': 'distributed',
    'save_shard': 'distributed',
    'load_shard': 'distributed',
    'module_fingerprint': 'distributed',
    'rows_fingerprint': 'distributed',
    'gather_results': 'distributed',
    'default_shard_dir': 'distributed',
    'sharded': 'distributed',
    'exact_decode': 'exact',
    'exact_simulate': 'exact',
    'reply_spans': 'exact',
    'loop_simulate': 'exact',
    'decode_loop': 'loop',
    'RejectionResult': 'rejection',
    'rejection_batch': 'rejection',
    'rejection_chains': 'rejection',
    'data_next_tokens': 'sampled',
    'chain_as_tree': 'sampled',
    'matched_path': 'sampled',
    'child_mass': 'sampled',
    'PER_DEPTH_COLUMNS': 'sampled',
    'StartTable': 'sampled',
    'PerDepth': 'sampled',
    'per_depth_batch': 'sampled',
    'sampled_counts': 'sampled',
    'rejection_chain': 'sampled',
    'ThresholdResult': 'thresholds',
    'trees_mask': 'thresholds',
    'threshold_expectation': 'thresholds',
    'greedy_walk': 'tree_verify',
    'tree_walk_lengths': 'tree_verify',
    'walk_nodes': 'tree_verify',
    'tree_accepted_counts': 'tree_verify',
    'ancestor_mask': 'tree_verify',
    'tree_forward': 'tree_verify',
    'exact_tree_decode': 'tree_verify',
    'TINY_ACC': 'verify_walk',
    'sglang_walk': 'verify_walk',
    'reach_probabilities': 'verify_walk',
    'expected_accept': 'verify_walk',
    'monte_carlo': 'verify_walk',
    'sampled_tree_decode': 'verify_walk',
    'sampled_simulate': 'verify_walk',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
