"""Issue 56: the long validation rows (`workbench.demo.long_rows`) and the docs sections rendered from the load and
long-context benchmarks' files."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from workbench.core.errors import WorkbenchError
from workbench.demo import long_rows as lr
from workbench.rows.dataset import load, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def _humaneval(tmp_path) -> Path:
    gz = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        for n in (0, 10, 20, 30):
            f.write(json.dumps({"task_id": f"HumanEval/{n}", "prompt": f"def f{n}(x):\n    \"\"\"Return x plus {n}.\"\"\"\n",
                                "canonical_solution": f"    return x + {n}\n"}) + "\n")
    return gz


def test_long_prompts_reach_their_length_and_hold_held_out_text_only(smoke_demo, tmp_path):
    tok = load_tokenizer(smoke_demo / "tokenizer")
    recs = lr.long_records(tok, _humaneval(tmp_path), lengths=(300, 440), per_length={"doc": 1, "code": 1})
    assert [(r["source"], r["length"]) for r in recs] == [("doc", 300), ("code", 300), ("doc", 440), ("code", 440)]
    for r in recs:
        n = lr.prompt_tokens(tok, r["prompt"])
        assert 0.85 * r["length"] <= n <= r["length"] + 2, (r["id"], n)
    held = {p.name for p in lr.held_out_modules()}
    names = set(re.findall(r"# ---- (\S+) ----", " ".join(r["prompt"] for r in recs)))
    assert names and names <= held
    code = recs[1]["prompt"]
    assert code.rstrip().endswith(lr.CODE_ASK) and "def f" in code


def test_the_build_writes_rows_with_the_targets_replies_and_keeps_a_finished_one(smoke_demo, tmp_path):
    gz = _humaneval(tmp_path)
    info = lr.build_long_rows(smoke_demo, lengths=(300, 440), per_length={"doc": 1, "code": 1}, reply_tokens=8,
                              humaneval_gz=gz, progress=False)
    rows = load(smoke_demo / lr.ROWS).rows()
    assert info["rows"] == len(rows) == 4 and all(sum(r["loss_mask"]) == 8 for r in rows)
    assert sorted(r["n_prompt_tokens"] for r in rows) == info["prompt_tokens"]
    before = (smoke_demo / lr.ROWS).stat().st_mtime_ns
    assert lr.build_long_rows(smoke_demo, lengths=(300, 440), per_length={"doc": 1, "code": 1}, reply_tokens=8,
                              humaneval_gz=gz, progress=False) == info
    assert (smoke_demo / lr.ROWS).stat().st_mtime_ns == before                  # kept, not rebuilt
    with pytest.raises(WorkbenchError, match="exceeds the target's max_position_embeddings 512"):
        lr.build_long_rows(smoke_demo, lengths=(500,), reply_tokens=64, humaneval_gz=gz, progress=False)
    with pytest.raises(WorkbenchError, match="tokens for the document after the chat template"):
        lr.long_records(load_tokenizer(smoke_demo / "tokenizer"), gz, lengths=(40,))


def _block(doc: str, name: str) -> str:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    a, b = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    return text[text.index(a) + len(a):text.index(b)].strip()


def test_the_docs_load_section_is_the_files():
    from bench import load as bl

    state = json.loads((ROOT / "bench" / "vllm-load.json").read_text())
    assert _block("load.md", "bench.load") == bl.render(state).strip()
    surface = json.loads((ROOT / "bench" / "vllm-load-surface.json").read_text())
    assert surface == json.loads(json.dumps(state["surface"]))


def test_the_docs_long_context_section_is_the_files():
    from bench import long_context as lc

    state = json.loads((ROOT / "bench" / "long-context.json").read_text())
    assert _block("load.md", "long-context") == lc.render(state).strip()
    assert state["longest_row"] > 8000


def test_the_long_context_benchmark_reruns_into_an_empty_folder(smoke_demo, tmp_path):
    """Issue 57: ``python -m bench.long_context``'s measurement on the smoke demo (short long rows: it serves 512
    positions), into an empty folder: both wirings (what vLLM feeds the draft, and its trained taps) by position."""
    import shutil

    from bench import long_context as lc

    demo = tmp_path / "demo"
    shutil.copytree(smoke_demo, demo, ignore=shutil.ignore_patterns("val-long*", ".val-long*", "long-context.json"))
    lr.build_long_rows(demo, lengths=(300, 440), per_length={"doc": 1, "code": 1}, reply_tokens=8,
                       humaneval_gz=_humaneval(tmp_path), progress=False)
    out, img = tmp_path / "empty" / "long-context.json", tmp_path / "empty" / "long-context.png"
    out.parent.mkdir()
    state = lc.measure(demo, out=out, img=img, progress=False)
    assert json.loads(out.read_text()) == json.loads(json.dumps(state)) and img.stat().st_size > 0
    assert list(state["runs"]) == ["as vLLM feeds it (L0,L2,L3)", "with the one-line fix: the trained taps (embed,L1,L3)"]
    n_val = len((smoke_demo / "val.jsonl").read_text().splitlines())
    assert state["rows"] == n_val + 4 and state["longest_row"] >= 440
    starts = {r["start"] for run in state["runs"].values() for r in run["by_position"]["rows"]}
    assert starts == {0}                                      # one 512-token bin holds every chain start here
    assert "| 0–511 | " in lc.render(state)
