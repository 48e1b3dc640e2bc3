"""Three trainers like for like (issue 57): the same rows, each recipe difference beside the result, intervals.

    $ .venv/bin/python -m bench.foreign_quality --root data/demo-real     # writes bench/foreign-quality.json
    $ .venv/bin/python -m bench.foreign_quality --root data/demo-real --measure-only
    $ .venv/bin/python -m bench.foreign_quality --docs        # rewrites its tables in docs/foreign-drafts.md

Needs the real demo (``make demo-real``'s build) and the real trainers (``make trainers``). One command trains what
is missing and measures; every part resumes (the foreign trainers through their manifests, the project's trainer
epoch by epoch), so the same command continues after a stop.

Every draft is trained on the **same rows**: the first ``int(0.9 n)`` of ``train.jsonl`` (122 of the real demo's
136), since speculators splits its rows itself and refuses a ratio of 1.0 (:mod:`workbench.demo.foreign`); 3 epochs,
seed 0, one decoder layer, the taps ``L1,L14,L26`` (each trainer's own default for N=30), and each ships its last
epoch. The drafts:

- ``ours``: the project's trainer and its real-demo recipe (draft vocabulary 8,192, 4 TTT steps, lr 1.5e-3,
  the target's top-16 soft labels);
- ``ours-foreign-settings``: the project's trainer with the foreign trainers' draft vocabulary (2,048), TTT steps
  (3) and lr (1e-3): what of a gap the recipe explains;
- ``modelopt-norope``: NVIDIA ModelOpt's weights, exported with its rope injection off (like for like);
- ``modelopt``: the same weights as ModelOpt exports them by default (YaRN x32 in ``config.json``): the default's
  cost alone;
- ``speculators``: vllm-project/speculators, its last epoch.

Measured: the decode-path accept length (chain K=4, greedy, bonus counted: what a server reports) on ``val.jsonl``
(held out) under each draft's trained taps, with the draft loaded as users load it (the exact YaRN simulation
included), and for each pair the difference with a 95% interval from a paired bootstrap over rows (the
independent unit; 2,000 resamples, seeded). A difference whose interval holds 0 is "not told apart".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.common import splice

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

OUT = Path(__file__).resolve().parent / "foreign-quality.json"
DOC = Path(__file__).resolve().parents[1] / "docs" / "foreign-drafts.md"
BEGIN = "<!-- foreign-quality tables: python -m bench.foreign_quality --docs -->"
END = "<!-- end of the foreign-quality tables -->"
FIELDS = ("rows", "epochs", "seed", "draft_vocab", "ttt_steps", "step_weight", "lr", "optimizer", "batch", "labels",
          "checkpoint", "precision")
K = 4
N_BOOT = 2000
TAPS = "L1,L14,L26"
OURS = {"ours": {}, "ours-foreign-settings": {"draft_vocab": 2048, "draft_K": 3, "draft_lr": 1e-3}}
FOLDERS = {"ours": None, "ours-foreign-settings": None, "modelopt-norope": "draft-modelopt-norope",
           "modelopt": "draft-modelopt", "speculators": "draft-speculators"}
PAIRS = [("ours", "ours-foreign-settings"), ("ours", "modelopt-norope"), ("ours", "speculators"),
         ("ours-foreign-settings", "modelopt-norope"), ("ours-foreign-settings", "speculators"),
         ("modelopt-norope", "speculators")]

# Each recipe as it ran here, and where each value comes from (the trainer's default, or why it differs).
RECIPES = {
    "ours": {"trainer": "workbench (model/train.py)", "rows": "first 122 of 136", "epochs": 3, "seed": 0,
             "draft_vocab": 8192, "ttt_steps": 4, "step_weight": "0.8^k", "lr": 1.5e-3, "optimizer": "AdamW",
             "batch": "4 rows", "labels": "the target's top-16 next-token distribution (soft), answer tokens",
             "checkpoint": "last epoch", "precision": "fp32"},
    "ours-foreign-settings": {"trainer": "workbench (model/train.py)", "rows": "first 122 of 136", "epochs": 3,
                              "seed": 0, "draft_vocab": 2048, "ttt_steps": 3, "step_weight": "0.8^k", "lr": 1e-3,
                              "optimizer": "AdamW", "batch": "4 rows",
                              "labels": "the target's top-16 next-token distribution (soft), answer tokens",
                              "checkpoint": "last epoch", "precision": "fp32"},
    "modelopt": {"trainer": "NVIDIA ModelOpt 0.47.0", "rows": "first 122 of 136", "epochs": "3 (default 1)",
                 "seed": "0 (default 42)", "draft_vocab": "2048 (default: the full 49,152)", "ttt_steps": "3 (default)",
                 "step_weight": "0.9^k (default)", "lr": "1e-3 (default 1e-4, which 1000 warm-up steps never leave)",
                 "optimizer": "AdamW (default)", "batch": "4 rows (default 1), warm-up 10 steps (default 1000)",
                 "labels": "the target's full distribution (soft CE, default), answer tokens (default: all tokens)",
                 "checkpoint": "last epoch (default)", "precision": "fp32 (default bf16)",
                 "export": "default eagle_export_rope_scaling: YaRN x32, original 2048 (draft-modelopt); "
                           "{} (draft-modelopt-norope)"},
    "speculators": {"trainer": "vllm-project/speculators 0.9.0", "rows": "first 122 of 136 (its train_data_ratio 0.9)",
                    "epochs": "3 (default 20)", "seed": "0 (default 42)", "draft_vocab": "2048 (default: full)",
                    "ttt_steps": "3 (default)", "step_weight": "1.0 (default)", "lr": "1e-3 (default)",
                    "optimizer": "AdamW (default Muon: bf16 orthogonalisation, 22 s of a 26 s CPU step)",
                    "batch": "packed 2048 tokens (default 8192)",
                    "labels": "the target's full distribution (KL, default), answer tokens",
                    "checkpoint": "last epoch (default checkpoint_best: its best epoch is in the manifest)",
                    "precision": "fp32 hidden states (default bf16: 74 s against 26 s a CPU step)"},
}


def _say(msg: str) -> None:
    print(f"[foreign-quality] {msg}", flush=True)


def train_ours(root: Path, work: Path, *, say=_say) -> dict:
    """The project's trainer on the same rows as the foreign trainers, in its recipe and in theirs; {name: folder}."""
    import torch  # noqa: F401  (loads before the workbench's model code)

    from workbench import rows as data
    from workbench.demo.foreign import Recipe, train_rows_count
    from workbench.demo.real import REAL, train_real_draft
    from workbench.demo.samples import response_counts
    from workbench.load import inputs
    from workbench.model import train
    from workbench.demo.target import deterministic_seed

    target = inputs.target(root / "target")
    rows = list(data.load(root / "train.jsonl").rows())
    rows = rows[:train_rows_count(len(rows), Recipe())]
    out = {}
    for name, over in OURS.items():
        folder = work / name / "draft-aligned"
        if (folder / "config.json").is_file() and (work / name / "done.json").is_file():
            out[name] = folder
            continue
        size = replace(REAL, **over)
        d2t, t2d = train.build_vocab_map(response_counts(rows), target.vocab_size, min(size.draft_vocab, target.vocab_size))
        say(f"{name}: the project's trainer on {len(rows)} rows (vocab {size.draft_vocab}, K={size.draft_K}, "
            f"lr {size.draft_lr:g}, {size.draft_epochs} epochs)")
        t0 = time.perf_counter()                       # the clock train_real_draft's progress lines read
        with deterministic_seed(0, threads=size.threads):
            info = train_real_draft("aligned", target, rows, work / name, size, 0, d2t, t2d,
                                    features=work / "features", progress=True, t0=t0)
        write_json(work / name / "done.json", {"wall_s": round(time.perf_counter() - t0, 1), "rows": len(rows),
                                               **{k: info[k] for k in ("K", "epochs", "draft_vocab_size", "lr", "labels")}})
        out[name] = folder
    return out


def per_row(result) -> tuple[np.ndarray, np.ndarray]:
    """(sum of A + 1, on-path chains) per row: the decode-path accept length's numerator and denominator by row."""
    ch = result.chains
    on = np.asarray(ch["on_path"], bool)
    sample = np.asarray(ch["sample"])[on]
    a = np.asarray(ch["accepted"], float)[on] + 1.0
    n = int(result.n_samples)
    return np.bincount(sample, weights=a, minlength=n), np.bincount(sample, minlength=n).astype(float)


def paired_interval(a: tuple, b: tuple, *, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """``a`` − ``b`` (accept lengths as ratios of per-row sums) with a 95% percentile interval from resampling rows.

        >>> x = (np.array([3.0, 2.0, 4.0]), np.array([1.0, 1.0, 2.0])); paired_interval(x, x)["difference"]
        0.0
    """
    (na, da), (nb, db) = a, b
    point = na.sum() / da.sum() - nb.sum() / db.sum()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(na), size=(n_boot, len(na)))
    diffs = na[idx].sum(1) / da[idx].sum(1) - nb[idx].sum(1) / db[idx].sum(1)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return {"difference": round(float(point), 4), "low": round(float(lo), 4), "high": round(float(hi), 4),
            "told_apart": bool(lo > 0 or hi < 0)}


def measure(root: Path, folders: dict, *, taps: str = TAPS, say=_say) -> dict:
    """Each draft's accept length on ``taps`` (the trained ones) and on the taps vLLM feeds it (its record's
    reading of the config as exported), per row; the paired differences of :data:`PAIRS` on the trained taps,
    and ModelOpt's default export against the same weights without the rope injection on both."""
    from workbench import rows as data
    from workbench.engines.wiring import resolve
    from workbench.load import inputs
    from workbench.model import checkpoint
    from workbench.simulate import acceptance

    target = inputs.target(root / "target")
    val = data.load(root / "val.jsonl")
    rows, served_rows, accept = {}, {}, {}
    for name, folder in folders.items():
        say(f"measuring {name} ({folder})")
        d = checkpoint.load_draft(folder, target)
        fed = ",".join(resolve("vllm", target.n_layers, d.raw_config).taps)
        specs = list(dict.fromkeys([taps, fed]))
        res = acceptance.simulate(target, d, val, specs, K=K, progress=False, acc_topk=1,
                                  cache_dir=root / "foreign-drafts.cache")
        rows[name], served_rows[name] = per_row(res[taps]), per_row(res[fed])
        accept[name] = {"accept_length": round(float(res[taps].decode_path["accept_length"]), 4),
                        "top1": round(float(res[taps].top1), 4), "rows": int(res[taps].n_samples),
                        "vllm_feeds": fed,
                        "accept_length_as_vllm_feeds": round(float(res[fed].decode_path["accept_length"]), 4),
                        "rope_scaling": d.raw_config.get("rope_scaling"), "notes": list(d.notes)}
    diffs = [{"a": a, "b": b, **paired_interval(rows[a], rows[b])} for a, b in PAIRS if a in rows and b in rows]
    yarn = {}
    if "modelopt" in rows and "modelopt-norope" in rows:
        yarn = {"trained_taps": paired_interval(rows["modelopt"], rows["modelopt-norope"]),
                "as_vllm_feeds": paired_interval(served_rows["modelopt"], served_rows["modelopt-norope"])}
    return {"accept": accept, "differences": diffs, "modelopt_default_rope_cost": yarn}


def manifests(root: Path, work: Path) -> dict:
    out = {}
    for name in ("modelopt", "speculators"):
        p = root / f"draft-{name}.manifest.json"
        if p.is_file():
            m = json.loads(p.read_text())
            out[name] = {k: m.get(k) for k in ("version", "wall_s", "rows_trained", "recipe", "shipped_epoch",
                                               "best_epoch", "trained_taps")}
    for name in OURS:
        p = work / name / "done.json"
        if p.is_file():
            out[name] = json.loads(p.read_text())
    return out


def tables_md(doc: dict) -> str:
    """The results and the recipes of ``doc`` (``bench/foreign-quality.json``) as the markdown docs/foreign-drafts.md
    shows (:func:`write_docs`)."""
    acc = doc["accept"]
    lines = [f"Measured: the {doc['metric']}, on {next(iter(acc.values()))['rows']} held-out rows of `{doc['data']}`; "
             f"intervals: {doc['interval']}.", "",
             "| draft | accept, trained taps `" + doc["taps"] + "` | step-1 top-1 | vLLM feeds | accept as vLLM feeds it |",
             "|---|---|---|---|---|"]
    for name, a in acc.items():
        lines.append(f"| `{name}` | {a['accept_length']:.3f} | {a['top1']:.3f} | `{a['vllm_feeds']}` | "
                     f"{a['accept_length_as_vllm_feeds']:.3f} |")
    lines += ["", "| difference | accept length | 95% interval | told apart |", "|---|---|---|---|"]
    for d in doc["differences"]:
        lines.append(f"| `{d['a']}` − `{d['b']}` | {d['difference']:+.3f} | [{d['low']:+.3f}, {d['high']:+.3f}] | "
                     f"{'yes' if d['told_apart'] else 'no'} |")
    for key, d in (doc.get("modelopt_default_rope_cost") or {}).items():
        where = "trained taps" if key == "trained_taps" else "as vLLM feeds it"
        lines.append(f"| `modelopt` (default YaRN export) − `modelopt-norope`, {where} | {d['difference']:+.3f} | "
                     f"[{d['low']:+.3f}, {d['high']:+.3f}] | {'yes' if d['told_apart'] else 'no'} |")
    rec = doc["recipes"]
    names = list(rec)
    lines += ["", "| | " + " | ".join(f"`{n}`" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    for f in FIELDS:
        lines.append(f"| {f.replace('_', ' ')} | " + " | ".join(str(rec[n].get(f, "—")) for n in names) + " |")
    tr = doc.get("trained", {})
    lines.append("| trained in | " + " | ".join(
        f"{tr[k]['wall_s'] / 60:.1f} min" if tr.get(k, {}).get("wall_s") else "—"
        for k in ("ours", "ours-foreign-settings", "modelopt", "speculators")) + " |")
    return "\n".join(lines)


def write_docs(doc: dict, path: Path = DOC) -> None:
    """Replace the tables between the markers of ``docs/foreign-drafts.md`` with :func:`tables_md`."""
    splice(path, BEGIN, END, tables_md(doc))


def _taps(spec: str, target: Path) -> str:
    """``--taps`` checked against the target: three layer taps, normalised (one line naming the flag otherwise)."""
    from workbench.engines.taps import num_layers, parse_tap

    n = num_layers(target)
    try:
        taps = [parse_tap(t, n) for t in str(spec).split(",")]
    except WorkbenchError as e:
        raise WorkbenchError(f"--taps {spec!r}: {e}") from None
    if len(taps) != 3:
        raise WorkbenchError(f"--taps {spec!r}: expected 3 taps (an EAGLE-3 draft reads three), got {len(taps)}")
    return ",".join(taps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="data/demo-real", help="the real demo's folder (default data/demo-real)")
    ap.add_argument("--json", default=str(OUT), help="where to write (default bench/foreign-quality.json)")
    ap.add_argument("--measure-only", action="store_true", help="train nothing; measure the drafts present")
    ap.add_argument("--docs", action="store_true", help="only rewrite the tables in docs/foreign-drafts.md from --json")
    ap.add_argument("--taps", default=TAPS, help=f"the trained taps every draft is measured on (default {TAPS}, "
                    "the real demo's)")
    args = ap.parse_args(argv)
    if args.docs:
        write_docs(json.loads(Path(args.json).read_text()))
        return 0
    root = Path(args.root)
    work = root / "foreign-quality.work"
    t0 = time.time()
    try:
        for need in ("target/config.json", "train.jsonl", "val.jsonl"):
            if not (root / need).is_file():
                raise WorkbenchError(f"{root / need}: missing (build the real demo first: make demo-real)")
        taps = _taps(args.taps, root / "target")
        if not args.measure_only:
            from workbench.demo.foreign import train_foreign

            for note in train_foreign(root, say=_say):
                _say(note)
            train_ours(root, work)
        folders = {n: (work / n / "draft-aligned") if f is None else root / f for n, f in FOLDERS.items()}
        missing = [n for n, f in folders.items() if not (f / "config.json").is_file()]
        if missing:
            raise WorkbenchError(f"not trained: {', '.join(missing)} (run without --measure-only; make trainers)")
        result = measure(root, folders, taps=taps)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    doc = {"format": 1, "root": str(root), "data": "val.jsonl", "taps": taps,
           "metric": f"accept length (decode path, chain K={K}, greedy, bonus counted), on each draft's trained taps",
           "interval": f"95% percentile, paired bootstrap over rows ({N_BOOT} resamples, seed 0)",
           "rows_trained": "the first int(0.9 n) rows of train.jsonl for every draft",
           "recipes": RECIPES, "trained": manifests(root, work), **result,
           "measure_seconds": round(time.time() - t0, 1)}
    write_json(args.json, doc, indent=1)
    for name, a in result["accept"].items():
        _say(f"{name}: accept length {a['accept_length']} (step-1 top-1 {a['top1']}) on {a['rows']} rows")
    for key, d in result["modelopt_default_rope_cost"].items():
        _say(f"ModelOpt's default YaRN export - without it ({key}): {d['difference']:+.3f} [{d['low']:+.3f}, "
             f"{d['high']:+.3f}]")
    for d in result["differences"]:
        _say(f"{d['a']} - {d['b']}: {d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
             f"{'' if d['told_apart'] else ' (not told apart)'}")
    _say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
