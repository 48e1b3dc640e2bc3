"""The README's figure: per-position acceptance of the real model's mis-wired draft, fed its trained taps and the
taps SGLang feeds (issue 48).

    $ .venv/bin/python -m bench.readme_figure                   # data/demo-real (make demo-real builds it)

Simulates ``draft-mismatched`` of the real demo (SmolLM2-135M-Instruct, 30 layers) on ``val.jsonl``, chain K=4,
greedy, under the wiring it was trained on and under the one SGLang (current) feeds it, with the same code as
notebook 03 (:func:`workbench.simulate.acceptance.simulate`, :func:`workbench.report.plots.acceptance_curves`);
writes ``docs/img/real-per-position.png`` and the numbers beside it (``docs/img/real-per-position.json``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.core.files import write_json
from workbench.engines.trainers import trained_wiring_from_config
from workbench.engines.wiring import resolve
from workbench.load.inputs import load
from workbench.report import plots
from workbench.report.benchmark import machine
from workbench.simulate.acceptance import simulate


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", default="data/demo-real")
    p.add_argument("--engine", default="sglang")
    p.add_argument("--steps", "-K", type=int, default=4)
    p.add_argument("--out", default="docs/img/real-per-position.png")
    args = p.parse_args(argv)
    demo = Path(args.demo)
    if not (demo / "manifest.json").is_file():
        print(f"error: {demo}: not a built demo (make demo-real builds it)", file=sys.stderr)
        return 2
    tgt, drf, ds = load(demo / "target", demo / "draft-mismatched", demo / "val.jsonl", progress=False)
    trained = trained_wiring_from_config(drf.raw_config, tgt.n_layers).spec
    served = resolve(args.engine, tgt.config.to_dict(), drf.raw_config).spec
    res = simulate(tgt, drf, ds, [trained, served], K=args.steps, engine=args.engine, progress=False)
    shown = {f"trained on {trained}": res[trained], f"served: {served} (what SGLang feeds)": res[served]}
    fig = plots.acceptance_curves(shown, title=(
        f"Real model (SmolLM2-135M-Instruct, {tgt.n_layers} layers), its draft fed the taps it was trained on and "
        f"the taps SGLang feeds: per-position acceptance, chain K={args.steps}, {len(ds)} rows"))
    plots.save(fig, args.out)
    out = {"demo": str(demo), "engine": args.engine, "K": args.steps, "machine": machine("cpu"),
           **{name: {"accept_length (decode path)": r.decode_path["accept_length"],
                     "accept_length (every position)": r.accept_length, "chains": r.n_chains}
              for name, r in shown.items()}}
    write_json(Path(args.out).with_suffix(".json"), out, indent=2)
    print(f"wrote {args.out}")
    for name, r in shown.items():
        print(f"{name}: decode path {r.decode_path['accept_length']:.3f}, every position {r.accept_length:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
