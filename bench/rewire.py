"""Rewire benchmark: the share of the accept-length gap recovered on the demo, closed form and fine-tuned.

    $ .venv/bin/python -m bench.rewire                                    # data/demo (built if missing)
    $ .venv/bin/python -m bench.rewire --demo /tmp/demo --finetune-seconds 120 --json rewire-bench.json

Rewires ``draft-mismatched`` (trained on embed,L1,L{N//2-1}) for what SGLang feeds it, evaluates on
``val.jsonl``: once with the closed-form refit alone, once with a fine-tune capped at
``--finetune-seconds`` (default 120 s). Prints measured numbers; asserts nothing (goals: >= 50% closed
form, >= 80% fine-tuned).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from workbench.demo.build import ensure_demo
from workbench.core.files import write_json
from workbench.analysis.rewire import rewire


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="data/demo", help="demo folder (built at size default if missing)")
    p.add_argument("--engine", default="sglang")
    p.add_argument("--steps", "-K", type=int, default=4)
    p.add_argument("--finetune", choices=["fc", "all"], default="all")
    p.add_argument("--finetune-steps", type=int, default=10_000, help="upper bound; the time cap usually stops first")
    p.add_argument("--finetune-seconds", type=float, default=120.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args(argv)

    demo = ensure_demo(args.demo, size="default")
    common = dict(engine=args.engine, eval_data=demo / "val.jsonl", K=args.steps, device=args.device, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        ft = rewire(demo / "target", demo / "draft-mismatched", demo / "train.jsonl", out=os.path.join(tmp, "ft"),
                    finetune_steps=args.finetune_steps, finetune_part=args.finetune,
                    finetune_seconds=args.finetune_seconds, **common)
    print(ft.summary())
    out = {"demo": str(demo), "engine": args.engine, "K": args.steps,
           "before": ft.before.accept_length, "reference": ft.reference.accept_length,
           "closed_form": {"accept_length": ft.after_closed_form.accept_length,
                           "recovered": ft.recovered_closed_form},
           "finetuned": {"accept_length": ft.after.accept_length, "recovered": ft.recovered,
                         "part": args.finetune, "steps": ft.finetune["steps"], "seconds": ft.finetune["seconds"]},
           "refit_seconds": ft.refit_info["seconds"]}
    print(json.dumps(out, indent=2))
    if args.json:
        write_json(args.json, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
