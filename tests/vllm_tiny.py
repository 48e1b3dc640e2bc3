"""A tiny target + EAGLE-3 draft that a real vLLM (CPU build) loads and serves, built in seconds, no hub.

    python tests/vllm_tiny.py OUT [--draft-vocab 256] [--noise 0.0]     # writes OUT/target, OUT/draft

Made for live checks of ``workbench.live.vllm_server`` (and tests/test_vllm_real.py), not for accuracy work.
Runs under any python with torch, transformers, safetensors and tokenizers (the project's ``.venv`` or
``.venv-vllm``); imports nothing else of the project.

The target is a real ``LlamaForCausalLM`` (N=8 layers, hidden 64, 2 heads of ``head_dim`` 32: vLLM's CPU
attention takes head sizes 32, 64, 80, ... only) whose layers write little into the residual stream
(``layer_scale``), so it is close to a bigram model: the next token is mostly a function of the current one.
Token embeddings are ``[1, 0, ..., 0 | u(t)]`` (a constant in dim 0, a random unit vector u(t) in dims
32..63); the lm_head reads dims 32..63 only.

The draft (``LlamaForCausalLMEagle3``, hand-set weights) computes the same bigram: ``fc`` is zero, q and k
read the constant dim 0 into every rotary pair (with ``rope_theta`` 10 and a large scale the query attends
to its own position only), v/o copy u(t) of the current input token into the hidden state, the MLP writes
nothing, and its lm_head is the target's (plus ``noise``). With ``norm_before_residual`` and a tiny
``hidden_norm`` weight the previous step's hidden state hardly counts. So its drafts are mostly the target's
greedy tokens: accept lengths near K+1 at ``noise=0`` and a full vocabulary, lower with ``noise`` or a
reduced draft vocabulary (``draft_vocab`` < vocab: ``d2t``/``t2d`` shipped; target tokens outside it are
never drafted). The draft's taps (ids ``[2, 4, 5]``) are wired but unused (``fc`` is zero).

Token 0 is ``<eos>`` and the target never emits it, so requests run to ``max_tokens``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

VOCAB = 320
HIDDEN = 64
HEAD_DIM = 32
LAYERS = 8
LAYER_IDS = [2, 4, 5]


def _tokenizer(path: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<eos>": 0, **{f"t{i}": i for i in range(1, vocab)}}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", bos_token="<eos>",
                                   pad_token="<eos>", unk_token="<eos>", model_max_length=1024)
    fast.save_pretrained(str(path))


def build_tiny(out, *, draft_vocab: int = VOCAB, noise: float = 0.0, layer_scale: float = 0.1,
               seed: int = 0) -> dict:
    """Write ``out/target`` (HF Llama + tokenizer) and ``out/draft`` (EAGLE-3); returns their paths."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out)
    target_dir, draft_dir = out / "target", out / "draft"
    g = torch.Generator().manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=HEAD_DIM,
                      max_position_embeddings=1024, tie_word_embeddings=False, bos_token_id=0,
                      eos_token_id=0, pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float().eval()
    half = HIDDEN // 2
    u = torch.randn(VOCAB, half, generator=g)
    u = u / u.norm(dim=1, keepdim=True)
    embed = torch.zeros(VOCAB, HIDDEN)
    embed[:, 0] = 1.0
    embed[:, half:] = u
    head = torch.zeros(VOCAB, HIDDEN)
    head[:, half:] = torch.randn(VOCAB, half, generator=g)
    head[0, half:] = 0.0
    head[0, 0] = -100.0                       # <eos> never wins (dim 0 of the normed stream is ~ +5.7)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(embed)
        model.lm_head.weight.copy_(head)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(layer_scale)
            layer.mlp.down_proj.weight.mul_(layer_scale)
    model.save_pretrained(str(target_dir), safe_serialization=True)
    _tokenizer(target_dir, VOCAB)

    # ---- the draft: one decoder layer on [input_layernorm(embed); hidden_norm(h)] (width 2H)
    h2 = 2 * HIDDEN
    rms = math.sqrt(2.0 / HIDDEN)             # rms of an embedding row: |row|^2 = 2
    a = 8.0                                   # q.k = a^2 sum_i cos(d theta_i): self-attention by ~e^21
    wq = torch.zeros(HEAD_DIM, h2)
    wq[: HEAD_DIM // 2, 0] = a * rms          # dim 0 of the normed embedding is 1/rms
    wk = wq.clone()
    wv = torch.zeros(HEAD_DIM, h2)
    wv[:, half:HIDDEN] = torch.eye(half)      # u(t) of the current token
    wo = torch.zeros(HIDDEN, HEAD_DIM)
    wo[half:, :] = torch.eye(HEAD_DIM)
    inter = 128
    keep = sorted(torch.randperm(VOCAB - 1, generator=g)[: draft_vocab - 1].add(1).tolist())
    keep = [0] + keep if draft_vocab < VOCAB else list(range(VOCAB))
    d_head = head[keep].clone()
    if noise:
        d_head[:, half:] += noise * torch.randn(len(keep), half, generator=g)
    tensors = {
        "fc.weight": torch.zeros(HIDDEN, 3 * HIDDEN),
        "midlayer.hidden_norm.weight": torch.full((HIDDEN,), 1e-3),
        "midlayer.input_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.self_attn.q_proj.weight": wq,
        "midlayer.self_attn.k_proj.weight": wk,
        "midlayer.self_attn.v_proj.weight": wv,
        "midlayer.self_attn.o_proj.weight": wo,
        "midlayer.mlp.gate_proj.weight": 0.02 * torch.randn(inter, HIDDEN, generator=g),
        "midlayer.mlp.up_proj.weight": 0.02 * torch.randn(inter, HIDDEN, generator=g),
        "midlayer.mlp.down_proj.weight": torch.zeros(HIDDEN, inter),
        "norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": d_head,
    }
    if draft_vocab < VOCAB:                   # vLLM refuses d2t when the draft vocab is the full one
        ids = torch.tensor(keep, dtype=torch.int64)
        tensors["d2t"] = ids - torch.arange(len(keep), dtype=torch.int64)
        t2d = torch.zeros(VOCAB, dtype=torch.bool)
        t2d[ids] = True
        tensors["t2d"] = t2d
    draft_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(draft_dir / "model.safetensors"),
              metadata={"format": "pt"})
    draft_cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": HIDDEN, "intermediate_size": inter, "num_hidden_layers": 1,
        "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 1024,
        "rope_theta": 10.0, "rope_parameters": {"rope_type": "default", "rope_theta": 10.0},
        "vocab_size": VOCAB, "draft_vocab_size": len(keep), "tie_word_embeddings": False,
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
        "norm_before_residual": True,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": LAYER_IDS, "use_aux_hidden_state": True},
    }
    (draft_dir / "config.json").write_text(json.dumps(draft_cfg, indent=2) + "\n")
    return {"target": str(target_dir), "draft": str(draft_dir), "vocab_size": VOCAB,
            "draft_vocab_size": len(keep)}


def greedy(target_dir, prompt: list[int], n: int) -> list[int]:
    """The target's greedy continuation (HF, fp32): what a T=0 server must return."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                             min_new_tokens=n, pad_token_id=0)
    return out[0, len(prompt):].tolist()


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--draft-vocab", type=int, default=VOCAB)
    p.add_argument("--noise", type=float, default=0.0)
    p.add_argument("--layer-scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print(json.dumps(build_tiny(a.out, draft_vocab=a.draft_vocab, noise=a.noise, layer_scale=a.layer_scale,
                                seed=a.seed)))
