"""The built-in demo: recipe, build, and story.

    >>> from workbench.demo import SIZES, fill_paths
    >>> SIZES["smoke"].n_layers
    8

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('build', 'chat', 'fetch', 'gguf', 'real', 'real_recipe', 'recipe', 'samples', 'story', 'target')

# public name -> the module of this package that defines it
_WHERE = {
    'MANIFEST': 'build',
    'FORMAT': 'build',
    'read_manifest': 'build',
    'is_built': 'build',
    'build_reason': 'build',
    'build_demo': 'build',
    'ensure_demo': 'build',
    'DEMO_PATHS': 'build',
    'BUILD_TIME': 'build',
    'fill_paths': 'build',
    'N_QUESTIONS': 'build',
    'TAGGED': 'chat',
    'PLAIN': 'chat',
    'TEMPLATES': 'chat',
    'CHAT': 'chat',
    'QUESTIONS': 'chat',
    'chat_prompts': 'chat',
    'write_chat_files': 'chat',
    'FOREIGN': 'recipe',
    'SAMPLED_TEMPERATURES': 'recipe',
    'STDLIB_MODULES': 'recipe',
    'SOURCES': 'recipe',
    'EOS': 'recipe',
    'MAX_POSITIONS': 'recipe',
    'VLLM_CPU_HEAD_DIMS': 'recipe',
    'DemoSize': 'recipe',
    'SIZES': 'recipe',
    'demo_taps': 'recipe',
    'stdlib_files': 'recipe',
    'split_source': 'recipe',
    'corpus': 'recipe',
    'encode': 'recipe',
    'file_notes': 'recipe',
    'cut_prompts': 'samples',
    'greedy_continue': 'samples',
    'make_rows': 'samples',
    'lively_rows': 'samples',
    'foreign_rows': 'samples',
    'demo_row': 'samples',
    'sampled_files': 'samples',
    'write_jsonl': 'samples',
    'response_counts': 'samples',
    'summary': 'story',
    'story_table': 'story',
    'tap_stats': 'story',
    'response_stats': 'story',
    'measure_story': 'story',
    'train_tokenizer': 'target',
    'deterministic_seed': 'target',
    'realistic_init': 'target',
    'write_blocks': 'target',
    'write_masks': 'target',
    'apply_masks': 'target',
    'growth_loss': 'target',
    'massive_vector': 'target',
    'set_massive': 'target',
    'train_target': 'target',
    'sampled_name': 'samples',
    'Wheel': 'fetch',
    'MODEL': 'fetch',
    'HUMANEVAL': 'fetch',
    'cache_dir': 'fetch',
    'convert': 'gguf',
    'build_real': 'real',
    'RealSize': 'real_recipe',
    'REAL': 'real_recipe',
    'real_taps': 'real_recipe',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
