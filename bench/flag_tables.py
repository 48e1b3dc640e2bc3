"""The engines' own command-line parsers, as tables the lints read (issue 57, item 8): ``engines/data/flags.json``.

    $ python -m bench.flag_tables --vllm .venv-vllm/bin/python --sglang .venv-sglang/bin/python \
          --sglang .venv-sglang-0.5.14/bin/python          # the newest release is "sglang", others "sglang@X"

Each engine's python (its own venv) builds the engine's real parser (vLLM: ``make_arg_parser(FlexibleArgumentParser())``
of ``vllm serve``; SGLang: ``argparse.ArgumentParser`` + ``ServerArgs.add_cli_args``, as ``prepare_server_args``
does) and prints every long option with its ``dest`` and whether it takes a value. The lints resolve a flag as
argparse does (``allow_abbrev``: an exact name, else the one option it is a unique prefix of) from this table, so a
command copied from a model card (``--speculative-algo NEXTN``) is read as the engine reads it, without the engine
installed. ``tests/test_commands.py`` checks the lints' reading against the real parsers wherever their venvs exist.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "workbench" / "engines" / "data" / "flags.json"

DUMP = r"""
import argparse, json, sys
engine = sys.argv[1]
if engine == "vllm":
    import vllm
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    p, release = make_arg_parser(FlexibleArgumentParser()), vllm.__version__
else:
    import importlib.metadata as md
    from sglang.srt.server_args import ServerArgs
    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    release = md.version("sglang")
out = {}
for a in p._actions:
    for s in a.option_strings:
        if s.startswith("--"):
            out[s] = {"dest": a.dest, "value": a.nargs != 0}
print(json.dumps({"release": release, "allow_abbrev": p.allow_abbrev, "options": dict(sorted(out.items()))}))
"""

PARSE = r"""
import argparse, json, shlex, sys
engine, commands = sys.argv[1], json.loads(sys.stdin.read())
res = []
for argv in commands:
    try:
        if engine == "vllm":
            from vllm.utils.argparse_utils import FlexibleArgumentParser
            from vllm.entrypoints.launchers.cli_args import make_arg_parser
            ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
            res.append({"speculative_config": ns.speculative_config})
        else:
            from sglang.srt.server_args import ServerArgs
            p = argparse.ArgumentParser(prog="sglang serve")
            ServerArgs.add_cli_args(p)
            ns = p.parse_args(argv)
            res.append({k: getattr(ns, k, None) for k in ("model_path", "speculative_algorithm",
                        "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
                        "speculative_num_draft_tokens")})
    except SystemExit as e:
        res.append({"error": f"exit {e.code}"})
    except Exception as e:
        res.append({"error": f"{type(e).__name__}: {e}"[:200]})
print("RESULT " + json.dumps(res, default=str))
"""


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    return env


def dump(engine: str, python: str) -> dict:
    """The engine's parser as a table (run in its own python)."""
    proc = subprocess.run([python, "-c", DUMP, engine], capture_output=True, text=True, env=_env(), timeout=600)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{engine} parser dump failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(line[-1])


def parse_real(engine: str, python: str, argvs: list[list[str]]) -> list[dict]:
    """Each argv (the arguments after ``vllm serve`` / ``sglang.launch_server``) through the engine's own parser."""
    proc = subprocess.run([python, "-c", PARSE, engine], input=json.dumps(argvs), capture_output=True, text=True,
                          env=_env(), timeout=900)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"{engine} parser failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(line[-1][len("RESULT "):])


def _version(text: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in text.split("+")[0].split("."))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", metavar="PYTHON", help="a python with vllm-cpu (default .venv-vllm/bin/python)")
    ap.add_argument("--sglang", metavar="PYTHON", action="append", default=[],
                    help="a python with sglang (e.g. .venv-sglang/bin/python); repeat for older releases: the newest "
                         "is stored as 'sglang', each other as 'sglang@<release>' (sglang lint --engine-version)")
    args = ap.parse_args(argv)
    doc = json.loads(OUT.read_text()) if OUT.is_file() else {}
    doc["what"] = ("Each engine's own command-line parser as a table (python -m bench.flag_tables): long options, "
                   "their dest and whether they take a value; the lints resolve prefixes from it as argparse does")
    py = args.vllm or str(ROOT / ".venv-vllm" / "bin" / "python")
    if Path(py).exists():
        doc["vllm"] = dump("vllm", py)
        print(f"vllm {doc['vllm']['release']}: {len(doc['vllm']['options'])} options")
    sg = sorted((dump("sglang", p) for p in args.sglang if Path(p).exists()), key=lambda t: _version(t["release"]))
    for i, t in enumerate(reversed(sg)):
        key = "sglang" if i == 0 else f"sglang@{t['release']}"
        doc[key] = t
        print(f"{key} {t['release']}: {len(t['options'])} options")
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
