"""Rows of data: loading JSONL/Parquet/HF datasets into the canonical schema, validating them, previewing one.


The face is lazy: a name is imported from its module the first time it is used, so importing
the package costs nothing (light commands stay free of torch).
"""

import importlib

MODULES = ('conversations', 'dataset', 'hub', 'preview', 'reports', 'schema')

# public name -> the module of this package that defines it
_WHERE = {
    'open_records': 'dataset',
    'json_array': 'dataset',
    'Conversation': 'conversations',
    'conversation': 'conversations',
    'layout_of': 'conversations',
    'sniff': 'conversations',
    'read': 'conversations',
    'ROLES': 'conversations',
    'parse_spec': 'hub',
    'hub_records': 'hub',
    'load': 'dataset',
    'load_tokenizer': 'dataset',
    'Dataset': 'dataset',
    'describe': 'dataset',
    'validate': 'dataset',
    'summary': 'dataset',
    'Preview': 'preview',
    'write_html': 'preview',
    'vocab_size_of': 'preview',
    'decode_ids': 'preview',
    'preview_text': 'preview',
    'preview_html': 'preview',
    'KeyInfo': 'reports',
    'Description': 'reports',
    'ValidationReport': 'reports',
    'Inspection': 'reports',
    'summary_frame': 'reports',
    'CANONICAL': 'schema',
    'ALIASES': 'schema',
    'ID_KEYS': 'schema',
    'RESERVED': 'schema',
    'GENERATION_FIELDS': 'schema',
    'check_generation': 'schema',
    'generation_label': 'schema',
    'Problem': 'schema',
    'MissingKey': 'schema',
    'Row': 'schema',
    'one_line': 'schema',
    'did_you_mean': 'schema',
    'is_int': 'schema',
    'as_list': 'schema',
    'TYPE_NAMES': 'schema',
    'type_name': 'schema',
    'short': 'schema',
    'first_line': 'schema',
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
