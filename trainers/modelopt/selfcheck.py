"""End-to-end check of train.py on a tiny random target (about 1 minute on 1 CPU thread).

    OMP_NUM_THREADS=1 .venv-modelopt/bin/python trainers/modelopt/selfcheck.py [WORK_DIR]

1. make_tiny.py: a 6-layer random Llama target and 12 pre-tokenised rows;
2. a straight 6-step run with a reduced draft vocabulary (64 of 320), exported to A/;
3. the same run stopped after 3 steps (exit 3), then rerun: it resumes from checkpoint-3 and exports B/;
   A and B must be bit-identical;
4. the export's config.json and tensors are printed and checked (architecture, taps, rope, d2t, no t2d);
5. the one required CPU switch: with training.tf32=true the run must fail (cpu_shims.py).
Exits non-zero on the first failed check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


def run(args, expect=0):
    p = subprocess.run([PY, *map(str, args)], capture_output=True, text=True)
    if p.returncode != expect:
        sys.stdout.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"selfcheck: FAILED: {' '.join(map(str, args[:1]))} exited {p.returncode}, expected {expect}")
    return p.stdout + p.stderr


def check(cond, what):
    print(f"  {'ok ' if cond else 'BAD'} {what}")
    if not cond:
        raise SystemExit(f"selfcheck: FAILED: {what}")


def main():
    import torch
    from safetensors.torch import load_file

    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="modelopt-selfcheck-"))
    run([HERE / "make_tiny.py", work / "tiny"])
    common = [HERE / "train.py", "--target", work / "tiny/target", "--data", work / "tiny/rows.jsonl",
              "--steps", 6, "--lr", 1e-3, "--warmup-steps", 0, "--draft-vocab-size", 64, "--save-steps", 2]
    print("straight run, 6 steps")
    run([*common, "--out", work / "A", "--restart"])
    print("interrupted run: 3 steps, then resumed")
    run([*common, "--out", work / "B", "--restart", "--stop-after-steps", 3], expect=3)
    log = run([*common, "--out", work / "B"])
    check("resume: from" in log and "checkpoint-3" in log, "the rerun resumed from checkpoint-3")

    a, b = load_file(work / "A/model.safetensors"), load_file(work / "B/model.safetensors")
    check(sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a), "resumed export == straight export, bit for bit")
    cfg = json.loads((work / "A/config.json").read_text())
    print(json.dumps(cfg, indent=1))
    for k in sorted(a):
        print(f"  {k} {tuple(a[k].shape)} {str(a[k].dtype).replace('torch.', '')}")
    check(cfg["architectures"] == ["LlamaForCausalLMEagle3"], "architecture LlamaForCausalLMEagle3")
    check(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2], "taps for N=6: [1, 2] (the set {1, N//2-1, N-4})")
    check(cfg["rope_scaling"] == {"rope_theta": 100000.0, "rope_type": "default"}, "rope: the target's, no YaRN injected")
    check(cfg["draft_vocab_size"] == 64 and a["d2t"].shape == (64,) and "t2d" not in a, "d2t[64], no t2d")
    check(a["fc.weight"].shape == (64, 128) and a["lm_head.weight"].shape == (64, 64), "fc 2 taps x 64 -> 64, lm_head 64 x 64")
    check(not any(k.startswith("embed_tokens") for k in a), "no embed_tokens")

    print("tf32=true on CPU must fail")
    out = run([*common, "--out", work / "C", "--restart", "--set", "training.tf32=true"], expect=1)
    check("--tf32 requires Ampere" in out, "ValueError: --tf32 requires Ampere ... (so train.py sets tf32=false)")
    print(f"selfcheck: all passed ({work})")


if __name__ == "__main__":
    main()
