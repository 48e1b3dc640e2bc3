"""Live servers: the engine-neutral comparison core, the SGLang client, per-request fingerprints, the loopback stand-in, and regeneration.

    >>> from workbench.live import HttpClient
    >>> HttpClient("http://127.0.0.1:30000/").url
    'http://127.0.0.1:30000'

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('comparison', 'fake_sglang', 'fingerprint', 'http', 'regenerate', 'sglang_live', 'vllm_server')

# public name -> the module of this package that defines it
_WHERE = {
    'VERDICTS': 'comparison',
    'ALPHA': 'comparison',
    'LiveSample': 'comparison',
    'prompt_of': 'comparison',
    'Comparison': 'comparison',
    'offline_results': 'comparison',
    'with_counting': 'comparison',
    'VARIANTS': 'fake_sglang',
    'SAMPLING_FIELDS': 'fake_sglang',
    'spec_meta': 'fake_sglang',
    'FakeServer': 'fake_sglang',
    'sampling_of': 'fake_sglang',
    'prompt_key': 'fake_sglang',
    'sampled_generator': 'fake_sglang',
    'exact_generator': 'fake_sglang',
    'serve': 'fake_sglang',
    'FIELDS': 'fingerprint',
    'COUNTING': 'fingerprint',
    'ServerSteps': 'fingerprint',
    'server_steps': 'fingerprint',
    'walk': 'fingerprint',
    'fields_of': 'fingerprint',
    'reported': 'fingerprint',
    'status': 'fingerprint',
    'sign_test': 'fingerprint',
    'more_to_separate': 'fingerprint',
    'near_ties': 'fingerprint',
    'continuation': 'fingerprint',
    'offline_requests': 'fingerprint',
    'exact_requests': 'fingerprint',
    'check_url': 'http',
    'NoRedirect': 'http',
    'OPENER': 'http',
    'HttpClient': 'http',
    'snippet': 'http',
    'SKIP_REASONS': 'regenerate',
    'TargetInfo': 'regenerate',
    'eos_ids_of': 'regenerate',
    'target_info': 'regenerate',
    'Job': 'regenerate',
    'Generated': 'regenerate',
    'make_job': 'regenerate',
    'generate_reference': 'regenerate',
    'generate_hf': 'regenerate',
    'generate_server': 'regenerate',
    'settings_of': 'regenerate',
    'output_row': 'regenerate',
    'RegenerateResult': 'regenerate',
    'SPEC_KEYS': 'sglang_live',
    'SpecMeta': 'sglang_live',
    'parse_meta_info': 'sglang_live',
    'Client': 'sglang_live',
    'sampling_params': 'sglang_live',
    'server_settings': 'sglang_live',
    'generate_samples': 'sglang_live',
    'compare': 'sglang_live',
    'VENV': 'vllm_server',
    'PYTHON_ENV': 'vllm_server',
    'APPLIED': 'vllm_server',
    'NOT_APPLIED': 'vllm_server',
    'BASE_ENV': 'vllm_server',
    'VllmServer': 'vllm_server',
    'find_python': 'vllm_server',
    'free_port': 'vllm_server',
    'build_command': 'vllm_server',
    'fix_state': 'vllm_server',
    'stop': 'vllm_server',
    'start': 'vllm_server',
    'running_server': 'vllm_server',
    'post': 'vllm_server',
    'model_name': 'vllm_server',
    'complete': 'vllm_server',
    'spec_metrics': 'vllm_server',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
