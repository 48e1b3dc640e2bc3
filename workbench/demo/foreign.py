"""``make foreign-drafts``: EAGLE-3 drafts for the real demo's target, trained by real trainers, kept as exported.

    >>> # notes = train_foreign("data/demo-real")      # both trainers, each in its own venv; resumable

Each trainer runs from its own environment (``.venv-modelopt``, ``.venv-speculators``: ``make trainers``, the
scripts in ``trainers/``) through its documented entry point, on the real demo's own training rows
(``train.jsonl``: the target's replies with the chat template and the answer mask). Every trainer trains on the
same rows: speculators splits its rows itself (``train_data_ratio`` 0.9: the first ``int(0.9 n)`` to train, the
rest to validate, and it refuses 1.0), so every other trainer is given that same first share
(:func:`training_rows`; 122 of the real demo's 136), and every trainer ships its last epoch:

- **NVIDIA ModelOpt** 0.47.0 (``trainers/modelopt/train.py``: ``mtsp.convert`` + HF Trainer + ModelOpt's
  ``export_speculative_decoding``), in process. Its own taps (``default_eagle_aux_layer_ids``: ``[1, 14, 26]`` for
  N=30, output of layer k), its own loss (soft-target cross-entropy, 3 TTT steps weighted 0.9^k), its export with
  its default ``eagle_export_rope_scaling`` (YaRN x32 written into ``config.json``: ``draft-modelopt``), and the
  same weights exported with that injection off (``draft-modelopt-norope``), which measures what it costs.
- **speculators** 0.9.0 (``speculators train`` via ``trainers/speculators/run.py``) on hidden states in its own
  file format, written by ``trainers/speculators/write_hidden_states.py`` (plain HF ``output_hidden_states`` plus
  a pre-hook on the final norm; not captured through vLLM). Its own taps (``[2, 15, 27]``: vLLM ids, input of
  layer k), its loss (KL, 3 TTT steps), its export of the last epoch (its default pick, ``checkpoint_best``, the
  lowest loss on its validation rows, is recorded in the manifest as ``best_epoch``). Two CPU choices differ from its GPU
  defaults, both its own flags: ``--hidden-states-dtype float32`` (bf16 autocast on a CPU without bf16 units: 74 s
  a step against 26 s) and ``--optimizer adamw`` (``torch.optim.Muon`` orthogonalises in bf16: 22 s of a 26 s
  step; AdamW: 3.6 s a step), measured on the real demo on this 2-core machine.

Both get the one-layer draft shape of the project's real drafts and a reduced draft vocabulary of
:data:`DRAFT_VOCAB` tokens (the rows hold about 2,200 distinct tokens; ModelOpt refuses a V above that).

Output: ``<root>/draft-<trainer>/`` exactly as the trainer exported it (ModelOpt writes it itself, atomically;
speculators' last epoch is copied file by file into a temporary folder renamed into place, without its
optimizer state), and ``<root>/draft-<trainer>.manifest.json`` (trainer, version, commands, wall time, seed).
A trainer that cannot install or run gives one ``note:`` line naming it, its version and the cause; the others
go on. A rerun skips a draft whose manifest matches the recipe, the data and the export's files; otherwise the
trainer's own resume continues from its work folder (``<root>/draft-<trainer>.work``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, write_json
from workbench.demo.fetch import sha256_of
from workbench.engines.trainers import provenance

REPO = Path(__file__).resolve().parents[2]
DRAFT_VOCAB = 2048
MANIFEST_FORMAT = 2                  # 2: same rows for every trainer, ModelOpt's default export, speculators' last epoch


@dataclass(frozen=True)
class Recipe:
    """What every foreign trainer gets: the same rows, epochs, seed and draft vocabulary as far as it has the knob."""

    epochs: int = 3
    seed: int = 0
    draft_vocab: int = DRAFT_VOCAB
    lr: float = 1e-3                 # speculators' default; ModelOpt's recipe says 1e-4 with 1000 warm-up steps
    batch: int = 4                   # ModelOpt rows per step (the project's own trainer uses 4)
    warmup: int = 10                 # ModelOpt warm-up steps (its 1000 would never end in 102 steps)
    max_len: int | None = None       # ModelOpt pads every row to one length: default the longest row
    total_seq_len: int = 2048        # speculators packs rows into batches of this many tokens
    threads: int = 0                 # 0: every core
    rows: int | None = None          # the first ``rows`` training rows only (the smoke test); None: all
    train_share: float = 0.9         # speculators' train_data_ratio: it trains on this first share of the rows and
                                     # validates on the rest; every trainer is given the same first share


SMOKE = Recipe(epochs=1, draft_vocab=32, batch=2, warmup=1, total_seq_len=256, rows=16, threads=1)


@dataclass(frozen=True)
class Trainer:
    name: str                # folder suffix: draft-<name>
    title: str
    package: str             # the distribution whose version the manifest records
    version: str             # the version trainers/<name>/install.sh pins
    venv: str                # relative to the repository
    extra: tuple = ()        # further export folders the trainer writes beside draft-<name>


TRAINERS = {
    "modelopt": Trainer("modelopt", "NVIDIA ModelOpt", "nvidia-modelopt", "0.47.0", ".venv-modelopt",
                        extra=("draft-modelopt-norope",)),
    "speculators": Trainer("speculators", "vllm-project/speculators", "speculators", "0.9.0", ".venv-speculators"),
}


@dataclass
class Step:
    label: str
    argv: list
    env: dict = field(default_factory=dict)
    skip_if: Path | None = None      # the step's product: present and complete → the step is not rerun


def venv_python(t: Trainer, repo: Path = REPO) -> Path:
    return repo / t.venv / "bin" / "python"


def installed(t: Trainer, repo: Path = REPO) -> tuple[str | None, str]:
    """(version, "") when the trainer's venv imports its package at the pinned version, else (None, why)."""
    py = venv_python(t, repo)
    if not py.is_file():
        log = repo / t.venv / "install.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
        return None, (f"no {t.venv} (make trainers)" + (f"; last install log line: {tail[0][:200]}" if tail else ""))
    r = subprocess.run([str(py), "-c", f"from importlib.metadata import version; print(version({t.package!r}))"],
                       capture_output=True, text=True)
    if r.returncode:
        return None, f"{t.venv}: {t.package} does not import ({(r.stderr.strip().splitlines() or ['?'])[-1][:200]})"
    got = r.stdout.strip()
    if got != t.version:
        return None, f"{t.venv} has {t.package} {got}, expected {t.version} (rerun make trainers)"
    return got, ""


def steps(name: str, root: Path, recipe: Recipe, repo: Path = REPO) -> list[Step]:
    """The commands that train ``name``'s draft into ``<root>/draft-<name>``, in order."""
    t = TRAINERS[name]
    py, root = str(venv_python(t, repo)), root.resolve()
    out, work = root / f"draft-{name}", root / f"draft-{name}.work"
    rows = training_rows(root, work, recipe, split_here=name != "speculators")
    env = {"OMP_NUM_THREADS": str(recipe.threads or os.cpu_count() or 1)}
    if name == "modelopt":
        argv = [py, str(repo / "trainers/modelopt/train.py"), "--target", str(root / "target"),
                "--data", str(rows), "--out", str(out), "--work-dir", str(work),
                "--epochs", str(recipe.epochs), "--batch-size", str(recipe.batch), "--lr", f"{recipe.lr:g}",
                "--warmup-steps", str(recipe.warmup), "--draft-vocab-size", str(recipe.draft_vocab),
                "--seed", str(recipe.seed), "--log-steps", "5",
                "--also-export-without-rope-scaling", str(root / t.extra[0])]
        if recipe.max_len:
            argv += ["--max-len", str(recipe.max_len)]
        return [Step("train", argv, env)]
    if name == "speculators":
        hs = work / "data"
        write = [sys.executable, str(repo / "trainers/speculators/write_hidden_states.py"),
                 "--target", str(root / "target"), "--rows", str(rows), "--out", str(hs),
                 "--dtype", "float32", "--token-freq", "--overwrite"]
        train = [py, str(repo / "trainers/speculators/run.py"), "--speculator-type", "eagle3",
                 "--verifier-name-or-path", str(root / "target"), "--data-path", str(hs),
                 "--save-path", str(work / "checkpoints"), "--num-layers", "1",
                 "--draft-vocab-size", str(recipe.draft_vocab), "--total-seq-len", str(recipe.total_seq_len),
                 "--hidden-states-dtype", "float32", "--optimizer", "adamw", "--num-workers", "0",
                 "--epochs", str(recipe.epochs), "--lr", f"{recipe.lr:g}", "--seed", str(recipe.seed),
                 "--train-data-ratio", f"{recipe.train_share:g}", "--on-missing", "raise"]
        return [Step("hidden-states", write, env, skip_if=hs / "workbench_hidden_states.json"),
                Step("train", train, env)]
    raise WorkbenchError(f"unknown trainer {name!r}: expected one of {', '.join(TRAINERS)}")


def training_rows(root: Path, work: Path, recipe: Recipe, *, split_here: bool = True) -> Path:
    """The rows a trainer is given: ``train.jsonl`` (its first ``recipe.rows`` with ``rows`` set), and of those the
    first ``recipe.train_share`` when ``split_here`` (speculators is given them all and splits them itself, with
    the same expression: ``int(n * share)`` rows to train, the rest to validate), copied into the work folder."""
    with open(root / "train.jsonl", encoding="utf-8") as f:
        lines = [ln if ln.endswith("\n") else ln + "\n" for ln in f if ln.strip()]
    if recipe.rows is not None:
        lines = lines[:recipe.rows]
    if split_here:
        lines = lines[:train_rows_count(len(lines), recipe)]
    sub = work / f"train-{len(lines)}-rows.jsonl"
    work.mkdir(parents=True, exist_ok=True)
    if not sub.is_file() or sub.read_text(encoding="utf-8") != "".join(lines):
        with atomic_write(sub) as f:
            f.writelines(lines)
    return sub


def train_rows_count(n: int, recipe: Recipe) -> int:
    """How many of ``n`` rows every trainer trains on: speculators' own split (``int(len * train_data_ratio)``,
    ``speculators/train/data.py``).

        >>> train_rows_count(136, Recipe()), train_rows_count(16, Recipe())
        (122, 14)
    """
    return int(n * recipe.train_share)


def export_files(folder: Path) -> dict:
    return {p.name: sha256_of(p) for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def manifest_path(root: Path, name: str) -> Path:
    return root / f"draft-{name}.manifest.json"


def scripts_sha256(name: str, repo: Path = REPO) -> str:
    """One hash of the trainer's scripts and install recipe (``trainers/<name>/``): a changed script retrains."""
    h = hashlib.sha256()
    for f in sorted((repo / "trainers" / name).glob("*")):
        if f.is_file() and f.suffix in (".py", ".sh", ".txt", ".json"):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _key(name: str, root: Path, recipe: Recipe) -> dict:
    return {"format": MANIFEST_FORMAT, "trainer": name, "recipe": asdict(recipe),
            "trainer_version": TRAINERS[name].version, "scripts_sha256": scripts_sha256(name),
            "data": {"path": "train.jsonl", "sha256": sha256_of(root / "train.jsonl")},
            "target": {"config_sha256": sha256_of(root / "target" / "config.json")}}


def up_to_date(name: str, root: Path, key: dict) -> dict | None:
    """The manifest when ``draft-<name>`` was trained under ``key`` (:func:`_key`: recipe, rows, target) and is
    unchanged since."""
    p = manifest_path(root, name)
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    if any(m.get(k) != v for k, v in key.items()):
        return None
    exports = {"files": export_files(root / f"draft-{name}"),
               **{f: export_files(root / f) for f in TRAINERS[name].extra}}
    return m if all(m.get("export", {}).get(k) == v for k, v in exports.items()) else None


def _run(step: Step, log_file: Path, say) -> float:
    """Run one step, its output shown line by line and kept in ``log_file``; its wall seconds, or an error."""
    env = dict(os.environ, **step.env, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    t0 = time.time()
    with open(log_file, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(step.argv)}\n")
        proc = subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=str(REPO), errors="replace")
        last = []
        try:
            for line in proc.stdout:
                log.write(line)
                line = line.rstrip()
                if line:
                    last = (last + [line])[-5:]
                    say(f"    {line[:200]}")
            rc = proc.wait()
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
    if rc:
        cause = next((ln for ln in reversed(last) if "rror" in ln or "FAILED" in ln), last[-1] if last else "")
        raise WorkbenchError(f"{step.label} exited with {rc}: {cause[:300]} (log: {log_file})")
    return time.time() - t0


def _copy_export(src: Path, dst: Path) -> None:
    """speculators' checkpoint folder → ``dst``, atomically; its training state (optimizer, scheduler) left out."""
    src = src.resolve()
    if not (src / "config.json").is_file() or not (src / "model.safetensors").is_file():
        raise WorkbenchError(f"{src}: no config.json + model.safetensors (speculators' export)")
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for p in sorted(src.iterdir()):
        if p.is_file() and not p.name.endswith("_state_dict.pt"):
            shutil.copy2(p, tmp / p.name)
    old = dst.with_name(f".{dst.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if dst.exists():
        os.replace(dst, old)
    os.replace(tmp, dst)
    shutil.rmtree(old, ignore_errors=True)


def train_one(name: str, root, recipe: Recipe = Recipe(), *, say=print, repo: Path = REPO) -> dict:
    """Train (or resume, or keep) ``<root>/draft-<name>``; its manifest. Raises WorkbenchError naming the cause."""
    root = Path(root)
    t = TRAINERS[name]
    for need in ("target/config.json", "train.jsonl"):
        if not (root / need).is_file():
            raise WorkbenchError(f"{root / need}: missing (build the real demo first: workbench demo --size real)")
    key = _key(name, root, recipe)
    m = up_to_date(name, root, key)
    if m is not None:
        say(f"draft-{name}: up to date ({t.title} {m['version']}, trained in {m['wall_s'] / 60:.1f} min; "
            f"{manifest_path(root, name).name})")
        return m
    version, why = installed(t, repo)
    if version is None:
        raise WorkbenchError(why)
    work = root / f"draft-{name}.work"
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "train.log"
    walls = work / "steps.json"            # every finished step's wall seconds, kept across resumed runs
    try:
        before = json.loads(walls.read_text())
    except (OSError, ValueError):
        before = {}
    done, t0 = [], time.time()
    for s in steps(name, root, recipe, repo):
        if s.skip_if is not None and s.skip_if.is_file():
            say(f"draft-{name}: {s.label}: done before ({s.skip_if.name})")
            if s.label in before:
                done.append(before[s.label])
            continue
        say(f"draft-{name}: {s.label} ({t.title} {version}) ...")
        wall = _run(s, log_file, say)
        done.append({"step": s.label, "argv": [_rel(a, root) for a in s.argv], "env": s.env, "wall_s": round(wall, 1)})
        before[s.label] = done[-1]
        write_json(walls, before)
    out = root / f"draft-{name}"
    chosen = {}
    if name == "speculators":                   # its last epoch, as the other trainers ship theirs
        chosen = last_epoch(work / "checkpoints")
        _copy_export(work / "checkpoints" / str(chosen["shipped_epoch"]), out)
    if not (out / "config.json").is_file():
        raise WorkbenchError(f"{out}: the trainer finished without an export (log: {log_file})")
    prov = provenance(json.loads((out / "config.json").read_text()), root / "target")
    m = dict(key, title=t.title, package=t.package, version=version, seed=recipe.seed,
             commands=done, wall_s=round(sum(c["wall_s"] for c in done) if done else time.time() - t0, 1),
             finished=time.strftime("%Y-%m-%d %H:%M:%S"),
             cores=os.cpu_count(), trained_taps=prov.trained.spec if prov.trained is not None else None,
             export={"folder": out.name, "files": export_files(out),
                     **{f: export_files(root / f) for f in t.extra}}, **chosen,
             rows_trained=train_rows_count(_n_rows(root, recipe), recipe))
    write_json(manifest_path(root, name), m)
    say(f"draft-{name}: exported by {t.title} {version} in {m['wall_s'] / 60:.1f} min → {out}")
    return m


def last_epoch(checkpoints: Path) -> dict:
    """speculators' checkpoint folder: its last epoch (what is shipped) and the one ``checkpoint_best`` points to
    (its default pick: the lowest loss on its validation rows), both recorded in the manifest."""
    epochs = sorted(int(p.name) for p in checkpoints.iterdir() if p.is_dir() and p.name.isdigit()) \
        if checkpoints.is_dir() else []
    if not epochs:
        raise WorkbenchError(f"{checkpoints}: no epoch checkpoint (speculators' export)")
    best = checkpoints / "checkpoint_best"
    best_epoch = int(best.readlink().name) if best.is_symlink() and best.readlink().name.isdigit() else None
    return {"shipped_epoch": epochs[-1], "best_epoch": best_epoch}


def _n_rows(root: Path, recipe: Recipe) -> int:
    with open(root / "train.jsonl", encoding="utf-8") as f:
        n = sum(1 for ln in f if ln.strip())
    return min(n, recipe.rows) if recipe.rows is not None else n


def _rel(arg, root: Path) -> str:
    """Command lines in the manifest without this machine's paths: the repo and the demo folder named as such."""
    s = str(arg)
    return s.replace(str(root), "<root>").replace(str(REPO), "<repo>").replace(sys.executable, "<workbench python>")


def train_foreign(root, names=tuple(TRAINERS), recipe: Recipe = Recipe(), *, say=print) -> list[str]:
    """Every trainer in ``names``; the ``note:`` lines of those that could not (the rest go on)."""
    notes = []
    for name in names:
        t = TRAINERS[name]
        try:
            train_one(name, root, recipe, say=say)
        except WorkbenchError as e:
            notes.append(f"note: draft-{name} not trained: {t.title} ({t.package} {t.version}): {e}")
            say(notes[-1])
    return notes
