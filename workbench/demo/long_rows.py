"""Long validation rows for the real demo (1k to 8k tokens of context), built from what the registry ships, with
the target's own greedy replies: where acceptance and the verify step's cost are read at long context (issue 56).

    >>> # info = build_long_rows("data/demo-real")        # about 15 minutes on 2 cores (HF target, KV cache)
    >>> # workbench accept --target data/demo-real/target --draft data/demo-real/draft-aligned \\
    >>> #     --data data/demo-real/val-long.jsonl --by-position 512

Two kinds of prompt, each cut to a prompt length of the grid :data:`LENGTHS` (tokens, chat template included):

- **doc**: held-out standard-library modules (every 8th of :data:`workbench.demo.recipe.STDLIB_MODULES`, the
  ones the drafts never trained on), whole source files one after the other, then a question about them;
- **code**: held-out HumanEval problems (``HumanEval/0``, ``/10``, ...) with their canonical solutions, then
  held-out standard-library source, one file, ending in another held-out problem's prompt: "complete the last
  function".

Each prompt is rendered through the target's chat template and answered by the target itself, greedy, with
``ignore_eos`` so every reply has :data:`REPLY_TOKENS` tokens (what a speed benchmark asks a server for), by
:func:`workbench.live.chat_regen.regenerate_chats`, one run per length (resumable: an interrupted build redoes
only the lengths it had not finished).
The counted tokens of a row are its reply, which starts at the prompt's length: a row of the 4k grid point puts
its chains at t = 4k. ``val-long.json`` beside the rows records the grid, the rows per length and the seconds.

Not built here: multi-turn chats reaching 8k (each turn re-reads the whole history: about 20 minutes per chat on
2 cores) and SWE-style repositories; the two kinds above reach every length of the grid.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, write_json
from workbench.demo.fetch import HUMANEVAL, fetch
from workbench.demo.recipe import stdlib_files
from workbench.live.chat_regen import regenerate_chats
from workbench.rows.dataset import load, load_tokenizer

LENGTHS = (512, 1024, 2048, 3072, 4096, 6144, 8064)   # prompt tokens; 8064 + the reply stays within 8,192 positions
REPLY_TOKENS = 64
PER_LENGTH = {"doc": 2, "code": 2}
ROWS = "val-long.jsonl"
INFO = "val-long.json"
DOC_ASK = ("The Python source above is from the standard library. Which function defined in it would a newcomer "
           "call first, and what does it do? Answer in a few sentences.")
CODE_ASK = "Complete the last function of this Python file. Reply with the code only."


def held_out_modules() -> list[Path]:
    """The standard-library files the real demo holds out of training (every 8th, as ``prose_records`` splits)."""
    return [p for i, p in enumerate(stdlib_files()) if i % 8 == 7]


def _fit(tokenizer, text: str, budget: int) -> str:
    """``text`` cut to its first ``budget`` tokens (at a line end when one is near)."""
    if budget < 16:
        raise WorkbenchError(f"long rows: a length leaves {budget} tokens for the document after the chat template "
                             f"and the question (expected a longer length)")
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= budget:
        return text
    cut = tokenizer.decode(ids[:budget])
    nl = cut.rfind("\n")
    return cut[:nl + 1] if nl > len(cut) * 0.9 else cut


def _overhead(tokenizer, ask: str) -> int:
    """Tokens the chat template and the question add around an empty document."""
    return prompt_tokens(tokenizer, f"\n\n{ask}")


def prompt_tokens(tokenizer, prompt: str) -> int:
    """Tokens of ``prompt`` as one user turn rendered through the chat template (generation prompt included)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)
    return len(tokenizer.encode(text, add_special_tokens=False))


def doc_text(start: int, files: list[Path]) -> str:
    """Held-out module sources from the ``start``-th on, one after the other (wrapping), about 200k characters."""
    parts, n = [], 0
    for j in range(len(files)):
        p = files[(start + j) % len(files)]
        src = p.read_text(encoding="utf-8", errors="replace")
        parts.append(f"# ---- {p.name} ----\n{src}")
        n += len(src)
        if n > 200_000:
            break
    return "\n".join(parts)


def code_text(start: int, problems: list[dict], files: list[Path]) -> tuple[str, str]:
    """A Python file: held-out HumanEval problems from the ``start``-th on with their canonical solutions, then
    held-out standard-library source (the 17 held-out problems hold only about 3.4k tokens), and the prompt of
    the problem before ``start`` (the function to complete, never in the file above it)."""
    solved = [problems[(start + j) % len(problems)] for j in range(len(problems) - 1)]
    body = "\n\n".join(p["prompt"] + p["canonical_solution"] for p in solved)
    return body + "\n\n" + doc_text(start, files), problems[(start - 1) % len(problems)]["prompt"]


def humaneval_val(humaneval_gz) -> list[dict]:
    """HumanEval's held-out problems (every 10th task) with their canonical solutions."""
    import gzip

    out = []
    with gzip.open(humaneval_gz, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                p = json.loads(line)
                if int(str(p["task_id"]).rsplit("/", 1)[-1]) % 10 == 0:
                    out.append(p)
    return out


def long_records(tokenizer, humaneval_gz, lengths=LENGTHS, per_length: dict | None = None) -> list[dict]:
    """Prompt records (``{"id", "source", "prompt", "length"}``) of every kind at every length: the prompt, once
    rendered through the chat template, has about ``length`` tokens (the document part is cut to fit the
    template and the question; the rows record the exact count)."""
    per = dict(PER_LENGTH if per_length is None else per_length)
    files, problems = held_out_modules(), humaneval_val(humaneval_gz)
    if not files or not problems:
        raise WorkbenchError("long rows: no held-out standard-library module or HumanEval problem found")
    recs = []
    for length in lengths:
        for i in range(int(per.get("doc", 0))):
            start = (i * 3 + length // 512) % len(files)
            body = _fit(tokenizer, doc_text(start, files), int(length) - _overhead(tokenizer, DOC_ASK))
            recs.append({"id": f"long-doc-{length}-{i}", "source": "doc", "length": int(length),
                         "prompt": f"{body}\n\n{DOC_ASK}"})
        for i in range(int(per.get("code", 0))):
            start = (i * 5 + length // 512) % len(problems)
            body, last = code_text(start, problems, files)
            room = int(length) - _overhead(tokenizer, CODE_ASK) - len(tokenizer.encode(last, add_special_tokens=False))
            recs.append({"id": f"long-code-{length}-{i}", "source": "code", "length": int(length),
                         "prompt": f"{_fit(tokenizer, body, room)}\n\n{last}\n\n{CODE_ASK}"})
    return recs


def build_long_rows(demo, *, lengths=LENGTHS, per_length: dict | None = None, reply_tokens: int = REPLY_TOKENS,
                    cache=None, humaneval_gz=None, progress: bool = True) -> dict:
    """Write ``<demo>/val-long.jsonl`` (the rows) and ``<demo>/val-long.json`` (what was built, how long it took);
    returns the latter. ``humaneval_gz``: HumanEval's ``HumanEval.jsonl.gz`` (default: fetched, as the real demo's
    build does). Resumes an interrupted build; a finished one with the same grid is kept as it is."""
    demo = Path(demo)
    target = demo / "target"
    if not (target / "config.json").is_file():
        raise WorkbenchError(f"{demo}: no target/config.json (build the real demo first: make demo-real)")
    cfg = json.loads((target / "config.json").read_text())
    max_pos = int(cfg.get("max_position_embeddings") or 0)
    too_long = [n for n in lengths if max_pos and int(n) + int(reply_tokens) > max_pos]
    if too_long:
        raise WorkbenchError(f"long rows: a prompt of {too_long[0]} tokens plus a {reply_tokens}-token reply exceeds "
                             f"the target's max_position_embeddings {max_pos}")
    grid = {"lengths": [int(n) for n in lengths], "per_length": dict(PER_LENGTH if per_length is None else per_length),
            "reply_tokens": int(reply_tokens)}
    info_path, out = demo / INFO, demo / ROWS
    if out.is_file() and info_path.is_file() and json.loads(info_path.read_text()).get("grid") == grid:
        return json.loads(info_path.read_text())
    tok = load_tokenizer(demo / "tokenizer" if (demo / "tokenizer").is_dir() else target)
    recs = long_records(tok, humaneval_gz or fetch(HUMANEVAL, cache, progress=progress), lengths, per_length)
    work = demo / ".val-long.work"                 # one regenerate run per length: a build resumes by length
    work.mkdir(exist_ok=True)
    t0, new_tokens, parts = time.perf_counter(), 0, []
    for length in grid["lengths"]:
        prompts, part = work / f"prompts-{length}.jsonl", work / f"rows-{length}.jsonl"
        mine = [r for r in recs if r["length"] == length]
        text = "".join(json.dumps(r) + "\n" for r in mine)
        if not prompts.is_file() or prompts.read_text(encoding="utf-8") != text:
            prompts.write_text(text, encoding="utf-8")
            part.unlink(missing_ok=True)
        res = regenerate_chats(target, prompts, part, max_new_tokens=int(reply_tokens), ignore_eos=True,
                               batch_size=1, progress=progress)
        new_tokens += int(res.tokens) if res.n_new else 0
        parts.append(part.read_text(encoding="utf-8"))
    with atomic_write(out) as f:
        f.write("".join(parts))
    rows = load(out).rows()
    info = {"grid": grid, "rows": len(rows), "prompt_tokens": sorted(r["n_prompt_tokens"] for r in rows),
            "seconds_this_run": round(time.perf_counter() - t0, 1), "new_tokens_this_run": new_tokens,
            "command": f"python -m workbench.demo.long_rows --demo {demo}",
            "what": "held-out stdlib sources and HumanEval files with a question at the end; the target's greedy "
                    f"replies of {reply_tokens} tokens (ignore_eos)"}
    write_json(info_path, info, indent=1)
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench.demo.long_rows", description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", default="data/demo-real", help="a built real demo (default data/demo-real)")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="prompt lengths in tokens, comma-separated")
    ap.add_argument("--per-length", default="2,2", metavar="DOC,CODE", help="rows of each kind per length (2,2)")
    ap.add_argument("--reply-tokens", type=int, default=REPLY_TOKENS)
    a = ap.parse_args(argv)
    try:
        doc, code = (int(x) for x in a.per_length.split(","))
        info = build_long_rows(a.demo, lengths=[int(x) for x in a.lengths.split(",")],
                               per_length={"doc": doc, "code": code}, reply_tokens=a.reply_tokens)
    except (WorkbenchError, ValueError) as e:
        print(f"error: {e}")
        return 2
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["LENGTHS", "REPLY_TOKENS", "long_records", "prompt_tokens", "build_long_rows", "held_out_modules"]
