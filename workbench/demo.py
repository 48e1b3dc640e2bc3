"""The built-in demo: the wiring bug reproduced end to end, offline, on a CPU.

    >>> from workbench.demo import build_demo, read_manifest
    >>> out = build_demo("data/demo", size="smoke", seed=0, progress=False)   # doctest: +SKIP
    >>> read_manifest(out)["drafts"]["draft-mismatched"]["trained_taps"]      # doctest: +SKIP
    ['embed', 'L1', 'L3']

What gets built into ``out`` (every piece with the library's own code paths):

- ``tokenizer/``: a byte-level BPE (``tokenizers``) trained on the standard library's own source
  and docstrings, wrapped in ``PreTrainedTokenizerFast`` (``AutoTokenizer.from_pretrained`` loads it).
- ``target/``: a ``LlamaForCausalLM`` (N ≥ 8 decoder layers) trained briefly with a plain torch loop,
  saved with ``save_pretrained`` and reloaded through :func:`workbench.capture.load_target`.
  It carries a fixed "massive" constant in ``L{N-4}`` that the next layer removes (:func:`set_massive`),
  and its story stretches write into their own blocks of dims (:func:`write_blocks`): SGLang's taps
  differ from the mismatched draft's training taps by construction (``docs/demo.md``).
- ``train.jsonl`` / ``val.jsonl``: prompts cut from held-out stdlib files, responses = the target's
  greedy continuation; sources ``code`` and ``prose``; loss_mask 0 on the prompt, 1 on the response;
  each row's ``generation`` says how it was made.
- ``val-foreign.jsonl``: val's prompts with the stdlib text's own continuation (:func:`foreign_rows`);
  ``val-T0.3.jsonl``, ``val-T0.7.jsonl``, ``val-T1.0.jsonl``: val's prompts with responses sampled
  from the target through :func:`workbench.regenerate.regenerate` (:func:`sampled_files`).
- ``draft-mismatched/``: an EAGLE-3 draft trained on ``embed,L1,L{N//2-1}`` whose config says ids
  ``[1, N//2-1, N-4]`` (SGLang serves ``L1,L{N//2-1},L{N-4}``): the classic bug.
- ``draft-aligned/``: the same recipe trained on ``L1,L{N//2-1},L{N-4}``: the healthy reference.
- ``manifest.json``: sizes, seeds, taps, losses, per-step accuracy, timings (wall and CPU), versions,
  ``tap_stats`` (norm per tap, cosines between taps), ``data.responses`` (how varied the responses
  are) and ``story``: each draft's decode-path accept length on ``val.jsonl`` under its training taps
  and under SGLang's (:func:`measure_story`).

The build happens in a temporary sibling folder that is renamed into place at the end, so an
interrupted build never leaves a demo that looks finished. Deterministic given ``seed``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import platform
import random
import shutil
import sysconfig
import time
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.files import atomic_write, write_json

MANIFEST = "manifest.json"
FORMAT = 3  # bump when the layout of the demo changes: older builds are then rebuilt
FOREIGN = "val-foreign.jsonl"
SAMPLED_TEMPERATURES = (0.3, 0.7, 1.0)

# A fixed selection of standard-library modules (present as a .py file or a package __init__ in
# every CPython >= 3.10). Every 4th one (index % 4 == 3) is held out of the target's training text
# and used for prompts: even positions of the held-out list for train.jsonl, odd ones for val.jsonl.
STDLIB_MODULES = (
    "argparse", "ast", "base64", "bisect", "calendar", "cmd", "codecs", "collections",
    "colorsys", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "dis", "doctest", "enum", "filecmp", "fnmatch", "fractions", "ftplib",
    "functools", "gettext", "glob", "gzip", "heapq", "hmac", "imaplib", "inspect",
    "ipaddress", "json", "logging", "mailbox", "numbers", "operator", "optparse", "pathlib",
    "pickle", "platform", "pprint", "queue", "quopri", "random", "sched", "secrets",
    "selectors", "shlex", "shutil", "smtplib", "socket", "statistics", "string", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "trace", "traceback",
    "typing", "uuid", "warnings", "wave", "weakref", "zipfile",
)
SOURCES = ("code", "prose")
EOS = "<|endoftext|>"
MAX_POSITIONS = 512


@dataclass(frozen=True)
class DemoSize:
    """Every knob of one demo size (recorded in the manifest)."""

    name: str
    n_modules: int            # how many of STDLIB_MODULES are used
    vocab_size: int
    n_layers: int
    hidden_size: int
    intermediate_size: int
    n_heads: int
    target_steps: int
    target_seq_len: int
    target_batch: int
    target_lr: float
    n_train: int              # rows of train.jsonl (half code, half prose)
    n_val: int
    prompt_len: int
    response_len: int
    draft_K: int
    draft_epochs: int
    draft_lr: float
    draft_batch: int
    embed_std: float = 0.02   # init std of the target's token embedding (small, as in real LLMs)
    resid_std: float = 0.02   # init std of o_proj/down_proj (what each layer writes into the residual)
    resid_growth: float = 0.0 # layer l's o_proj/down_proj init std = resid_std * (1 + resid_growth * l)
    embed_lr_mult: float = 1.0  # learning-rate multiplier of the embedding (kept small, as in real LLMs)
    resid_lr_mult: float = 1.0  # learning-rate multiplier of o_proj/down_proj (large writes, growing stream)
    story_K: int = 4          # draft depth of the story numbers measured on val.jsonl
    write_blocks: bool = False  # layers up to each story tap write only into their own block of dims
    tap_growth: float = 0.0   # > 0: train each story tap's new block to tap_growth x the previous tap's spread
    growth_weight: float = 1.0  # weight of that term in the target's loss
    massive: float = 0.0      # > 0: a fixed constant (this size per dim, block 3) in L{N-4}, removed by layer N-3


SIZES = {
    "smoke": DemoSize("smoke", n_modules=16, vocab_size=320, n_layers=8, hidden_size=32,
                      intermediate_size=64, n_heads=4, target_steps=400, target_seq_len=48,
                      target_batch=16, target_lr=6e-3, n_train=64, n_val=16, prompt_len=12,
                      response_len=16, draft_K=4, draft_epochs=30, draft_lr=3e-3, draft_batch=16,
                      embed_std=0.005, write_blocks=True, tap_growth=3.0, growth_weight=0.05, massive=4.0),
    "default": DemoSize("default", n_modules=len(STDLIB_MODULES), vocab_size=1024, n_layers=16,
                        hidden_size=48, intermediate_size=144, n_heads=4, target_steps=900,
                        target_seq_len=96, target_batch=16, target_lr=6e-3, n_train=512, n_val=128,
                        prompt_len=24, response_len=32, draft_K=4, draft_epochs=6, draft_lr=3e-3,
                        draft_batch=16, embed_std=0.005, write_blocks=True, tap_growth=3.0, growth_weight=0.05,
                        massive=4.0),
}


def demo_taps(n_layers: int) -> dict:
    """The demo's wirings for a target with ``n_layers`` decoder layers.

        >>> demo_taps(8)
        {'mismatched': ['embed', 'L1', 'L3'], 'aligned': ['L1', 'L3', 'L4'], 'layer_ids': [1, 3, 4]}
    """
    n = int(n_layers)
    if n < 8:
        raise WorkbenchError(f"the demo target needs at least 8 decoder layers, got n_layers={n}")
    ids = [1, n // 2 - 1, n - 4]
    return {"mismatched": ["embed", f"L{ids[0]}", f"L{ids[1]}"],
            "aligned": [f"L{i}" for i in ids], "layer_ids": ids}


# ----------------------------------------------------------------------------------------- text

def stdlib_files(n_modules: int | None = None) -> list[Path]:
    """The first ``n_modules`` of :data:`STDLIB_MODULES` that exist here, as paths (fixed order)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for name in STDLIB_MODULES[: n_modules or len(STDLIB_MODULES)]:
        for cand in (root / f"{name}.py", root / name / "__init__.py"):
            if cand.is_file():
                files.append(cand)
                break
    if len(files) < 8:
        raise WorkbenchError(f"found only {len(files)} standard-library source files under {root} "
                             f"(expected most of {', '.join(STDLIB_MODULES[:8])}, ...)")
    return files


def split_source(text: str) -> dict:
    """Split Python source into ``{"code": ..., "prose": ...}``: prose = docstrings and comments,
    code = the remaining lines.

        >>> s = split_source('def f(x):\\n    "Double x."\\n    return 2 * x  # twice\\n')
        >>> s["prose"].split()
        ['Double', 'x.', 'twice']
        >>> s["code"].splitlines()
        ['def f(x):', '    return 2 * x']
    """
    import inspect

    lines = text.splitlines()
    drop, prose = set(), []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None),
                                                                         ast.Constant) \
                        and isinstance(body[0].value.value, str):
                    first = body[0]
                    drop.update(range(first.lineno - 1, first.end_lineno))
                    prose.append(inspect.cleandoc(first.value.value))
    code_lines = list(lines)
    with contextlib.suppress(tokenize.TokenError, IndentationError, SyntaxError):
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                body = tok.string.lstrip("#").strip()
                row = tok.start[0] - 1
                if body and not body.startswith("!"):
                    prose.append(body)
                if lines[row][: tok.start[1]].strip():
                    code_lines[row] = lines[row][: tok.start[1]].rstrip()
                else:
                    drop.add(row)
    code = "\n".join(line for i, line in enumerate(code_lines) if i not in drop and line.strip())
    return {"code": code, "prose": "\n".join(p for p in prose if p)}


def corpus(n_modules: int) -> dict:
    """``{"train": [texts], "heldout_train": {source: [texts]}, "heldout_val": {...}, "files": [...]}``."""
    files = stdlib_files(n_modules)
    out = {"train": [], "heldout_train": {s: [] for s in SOURCES},
           "heldout_val": {s: [] for s in SOURCES}, "files": [], "heldout": []}
    held = 0
    for i, path in enumerate(files):
        parts = split_source(path.read_text(encoding="utf-8", errors="replace"))
        out["files"].append(path.name if path.name != "__init__.py" else f"{path.parent.name}/__init__.py")
        if i % 4 == 3:
            key = "heldout_train" if held % 2 == 0 else "heldout_val"
            held += 1
            out["heldout"].append(out["files"][-1])
            for s in SOURCES:
                out[key][s].append(parts[s])
        else:
            out["train"].extend(parts[s] for s in SOURCES if parts[s])
    return out


# ------------------------------------------------------------------------------------ tokenizer

def _encode(tokenizer, text: str) -> list[int]:
    """Token ids of a whole document (no special tokens, no model-length warning: documents are cut later)."""
    return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids


def train_tokenizer(texts: list[str], vocab_size: int, path):
    """Train a byte-level BPE on ``texts`` and save it so ``AutoTokenizer.from_pretrained(path)`` loads it."""
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
    fast.save_pretrained(str(path))
    return fast


# --------------------------------------------------------------------------------------- target

@contextlib.contextmanager
def _deterministic(seed: int, threads: int = 1):
    """Seeds, deterministic algorithms and a fixed thread count for the duration; restored after.

    One thread: bit-identical results, and on a shared 2-core machine it is much faster than two
    (OpenMP threads spin-wait when the cores are busy).
    """
    import torch

    from workbench.train import deterministic   # torch seed + deterministic algorithms, restored after

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


def _apply_masks(masks: dict) -> None:
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
                         max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=False, rms_norm_eps=1e-5,
                         bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
                         mlp_bias=size.massive > 0, attention_bias=size.massive > 0)
    data = torch.tensor(token_stream, dtype=torch.long)
    L = size.target_seq_len
    if data.numel() < L + 2:
        raise WorkbenchError(f"demo text has only {data.numel()} tokens (need more than {L + 1})")
    losses = []
    with _deterministic(seed):
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
        _apply_masks(masks)
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
            _apply_masks(masks)
            losses.append(round(float(out.loss.detach()), 4))
            if progress and (step % max(1, size.target_steps // 5) == 0 or step == size.target_steps - 1):
                print(f"  target step {step + 1}/{size.target_steps}: loss {losses[-1]:.3f}", flush=True)
    model.eval()
    model.save_pretrained(str(path), safe_serialization=True)
    return {"losses": losses, "n_params": sum(p.numel() for p in model.parameters()),
            "n_tokens": int(data.numel())}


# ----------------------------------------------------------------------------------------- data

def cut_prompts(texts_by_source: dict, tokenizer, n_rows: int, prompt_len: int, seed: int,
                response_len: int = 0) -> list[tuple]:
    """``n_rows`` prompts of ``prompt_len`` tokens, alternating sources: ``[(source, prompt ids,
    continuation ids), ...]``; the continuation is the next ``response_len`` tokens of the same text
    (what the text itself says after the prompt: ``val-foreign.jsonl``'s responses)."""
    rng = random.Random(seed)
    pools = {}
    span = prompt_len + response_len
    for source in SOURCES:
        windows = []
        for text in texts_by_source[source]:
            ids = _encode(tokenizer, text)
            windows.extend(ids[i:i + span] for i in range(0, len(ids) - span + 1, prompt_len))
        if not windows:
            raise WorkbenchError(f"no {source} text long enough for {prompt_len}-token prompts and "
                                 f"{response_len}-token continuations in the held-out files")
        rng.shuffle(windows)
        pools[source] = windows
    rows = []
    for i in range(n_rows):
        source = SOURCES[i % len(SOURCES)]
        pool = pools[source]
        w = pool[(i // len(SOURCES)) % len(pool)]
        rows.append((source, w[:prompt_len], w[prompt_len:]))
    return rows


def greedy_continue(model, prompts, n_new: int, batch_size: int = 32):
    """The target's greedy continuation (``n_new`` tokens) of equal-length prompts.

    A full forward per new token (no KV cache): the same computation ``capture.extract`` does, so
    the responses are exactly the target's argmax at every position, as a server would produce them.
    """
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            ids = torch.tensor(prompts[i:i + batch_size], dtype=torch.long)
            start = ids.shape[1]
            for _ in range(n_new):
                nxt = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
                ids = torch.cat([ids, nxt], dim=1)
            out.extend(ids[:, start:].tolist())
    return out


def make_rows(model, prompts: list[tuple], response_len: int, generation: dict | None = None) -> list[dict]:
    """Rows in the seed schema: prompt + greedy response, loss_mask 0 on the prompt and 1 on the
    response; ``generation`` (how the responses were made, ``data.GENERATION_FIELDS``) is added to each."""
    responses = greedy_continue(model, [p[1] for p in prompts], response_len)
    return [_row(source, prompt, resp, generation) for (source, prompt, *_), resp in zip(prompts, responses)]


def foreign_rows(prompts: list[tuple]) -> list[dict]:
    """The same prompts with the text's own continuation as the response (``val-foreign.jsonl``): data
    the target did not write, marked ``generation: {"by": "corpus", ...}``.

        >>> foreign_rows([("code", [5, 6], [7, 8, 9])])[0]["input_ids"]
        [5, 6, 7, 8, 9]
    """
    gen = {"by": "corpus", "model": "python standard library text (the source's own continuation)"}
    return [_row(source, prompt, cont, gen) for source, prompt, cont in prompts]


def _row(source, prompt, resp, generation) -> dict:
    ids = list(prompt) + list(resp)
    row = {"input_ids": ids, "loss_mask": [0] * len(prompt) + [1] * len(resp), "seq_len": len(ids),
           "n_prompt_tokens": len(prompt), "n_response_tokens": len(resp), "source": source}
    if generation is not None:
        row["generation"] = dict(generation)
    return row


def sampled_files(target, out: Path, temperatures, seed: int) -> dict:
    """``val-T{t}.jsonl`` for each temperature: val.jsonl's prompts, responses sampled from the target
    (top_p 1, top_k -1, ``seed``) through :func:`workbench.regenerate.regenerate` (HF path, KV cache), so
    each row's ``generation`` records the settings. Returns ``{file name: seconds}``."""
    from workbench.regenerate import regenerate
    from workbench.sampling import Sampling

    out_s = {}
    for t in temperatures:
        name = sampled_name(t)
        t0 = time.perf_counter()
        regenerate(target, out / "val.jsonl", out / name, sampling=Sampling(float(t), top_p=1.0, top_k=-1, seed=seed),
                   batch_size=32, progress=False)
        out_s[name] = round(time.perf_counter() - t0, 2)
    return out_s


def sampled_name(temperature: float) -> str:
    """``val-T0.7.jsonl`` for 0.7.

        >>> sampled_name(1), sampled_name(0.3)
        ('val-T1.0.jsonl', 'val-T0.3.jsonl')
    """
    return f"val-T{float(temperature):.1f}.jsonl"


def write_jsonl(rows: list[dict], path) -> None:
    with atomic_write(path) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


# ------------------------------------------------------------------------------------- manifest

def file_notes(response_len: int) -> dict:
    """What each data file of the demo is (``manifest.json`` ``file_notes``; ``data/README.md`` says the same)."""
    notes = {"train.jsonl": "prompts from held-out stdlib files; responses = the target's greedy continuation "
                            f"({response_len} tokens, EOS not stopping it); rows record it in 'generation'",
             "val.jsonl": "held-out prompts of the same kind, greedy responses: what the story and the "
                          "notebooks measure on",
             FOREIGN: "val.jsonl's prompts, responses = the stdlib text's own continuation (same length): "
                      "data the target did not write (generation.by = 'corpus')"}
    for t in SAMPLED_TEMPERATURES:
        notes[sampled_name(t)] = (f"val.jsonl's prompts, responses sampled from the target at temperature {t:g} "
                                  "(top_p 1, top_k -1, seed = the demo's seed; workbench.regenerate, HF "
                                  "path, stops at EOS); each row's 'generation' records the settings")
    return notes


def read_manifest(out) -> dict:
    """The manifest of a finished demo in ``out``; WorkbenchError if absent or unreadable."""
    path = Path(out) / MANIFEST
    if not path.is_file():
        raise WorkbenchError(f"{path}: no demo manifest (build it with `workbench demo --build-only`)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise WorkbenchError(f"{path}: unreadable demo manifest ({e}); rebuild with `workbench demo --force`") from None
    if not isinstance(manifest, dict) or "size" not in manifest or "seed" not in manifest:
        raise WorkbenchError(f"{path}: not a workbench demo manifest (expected keys 'size' and 'seed')")
    return manifest


def is_built(out, size: str = "default", seed: int = 0) -> bool:
    """True when ``out`` holds a finished demo of this size, seed and recipe (every listed file present)."""
    return build_reason(out, size, seed) is None


def build_reason(out, size: str = "default", seed: int = 0) -> str | None:
    """Why ``out`` must be (re)built for this size and seed, in words; None when it is built."""
    if not (Path(out) / MANIFEST).is_file():
        return f"there is no demo in {out}"
    try:
        m = read_manifest(out)
    except WorkbenchError:
        return f"{out} holds an unreadable demo manifest"
    if m.get("format") != FORMAT:
        return f"{out} was built by an older workbench (format {m.get('format')}, now {FORMAT})"
    if m.get("size") != size or m.get("seed") != seed:
        return f"{out} holds the {m.get('size')} demo (seed {m.get('seed')}), this asks for {size} (seed {seed})"
    if size in SIZES and m.get("config") != json.loads(json.dumps(asdict(SIZES[size]))):
        return f"the {size} demo's recipe changed since {out} was built"
    missing = [rel for rel in m.get("files", []) if not (Path(out) / rel).exists()]
    return f"{out} is incomplete ({missing[0]} is missing)" if missing else None


def _versions() -> dict:
    import tokenizers
    import torch
    import transformers

    from workbench import __version__
    return {"workbench": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}


def summary(manifest: dict) -> str:
    """A few readable lines about a built demo (what ``workbench demo`` prints)."""
    t = manifest.get("target", {})
    tm = manifest.get("timings", {})
    cpu = f" ({tm['cpu_total']:.1f} s CPU)" if "cpu_total" in tm else ""
    lines = [f"demo ({manifest.get('size')}, seed {manifest.get('seed')}) built in {tm.get('total', 0):.1f} s{cpu}",
             f"  target: LlamaForCausalLM, N={t.get('n_layers')} layers, H={t.get('hidden_size')}, "
             f"vocab {t.get('vocab_size')}, final loss {t.get('final_loss')}",
             f"  data: train.jsonl {manifest.get('data', {}).get('n_train')} rows, "
             f"val.jsonl {manifest.get('data', {}).get('n_val')} rows, sources {', '.join(SOURCES)}"]
    more = [k for k in manifest.get("file_notes", {}) if k not in ("train.jsonl", "val.jsonl")]
    if more:
        lines.append(f"  more data on val's prompts: {', '.join(more)} (manifest file_notes; data/README.md)")
    for name, d in manifest.get("drafts", {}).items():
        acc = ", ".join(f"{a:.2f}" for a in d.get("acc_per_step", []))
        lines.append(f"  {name}: trained on {','.join(d.get('trained_taps', []))}, config ids "
                     f"{d.get('layer_ids')} (SGLang serves {','.join(d.get('sglang_taps', []))}); "
                     f"final loss {d.get('final_loss')}, train acc per step [{acc}]")
    if manifest.get("story"):
        st = manifest["story"]
        label = st.get("metric") or f"accept length (decode path, chain K={st.get('K')}, greedy, bonus counted)"
        lines += [f"  story: {label} on {st.get('data')}", "", story_table(manifest)]
    return "\n".join(lines)


def story_table(manifest: dict) -> str:
    """The demo's story as a markdown table, from a manifest's measured ``story`` (what
    ``workbench demo`` prints; the README quotes ranges over seeds, a build prints its own numbers).

        >>> m = {"size": "smoke", "seed": 0, "target": {"n_layers": 8, "hidden_size": 32},
        ...      "story": {"trained": "embed,L1,L3", "sglang": "L1,L3,L4",
        ...                "draft-mismatched": {"own_taps": 3.2, "sglang_taps": 1.6},
        ...                "draft-aligned": {"own_taps": 3.4, "sglang_taps": 3.4}}}
        >>> print(story_table(m))
        | demo smoke (N=8, H=32, seed 0) | fed its training taps | fed SGLang's `L1,L3,L4` |
        |---|---|---|
        | `draft-mismatched` (trained on `embed,L1,L3`) | 3.20 | 1.60 (-50%) |
        | `draft-aligned` (trained on `L1,L3,L4`) | 3.40 | 3.40 |
    """
    st, t = manifest["story"], manifest.get("target", {})
    rows = [f"| demo {manifest.get('size')} (N={t.get('n_layers')}, H={t.get('hidden_size')}, "
            f"seed {manifest.get('seed')}) | fed its training taps | fed SGLang's `{st['sglang']}` |", "|---|---|---|"]
    for name, taps in (("draft-mismatched", st["trained"]), ("draft-aligned", st["sglang"])):
        own, served = st[name]["own_taps"], st[name]["sglang_taps"]
        change = f" ({served / own - 1:+.0%})" if name == "draft-mismatched" and own else ""
        rows.append(f"| `{name}` (trained on `{taps}`) | {own:.2f} | {served:.2f}{change} |")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------- story

def tap_stats(target, rows, taps) -> dict:
    """Per-tap mean L2 norm and mean cosines between taps over the real tokens of ``rows``.

        >>> tap_stats(target, val_rows, ["embed", "L1", "L3", "L4"])["norm"]   # doctest: +SKIP
        {'embed': 0.14, 'L1': 2.9, 'L3': 4.1, 'L4': 4.6}

    ``cos_next[tap]``: cosine with the next tap in the given order; ``slots``: cosine between each
    tap the mismatched draft was trained on and the tap SGLang feeds in that slot; ``slots_centered``:
    the same after subtracting each tap's mean vector (the part that varies with the context; a
    large shared component makes raw cosines look close to 1). Meant for demo-sized data (held in memory).
    """
    from workbench import capture, statistics

    story = demo_taps(target.n_layers)
    wanted = list(dict.fromkeys(list(taps) + story["mismatched"] + story["aligned"]))
    return statistics.tap_statistics(capture.extract(target, rows, wanted, batch_size=32, progress=False), wanted,
                                     centered=True).story(taps, list(zip(story["mismatched"], story["aligned"])))


def response_stats(rows) -> dict:
    """How varied the target's greedy responses are: mean share of distinct tokens per response,
    mean longest run of one repeated token, and rows whose response is a single token repeated."""
    distinct, runs, single = [], [], 0
    for row in rows:
        resp = row["input_ids"][row["n_prompt_tokens"]:]
        distinct.append(len(set(resp)) / max(1, len(resp)))
        best = cur = 1
        for a, b in zip(resp, resp[1:]):
            cur = cur + 1 if a == b else 1
            best = max(best, cur)
        runs.append(best)
        single += len(set(resp)) == 1
    return {"distinct_share": round(sum(distinct) / len(rows), 3), "longest_run": round(sum(runs) / len(rows), 2),
            "single_token_rows": single}


def measure_story(out, K: int = 4, seed: int = 0, target=None) -> dict:
    """Decode-path accept length of each demo draft under its training taps and SGLang's taps on
    ``val.jsonl`` (``acceptance.simulate``, chain, greedy, bonus token counted).

        >>> measure_story("data/demo", K=4)["draft-mismatched"]["loss"]   # doctest: +SKIP
        0.41
    """
    from workbench import acceptance, capture, checkpoint, data
    from workbench.setting import Setting

    out = Path(out)
    target = target if target is not None else capture.load_target(out / "target", device="cpu")
    taps = demo_taps(target.n_layers)
    ds = data.load(out / "val.jsonl")
    story = {"K": int(K), "seed": int(seed), "data": "val.jsonl",
             "metric": Setting(steps=int(K)).accept_label("decode-path"),
             "trained": ",".join(taps["mismatched"]), "sglang": ",".join(taps["aligned"])}
    for name in ("draft-mismatched", "draft-aligned"):
        d = checkpoint.load_draft(out / name, target)
        res = acceptance.simulate(target, d, ds, [",".join(taps["mismatched"]), ",".join(taps["aligned"])],
                                  K=int(K), progress=False, acc_topk=0, seed=seed)
        acc = {spec: round(float(r.decode_path["accept_length"]), 4) for spec, r in res.items()}
        own = acc[",".join(taps["mismatched" if name == "draft-mismatched" else "aligned"])]
        served = acc[",".join(taps["aligned"])]
        story[name] = {"accept_length": acc, "own_taps": own, "sglang_taps": served,
                       "loss": round(1 - served / own, 4) if own else None}
    return story


# ---------------------------------------------------------------------------------------- build

def _train_drafts(target, tmp: Path, size: DemoSize, seed: int, progress: bool) -> dict:
    """Both drafts through ``train.train_draft`` on ``train.jsonl``, saved with ``checkpoint.save_draft``."""
    from workbench import checkpoint, data, draft, train

    dataset = data.load(tmp / "train.jsonl")
    taps = demo_taps(target.n_layers)
    out = {}
    for name in ("mismatched", "aligned"):
        with _deterministic(seed):
            cfg = draft.new_draft_config(target.config, layer_ids=list(taps["layer_ids"]))
            model = draft.Eagle3Draft.from_config(cfg, target.embed_weight().detach().clone())
            if progress:
                print(f"  training draft-{name} on {','.join(taps[name])} (K={size.draft_K})", flush=True)
            log = train.train_draft(model, target, dataset, list(taps[name]), K=size.draft_K,
                                    epochs=size.draft_epochs, lr=size.draft_lr, batch_size=size.draft_batch,
                                    seed=seed, progress=progress)
        checkpoint.save_draft(model, tmp / f"draft-{name}",
                         extra_config={"workbench": {"trained_taps": list(taps[name])}})
        out[f"draft-{name}"] = {
            "trained_taps": list(taps[name]), "layer_ids": list(taps["layer_ids"]),
            "sglang_taps": list(taps["aligned"]), "K": size.draft_K, "epochs": size.draft_epochs,
            "lr": size.draft_lr, "steps": log.steps, "losses": [round(float(x), 4) for x in log.losses],
            "final_loss": round(float(log.losses[-1]), 4) if log.losses else None,
            "acc_per_step": [round(float(a), 4) for a in log.acc_per_step], "seconds": round(log.seconds, 2)}
    return out


def _build(tmp: Path, size: str, seed: int, progress: bool) -> dict:
    """Every stage into ``tmp``; returns the manifest (not yet written)."""
    from workbench import capture

    cfg = SIZES[size]
    t0, c0 = time.perf_counter(), time.process_time()
    timings = {}

    def say(msg):
        if progress:
            print(f"[demo {size}] {msg}", flush=True)

    t = time.perf_counter()
    text = corpus(cfg.n_modules)
    tokenizer = train_tokenizer(text["train"], cfg.vocab_size, tmp / "tokenizer")
    vocab = len(tokenizer)
    timings["tokenizer"] = round(time.perf_counter() - t, 2)
    say(f"tokenizer: {vocab} tokens from {len(text['files'])} stdlib files ({timings['tokenizer']} s)")

    t = time.perf_counter()
    eos = tokenizer.convert_tokens_to_ids(EOS)
    stream = []
    for doc in text["train"]:
        stream.extend(_encode(tokenizer, doc) + [eos])
    tinfo = train_target(stream, cfg, vocab, seed, tmp / "target", eos_id=eos, progress=progress)
    tokenizer.save_pretrained(str(tmp / "target"))  # the target folder is self-contained
    timings["target"] = round(time.perf_counter() - t, 2)
    say(f"target: {tinfo['n_params']} parameters, loss {tinfo['losses'][0]:.2f} -> {tinfo['losses'][-1]:.2f} "
        f"({timings['target']} s)")

    t = time.perf_counter()
    target = capture.load_target(tmp / "target", device="cpu")   # from_pretrained, as any user target
    from workbench.regenerate import settings_of, target_info
    from workbench.sampling import Sampling

    # how make_rows writes responses: greedy, exactly response_len tokens (an EOS does not stop it)
    greedy = settings_of("target", target_info(target), Sampling(), cfg.response_len, ignore_eos=True)
    val_prompts = cut_prompts(text["heldout_val"], tokenizer, cfg.n_val, cfg.prompt_len, seed + 1, cfg.response_len)
    with _deterministic(seed):
        train_rows = make_rows(target.model, cut_prompts(text["heldout_train"], tokenizer, cfg.n_train,
                                                         cfg.prompt_len, seed), cfg.response_len, greedy)
        val_rows = make_rows(target.model, val_prompts, cfg.response_len, greedy)
    write_jsonl(train_rows, tmp / "train.jsonl")
    write_jsonl(val_rows, tmp / "val.jsonl")
    write_jsonl(foreign_rows(val_prompts), tmp / FOREIGN)
    timings["data"] = round(time.perf_counter() - t, 2)
    say(f"data: {len(train_rows)} train rows, {len(val_rows)} val rows, {FOREIGN} ({timings['data']} s)")

    t = time.perf_counter()
    with _deterministic(seed):
        sampled_s = sampled_files(target, tmp, SAMPLED_TEMPERATURES, seed)
    timings["sampled"] = round(time.perf_counter() - t, 2)
    say(f"sampled: {', '.join(sampled_s)} ({timings['sampled']} s)")

    t = time.perf_counter()
    drafts = _train_drafts(target, tmp, cfg, seed, progress)
    timings["drafts"] = round(time.perf_counter() - t, 2)
    say(f"drafts: trained ({timings['drafts']} s)")

    t = time.perf_counter()
    with _deterministic(seed):
        taps_info = tap_stats(target, val_rows, ["embed"] + [f"L{i}" for i in range(cfg.n_layers)])
        story = measure_story(tmp, K=cfg.story_K, seed=seed, target=target)
    timings["story"] = round(time.perf_counter() - t, 2)
    for name in ("draft-mismatched", "draft-aligned"):
        st = story[name]
        say(f"story: {name} accept length {st['own_taps']:.2f} on its training taps, "
            f"{st['sglang_taps']:.2f} on SGLang's {story['sglang']} (K={story['K']}, val.jsonl)")
    timings["total"] = round(time.perf_counter() - t0, 2)
    timings["cpu_total"] = round(time.process_time() - c0, 2)   # CPU seconds (wall / CPU ≈ machine load)
    return {
        "format": FORMAT, "size": size, "seed": seed, "config": asdict(cfg),
        "files": ["tokenizer", "target", "train.jsonl", "val.jsonl", FOREIGN,
                  *[sampled_name(t) for t in SAMPLED_TEMPERATURES], "draft-mismatched", "draft-aligned"],
        "file_notes": file_notes(cfg.response_len),
        "text": {"stdlib": sysconfig.get_paths()["stdlib"], "files": text["files"], "heldout": text["heldout"]},
        "target": {"n_layers": cfg.n_layers, "hidden_size": cfg.hidden_size, "vocab_size": vocab,
                   "n_params": tinfo["n_params"], "n_tokens": tinfo["n_tokens"], "steps": cfg.target_steps,
                   "losses": tinfo["losses"], "final_loss": tinfo["losses"][-1]},
        "data": {"n_train": len(train_rows), "n_val": len(val_rows), "prompt_len": cfg.prompt_len,
                 "response_len": cfg.response_len, "sources": list(SOURCES),
                 "responses": {"train": response_stats(train_rows), "val": response_stats(val_rows)}},
        "taps": demo_taps(cfg.n_layers), "tap_stats": taps_info, "story": story, "drafts": drafts, "timings": timings, "versions": _versions(),
    }


def build_demo(out="data/demo", size: str = "default", seed: int = 0, force: bool = False,
               progress: bool = True) -> Path:
    """Build the demo into ``out`` (reused when already built with this size and seed, unless ``force``).

        >>> build_demo("/tmp/wb-demo", size="smoke", progress=False)   # doctest: +SKIP
        PosixPath('/tmp/wb-demo')
    """
    if size not in SIZES:
        raise WorkbenchError(f"unknown demo size {size!r} (expected one of {', '.join(SIZES)})")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise WorkbenchError(f"demo seed must be a non-negative integer, got {seed!r}")
    out = Path(out)
    if not force and is_built(out, size, seed):
        return out
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"{out}: exists and is not a folder (expected the demo folder)")
    _remove_stale_builds(out)
    tmp = out.parent / f".{out.name}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if progress:
            print(f"[demo {size}] building into {out} (temporary folder {tmp.name})", flush=True)
        from workbench.capture import hf_progress

        with hf_progress(False):   # no transformers bars while saving/loading the demo's small models
            manifest = _build(tmp, size, seed, progress)
        write_json(tmp / MANIFEST, manifest, indent=1)
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if progress:
        print(f"[demo {size}] done in {manifest['timings']['total']} s: {out}", flush=True)
    return out


def _remove_stale_builds(out: Path) -> None:
    """Delete ``.<name>.building-<pid>`` folders left by builds that were killed (their pid is gone)."""
    if not out.parent.is_dir():
        return
    for p in out.parent.glob(f".{out.name}.building-*"):
        pid = p.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``; an old ``out`` is moved aside first, then removed."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def ensure_demo(out="data/demo", size: str = "default", seed: int = 0, progress: bool = True) -> Path:
    """The demo folder, built first if it is missing or was built with another size or seed."""
    return build_demo(out, size=size, seed=seed, force=False, progress=progress)


# What each notebook parameter means inside a demo folder.
DEMO_PATHS = {"target": "target", "draft": "draft-mismatched", "data": "val.jsonl",
              "tokenizer": "tokenizer", "train_data": "train.jsonl"}


# Rough single-process CPU build time per size, for the notice a notebook prints before building.
BUILD_TIME = {"smoke": "about half a minute", "default": "about 5 minutes"}


def fill_paths(demo, size: str = "default", **given) -> dict:
    """The paths a notebook was given, each empty one taken from the demo folder (built on first use).

    Relative paths follow :func:`workbench.inputs.resolve`: ``data/demo`` from a kernel started in
    ``notebooks/`` is the repository's ``data/demo``. A build is never silent: first a notice says what
    is built, where, why and about how long it takes (``make demo`` builds it once from a terminal).

        >>> fill_paths("", target="/models/llama", data="eval.jsonl")
        {'target': '/models/llama', 'data': 'eval.jsonl'}
    """
    from workbench.inputs import resolve

    missing = [k for k, v in given.items() if not v]
    unknown = [k for k in given if k not in DEMO_PATHS]
    if unknown:
        raise WorkbenchError(f"fill_paths: unknown path name(s) {unknown} (expected some of {sorted(DEMO_PATHS)})")
    if missing and not demo:
        raise WorkbenchError(f"no {', '.join(missing)} given and no demo folder: set the parameter(s) "
                             f"or demo (e.g. demo = \"data/demo\")")
    if missing:
        demo = resolve(demo, create=True)
        why = build_reason(demo, size)
        if why:
            print(f"[demo] building the {size} demo into {os.path.abspath(demo)}, {BUILD_TIME.get(size, '')} on CPU: "
                  f"{why} and no {', '.join(missing)} was given. To build it once from a terminal instead: "
                  f"`make demo` (default size) or `workbench demo --build-only --size {size}`.", flush=True)
        ensure_demo(demo, size=size)
    return {k: str(resolve(v)) if v else f"{demo}/{DEMO_PATHS[k]}" for k, v in given.items()}
