"""Stand-in servers for tests and demonstrations: loopback servers that speak SGLang's and vLLM's protocols and
decode with the workbench's own speculative loop, feeding the draft whatever wiring they are told to.

    >>> from workbench.testing import serve            # the SGLang stand-in (fake_sglang.serve)
    >>> # with serve(target, draft, "L1,L3,L4", K=3) as url: ...

They are not servers to measure: a comparison against a stand-in shows the method, and finds the wiring the
stand-in was configured with (issue 35). The face is lazy (workbench.core.faces).
"""

from workbench.core.faces import lazy

MODULES = ('fake_sglang', 'fake_vllm')

# public name -> the module of this package that defines it
_WHERE = {
    'VARIANTS': 'fake_sglang',
    'SAMPLING_FIELDS': 'fake_sglang',
    'spec_meta': 'fake_sglang',
    'FakeServer': 'fake_sglang',
    'JsonHandler': 'fake_sglang',
    'sampling_of': 'fake_sglang',
    'prompt_key': 'fake_sglang',
    'sampled_generator': 'fake_sglang',
    'exact_generator': 'fake_sglang',
    'serve': 'fake_sglang',
    'engine_generator': 'fake_sglang',
    'loopback': 'fake_sglang',
    'DETAILS': 'fake_vllm',
    'BUG_TEMPERATURE': 'fake_vllm',
    'FakeVllm': 'fake_vllm',
    'spec_decoding': 'fake_vllm',
    'metrics_text': 'fake_vllm',
    'stop_at_eos': 'fake_vllm',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
