"""The one loader: target, draft and data from paths or objects on one device (conversations through the target's chat template), prepare, and the data's greedy agreement with the target.

    >>> from workbench.load import load
    >>> # tgt, drf, ds = load("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl")

The face is lazy (workbench.core.faces): a name is imported from its module on first use, so
importing the package costs nothing and light commands stay free of torch.
"""

from workbench.core.faces import lazy

MODULES = ('agreement', 'chat', 'inputs', 'prepare')

# public name -> the module of this package that defines it
_WHERE = {
    'THRESHOLD': 'agreement',
    'AgreementWarning': 'agreement',
    'greedy_matches': 'agreement',
    'greedy_matches_reference': 'agreement',
    'generation_settings': 'agreement',
    'is_sampled': 'agreement',
    'sampling_label': 'agreement',
    'sampling_note': 'agreement',
    'data_note': 'agreement',
    'warning_text': 'agreement',
    'Agreement': 'agreement',
    'measure': 'agreement',
    'warn_once': 'agreement',
    'plain_warnings': 'agreement',
    'GENERATION_TAG': 'chat',
    'EMPTY_THINK': 'chat',
    'has_generation_tags': 'chat',
    'template_name': 'chat',
    'ChatTemplate': 'chat',
    'turn_row': 'chat',
    'all_turns_row': 'chat',
    'Tally': 'chat',
    'chat_rows': 'chat',
    'chat_dataset': 'chat',
    'named_templates': 'chat',
    'pick_template': 'chat',
    'ChatFile': 'chat',
    'template_names': 'chat',
    'compare_templates': 'chat',
    'TemplateComparison': 'chat',
    'describe_conversations': 'chat',
    'project_root': 'inputs',
    'resolve': 'inputs',
    'same_path': 'inputs',
    'rows': 'inputs',
    'target': 'inputs',
    'draft': 'inputs',
    'dataset': 'inputs',
    'Inputs': 'inputs',
    'load': 'inputs',
    'PrepareResult': 'prepare',
}

__all__ = sorted(set(MODULES) | set(_WHERE))
__getattr__, __dir__ = lazy(__name__, MODULES, _WHERE)
