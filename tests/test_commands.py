"""Issue 57, item 8: launch commands copied from model cards, docs and issues (``tests/data/commands/corpus.jsonl``, with
sources in ``SOURCES.md``) are read by the lints as the engines' own parsers read them.

- Always: the lints resolve flags from the engines' parser tables (``engines/data/flags.json``), so the short forms
  model cards use are read as the engine reads them (``--speculative-algo NEXTN`` is NEXTN, not "no speculation").
- Where the engine's parser is installed (``.venv-vllm``: ``make vllm``; ``.venv-sglang``: ``make sglang-parser``):
  every corpus command the real parser accepts gives the lint the same speculative settings, and the table is the
  parser's own (same release, same options).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from workbench.engines import sglang_lint, vllm_lint
from workbench.engines.tables import table

ROOT = Path(__file__).resolve().parents[1]
CORPUS = [json.loads(line) for line in (ROOT / "tests/data/commands/corpus.jsonl").read_text().splitlines() if line]
PYTHONS = {"vllm": ROOT / ".venv-vllm" / "bin" / "python", "sglang": ROOT / ".venv-sglang" / "bin" / "python",
           "sglang@0.5.14": ROOT / ".venv-sglang-0.5.14" / "bin" / "python"}    # make sglang-parser-old
SG_KEYS = ("model_path", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
           "speculative_eagle_topk", "speculative_num_draft_tokens")


def test_the_corpus_is_real_and_large_enough():
    by = {e: [c for c in CORPUS if c["engine"] == e] for e in ("sglang", "vllm")}
    assert len(CORPUS) >= 30 and len(by["sglang"]) >= 15 and len(by["vllm"]) >= 15
    assert all(c["source"] and c["command"] for c in CORPUS)
    sources = (ROOT / "tests/data/commands/SOURCES.md").read_text()
    assert sources.strip()


def test_model_card_short_forms_are_read_as_sglang_reads_them():
    cmd = "python3 -m sglang.launch_server --model Qwen/Qwen3.6-35B-A3B --speculative-algo NEXTN " \
          "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
    args = sglang_lint.parse_command(cmd)
    assert args["speculative_algorithm"] == "NEXTN" and args["model_path"] == "Qwen/Qwen3.6-35B-A3B"
    res = sglang_lint.lint_command(cmd)
    assert "no-speculation" not in {p.code for p in res.problems}, res.summary()
    assert sglang_lint.parse_command("sglang serve --model-path m --speculative-draft-model d")[
        "speculative_draft_model_path"] == "d"
    from workbench.core.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match="--speculative-draft is ambiguous: sglang 0.5.23's parser could take it"):
        sglang_lint.parse_command("sglang serve --model-path m --speculative-draft d")   # 0.5.23 refuses it too
    with pytest.raises(WorkbenchError, match="--speculative-draft is ambiguous: sglang 0.5.14's parser could take it"):
        sglang_lint.parse_command("sglang serve --model-path m --speculative-draft d", "0.5.14")
    assert sglang_lint.parse_command("sglang serve --model m --speculative-algo EAGLE3", "0.5.14")[
        "speculative_algorithm"] == "EAGLE3"


def test_vllm_reads_underscores_dots_and_prefixes():
    a = vllm_lint.parse_command("vllm serve m --speculative_config '{\"method\": \"mtp\"}' "
                                "--speculative-config.num_speculative_tokens 2 --gpu-memory-util=0.9")
    assert a["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert a["gpu_memory_utilization"] == "0.9"


def _argv(engine: str, command: str) -> list[str] | None:
    """The arguments after the launcher, as the engine's parser sees them (env words dropped)."""
    toks = shlex.split(command, comments=True)
    for i, t in enumerate(toks):
        if engine == "vllm" and t == "serve" and i and Path(toks[i - 1]).name == "vllm":
            rest = toks[i + 1:]
            return (["--model", rest[0]] + rest[1:]) if rest and not rest[0].startswith("-") else rest
        if engine == "vllm" and t.endswith(("api_server", "api_server.py")):
            return toks[i + 1:]
        if engine == "sglang" and (t.endswith(("launch_server", "launch_server.py")) or
                                   (t == "serve" and i and Path(toks[i - 1]).name == "sglang")):
            return toks[i + 1:]
    return None


def _lint_settings(engine: str, command: str, release: str | None = None) -> dict:
    if engine == "sglang":
        a = sglang_lint.parse_command(command, release)
        return {k: a.get(k) for k in SG_KEYS}
    return {"speculative_config": vllm_lint.parse_command(command).get("speculative_config") or None}


def _same(engine: str, real: dict, ours: dict) -> bool:
    if engine == "sglang":
        return all(str(real[k]) == str(ours[k]) if real[k] is not None else ours[k] in (None, False) for k in SG_KEYS)
    r = real["speculative_config"] or None
    o = ours["speculative_config"]
    norm = lambda d: None if d is None else {k: str(v) for k, v in d.items()}  # noqa: E731
    return norm(r) == norm(o)


@pytest.mark.parametrize("parser", list(PYTHONS))
def test_the_lint_reads_every_command_as_the_engine_does(parser):
    """Each installed parser (vLLM 0.32; SGLang 0.5.23 and an older release, 0.5.14) against the lint reading the
    same release's table (``sglang lint --engine-version``)."""
    from bench.flag_tables import dump, parse_real

    engine, _, release = parser.partition("@")
    py = PYTHONS[parser]
    if not py.exists() or not (py.parents[1] / ".installed-stamp").exists():
        how = {"vllm": "make vllm", "sglang": "make sglang-parser"}.get(parser, "make sglang-parser-old")
        pytest.skip(f"{parser}'s own parser is not installed ({how})")
    real_table = dump(engine, str(py))
    ours = table("flags")[parser]
    assert real_table["release"] == ours["release"] and real_table["options"] == ours["options"], \
        "the flag table is not this parser's: python -m bench.flag_tables"
    cmds = [c for c in CORPUS if c["engine"] == engine and _argv(engine, c["command"]) is not None]
    real = parse_real(engine, str(py), [_argv(engine, c["command"]) for c in cmds])
    checked, differ = 0, []
    for c, r in zip(cmds, real):
        if "error" in r:                                   # the engine itself refuses it (an old flag, a typo)
            continue
        try:
            ours_ = _lint_settings(engine, c["command"], release or None)
        except Exception as e:                             # noqa: BLE001 (reported below, never silent)
            differ.append((c["command"][:120], f"lint raised {e}"))
            continue
        checked += 1
        if not _same(engine, r, ours_):
            differ.append((c["command"][:120], r, ours_))
    assert checked >= 10, (checked, len(cmds))
    assert not differ, differ


# what SGLang resolves after parsing, beyond the corpus: the auto-chosen shapes (STANDALONE's included), the topk-1
# rule at the seed's override, the block and n-gram drafters, and the two commands SGLang refuses to start with
# (topk without steps; steps without topk)
RESOLVE_CASES = [
    ("--speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-num-steps 1 "
     "--speculative-eagle-topk 1 --speculative-num-draft-tokens 16", "LlamaForCausalLM"),
    ("--speculative-algorithm EAGLE --speculative-draft-model-path D", "LlamaForCausalLM"),
    ("--speculative-algorithm EAGLE3 --speculative-draft-model-path D", "Qwen3ForCausalLM"),
    ("--speculative-algorithm STANDALONE --speculative-draft-model-path D", "LlamaForCausalLM"),
    ("--speculative-algorithm EAGLE --speculative-draft-model-path D --speculative-num-steps 3 "
     "--speculative-eagle-topk 4", "LlamaForCausalLM"),
    ("--speculative-algorithm NGRAM --speculative-num-draft-tokens 16 --speculative-ngram-max-bfs-breadth 10",
     "LlamaForCausalLM"),
    ("--speculative-algorithm NGRAM", "LlamaForCausalLM"),
    ("--speculative-algorithm DFLASH --speculative-draft-model-path D --speculative-num-steps 4 "
     "--speculative-eagle-topk 2 --speculative-dflash-block-size 8", "Qwen3ForCausalLM"),
    ("--speculative-algorithm eagle3 --speculative-draft-model-path D --speculative-num-steps 2 "
     "--speculative-eagle-topk 1", "LlamaForCausalLM"),
    ("--speculative-algorithm EAGLE --speculative-draft-model-path D --speculative-eagle-topk 1", "LlamaForCausalLM"),
    ("--speculative-algorithm EAGLE --speculative-draft-model-path D --speculative-num-steps 3", "LlamaForCausalLM"),
    # --speculative-adaptive: a chain starting at the default config's middle candidate (not Llama's auto (5, 4, 8)),
    # steps outside the candidates refused, and switched off for a tree
    ("--speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-adaptive", "LlamaForCausalLM"),
    ("--speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-adaptive --speculative-num-steps 4 "
     "--speculative-eagle-topk 1", "LlamaForCausalLM"),
    ("--speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-adaptive --speculative-num-steps 7 "
     "--speculative-num-draft-tokens 3", "Qwen3ForCausalLM"),
    ("--speculative-algorithm EAGLE3 --speculative-draft-model-path D --speculative-adaptive --speculative-num-steps 3 "
     "--speculative-eagle-topk 2 --speculative-num-draft-tokens 6", "LlamaForCausalLM"),
]
ARCHS = ("LlamaForCausalLM", "Qwen3ForCausalLM")        # both branches of SGLang's auto-chosen shapes
RESOLVED = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


@pytest.mark.parametrize("parser", [p for p in PYTHONS if p.startswith("sglang")])
def test_the_lints_effective_settings_are_what_sglang_resolves(parser):
    """Issue 57 item 8: after parsing, SGLang's speculative hook resolves the drafting shape itself (the auto-chosen
    (steps, topk, draft tokens) per target architecture, topk 1 forcing steps + 1 draft tokens, NEXTN as EAGLE, the
    block and n-gram drafters' own rules). Every corpus command its parser accepts, under two target architectures,
    and the edge cases above: the lint's effective settings are the resolved ones, and where SGLang refuses to start
    the lint says so with an error."""
    import re

    from bench.flag_tables import parse_real, resolve_real

    engine, _, release = parser.partition("@")
    py = PYTHONS[parser]
    if not py.exists() or not (py.parents[1] / ".installed-stamp").exists():
        pytest.skip(f"{parser}'s own parser is not installed (make sglang-parser / sglang-parser-old)")
    cmds = [_argv("sglang", c["command"]) for c in CORPUS if c["engine"] == "sglang"]
    cmds = [a for a, r in zip(cmds, parse_real("sglang", str(py), [a for a in cmds if a is not None]))
            if "error" not in r] if cmds else []
    jobs = [(a, arch) for a in cmds for arch in ARCHS] + \
           [(["--model-path", "T"] + shlex.split(x), arch) for x, arch in RESOLVE_CASES]
    real = resolve_real(str(py), [{"argv": a, "arch": arch, "draft_arch": None} for a, arch in jobs])
    num = lambda v: int(m.group(1)) if (m := re.fullmatch(r"auto \((\d+)\)", str(v))) else v  # noqa: E731
    differ, refused = [], 0
    for (argv, arch), r in zip(jobs, real):
        if "error" in r and r["error"].startswith("SystemExit"):       # the parser refuses a case: nothing resolved
            continue
        res = sglang_lint.lint(sglang_lint.parse_command("sglang serve " + shlex.join(argv), release or None),
                               target={"architectures": [arch], "num_hidden_layers": 32})
        if "error" in r:                                                # SGLang refuses to start with it
            refused += 1
            if not any(p.severity == "error" for p in res.problems):
                differ.append((shlex.join(argv)[:100], arch, r["error"], "lint: no error"))
            continue
        ours = {k: num(res.settings.get(k)) for k in RESOLVED}
        if any(str(r[k]) != str(ours[k]) for k in RESOLVED):
            differ.append((shlex.join(argv)[:100], arch, {k: r[k] for k in RESOLVED}, ours))
    assert len(jobs) - refused >= 20 and refused >= 1, (len(jobs), refused)
    assert not differ, differ
