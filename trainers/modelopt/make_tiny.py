"""Make a tiny random HF LlamaForCausalLM target and pre-tokenised training rows, for the CPU proof.

    .venv-modelopt/bin/python trainers/modelopt/make_tiny.py OUT_DIR [--layers 6] [--rows 12] [--seed 0]

Writes OUT_DIR/target/ (config.json + model.safetensors, no tokenizer: train.py needs none) and
OUT_DIR/rows.jsonl: one JSON object per line with ``input_ids`` and ``loss_mask`` (0 on the prompt,
1 on the answer), the project's row format. The shape mimics SmolLM2-135M-Instruct in miniature:
GQA (2 query heads, 1 KV head, head_dim 32), tied embeddings, rope_theta 100000.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
import transformers


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=320)
    ap.add_argument("--rows", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    torch.manual_seed(a.seed)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=a.layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32).eval()
    model.save_pretrained(a.out / "target")

    rng = random.Random(a.seed)
    with open(a.out / "rows.jsonl", "w") as f:
        for _ in range(a.rows):
            n_prompt, n_answer = rng.randint(6, 14), rng.randint(10, 24)
            # a skewed token distribution, so a reduced draft vocabulary has frequent tokens to keep
            ids = [1] + [min(a.vocab - 1, 3 + int(rng.expovariate(1 / 40))) for _ in range(n_prompt + n_answer - 2)] + [2]
            mask = [0] * n_prompt + [1] * n_answer
            f.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
    print(f"make_tiny: {a.out}/target ({a.layers} layers, hidden 64, vocab {a.vocab}) and {a.rows} rows in {a.out}/rows.jsonl")


if __name__ == "__main__":
    main()
