"""Live servers: the engine-neutral comparison core, the SGLang client, per-request fingerprints, the loopback stand-in, and regeneration.


The face is lazy: a name is imported from its module the first time it is used, so importing
the package costs nothing (light commands stay free of torch).
"""

import importlib

MODULES = ('chat_regen', 'comparison', 'fake_sglang', 'fingerprint', 'http', 'regenerate', 'sglang_live')

# public name -> the module of this package that defines it
_WHERE = {
    'regenerate_chats': 'chat_regen',
    'asks': 'chat_regen',
    'history': 'chat_regen',
    'DEFAULT_MAX_NEW_TOKENS': 'chat_regen',
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
