"""The built-in demo: the wiring bug reproduced end to end, offline, on a CPU.

    >>> from workbench.demo.build import build_demo, read_manifest
    >>> out = build_demo("data/demo", size="smoke", seed=0, progress=False)   # doctest: +SKIP
    >>> read_manifest(out)["drafts"]["draft-mismatched"]["trained_taps"]      # doctest: +SKIP
    ['embed', 'L1', 'L3']

What gets built into ``out`` (every piece with the library's own code paths):

- ``tokenizer/``: a byte-level BPE (``tokenizers``) trained on the standard library's own source
  and docstrings, wrapped in ``PreTrainedTokenizerFast`` (``AutoTokenizer.from_pretrained`` loads it), with
  a chat template in two variants: the default with ``{% generation %}`` tags, ``plain`` without
  (:mod:`workbench.demo.chat`).
- ``target/``: a ``LlamaForCausalLM`` (N ≥ 8 decoder layers) trained briefly with a plain torch loop,
  saved with ``save_pretrained`` and reloaded through :func:`workbench.load.inputs.target` (the one loader).
  It carries a fixed "massive" constant in ``L{N-4}`` that the next layer removes (:func:`set_massive`),
  and its story stretches write into their own blocks of dims (:func:`write_blocks`): SGLang's taps
  differ from the mismatched draft's training taps by construction (``docs/demo.md``).
- ``train.jsonl`` / ``val.jsonl``: prompts cut from held-out stdlib files, responses = the target's
  greedy continuation; sources ``code`` and ``prose``; loss_mask 0 on the prompt, 1 on the response;
  each row's ``generation`` says how it was made.
- ``val-foreign.jsonl``: val's prompts with the stdlib text's own continuation (:func:`foreign_rows`);
  ``val-T0.3.jsonl``, ``val-T0.7.jsonl``, ``val-T1.0.jsonl``: val's prompts with responses sampled
  from the target through :func:`workbench.regenerate.regenerate` (:func:`sampled_files`).
- ``val-chat.jsonl``: conversations over val's prompts whose replies are the target's own greedy answers to
  the chat-rendered prompts; ``questions.jsonl``: an MT-bench-style prompt file (two turns per question).
- ``draft-mismatched/``: an EAGLE-3 draft trained on ``embed,L1,L{N//2-1}`` whose config says ids
  ``[1, N//2-1, N-4]`` (SGLang serves ``L1,L{N//2-1},L{N-4}``): the classic bug.
- ``draft-aligned/``: the same recipe trained on ``L1,L{N//2-1},L{N-4}``: the healthy reference.
  Both drafts have a reduced vocabulary with ``d2t``/``t2d`` (SpecForge's pick from ``train.jsonl``) and,
  as the target, head_dim 32: a real vLLM (CPU) loads and serves them.
- ``manifest.json``: sizes, seeds, taps, losses, per-step accuracy, timings (wall and CPU), versions,
  ``tap_stats`` (norm per tap, cosines between taps), ``data.responses`` (how varied the responses
  are) and ``story``: each draft's decode-path accept length on ``val.jsonl`` under its training taps
  and under SGLang's (:func:`measure_story`).

The build happens in a temporary sibling folder that is renamed into place at the end, so an
interrupted build never leaves a demo that looks finished. Deterministic given ``seed`` on one machine (CPU
model): every step runs on the fixed :data:`~workbench.demo.recipe.THREADS` torch threads (``threads`` in the
manifest), whatever the machine's load.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sysconfig
import time
from dataclasses import asdict
from pathlib import Path

from workbench import __version__
from workbench import rows as data
from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json
from workbench.core.sampling import Sampling, sampled_name
from workbench.demo.chat import CHAT, QUESTIONS, TEMPLATES, write_chat_files
from workbench.demo.real import build_real, real_build_reason
from workbench.demo.recipe import (
    EOS,
    FOREIGN,
    SAMPLED_TEMPERATURES,
    SIZES,
    SOURCES,
    THREADS,
    DemoSize,
    corpus,
    demo_taps,
    encode,
    file_notes,
)
from workbench.demo.samples import (
    cut_prompts,
    foreign_rows,
    lively_rows,
    response_counts,
    sampled_files,
    write_jsonl,
)
from workbench.demo.story import measure_story, response_stats, tap_stats
from workbench.demo.target import deterministic_seed, train_target, train_tokenizer
from workbench.live.regenerate import settings_of, target_info
from workbench.load import inputs
from workbench.load.inputs import resolve
from workbench.model import checkpoint, draft, train
from workbench.model.capture import hf_progress

MANIFEST = "manifest.json"
N_QUESTIONS = 8   # questions.jsonl: MT-bench-style records of two turns
FORMAT = 6  # bump when the layout of the demo changes: older builds are then rebuilt

# ----------------------------------------------------------------------------------------- text

# ------------------------------------------------------------------------------------ tokenizer

# --------------------------------------------------------------------------------------- target

# ----------------------------------------------------------------------------------------- data

# ------------------------------------------------------------------------------------- manifest

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
    if size == "real":
        return real_build_reason(out, seed=seed)
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
    if m.get("threads", 1) != THREADS:                 # a manifest without it: built on deterministic_seed's 1
        return f"{out} was built with {m.get('threads')} torch threads, this build uses {THREADS}"
    missing = [rel for rel in m.get("files", []) if not (Path(out) / rel).exists()]
    return f"{out} is incomplete ({missing[0]} is missing)" if missing else None


def _versions() -> dict:
    import tokenizers
    import torch
    import transformers

    return {"workbench": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}


# ---------------------------------------------------------------------------------------- story

# ---------------------------------------------------------------------------------------- build

def _train_drafts(target, tmp: Path, size: DemoSize, seed: int, progress: bool) -> dict:
    """Both drafts through ``train.train_draft`` on ``train.jsonl``, saved with ``checkpoint.save_draft``.

    With ``size.draft_vocab`` the drafts get a reduced vocabulary (``d2t``/``t2d``): the most frequent target
    tokens of train.jsonl's responses (``train.build_vocab_map``), as SpecForge picks it.
    """

    dataset = data.load(tmp / "train.jsonl")
    taps = demo_taps(target.n_layers)
    dvocab = min(size.draft_vocab or target.vocab_size, target.vocab_size)
    d2t, t2d = train.build_vocab_map(response_counts(dataset.rows()), target.vocab_size, dvocab)
    out = {}
    for name in ("mismatched", "aligned"):
        with deterministic_seed(seed):
            cfg = draft.new_draft_config(target.config, layer_ids=list(taps["layer_ids"]), draft_vocab_size=dvocab)
            model = draft.Eagle3Draft.from_config(cfg, target.embed_weight().detach().clone())
            model.set_vocab_map(d2t, t2d)
            if progress:
                print(f"  training draft-{name} on {','.join(taps[name])} (K={size.draft_K}, draft vocab {dvocab})",
                      flush=True)
            log = train.train_draft(model, target, dataset, list(taps[name]), K=size.draft_K,
                                    epochs=size.draft_epochs, lr=size.draft_lr, batch_size=size.draft_batch,
                                    seed=seed, progress=progress)
        checkpoint.save_draft(model, tmp / f"draft-{name}",
                              extra_config={"workbench": {"trained_taps": list(taps[name]), "ttt_steps": size.draft_K}})
        out[f"draft-{name}"] = {
            "trained_taps": list(taps[name]), "layer_ids": list(taps["layer_ids"]),
            "sglang_taps": list(taps["aligned"]), "K": size.draft_K, "epochs": size.draft_epochs,
            "draft_vocab_size": dvocab, "head_dim": model.spec.head_dim,
            "lr": size.draft_lr, "steps": log.steps, "losses": [round(float(x), 4) for x in log.losses],
            "final_loss": round(float(log.losses[-1]), 4) if log.losses else None,
            "acc_per_step": [round(float(a), 4) for a in log.acc_per_step], "seconds": round(log.seconds, 2)}
    return out


def _build(tmp: Path, size: str, seed: int, progress: bool) -> dict:
    """Every stage into ``tmp``; returns the manifest (not yet written)."""

    cfg = SIZES[size]
    t0, c0 = time.perf_counter(), time.process_time()
    timings = {}

    def say(msg):
        if progress:
            print(f"[demo {size}] {msg}", flush=True)

    t = time.perf_counter()
    text = corpus(cfg.n_modules)
    tokenizer = train_tokenizer(text["train"], cfg.vocab_size, tmp / "tokenizer",
                                chat_template=dict(TEMPLATES))   # the demo's chat template, two variants
    vocab = len(tokenizer)
    timings["tokenizer"] = round(time.perf_counter() - t, 2)
    say(f"tokenizer: {vocab} tokens from {len(text['files'])} stdlib files ({timings['tokenizer']} s)")

    t = time.perf_counter()
    eos = tokenizer.convert_tokens_to_ids(EOS)
    stream = []
    for doc in text["train"]:
        stream.extend(encode(tokenizer, doc) + [eos])
    tinfo = train_target(stream, cfg, vocab, seed, tmp / "target", eos_id=eos, progress=progress)
    tokenizer.save_pretrained(str(tmp / "target"))  # the target folder is self-contained
    timings["target"] = round(time.perf_counter() - t, 2)
    say(f"target: {tinfo['n_params']} parameters, loss {tinfo['losses'][0]:.2f} -> {tinfo['losses'][-1]:.2f} "
        f"({timings['target']} s)")

    t = time.perf_counter()
    target = inputs.target(tmp / "target", device="cpu")   # from_pretrained, as any user target

    # how make_rows writes responses: greedy, exactly response_len tokens (an EOS does not stop it)
    greedy = settings_of("target", target_info(target), Sampling(), cfg.response_len, ignore_eos=True)
    # twice the prompts needed: spares for the rows whose response is one repeated token (lively_rows)
    val_cands = cut_prompts(text["heldout_val"], tokenizer, 2 * cfg.n_val, cfg.prompt_len, seed + 1, cfg.response_len)
    train_cands = cut_prompts(text["heldout_train"], tokenizer, 2 * cfg.n_train, cfg.prompt_len, seed)
    with deterministic_seed(seed):
        _, train_rows, train_out = lively_rows(target.model, train_cands, cfg.n_train, cfg.response_len, greedy)
        val_prompts, val_rows, val_out = lively_rows(target.model, val_cands, cfg.n_val, cfg.response_len, greedy)
    write_jsonl(train_rows, tmp / "train.jsonl")
    write_jsonl(val_rows, tmp / "val.jsonl")
    write_jsonl(foreign_rows(val_prompts), tmp / FOREIGN)
    timings["data"] = round(time.perf_counter() - t, 2)
    say(f"data: {len(train_rows)} train rows, {len(val_rows)} val rows, {FOREIGN} ({timings['data']} s)")

    t = time.perf_counter()
    with deterministic_seed(seed):
        chat_info = write_chat_files(target, tmp, val_prompts, response_len=cfg.response_len, n_questions=N_QUESTIONS)
    timings["chat"] = round(time.perf_counter() - t, 2)
    say(f"chat: {CHAT} ({chat_info['conversations']} conversations), {QUESTIONS} ({chat_info['questions']} "
        f"questions) ({timings['chat']} s)")

    t = time.perf_counter()
    with deterministic_seed(seed):
        sampled_s = sampled_files(target, tmp, SAMPLED_TEMPERATURES, seed)
    timings["sampled"] = round(time.perf_counter() - t, 2)
    say(f"sampled: {', '.join(sampled_s)} ({timings['sampled']} s)")

    t = time.perf_counter()
    drafts = _train_drafts(target, tmp, cfg, seed, progress)
    timings["drafts"] = round(time.perf_counter() - t, 2)
    say(f"drafts: trained ({timings['drafts']} s)")

    t = time.perf_counter()
    with deterministic_seed(seed):
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
        "format": FORMAT, "size": size, "seed": seed, "config": asdict(cfg), "threads": THREADS,
        "files": ["tokenizer", "target", "train.jsonl", "val.jsonl", FOREIGN,
                  *[sampled_name(t) for t in SAMPLED_TEMPERATURES], CHAT, QUESTIONS, "draft-mismatched",
                  "draft-aligned"],
        "file_notes": file_notes(cfg.response_len),
        "text": {"stdlib": sysconfig.get_paths()["stdlib"], "files": text["files"], "heldout": text["heldout"]},
        "target": {"n_layers": cfg.n_layers, "hidden_size": cfg.hidden_size, "head_dim": cfg.attn_head_dim,
                   "vocab_size": vocab,
                   "n_params": tinfo["n_params"], "n_tokens": tinfo["n_tokens"], "steps": cfg.target_steps,
                   "losses": tinfo["losses"], "final_loss": tinfo["losses"][-1]},
        "data": {"n_train": len(train_rows), "n_val": len(val_rows), "prompt_len": cfg.prompt_len,
                 "response_len": cfg.response_len, "sources": list(SOURCES),
                 "responses": {"train": response_stats(train_rows), "val": response_stats(val_rows)},
                 "one_token_prompts_replaced": {"train": train_out, "val": val_out},
                 "chat": chat_info},
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
    if size == "real":
        return build_real(out, seed=seed, progress=progress)
    return build_demo(out, size=size, seed=seed, force=False, progress=progress)


# What each notebook parameter means inside a demo folder.
DEMO_PATHS = {"target": "target", "draft": "draft-mismatched", "data": "val.jsonl",
              "tokenizer": "tokenizer", "train_data": "train.jsonl"}


# Rough single-process CPU build time per size, for the notice a notebook prints before building.
BUILD_TIME = {"smoke": "about half a minute", "default": "about 5 minutes",
              "real": "about 27 minutes on 2 lightly loaded cores (1 thread), 50 on busy ones (resumable; the model "
                      "is pip-downloaded once)"}


def fill_paths(demo, size: str = "default", **given) -> dict:
    """The paths a notebook was given, each empty one taken from the demo folder (built on first use).

    Relative paths follow :func:`workbench.inputs.resolve`: ``data/demo`` from a kernel started in
    ``notebooks/`` is the repository's ``data/demo``. A build is never silent: first a notice says what
    is built, where, why and about how long it takes (``make demo`` builds it once from a terminal).

        >>> fill_paths("", target="/models/llama", data="eval.jsonl")
        {'target': '/models/llama', 'data': 'eval.jsonl'}
    """

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
