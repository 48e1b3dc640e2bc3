"""Shared fixtures and builders.

- ``smoke_demo``: the built-in demo at size smoke as shipped in ``tests/data/smoke-demo`` (the same weights on
  every CPU kind); ``built_smoke_demo``: the same recipe built here once per test session.
- The tiny world many test files build (a random Llama-family target, EAGLE-3 drafts for it, rows of
  its greedy output or of random tokens, and the folders the CLI reads): :func:`tiny_target`,
  :func:`tiny_draft`, :func:`greedy_rows`, :func:`random_rows`, :func:`save_world`. Test files import
  them (``from conftest import tiny_target``) and keep their own sizes and seeds; each builder draws its
  random numbers in the order the files always did, so every test sees the same models and rows.

    >>> t = tiny_target(num_hidden_layers=2)
    >>> d = tiny_draft(t, [0, 1, 1], trained=["embed", "L0", "L1"])
    >>> (t.n_layers, t.vocab_size, d.config["workbench"]["trained_taps"])
    (2, 32, ['embed', 'L0', 'L1'])
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from workbench.model.capture import target_from_model
from workbench.model.checkpoint import save_draft
from workbench.model.draft import Eagle3Draft, new_draft_config

# The tiny Llama most tests use (vocab 32, hidden 32, 4 layers, GQA 4/2); a test changes what it needs.
LLAMA = dict(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)
FAMILIES = {   # name: (config class, model class, what the family needs besides LLAMA)
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {}),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, {"head_dim": 8}),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM, {"sliding_window": None}),
}


SMOKE_FIXTURE = Path(__file__).parent / "data" / "smoke-demo"
SMOKE_REBUILD = "workbench demo --size smoke --out tests/data/smoke-demo --build-only --force"


@pytest.fixture(scope="session")
def smoke_demo(tmp_path_factory):
    """Path of a copy of the shipped smoke demo (``tests/data/smoke-demo``: tokenizer, target, data, drafts).

    Shipped, not built, so that every CPU kind tests the same weights: a seed trains to different weights
    with AVX2 and AVX-512 kernels, and the golden files pin the CLI's outputs on these. The build itself is
    tested on a fresh build (``built_smoke_demo``). Stale after a recipe or layout change: rebuild it with
    SMOKE_REBUILD (and regenerate the golden files)."""
    import shutil

    from workbench.demo.build import build_reason

    why = build_reason(SMOKE_FIXTURE, "smoke", 0)
    if why is not None:
        pytest.fail(f"tests/data/smoke-demo is stale: {why}; rebuild it with `{SMOKE_REBUILD}`")
    out = tmp_path_factory.mktemp("demo") / "demo"
    shutil.copytree(SMOKE_FIXTURE, out)
    return out


@pytest.fixture(scope="session")
def built_smoke_demo(tmp_path_factory):
    """Path of a ``workbench demo --size smoke`` built here, once per test session: what the recipe makes
    on this machine's kernels (its properties hold on every CPU kind; its exact numbers do not)."""
    from workbench.demo.build import build_demo

    return build_demo(tmp_path_factory.mktemp("built") / "demo", size="smoke", seed=0, progress=False)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny ops on a shared 2-core box are far faster single-threaded (no OpenMP spinning): a test module
    opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_target(seed: int = 0, family: str = "llama", **config):
    """``torch.manual_seed(seed)``, then a random causal LM of ``family`` (LLAMA updated by ``config``) as a
    :class:`~workbench.capture.Target` in eval mode; ``target.model`` is the HF model (edit it in place)."""
    torch.manual_seed(seed)
    cfg_cls, model_cls, extra = FAMILIES[family]
    return target_from_model(model_cls(cfg_cls(**{**LLAMA, **extra, **config})))


def tiny_draft(target, layer_ids=(0, 1, 2), *, trained=None, embed=None, seed: int | None = None, **config):
    """A fresh EAGLE-3 draft for ``target`` (``new_draft_config`` with ``layer_ids`` and ``config``), on the
    target's embedding or ``embed``; ``trained``: the taps recorded as ``workbench.trained_taps``;
    ``seed``: ``torch.manual_seed(seed)`` first (None: the global generator as it stands)."""
    if seed is not None:
        torch.manual_seed(seed)
    cfg = new_draft_config(target.config, layer_ids=list(layer_ids), **config)
    if trained is not None:
        cfg["workbench"] = {"trained_taps": list(trained)}
    return Eagle3Draft.from_config(cfg, target.embed_weight() if embed is None else embed)


def greedy_rows(target, responses, seed: int = 1) -> list[dict]:
    """One row per entry of ``responses``: a random prompt of 2 + i % 3 tokens (generator ``seed``) and the
    target's greedy continuation of that many tokens (a full forward per token); ``loss_mask`` 1 on the
    response; ``n_prompt_tokens``, ``_row`` and ``source`` "a"/"b" alternating."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i, n_resp in enumerate(responses):
        ids = torch.randint(0, target.vocab_size, (2 + i % 3,), generator=g).tolist()
        n_prompt = len(ids)
        with torch.no_grad():
            for _ in range(n_resp):
                ids.append(int(target.model(torch.tensor([ids])).logits[0, -1].argmax()))
        rows.append({"input_ids": ids, "loss_mask": [0] * n_prompt + [1] * n_resp, "n_prompt_tokens": n_prompt,
                     "_row": i, "source": "ab"[i % 2]})
    return rows


def random_rows(vocab: int, lengths, *, prompt: int, seed: int = 1) -> list[dict]:
    """Rows of random tokens (generator ``seed``), one per length: ``input_ids`` and ``loss_mask`` (0 on
    the first ``prompt`` tokens); add the keys a test needs with ``{**row, ...}``."""
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, vocab, (n,), generator=g).tolist(), "loss_mask": [0] * prompt + [1] * (n - prompt)}
            for n in lengths]


def save_world(folder, target=None, drafts: dict | None = None, rows=None, data: str = "data.jsonl",
               keys=None) -> Path:
    """Write what the CLI reads into ``folder``: ``target/`` (``save_pretrained``), one folder per entry of
    ``drafts`` ({folder name: draft}, ``save_draft`` with its ``workbench`` config), and ``data``: one
    JSON line per row, without the in-memory ``_`` keys (or only ``keys``)."""
    folder = Path(folder)
    if target is not None:
        target.model.save_pretrained(folder / "target")
    for name, d in (drafts or {}).items():
        save_draft(d, folder / name)
    if rows is not None:
        with open(folder / data, "w") as f:
            for r in rows:
                f.write(json.dumps({k: v for k, v in r.items() if (k in keys if keys else not k.startswith("_"))})
                        + "\n")
    return folder
