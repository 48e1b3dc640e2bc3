"""The demo's target: a real HF ``LlamaForCausalLM`` trained on the corpus, with a planted "massive activation".

    >>> # path = train_target(token_stream, SIZES["smoke"], vocab_size=320, seed=0, path="data/demo/target")

:func:`massive_vector` / :func:`set_massive` add a fixed constant to one layer's output and remove it two
layers later, so only SGLang's third tap carries it: the mismatched draft's wiring mistake then costs what it
costs on real models (docs/demo.md).
"""

from __future__ import annotations

import contextlib
import os
import random

from workbench.core.errors import WorkbenchError
from workbench.demo.recipe import EOS, MAX_POSITIONS, THREADS, DemoSize, demo_taps
from workbench.model.train import deterministic


def train_tokenizer(texts: list[str], vocab_size: int, path, chat_template=None):
    """Train a byte-level BPE on ``texts`` and save it so ``AutoTokenizer.from_pretrained(path)`` loads it, with
    ``chat_template`` (a template text or ``{name: text}``) when given."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=None,
                                   pad_token=EOS, model_max_length=MAX_POSITIONS)
    if chat_template is not None:
        fast.chat_template = chat_template
    fast.save_pretrained(str(path))
    return fast



@contextlib.contextmanager
def deterministic_seed(seed: int, threads: int = THREADS):
    """Seeds, deterministic algorithms and a fixed thread count for the duration; restored after.

    The demo's fixed :data:`~workbench.demo.recipe.THREADS` (1): bit-identical results, and on a shared 2-core
    machine it is much faster than two (OpenMP threads spin-wait when the cores are busy).
    """
    import torch


    old_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(threads, os.cpu_count() or 1)))
    random.seed(seed)
    try:
        with deterministic(seed):
            yield
    finally:
        torch.set_num_threads(old_threads)



def realistic_init(model, embed_std: float, resid_std: float, growth: float = 0.0) -> None:
    """Re-initialise a Llama's token embedding (std ``embed_std``) and the projections that write into
    the residual stream (``o_proj``/``down_proj``, std ``resid_std * (1 + growth * layer)``).

    A small embedding keeps ``embed`` far smaller than ``L1`` after training, as in real LLMs (the
    demo's manifest records the measured norms and cosines per tap, ``tap_stats``).

        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> m = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
        ...                                  num_hidden_layers=2, num_attention_heads=2))
        >>> realistic_init(m, 0.01, 0.2)
        >>> round(float(m.model.embed_tokens.weight.detach().std()), 2)
        0.01

    Uses the torch generator's current state (seed it first). HF's default is 0.02 everywhere.
    """
    import torch

    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0.0, embed_std)
        for i, layer in enumerate(model.model.layers):
            layer.self_attn.o_proj.weight.normal_(0.0, resid_std * (1 + growth * i))
            layer.mlp.down_proj.weight.normal_(0.0, resid_std * (1 + growth * i))



def write_blocks(n_layers: int, hidden_size: int) -> list:
    """For each decoder layer, the residual dims it may write (a ``range``), or None (all dims).

    The story's layer ids split the layers into stretches (``<= ids[0]``, ``<= ids[1]``,
    ``<= ids[2]``), each writing only into its own third of the hidden dims; later layers write
    anywhere. So each tap SGLang feeds adds, to the tap trained in that slot, a block of
    directions that tap never had.

        >>> [b if b is None else (b.start, b.stop) for b in write_blocks(8, 30)]
        [(0, 10), (0, 10), (10, 20), (10, 20), (20, 30), None, None, None]
    """
    ids = demo_taps(n_layers)["layer_ids"]
    edges = [round(hidden_size * j / 3) for j in range(4)]
    out = []
    for i in range(n_layers):
        j = next((j for j, last in enumerate(ids) if i <= last), None)
        out.append(None if j is None else range(edges[j], edges[j + 1]))
    return out



def write_masks(model, n_layers: int) -> dict:
    """``{weight: 0/1 mask}`` for o_proj/down_proj rows outside each layer's write block."""
    import torch

    masks = {}
    for layer, block in zip(model.model.layers, write_blocks(n_layers, model.config.hidden_size)):
        if block is None:
            continue
        for w in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight):
            m = torch.zeros_like(w)
            m[block.start:block.stop] = 1
            masks[w] = m
    return masks



def apply_masks(masks: dict) -> None:
    import torch

    with torch.no_grad():
        for w, m in masks.items():
            w.mul_(m)



def growth_loss(hidden_states, n_layers: int, growth: float):
    """Squared log-distance of each story tap's new write block from ``growth`` x the previous tap.

    For story ids ``[a, b, c]``: spread (RMS over tokens after removing the batch mean) of ``L_b``'s
    block 1 vs the spread of ``L_a``, and of ``L_c``'s block 2 vs ``L_b``. ``hidden_states``: HF's
    tuple (``hidden_states[k + 1]`` is ``L{k}``).
    """
    import math

    import torch

    ids = demo_taps(n_layers)["layer_ids"]
    blocks = write_blocks(n_layers, hidden_states[0].shape[-1])

    def spread(x):
        x = x.reshape(-1, x.shape[-1]).float()
        return (x - x.mean(0, keepdim=True)).pow(2).sum(-1).mean().sqrt()

    total = 0.0
    for prev, nxt in zip(ids, ids[1:]):
        blk = blocks[nxt]
        new = spread(hidden_states[nxt + 1][..., blk.start:blk.stop])
        old = spread(hidden_states[prev + 1])
        total = total + (torch.log(new.clamp(min=1e-6) / old.clamp(min=1e-6)) - math.log(growth)) ** 2
    return total



def massive_vector(n_layers: int, hidden_size: int, size: float):
    """The fixed constant the demo target writes into ``L{N-4}``: ``+size, -size, ...`` on the last
    story block of dims (``write_blocks``), zero elsewhere.

        >>> massive_vector(8, 6, 2.0).tolist()
        [0.0, 0.0, 0.0, 0.0, 2.0, -2.0]
    """
    import torch

    blk = write_blocks(n_layers, hidden_size)[demo_taps(n_layers)["layer_ids"][-1]]
    c = torch.zeros(hidden_size)
    c[blk.start:blk.stop] = size * (1 - 2 * (torch.arange(blk.stop - blk.start) % 2)).float()
    return c



def set_massive(model, n_layers: int, size: float) -> None:
    """Zero every bias, then layer N-4's ``down_proj`` bias = the massive vector and layer N-3's
    ``o_proj`` bias = minus it: ``L{N-4}`` carries a large constant that only layer N-3's attention
    reads (a "massive activation", as real LLMs have in their residual streams), and every other
    layer computes as without it. The biases are not trained."""
    import torch

    c = massive_vector(n_layers, model.config.hidden_size, size)
    k = demo_taps(n_layers)["layer_ids"][-1]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
                p.requires_grad_(False)
        model.model.layers[k].mlp.down_proj.bias.copy_(c)
        model.model.layers[k + 1].self_attn.o_proj.bias.copy_(-c)



def train_target(token_stream: list[int], size: DemoSize, vocab_size: int, seed: int, path, *,
                 eos_id: int, progress: bool = True) -> dict:
    """Train a ``LlamaForCausalLM`` on random windows of ``token_stream``; save it to ``path``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=size.hidden_size,
                         intermediate_size=size.intermediate_size, num_hidden_layers=size.n_layers,
                         num_attention_heads=size.n_heads, num_key_value_heads=size.n_heads,
                         head_dim=size.attn_head_dim,
                         max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=False, rms_norm_eps=1e-5,
                         bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
                         mlp_bias=size.massive > 0, attention_bias=size.massive > 0)
    data = torch.tensor(token_stream, dtype=torch.long)
    L = size.target_seq_len
    if data.numel() < L + 2:
        raise WorkbenchError(f"demo text has only {data.numel()} tokens (need more than {L + 1})")
    losses = []
    with deterministic_seed(seed):
        model = LlamaForCausalLM(config)
        realistic_init(model, size.embed_std, size.resid_std, size.resid_growth)
        if size.massive > 0:
            set_massive(model, size.n_layers, size.massive)
        model.train()
        embed = model.get_input_embeddings().weight
        resid = [p for layer in model.model.layers for p in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight)]
        special = {id(embed)} | {id(p) for p in resid} | {id(p) for n, p in model.named_parameters()
                                                            if n.endswith(".bias")}   # biases: fixed
        groups = [{"params": [embed], "mult": size.embed_lr_mult}, {"params": resid, "mult": size.resid_lr_mult},
                  {"params": [p for p in model.parameters() if id(p) not in special], "mult": 1.0}]
        opt = torch.optim.AdamW(groups, lr=size.target_lr, weight_decay=0.0)
        masks = write_masks(model, size.n_layers) if size.write_blocks else {}
        apply_masks(masks)
        gen = torch.Generator().manual_seed(seed)
        warm = max(1, size.target_steps // 20)
        for step in range(size.target_steps):
            lr = size.target_lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * (1 - step / size.target_steps))
            for g in opt.param_groups:
                g["lr"] = lr * g["mult"]
            starts = torch.randint(0, data.numel() - L - 1, (size.target_batch,), generator=gen)
            x = torch.stack([data[s:s + L] for s in starts.tolist()])
            out = model(input_ids=x, labels=x, output_hidden_states=size.tap_growth > 0)
            loss = out.loss
            if size.tap_growth > 0:
                loss = loss + size.growth_weight * growth_loss(out.hidden_states, size.n_layers, size.tap_growth)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            apply_masks(masks)
            losses.append(round(float(out.loss.detach()), 4))
            if progress and (step % max(1, size.target_steps // 5) == 0 or step == size.target_steps - 1):
                print(f"  target step {step + 1}/{size.target_steps}: loss {losses[-1]:.3f}", flush=True)
    model.eval()
    model.save_pretrained(str(path), safe_serialization=True)
    return {"losses": losses, "n_params": sum(p.numel() for p in model.parameters()),
            "n_tokens": int(data.numel())}
