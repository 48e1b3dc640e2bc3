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

# SGLang's own resolution of the speculative settings after parsing (arg_groups/speculative_hook.py): only its hook
# runs, on a parsed record, with the target's ModelConfig and the draft's HF config replaced by
# {"architectures": [arch]} (no GPU, no model, no hub). stdin: [{"argv", "arch", "draft_arch"}]; stdout: RESULT [...]
# (0.5.23 declares resolutions and resolves nothing at construction; 0.5.14 resolves in __post_init__, switched off
# here so that only the hook runs). Full ServerArgs resolution needs torchvision/einops and an accelerator here.
RESOLVE = r"""
import argparse, json, sys, types, logging
from types import SimpleNamespace as NS
logging.disable(logging.WARNING)
KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
        "speculative_num_draft_tokens", "speculative_draft_model_path")
DRAFT_ARCH = [None]
try:                                                                    # 0.5.14 imports it at module level
    import sglang.srt.utils.hf_transformers_utils as hf
except ImportError:                                                     # 0.5.23's needs torchvision (absent)
    hf = sys.modules["sglang.srt.utils.hf_transformers_utils"] = types.ModuleType("sglang.srt.utils.hf_transformers_utils")
hf.get_config = lambda path, **kw: NS(architectures=[DRAFT_ARCH[0]] if DRAFT_ARCH[0] else [])   # no hub
if "sglang.srt.configs.iquest_q1" not in sys.modules:
  iq = types.ModuleType("sglang.srt.configs.iquest_q1")                  # 0.5.23 imports it before its arch check
  iq.IQuestQ1MTPConfig = type("IQuestQ1MTPConfig", (), {})
  sys.modules["sglang.srt.configs.iquest_q1"] = iq
import sglang.srt.server_args as sa_mod
from sglang.srt.server_args import ServerArgs
import sglang.srt.arg_groups.speculative_hook as sh
NEW = hasattr(ServerArgs, "resolve_once")                               # 0.5.23: declarations; 0.5.14: __post_init__ mutates
if NEW:
    from sglang.srt.arg_groups.overrides import declare_resolution, resolution_result
    from sglang.srt.arg_groups.arg_utils import record_fields
else:
    ServerArgs.__post_init__ = lambda self: None                       # parse only; the hook runs below
res = []
for job in json.loads(sys.stdin.read()):
    DRAFT_ARCH[0] = job.get("draft_arch")
    mc = NS(hf_config=NS(architectures=[job["arch"]]))
    try:
        p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
        ns = p.parse_args(job["argv"])
        s = ServerArgs.from_cli_args(ns)
        if NEW:
            sh.model_config_of = lambda _s: mc
            s._raw_input = {f.name: getattr(s, f.name) for f in record_fields(type(s))}
            s._resolved_overrides = []
            if s.page_size is None:                 # resolved before the hook (_page_size_default); only validation reads it
                declare_resolution(s, "stand-in", page_size=1)
            if s.device is None:                    # resolved before the hook (platform defaults): a GPU host's
                declare_resolution(s, "stand-in", device="cuda")
        else:
            s.get_model_config = lambda: mc
            if s.device is None:
                s.device = "cuda"
            if s.page_size is None:
                s.page_size = 1
        sh.handle_speculative_decoding(s)
        get = (lambda k: resolution_result(s, k)) if NEW else (lambda k: getattr(s, k))
        res.append({k: get(k) for k in KEYS})
    except BaseException as e:
        res.append({"error": f"{type(e).__name__}: {e}"[:300]})
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


def _results(python: str, script: str, args: list[str], jobs: list, what: str) -> list[dict]:
    """Run ``script`` in ``python`` with ``jobs`` as JSON on stdin; its ``RESULT <json>`` line, read."""
    proc = subprocess.run([python, "-c", script, *args], input=json.dumps(jobs), capture_output=True, text=True,
                          env=_env(), timeout=900)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"{what} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(line[-1][len("RESULT "):])


def parse_real(engine: str, python: str, argvs: list[list[str]]) -> list[dict]:
    """Each argv (the arguments after ``vllm serve`` / ``sglang.launch_server``) through the engine's own parser."""
    return _results(python, PARSE, [engine], argvs, f"{engine} parser")


def resolve_real(python: str, jobs: list[dict]) -> list[dict]:
    """SGLang's own resolved (algorithm, steps, topk, draft tokens, draft path) of each job (``argv``: the arguments
    after ``sglang.launch_server``; ``arch``: the target's architecture; ``draft_arch``: the draft's, or None), run in
    ``python``'s SGLang: :data:`RESOLVE`. A job SGLang refuses to start holds ``error``."""
    return _results(python, RESOLVE, [], jobs, "sglang resolution")


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
