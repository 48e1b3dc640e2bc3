"""An older SGLang release's own command-line parser in its own venv (issue 57, item 8): ``make sglang-parser-old``.

    $ .venv/bin/python -m bench.sglang_parser --release 0.5.14          # → .venv-sglang-0.5.14 (about a minute)
    $ .venv/bin/python -m bench.flag_tables --sglang .venv-sglang/bin/python --sglang .venv-sglang-0.5.14/bin/python

What ``sglang.srt.server_args`` of that release needs to import and build its parser, nothing more (no server):

- ``sglang==X`` without its dependencies;
- torch 2.11.0 from the shared base of ``make vllm-versions`` (``.venv-vllm-versions/torch-2.11.0``, made here when
  missing: the registry's plain torch, a CUDA build that runs on a CPU) and the matching ``torchvision==0.26.0``
  without dependencies: 0.5.14's ``utils/common.py`` imports ``torchvision.io`` at module level, and no
  torchvision loads its operators beside the project's CPU torch 2.13;
- the transformers SpecForge pins beside 0.5.14 (5.8.1; 5.25 already registers its ``qwen3_asr`` config name) with
  the tokenizers, huggingface-hub and kernels ranges that release declares;
- the small pure-Python packages its imports name (orjson, pybase64, starlette, msgspec, aiohttp, openai 2.6.1,
  partial_json_parser, sentencepiece, distro).

The rest (numpy, safetensors, ...) comes from the project's ``.venv`` through a ``.pth`` line. One ``note:`` line
names the cause when it cannot be made; ``tests/test_commands.py`` then skips that release.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from bench.vllm_versions import _run, _site, torch_base

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {"0.5.14": {"torch": "2.11.0", "pins": ["torchvision==0.26.0", "transformers==5.8.1", "tokenizers==0.22.2",
                                                  "huggingface-hub>=1.5,<2", "kernels>=0.12.0,<0.13"],
                      "small": ["orjson", "pybase64", "starlette", "msgspec", "aiohttp", "openai==2.6.1",
                                "partial_json_parser", "sentencepiece", "distro"]}}


def install(release: str, *, python: str = sys.executable) -> Path:
    """``.venv-sglang-<release>`` with that release's parser importable; RuntimeError with one line."""
    if release not in RECIPES:
        raise RuntimeError(f"sglang {release}: no recipe (known: {', '.join(RECIPES)})")
    rec = RECIPES[release]
    venv = ROOT / f".venv-sglang-{release}"
    stamp = venv / ".installed-stamp"
    if stamp.is_file():
        return venv
    venv.mkdir(exist_ok=True)
    log = venv / "install.log"
    log.write_text("")
    if not (venv / "bin" / "python").exists():
        _run([python, "-m", "venv", venv], log)
    py = venv / "bin" / "python"
    base = torch_base(rec["torch"], python, log)
    # the release's own torch first, then the project's venv for everything else
    (_site(venv) / "_aa_torch.pth").write_text(str(_site(base)) + "\n")
    (_site(venv) / "_workbench.pth").write_text(str(_site(ROOT / ".venv")) + "\n")
    _run([py, "-m", "pip", "install", "--quiet", "--no-deps", f"sglang=={release}", *rec["pins"]], log)
    _run([py, "-m", "pip", "install", "--quiet", *rec["small"]], log)
    check = subprocess.run([py, "-c", "from sglang.srt.server_args import ServerArgs, prepare_server_args"],
                           capture_output=True, text=True)
    if check.returncode:
        raise RuntimeError(f"sglang {release}: its server_args does not import: "
                           f"{(check.stderr.strip().splitlines() or ['?'])[-1][:200]} (log {log})")
    stamp.write_text(release + "\n")
    return venv


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default="0.5.14", choices=sorted(RECIPES))
    args = ap.parse_args(argv)
    try:
        venv = install(args.release)
    except RuntimeError as e:
        print(f"note: SGLang {args.release}'s parser not installed: {e}")
        return 0
    print(f"SGLang's parser: {venv.relative_to(ROOT)} (sglang {args.release})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
