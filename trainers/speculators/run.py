"""Run ``speculators train`` on CPU: apply cpu_shims, then call speculators' own CLI.

    OMP_NUM_THREADS=1 .venv-speculators/bin/python trainers/speculators/run.py <speculators train args...>

The call is the one the ``speculators`` console script makes (entry point
``speculators.__main__:app``, a typer app; ``train`` -> speculators/cli/train.py
``train_command`` -> ``speculators.train.cli.main(TrainConfig.resolve(args))``).

Where the args do not choose them, ``--draft-attn-impl sdpa`` and ``--loss-implementation eager``
are put in front (speculators' defaults, flex attention and the triton loss, cannot train on
CPU; see cpu_shims.py) and a note says so on stderr. Explicit choices are passed through as given.

WB_SPECULATORS_SHIMS selects the shims: unset or "all" = all; "none" = none;
"a,b" = only those; "-a,-b" = all but those (used by check_shims.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cpu_shims  # noqa: E402

CPU_DEFAULTS = {"--draft-attn-impl": "sdpa", "--loss-implementation": "eager"}


def _given(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def with_cpu_defaults(args: list[str]) -> list[str]:
    if "--config" in args or any(a.startswith("--config=") for a in args):
        return args  # a YAML config may set them; CLI flags would override it
    extra: list[str] = []
    for flag, value in CPU_DEFAULTS.items():
        if not _given(args, flag):
            extra += [flag, value]
    if extra:
        print(f"run.py: adding {' '.join(extra)} (CPU)", file=sys.stderr)
    return extra + args


def select_shims(spec: str | None) -> list[str]:
    if spec is None or spec.strip() in ("", "all"):
        return cpu_shims.apply()
    if spec.strip() == "none":
        return []
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if all(p.startswith("-") for p in parts):
        return cpu_shims.apply(skip=[p[1:] for p in parts])
    return cpu_shims.apply(parts)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "train":
        args = args[1:]
    applied = select_shims(os.environ.get("WB_SPECULATORS_SHIMS"))
    print(f"run.py: cpu shims applied: {', '.join(applied) or 'none'}", file=sys.stderr)
    if "-h" not in args and "--help" not in args and "--dump-config" not in args:
        args = with_cpu_defaults(args)

    from speculators.__main__ import app  # the `speculators` console script's object

    app(args=["train", *args], prog_name="speculators")


if __name__ == "__main__":
    main()
