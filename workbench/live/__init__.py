"""Live servers: the engine-neutral comparison core, the SGLang and vLLM clients, per-request fingerprints, the loopback stand-in, and regeneration.


The face is lazy: a name is imported from its module the first time it is used, so importing
the package costs nothing (light commands stay free of torch).
"""

import importlib

MODULES = ('comparison', 'fake_sglang', 'fake_vllm', 'fingerprint', 'http', 'regenerate', 'sglang_live',
           'vllm_live', 'vllm_server')

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
    'parse_meta_info': 'sglang_live',
    'Client': 'sglang_live',
    'sampling_params': 'sglang_live',
    'server_settings': 'sglang_live',
    'generate_samples': 'sglang_live',
    'compare': 'sglang_live',
    'SpecMeta': 'comparison',
    'ServerKind': 'comparison',
    'GREEDY_SHARE': 'comparison',
    'METRICS_SLACK': 'comparison',
    'number_field': 'comparison',
    'count_list': 'comparison',
    'collect': 'comparison',
    'counter_deltas': 'comparison',
    'counter_histogram': 'comparison',
    'greedy_summary': 'comparison',
    'assemble': 'comparison',
    'JsonHandler': 'fake_sglang',
    'engine_generator': 'fake_sglang',
    'loopback': 'fake_sglang',
    'DETAILS': 'fake_vllm',
    'BUG_TEMPERATURE': 'fake_vllm',
    'FakeVllm': 'fake_vllm',
    'spec_decoding': 'fake_vllm',
    'metrics_text': 'fake_vllm',
    'greedy_mismatches': 'fingerprint',
    'VLLM': 'vllm_live',
    'PROBE_TEMPERATURE': 'vllm_live',
    'parse_spec_decoding': 'vllm_live',
    'request_params': 'vllm_live',
    'live_samples': 'vllm_live',
    'detect_k': 'vllm_live',
    'pooled_accept': 'vllm_live',
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
