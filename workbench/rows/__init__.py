"""Rows of data: loading JSONL/Parquet/HF datasets (and hf: names) into the canonical schema, conversation and prompt-only layouts, validating, previewing.

    >>> from workbench import rows
    >>> rows.load([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}]).rows()[0]["n_response_tokens"]
    2

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('conversations', 'dataset', 'hub', 'preview', 'reports', 'schema')

# public name -> the module of this package that defines it
_WHERE = {
    'load': 'dataset',
    'open_records': 'dataset',
    'json_array': 'dataset',
    'load_tokenizer': 'dataset',
    'Dataset': 'dataset',
    'describe': 'dataset',
    'validate': 'dataset',
    'summary': 'dataset',
    'ROLES': 'conversations',
    'KEEP': 'conversations',
    'CHAT_KEYS': 'conversations',
    'PROMPT_KEYS': 'conversations',
    'Conversation': 'conversations',
    'layout_of': 'conversations',
    'sniff': 'conversations',
    'conversation': 'conversations',
    'read': 'conversations',
    'HOW': 'hub',
    'parse_spec': 'hub',
    'hub_records': 'hub',
    'Preview': 'preview',
    'write_html': 'preview',
    'vocab_size_of': 'preview',
    'decode_ids': 'preview',
    'preview_text': 'preview',
    'preview_html': 'preview',
    'token_html': 'preview',
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
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
