"""A tiny byte-level tokenizer with the special tokens of Llama-3, ChatML/Qwen3 and GPT-2, and the real chat
templates kept in ``tests/data/templates`` (nothing downloads).

    >>> tok = byte_tokenizer("chatml")
    >>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    '<|im_start|>user\\nhi<|im_end|>\\n'
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "data" / "templates"
SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>",
            "<|im_end|>", "<|endoftext|>"]


def template(name: str) -> str:
    """The text of ``tests/data/templates/<name>.jinja``."""
    return (TEMPLATES / f"{name}.jinja").read_text()


def byte_tokenizer(name: str | None = None, *, bos_post_processor: bool = False):
    """A ``PreTrainedTokenizerFast``: one id per byte (256, no merges) then :data:`SPECIALS` (ids 256..262);
    chat template ``name`` (a file of TEMPLATES) or none; ``bos_post_processor``: encoding text adds BOS
    (Llama-3's tokenizer does), the setting under which a rendered template gets a second BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    if bos_post_processor:
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", 256)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    if name is not None:
        fast.chat_template = template(name)
    return fast


def enc(tok, text: str) -> list[int]:
    """``text`` as ids without any special-token handling of the wrapper (the reference tests build from)."""
    return tok.backend_tokenizer.encode(text, add_special_tokens=False).ids
