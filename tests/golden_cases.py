"""The CLI golden cases: every command's stdout and JSON output on the smoke demo, paths normalised.

Used by ``tests/test_golden.py``. Regenerate the files on purpose (after an intended output change)::

    WORKBENCH_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py

Every case runs ``workbench.cli.main`` in-process with ``--quiet`` (where the command has it) and a
fixed ``--cost-ratio`` (accept, diagnose), so nothing measured on the clock reaches the output;
the few timing fields left (rewire's seconds) are masked by :func:`normalise`.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"
UPDATE_ENV = "WORKBENCH_UPDATE_GOLDEN"
RATIO = "0.05"
LAUNCH = ("python -m sglang.launch_server --model-path {demo}/target --speculative-algorithm EAGLE3 "
          "--speculative-draft-model-path {demo}/draft-mismatched --speculative-num-steps 4 "
          "--speculative-eagle-topk 1 --speculative-num-draft-tokens 5")

# name -> (argv with {demo}/{out} placeholders, output files (relative to {out}) to keep)
CASES = {
    "inspect": (["inspect", "{demo}/val.jsonl", "--tokenizer", "{demo}/tokenizer", "--preview", "0"], []),
    "inspect-json": (["inspect", "{demo}/val.jsonl", "--tokenizer", "{demo}/tokenizer", "--json"], []),
    "wiring": (["wiring", "--target", "{demo}/target", "--draft", "{demo}/draft-mismatched"], []),
    "wiring-json": (["wiring", "--target", "{demo}/target", "--draft", "{demo}/draft-mismatched", "--json"], []),
    "draft": (["draft", "{demo}/draft-mismatched", "--target", "{demo}/target"], []),
    "draft-json": (["draft", "{demo}/draft-mismatched", "--target", "{demo}/target", "--json"], []),
    "accept-engine": (["accept", "--target", "{demo}/target", "--draft", "{demo}/draft-mismatched", "--data",
                       "{demo}/val.jsonl", "--engine", "sglang", "--steps", "4", "--quiet", "--cost-ratio", RATIO,
                       "--json", "{out}/acc.json", "--per-chain", "{out}/chains.jsonl"],
                      ["acc.json", "chains.jsonl"]),
    "accept-wiring": (["accept", "--target", "{demo}/target", "--draft", "{demo}/draft-aligned", "--data",
                       "{demo}/val.jsonl", "--wiring", "L1,L3,L4", "--steps", "3", "--limit", "10", "--quiet",
                       "--cost-ratio", RATIO, "--json", "{out}/acc.json", "--min-accept-length", "1.5"],
                      ["acc.json"]),
    "diagnose-mismatched": (["diagnose", "--target", "{demo}/target", "--draft", "{demo}/draft-mismatched",
                             "--data", "{demo}/val.jsonl", "--engine", "sglang", "--steps", "4", "--quiet",
                             "--cost-ratio", RATIO, "--json", "{out}/dx.json"], ["dx.json"]),
    "diagnose-aligned": (["diagnose", "--target", "{demo}/target", "--draft", "{demo}/draft-aligned",
                          "--data", "{demo}/val.jsonl", "--engine", "vllm", "--steps", "3", "--quiet",
                          "--cost-ratio", RATIO, "--json", "{out}/dx.json"], ["dx.json"]),
    "rewire": (["rewire", "--target", "{demo}/target", "--draft", "{demo}/draft-mismatched", "--data",
                "{demo}/train.jsonl", "--eval-data", "{demo}/val.jsonl", "--engine", "sglang", "--out",
                "{out}/rewired", "--finetune-steps", "2", "--steps", "3", "--quiet", "--json", "{out}/rw.json"],
               ["rw.json", "rewired/config.json"]),
    "sglang-lint": (["sglang", "lint", LAUNCH, "--draft", "{demo}/draft-mismatched", "--target", "{demo}/target",
                     "--trained-wiring", "embed,L1,L3"], []),
    "sglang-lint-json": (["sglang", "lint", LAUNCH, "--draft", "{demo}/draft-mismatched", "--target",
                          "{demo}/target", "--trained-wiring", "embed,L1,L3", "--json"], []),
}


def normalise(text: str, demo: Path, out: Path) -> str:
    """Paths to ``<DEMO>``/``<OUT>``; wall-clock seconds to ``<s>``."""
    for real, name in ((out, "<OUT>"), (demo, "<DEMO>")):
        for form in {str(real.resolve()), str(real)}:
            text = text.replace(form, name)
    text = re.sub(r'"seconds": [0-9.eE+-]+', '"seconds": "<s>"', text)
    text = re.sub(r"in [0-9.]+ s\b", "in <s> s", text)
    return text


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
REL = 1e-5      # the stated precision of a golden number


def first_difference(got: str, want: str, rel: float = REL) -> str | None:
    """None when ``got`` equals ``want`` with every non-number piece byte for byte and every number within
    ``rel`` (relative) of the golden one (integers exactly); else the first difference, in words."""
    if got == want:
        return None
    g_nums, w_nums = NUMBER.findall(got), NUMBER.findall(want)
    g_text, w_text = NUMBER.split(got), NUMBER.split(want)
    for a, b in zip(g_text, w_text):
        if a != b:
            return f"text {a[:60]!r} where the golden file has {b[:60]!r}"
    if len(g_text) != len(w_text):
        return "a different number of numbers"
    for a, b in zip(g_nums, w_nums):
        if a == b:
            continue
        if "." not in a + b and "e" not in (a + b).lower():
            return f"{a} where the golden file has {b}"
        x, y = float(a), float(b)
        if abs(x - y) > rel * max(abs(x), abs(y), 1e-12):
            return f"{a} where the golden file has {b}"
    return None


def run_case(name: str, demo: Path, out: Path) -> dict[str, str]:
    """``{golden file name: normalised text}`` of one case (stdout with the exit code, then its files)."""
    from workbench.cli import main

    argv, files = CASES[name]
    argv = [a.format(demo=demo, out=out) for a in argv]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    shown = " ".join(argv)
    got = {f"{name}.txt": normalise(f"$ workbench {shown}\n[exit {rc}]\n{buf.getvalue()}", demo, out)}
    for f in files:
        got[f"{name}.{f.replace('/', '.')}"] = normalise((out / f).read_text(encoding="utf-8"), demo, out)
    return got
