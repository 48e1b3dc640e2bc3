"""Make a tiny random LlamaForCausalLM target and a JSONL of rows for the e2e check.

Usage: python trainers/speculators/make_tiny.py OUT_DIR [--layers 4] [--rows 12]
Writes OUT_DIR/target (config.json + model.safetensors, no tokenizer: pass
--mask-token-id to speculators train) and OUT_DIR/rows.jsonl.
"""

import argparse
import json
import random
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--rows", type=int, default=12)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    out = Path(a.out)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    cfg = LlamaConfig(
        vocab_size=a.vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=a.layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
        tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # a non-trivial final norm, so pre- and post-norm states differ
        model.model.norm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(out / "target")
    with open(out / "rows.jsonl", "w") as f:
        for _ in range(a.rows):
            n = rng.randint(12, 40)
            prompt = rng.randint(3, n // 2)
            # a small token range so a reduced draft vocabulary covers most targets
            ids = [1] + [rng.randint(3, 100) for _ in range(n - 1)]
            mask = [0] * prompt + [1] * (n - prompt)
            f.write(json.dumps({"input_ids": ids, "loss_mask": mask}) + "\n")
    print(f"wrote {out / 'target'} and {out / 'rows.jsonl'}")


if __name__ == "__main__":
    main()
