"""The models: the EAGLE-3 draft and its attention, memory-budgeted heads, checkpoints, the target's one capture pass, SGLang's tree builders, and the trainer.

    >>> from workbench.model import draft, capture          # the draft and the target's one pass
    >>> # tgt = capture.load_target("data/demo/target"); batches = capture.extract(tgt, rows, ["L1", "L3"])

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('attention', 'capture', 'checkpoint', 'chunks', 'draft', 'served', 'train', 'tree', 'tree_reference')

# public name -> the module of this package that defines it
_WHERE = {
    'KERNELS': 'attention',
    'prefix_attention': 'attention',
    'reference_attention': 'attention',
    'CACHE_VERSION': 'capture',
    'Target': 'capture',
    'find_layers': 'capture',
    'target_from_model': 'capture',
    'hf_progress': 'capture',
    'load_target': 'capture',
    'loop_inputs': 'capture',
    'check_width': 'capture',
    'tap_hooks': 'capture',
    'Batch': 'capture',
    'union_taps': 'capture',
    '_SPLITS': 'capture',
    'split_head': 'capture',
    'target_fingerprint': 'capture',
    'extract': 'capture',
    'count_forwards': 'capture',
    'draft_architecture': 'checkpoint',
    'load_draft': 'checkpoint',
    'mixed_conventions': 'checkpoint',
    'save_draft': 'checkpoint',
    'FREE_SHARE': 'chunks',
    'DEFAULT_CAP': 'chunks',
    'parse_memory': 'chunks',
    'free_memory': 'chunks',
    'memory_budget': 'chunks',
    'rows_per_chunk': 'chunks',
    'HeadOutput': 'chunks',
    'head_chunks': 'chunks',
    'ARCHITECTURE': 'draft',
    'new_draft_config': 'draft',
    'Eagle3Draft': 'draft',
    'ChainOutput': 'draft',
    'unroll': 'draft',
    'check_chain_inputs': 'draft',
    'run_chains': 'draft',
    'check_one_sequence': 'draft',
    'chain_reference': 'draft',
    'DraftDescription': 'draft',
    'describe_draft': 'draft',
    'verify_probs': 'served',
    'PARTIAL': 'served',
    'served_stats': 'served',
    'token_probs': 'served',
    'head_logits': 'served',
    'TrainLog': 'train',
    'deterministic': 'train',
    'ttt_targets': 'train',
    'train_on_batches': 'train',
    'train_draft': 'train',
    'build_vocab_map': 'train',
    'TreeShape': 'tree',
    'n_candidates': 'tree',
    'tree_shape': 'tree',
    'prefix_extra_attention': 'tree',
    'depth_of': 'tree',
    'select_nodes': 'tree',
    'TreeOutput': 'tree',
    'draft_trees': 'tree',
    'Node': 'tree_reference',
    'Tree': 'tree_reference',
    'select_reference': 'tree_reference',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
