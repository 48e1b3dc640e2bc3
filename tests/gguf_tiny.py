"""A tiny Llama GGUF written with the ``gguf`` package (2 layers, H=64, a 64-token BPE, a ChatML template): what
``workbench.demo.gguf.convert`` reads in tests, instead of the real 98 MB model."""

from __future__ import annotations

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_tiny_gguf(path, *, vocab: int = 64, hidden: int = 64, layers: int = 2, heads: int = 2, kv_heads: int = 1,
                    seed: int = 0):
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(2 * hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // heads)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    letters = [chr(c) for c in range(ord("a"), ord("a") + 26)] + [chr(c) for c in range(ord("A"), ord("A") + 26)]
    toks = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + letters + ["Ġ", "Ċ", "ab", "Ġa"]
    toks += [f"x{i}" for i in range(vocab - len(toks))]
    w.add_token_list(toks[:vocab])
    w.add_token_types([3, 3, 3] + [1] * (vocab - 3))
    w.add_token_merges(["a b", "Ġ a"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_chat_template(TEMPLATE)
    rng = np.random.default_rng(seed)
    hd = hidden // heads

    def rand(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    rand("token_embd.weight", vocab, hidden)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        rand(f"blk.{i}.attn_q.weight", hidden, hidden)
        rand(f"blk.{i}.attn_k.weight", hd * kv_heads, hidden)
        rand(f"blk.{i}.attn_v.weight", hd * kv_heads, hidden)
        rand(f"blk.{i}.attn_output.weight", hidden, hidden)
        rand(f"blk.{i}.ffn_gate.weight", 2 * hidden, hidden)
        rand(f"blk.{i}.ffn_up.weight", 2 * hidden, hidden)
        rand(f"blk.{i}.ffn_down.weight", hidden, 2 * hidden)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
