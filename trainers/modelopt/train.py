"""Train an EAGLE-3 draft with NVIDIA ModelOpt (0.47.0) on CPU, in process, and export it as ModelOpt does.

    .venv-modelopt/bin/python trainers/modelopt/train.py --target DIR --data rows.jsonl --out DIR
        [--steps N | --epochs E] [--lr 1e-4] [--seed 0] [--draft-vocab-size V] [--max-len L]
        [--warmup-steps W] [--save-steps S] [--work-dir DIR] [--stop-after-steps K] [--keep-work]
        [--also-export-without-rope-scaling DIR]

The path is ModelOpt's own (examples/speculative_decoding/main.py upstream, rebuilt from the wheel):
  1. the recipe ``general/speculative_decoding/eagle3.yaml`` from the wheel (``modelopt.recipe.load_recipe``);
  2. ``modelopt.torch.speculative.utils.load_vlm_or_llm`` loads the HF target, then
     ``mtsp.convert(model, [("eagle", recipe.eagle.model_dump())])`` (EAGLE3_DEFAULT_CFG's architecture merged in
     by ``eagle/conversion.py``);
  3. a reduced draft vocabulary (``--draft-vocab-size``) takes its d2t from ModelOpt's
     ``calibrate_frequent_vocab`` (token frequencies over the rows) and ``HFEagleModel.load_draft_vocab_cache``;
  4. a HF ``Trainer`` (``EagleTrainerWithAccLog``'s compute_loss) with the recipe's training arguments;
  5. ``modelopt.torch.export.export_speculative_decoding`` into a temporary folder, renamed onto --out.

Overridden, and only these: the draft layer's shape (heads, KV heads, head_dim, intermediate; hidden and vocab
come from the target in ``HFEagleModel.modify``), its rope in training (the target's ``rope_parameters``), its
dtype name (float32), the draft vocabulary
when asked, and the CPU switches: ``eagle_use_torch_compile=false``, ``bf16=false``, ``tf32=false``
(``ar_validate_steps`` is already -1 in the recipe). The taps (``default_eagle_aux_layer_ids``), the loss
(``HFEagleModel._eagle_loss`` with ``eagle_loss_decay_factor``) and the export are ModelOpt's, its default
``eagle_export_rope_scaling`` included: the export writes YaRN x32 (``original_max_position_embeddings`` 2048)
into ``config.json`` when the training rope is plain, as every ModelOpt user's export does.
``--also-export-without-rope-scaling DIR`` exports the same trained weights a second time with that injection
off (``eagle_export_rope_scaling = {}``, ModelOpt's own switch): the pair measures what the default costs.

Data: JSON Lines, one row per line with ``input_ids`` and ``loss_mask`` (1 on answer tokens), already tokenised
with the chat template. Each row becomes ModelOpt's batch dict (``input_ids``, ``attention_mask``, ``loss_mask``,
``labels``), right-padded to one fixed length like ModelOpt's collators; ``loss_mask`` goes straight into
``HFEagleModel.forward(loss_mask=...)``, as ModelOpt's offline and streaming datasets feed it.

Resume: Trainer checkpoints go to --work-dir (default ``<out>.work``) every --save-steps; a rerun with the same
arguments resumes from the newest complete one (``trainer.train(resume_from_checkpoint=...)``: weights,
optimizer, scheduler, RNG, data position). --stop-after-steps K stops after K steps in this run with a
checkpoint and exits 3 (rerun to continue). After a successful export the work dir is removed unless --keep-work.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

STOPPED_EXIT = 3
RECIPE = "general/speculative_decoding/eagle3"


def fail(msg: str) -> None:
    print(f"train.py: error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, type=Path, help="saved HF causal-LM folder (the target)")
    ap.add_argument("--data", required=True, type=Path, help="JSON Lines rows with input_ids and loss_mask")
    ap.add_argument("--out", required=True, type=Path, help="export folder (ModelOpt's config.json + model.safetensors)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, help="optimizer steps (HF max_steps)")
    g.add_argument("--epochs", type=float, help="epochs (HF num_train_epochs); default: the recipe's (1)")
    ap.add_argument("--lr", type=float, help="learning rate; default: the recipe's (1e-4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draft-vocab-size", type=int, help="reduced draft vocabulary (d2t from token frequencies)")
    ap.add_argument("--max-len", type=int, help="training_seq_len: rows are truncated and padded to it; "
                    "default: the longest row, at most the recipe's 2048")
    ap.add_argument("--batch-size", type=int, help="per-device batch; default: the recipe's (1)")
    ap.add_argument("--warmup-steps", type=int, help="default: the recipe's (1000)")
    ap.add_argument("--save-steps", type=int, default=50, help="checkpoint every S steps (default 50)")
    ap.add_argument("--log-steps", type=int, default=1, help="print progress every N steps (default 1)")
    ap.add_argument("--work-dir", type=Path, help="Trainer checkpoints (default: <out>.work)")
    ap.add_argument("--stop-after-steps", type=int, help="stop after K steps in this run, checkpoint, exit 3")
    ap.add_argument("--restart", action="store_true", help="discard the work dir's checkpoints and start over")
    ap.add_argument("--keep-work", action="store_true", help="keep the work dir after a successful export")
    ap.add_argument("--also-export-without-rope-scaling", type=Path, metavar="DIR",
                    help="export the same weights again into DIR with eagle_export_rope_scaling = {} (ModelOpt's "
                         "default injects YaRN x32 into config.json)")
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's / OMP_NUM_THREADS)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra recipe dotlist override, applied last (e.g. training.weight_decay=0.01)")
    ap.add_argument("--shims", default="all", help="cpu_shims to apply: all, none, or a comma list")
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------------------------------- data
def read_rows(path: Path) -> list[tuple[list[int], list[int]]]:
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{n}: not JSON ({e.msg})")
            ids, mask = r.get("input_ids"), r.get("loss_mask")
            if not isinstance(ids, list) or not ids:
                fail(f"{path}:{n}: input_ids: missing or empty (expected a list of token ids)")
            if not isinstance(mask, list) or len(mask) != len(ids):
                fail(f"{path}:{n}: loss_mask: missing or not the length of input_ids ({len(ids)})")
            rows.append(([int(t) for t in ids], [1 if m else 0 for m in mask]))
    if not rows:
        fail(f"{path}: no rows")
    return rows


class RowsDataset:
    """Map-style dataset of ModelOpt batch items (cf. modelopt.torch.speculative.eagle.utils.OfflineSupervisedDataset)."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        import torch

        ids, mask = self.rows[i]
        input_ids = torch.tensor(ids, dtype=torch.long)
        labels = torch.full_like(input_ids, -100)  # as ModelOpt's datasets: label[i] = input[i+1]; unused
        labels[:-1] = input_ids[1:]  # by the EAGLE loss while the base model is frozen
        return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                "loss_mask": torch.tensor(mask, dtype=torch.long), "labels": labels}


class FixedLenCollator:
    """Right-pad or truncate every item to train_len (as EagleOfflineDataCollator / LanguageDataCollator do).

    The length must be fixed: HFEagleModel caches its TTT attention masks by ttt_step alone
    (``_get_ttt_attention_mask``), so a later batch of another length would reuse a mask of the wrong size.
    """

    def __init__(self, train_len: int, pad_id: int):
        self.train_len, self.pad_id = train_len, pad_id

    def __call__(self, features):
        import torch

        out = {}
        for k in ("input_ids", "attention_mask", "loss_mask", "labels"):
            fill = {"input_ids": self.pad_id, "labels": -100}.get(k, 0)
            batch = torch.full((len(features), self.train_len), fill, dtype=torch.long)
            for b, item in enumerate(features):
                x = item[k][: self.train_len]
                batch[b, : x.numel()] = x
            out[k] = batch
        return out


class _IdsAsChat:
    """Hands pre-tokenised ids to ModelOpt's calibrate_frequent_vocab, which asks a tokenizer for chat ids."""

    def __init__(self, ids):
        self.ids = ids

    def apply_chat_template(self, conversations, **kw):
        return list(self.ids)


def calibrate_d2t(rows, draft_vocab_size: int, path: Path):
    """ModelOpt's d2t: the draft_vocab_size most frequent token ids over all the rows' tokens (prompt and answer,
    as scripts/calibrate_draft_vocab.py counts a whole conversation file), d2t[i] = token_i - i."""
    import torch
    from modelopt.torch.speculative.utils import calibrate_frequent_vocab

    stream = [t for ids, _ in rows for t in ids]
    d2t = calibrate_frequent_vocab(_IdsAsChat(stream), None, draft_vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(d2t, tmp)
    os.replace(tmp, path)
    return d2t


# ---------------------------------------------------------------------------------------------------- config
def target_rope(cfg) -> dict:
    """The target's rope as a transformers-5 rope dict (rope_type + rope_theta + any scaling fields)."""
    rope = dict(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
    theta = rope.get("rope_theta", getattr(cfg, "rope_theta", None))
    if theta is None:
        fail("the target's config has no rope_theta")
    rope["rope_theta"] = float(theta)
    rope["rope_type"] = rope.get("rope_type") or rope.pop("type", None) or "default"
    return rope


def build_recipe(args, target_cfg, train_len: int, work: Path):
    """ModelOpt's eagle3 recipe with the overrides named in the module docstring."""
    import cpu_shims
    from modelopt.recipe import load_recipe
    from modelopt.recipe.config import ModelOptEagleRecipe

    t = [f"model.model_name_or_path={args.target}", f"data.data_path={args.data}",
         f"training.output_dir={work}", f"training.training_seq_len={train_len}",
         f"training.seed={args.seed}", f"training.save_steps={args.save_steps}",
         f"training.logging_steps={args.log_steps}",
         # Trainer housekeeping (no effect on the maths)
         "training.disable_tqdm=true", "training.report_to=none", "training.save_total_limit=2",
         "training.dataloader_num_workers=0", f"training.use_cpu={'true' if not _cuda() else 'false'}"]
    t += list(cpu_shims.CPU_SWITCHES)  # tf32/bf16/torch.compile off, ar_validate off (cpu_shims.py says why)
    if args.steps is not None:
        t.append(f"training.max_steps={args.steps}")
    if args.epochs is not None:
        t.append(f"training.num_train_epochs={args.epochs}")
    if args.lr is not None:
        t.append(f"training.learning_rate={args.lr}")
    if args.warmup_steps is not None:
        t.append(f"training.warmup_steps={args.warmup_steps}")
    if args.batch_size is not None:
        t.append(f"training.per_device_train_batch_size={args.batch_size}")
    t += args.set
    recipe = load_recipe(RECIPE, overrides=t)      # ModelOpt warns that the default YaRN's 2048 is not training_seq_len

    rope = target_rope(target_cfg)
    n_heads = target_cfg.num_attention_heads
    arch = {
        "num_attention_heads": n_heads,
        "num_key_value_heads": getattr(target_cfg, "num_key_value_heads", None) or n_heads,
        "head_dim": getattr(target_cfg, "head_dim", None) or target_cfg.hidden_size // n_heads,
        "intermediate_size": target_cfg.intermediate_size,
        "rope_scaling": rope,
        "rope_theta": rope["rope_theta"],
        "torch_dtype": "float32",
    }
    if args.draft_vocab_size is not None and args.draft_vocab_size != target_cfg.vocab_size:
        if not 0 < args.draft_vocab_size < target_cfg.vocab_size:
            fail(f"--draft-vocab-size {args.draft_vocab_size}: must be below the target's vocab {target_cfg.vocab_size}")
        arch["draft_vocab_size"] = args.draft_vocab_size
    recipe.eagle.eagle_architecture_config.update(arch)
    return ModelOptEagleRecipe.model_validate(recipe.model_dump())  # re-run the recipe's validators


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def hf_training_args(recipe):
    """main.py's HfTrainingArguments: transformers.TrainingArguments + the speculative-decoding fields."""
    import transformers
    from modelopt.torch.speculative.plugins.hf_training_args import TrainingArguments as SpecTrainingArgs

    cls = dataclasses.make_dataclass(
        "HfTrainingArguments",
        [(n, fi.annotation, dataclasses.field(default=fi.default)) for n, fi in SpecTrainingArgs.model_fields.items()],
        bases=(transformers.TrainingArguments,),
    )
    cls.__module__ = __name__
    globals()["HfTrainingArguments"] = cls  # picklable: the Trainer torch.saves its args into each checkpoint
    return cls(**recipe.training.model_dump())


# ---------------------------------------------------------------------------------------------------- trainer
def make_trainer_classes():
    import numpy as np
    import transformers

    class EagleTrainer(transformers.Trainer):
        """compute_loss as upstream's EagleTrainerWithAccLog: the model's own loss, train_acc kept for logging."""

        def compute_loss(self, *args, **kwargs):
            if not hasattr(self.state, "training_accs"):
                self.state.training_accs = []
            kwargs.pop("num_items_in_batch", None)
            loss, outputs = super().compute_loss(*args, return_outputs=True, **kwargs)
            if getattr(outputs, "train_acc", None) is not None:
                self.state.training_accs.append(outputs.train_acc)
            return loss

    class Progress(transformers.TrainerCallback):
        def __init__(self, stop_after=None):
            self.t0, self.stop_after, self.start_step = time.time(), stop_after, None

        def on_train_begin(self, args, state, control, **kw):
            self.start_step = state.global_step
            print(f"train: steps {state.global_step}/{state.max_steps}", flush=True)

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            accs = getattr(state, "training_accs", [])
            acc = ""
            if accs:
                m = np.mean(np.array(accs, dtype=float), axis=0).flatten()
                acc = " acc/ttt [" + ", ".join(f"{a:.3f}" for a in m) + "]"
                state.training_accs = []
            if "loss" in logs:
                dt = time.time() - self.t0
                done = max(1, state.global_step - (self.start_step or 0))
                print(f"step {state.global_step}/{state.max_steps} loss {logs['loss']:.4f}{acc} "
                      f"lr {logs.get('learning_rate', 0):.2e} {dt:.1f}s ({dt / done:.2f}s/step)", flush=True)

        def on_step_end(self, args, state, control, **kw):
            if self.stop_after and state.global_step - self.start_step >= self.stop_after \
                    and state.global_step < state.max_steps:
                control.should_save = True
                control.should_training_stop = True
                self.stopped = True
            return control

        def on_save(self, args, state, control, **kw):
            print(f"checkpoint: {args.output_dir}/checkpoint-{state.global_step}", flush=True)

    return EagleTrainer, Progress


def last_complete_checkpoint(work: Path):
    """The newest checkpoint-N holding trainer_state.json (the Trainer writes it last); half-written ones go."""
    best = None
    if work.is_dir():
        for p in sorted(work.glob("checkpoint-*"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0)):
            if (p / "trainer_state.json").is_file():
                best = p
            elif p.is_dir():
                print(f"resume: removing incomplete {p}", flush=True)
                shutil.rmtree(p)
    return best


def run_signature(args, train_len: int) -> dict:
    """What a checkpoint in the work dir must agree with to be resumed."""
    import hashlib

    def digest(p: Path) -> str:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()[:16]

    return {"target_config": digest(args.target / "config.json"), "data": digest(args.data),
            "steps": args.steps, "epochs": args.epochs, "lr": args.lr, "seed": args.seed,
            "draft_vocab_size": args.draft_vocab_size, "train_len": train_len, "batch_size": args.batch_size,
            "warmup_steps": args.warmup_steps, "set": list(args.set)}


# ---------------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.time()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    for p, what in ((args.target, "--target"), (args.data, "--data")):
        if not p.exists():
            fail(f"{what} {p}: not found")
    out = args.out.resolve()
    work = (args.work_dir or out.with_name(out.name + ".work")).resolve()
    work.mkdir(parents=True, exist_ok=True)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import cpu_shims

    names = None if args.shims == "all" else [] if args.shims == "none" else args.shims.split(",")
    applied = cpu_shims.apply(names)

    import torch
    import transformers

    import modelopt
    import modelopt.torch.opt as mto
    import modelopt.torch.speculative as mtsp
    from modelopt.torch.export import export_speculative_decoding
    from modelopt.torch.speculative.plugins.hf_eagle import HFEagleModel, default_eagle_aux_layer_ids
    from modelopt.torch.speculative.utils import load_vlm_or_llm

    print(f"train.py: torch {torch.__version__} transformers {transformers.__version__} "
          f"modelopt {modelopt.__version__}; shims {applied or 'none'}; threads {torch.get_num_threads()}", flush=True)
    mto.enable_huggingface_checkpointing()  # as main.py: checkpoints carry modelopt_state

    rows = read_rows(args.data)
    target_cfg = transformers.AutoConfig.from_pretrained(args.target)
    longest = max(len(ids) for ids, _ in rows)
    train_len = args.max_len or min(longest, 2048)
    n_cut = sum(len(ids) > train_len for ids, _ in rows)
    print(f"data: {len(rows)} rows from {args.data}, longest {longest}, padded/truncated to {train_len}"
          f"{f' ({n_cut} truncated)' if n_cut else ''}; answer tokens {sum(sum(m) for _, m in rows)}", flush=True)

    if args.draft_vocab_size is not None and args.draft_vocab_size < target_cfg.vocab_size:
        distinct = len({t for ids, _ in rows for t in ids})
        if args.draft_vocab_size > distinct:
            fail(f"--draft-vocab-size {args.draft_vocab_size}: the rows hold only {distinct} distinct tokens, and "
                 f"ModelOpt's calibrate_frequent_vocab needs at least that many (more data, or a smaller V)")
    signature = run_signature(args, train_len)
    if args.restart:
        for p in work.glob("checkpoint-*"):
            shutil.rmtree(p)
    elif any(work.glob("checkpoint-*")):
        try:
            before = json.loads((work / "run.json").read_text()).get("signature")
        except (OSError, ValueError):
            before = None
        if before != signature:
            diff = sorted(k for k in signature if not before or before.get(k) != signature[k])
            fail(f"{work} holds checkpoints of another run (differs in: {', '.join(diff) or 'unknown'}); "
                 f"pass --restart, or another --work-dir")
    recipe = build_recipe(args, target_cfg, train_len, work)
    training_args = hf_training_args(recipe)
    transformers.set_seed(args.seed)

    # ModelOpt's loader and convert, as main.py (fp32 on CPU).
    model = load_vlm_or_llm(str(args.target), dtype=torch.float32, device_map="cpu")
    eagle_cfg = recipe.eagle.model_dump()
    mtsp.convert(model, [("eagle", eagle_cfg)])
    d2t_path = None
    if model.eagle_config.draft_vocab_size < model.eagle_config.vocab_size:
        d2t_path = work / "d2t.pt"
        calibrate_d2t(rows, model.eagle_config.draft_vocab_size, d2t_path)
        HFEagleModel.load_draft_vocab_cache(model, str(d2t_path))
    model.eagle_cp_size = 1
    ec = model.eagle_config
    taps = list(ec.eagle_aux_hidden_state_layer_ids)
    n_layers = target_cfg.num_hidden_layers
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"draft: {ec.num_hidden_layers} layer, hidden {ec.hidden_size}, heads {ec.num_attention_heads}/"
          f"{ec.num_key_value_heads} kv, head_dim {ec.head_dim}, intermediate {ec.intermediate_size}, "
          f"vocab {ec.draft_vocab_size}/{ec.vocab_size}, rope {dict(ec.rope_scaling or {})}, "
          f"attn {ec._attn_implementation}; {n_train} trainable parameters", flush=True)
    print(f"taps: eagle_aux_hidden_state_layer_ids {taps} for N={n_layers} (default_eagle_aux_layer_ids = "
          f"{default_eagle_aux_layer_ids(n_layers)}; id k = output of decoder layer k = HF hidden_states[k+1])", flush=True)

    record = {
        "signature": signature,
        "modelopt": modelopt.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
        "recipe": RECIPE, "target": str(args.target), "data": str(args.data), "rows": len(rows),
        "train_len": train_len, "taps": taps, "target_layers": n_layers, "shims": applied,
        "eagle": {k: v for k, v in eagle_cfg.items() if k != "eagle_architecture_config"},
        "eagle_architecture_config": eagle_cfg["eagle_architecture_config"],
        "d2t": str(d2t_path) if d2t_path else None,
        "training": {k: v for k, v in recipe.training.model_dump().items()},
    }
    (work / "run.json").write_text(json.dumps(record, indent=2, default=str) + "\n")

    EagleTrainer, Progress = make_trainer_classes()
    progress = Progress(args.stop_after_steps)
    pad_id = target_cfg.pad_token_id if target_cfg.pad_token_id is not None else (target_cfg.eos_token_id or 0)
    if isinstance(pad_id, list):
        pad_id = pad_id[0]
    trainer = EagleTrainer(model=model, args=training_args, train_dataset=RowsDataset(rows),
                           data_collator=FixedLenCollator(train_len, pad_id), callbacks=[progress])
    trainer.remove_callback(transformers.PrinterCallback)  # Progress prints instead
    trainer.can_return_loss = True
    assert trainer.label_smoother is None

    ckpt = last_complete_checkpoint(work)
    if ckpt:
        print(f"resume: from {ckpt}", flush=True)
    t_train = time.time()
    trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    t_train = time.time() - t_train
    if getattr(progress, "stopped", False):
        print(f"stopped after {args.stop_after_steps} steps at step {trainer.state.global_step}/"
              f"{trainer.state.max_steps}; rerun the same command to resume from {work}", flush=True)
        return STOPPED_EXIT

    # Export exactly as ModelOpt writes it, into a temporary sibling, then rename onto --out.
    model.eval()
    t_exp = time.time()
    export_to(model, out, export_speculative_decoding)
    print(f"export: {out} ({', '.join(sorted(os.listdir(out)))}; rope_scaling "
          f"{json.loads((out / 'config.json').read_text()).get('rope_scaling')}) in {time.time() - t_exp:.1f}s; "
          f"training {t_train:.1f}s, total {time.time() - t_start:.1f}s", flush=True)
    if args.also_export_without_rope_scaling:
        model.eagle_export_rope_scaling = {}      # ModelOpt's switch: "empty dict disables" the injection
        second = args.also_export_without_rope_scaling.resolve()
        export_to(model, second, export_speculative_decoding)
        print(f"export without the rope injection: {second} (rope_scaling "
              f"{json.loads((second / 'config.json').read_text()).get('rope_scaling')})", flush=True)
    if not args.keep_work:
        shutil.rmtree(work)
    else:
        print(f"work dir kept: {work}")
    return 0


def export_to(model, out: Path, export_speculative_decoding) -> None:
    """ModelOpt's export into a temporary sibling of ``out``, then renamed onto it (a killed export leaves the old
    folder, never a half-written one)."""
    import torch

    for stale in list(out.parent.glob(f".{out.name}.tmp-*")) + list(out.parent.glob(f".{out.name}.old-*")):
        shutil.rmtree(stale, ignore_errors=True)  # left by an export that was killed
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with torch.inference_mode():
        export_speculative_decoding(model, export_dir=tmp)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old:
        shutil.rmtree(old)


if __name__ == "__main__":
    raise SystemExit(main())
