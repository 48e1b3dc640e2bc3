"""What a row is: the canonical keys, their aliases, the ``generation`` record, and the value checks.

    >>> CANONICAL[:2], ALIASES["input_ids"][0]
    (('input_ids', 'loss_mask'), 'token_ids')
    >>> check_generation({"by": "target", "temperature": -1})[0][:2]
    ('generation.temperature', 'got int -1')
    >>> did_you_mean("input_id", ["input_ids", "loss_mask"])
    "; did you mean 'input_ids'?"

Everything here is pure Python: :mod:`workbench.rows.dataset` streams rows through these rules, and the
reports (:mod:`workbench.rows.reports`) and previews (:mod:`workbench.rows.preview`) print what they find.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError

CANONICAL = ("input_ids", "loss_mask", "seq_len", "n_prompt_tokens", "n_response_tokens", "source")



# Known aliases, tried in order when the canonical key is absent. (Never attention_mask: it is not a loss mask.)
ALIASES: dict[str, tuple[str, ...]] = {
    "input_ids": ("token_ids", "ids", "input_id", "tokens"),
    "loss_mask": ("loss_masks", "assistant_mask", "assistant_masks", "labels_mask", "label_mask",
                  "response_mask"),
    "seq_len": ("length", "seq_length", "num_tokens", "n_tokens"),
    "n_prompt_tokens": ("prompt_len", "prompt_length", "n_prompt", "num_prompt_tokens"),
    "n_response_tokens": ("response_len", "response_length", "n_response", "num_response_tokens"),
    "source": ("dataset", "data_source", "subset"),
}



ID_KEYS = ("input_ids",) + ALIASES["input_ids"]



RESERVED = ("_row", "_where")



# The per-row ``generation`` key: field -> what is expected (all but ``by`` optional; null allowed).
GENERATION_FIELDS = {
    "by": "a non-empty string: who wrote the response (target, server, human, a model name)",
    "model": "a string: the model that wrote it",
    "temperature": "a number >= 0 (0 = greedy)",
    "top_p": "a number in (0, 1]",
    "top_k": "an int, -1 (off) or >= 1",
    "seed": "an int >= 0",
    "dtype": "a string such as bf16 or fp32",
    "max_new_tokens": "an int >= 1",
}



def check_generation(gen) -> list[tuple[str, str, str]]:
    """Problems of one ``generation`` value as ``(field, what is wrong, expected)`` (empty when fine).

        >>> check_generation({"by": "target", "temperature": 0.7, "top_k": 20})
        []
        >>> check_generation({"temperature": -1})[0][:2]
        ('generation.by', 'missing')
    """
    if not isinstance(gen, dict):
        return [("generation", f"got {type_name(gen)}", 'an object like {"by": "target", "temperature": 0}')]
    out = []
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v == v  # noqa: E731
    whole = lambda v: type(v) is int  # noqa: E731
    tests = {"by": lambda v: isinstance(v, str) and v.strip() != "", "model": lambda v: isinstance(v, str),
             "temperature": lambda v: num(v) and 0 <= v < float("inf"), "top_p": lambda v: num(v) and 0 < v <= 1,
             "top_k": lambda v: whole(v) and (v == -1 or v >= 1), "seed": lambda v: whole(v) and v >= 0,
             "dtype": lambda v: isinstance(v, str), "max_new_tokens": lambda v: whole(v) and v >= 1}
    if gen.get("by") is None:
        out.append(("generation.by", "missing", GENERATION_FIELDS["by"]))
    for k, ok in tests.items():
        v = gen.get(k)
        if v is not None and not ok(v):
            out.append((f"generation.{k}", f"got {type_name(v)} {short(v)}", GENERATION_FIELDS[k]))
    return out



def generation_label(gen) -> str:
    """A short description of how a row was made, for summaries.

        >>> generation_label({"by": "target", "temperature": 0}), generation_label(None)
        ('target, greedy', 'not recorded')
        >>> generation_label({"by": "server", "temperature": 0.7, "top_p": 0.95, "top_k": 20, "seed": 1})
        'server, T=0.7 top_p=0.95 top_k=20 seed=1'
    """
    if not isinstance(gen, dict):
        return "not recorded"
    by = str(gen.get("by") or "?")
    t = gen.get("temperature")
    if t is None:
        return f"{by}, settings not recorded"
    if t < 1e-6 or gen.get("top_k") == 1:
        return f"{by}, greedy"
    parts = [f"T={t:g}"]
    if gen.get("top_p") not in (None, 1, 1.0):
        parts.append(f"top_p={gen['top_p']:g}")
    if gen.get("top_k") not in (None, -1):
        parts.append(f"top_k={gen['top_k']}")
    parts.append("unseeded" if gen.get("seed") is None else f"seed={gen['seed']}")
    return f"{by}, " + " ".join(parts)



@dataclass(frozen=True)
class Problem:
    """One thing wrong with one row: ``str(p)`` is ``file:line: field: what is wrong (expected ...)``."""
    where: str
    row: int
    field: str
    message: str
    expected: str | None = None

    def __str__(self) -> str:
        s = f"{self.where}: {self.field}: {self.message}"
        return s + (f" (expected {self.expected})" if self.expected else "")



class MissingKey(WorkbenchError, KeyError):
    """``row["token_ids"]`` on a canonical row: a ``KeyError`` that names the keys and a did-you-mean."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""



class Row(dict):
    """A canonical row (a plain ``dict``); a missing key raises :class:`MissingKey` with a did-you-mean."""

    def __missing__(self, key):
        raise MissingKey(f"{dict.get(self, '_where', 'row')}: no key {key!r} "
                         f"(keys: {', '.join(map(str, self))}){did_you_mean(key, list(self))}")



def one_line(probs: list[Problem]) -> str:
    more = f" [+{len(probs) - 1} more problems in this row]" if len(probs) > 1 else ""
    return f"{probs[0]}{more}"



def did_you_mean(key: str, keys: list[str]) -> str:
    """Suggest the closest of ``keys`` to ``key`` or to one of its aliases (``row["token_ids"]`` → 'input_ids')."""
    cands = [str(k) for k in keys if not str(k).startswith("_")]
    for canon, aliases in ALIASES.items():
        if key in aliases and canon in cands:
            return f"; did you mean {canon!r}?"
    for name in (key, *ALIASES.get(key, ())):
        m = difflib.get_close_matches(str(name), cands, n=1, cutoff=0.6)
        if m:
            return f"; did you mean {m[0]!r}?"
    return ""



def is_int(v) -> bool:
    return type(v) is int



def as_list(v):
    """numpy arrays / torch tensors / tuples → list; everything else unchanged."""
    if isinstance(v, tuple):
        return list(v)
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes, int, float)):
        try:
            return v.tolist()
        except Exception:
            return v
    return v



TYPE_NAMES = ((type(None), "null"), (bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (dict, "object"))



def type_name(v) -> str:
    for kind, name in TYPE_NAMES:               # bool before int: a bool is an int
        if isinstance(v, kind):
            return name
    if isinstance(v, list):
        kinds = set(map(type, v))
        inner = {type_name(x) for x in v if type(x) in (list, tuple)} if kinds & {list, tuple} else set()
        inner = sorted(inner | {type_name(k()) if k in (int, float, str, dict, bool) else
                                "null" if k is type(None) else k.__name__ for k in kinds - {list, tuple}})
        return f"list[{'|'.join(inner)}]" if inner else "list (empty)"
    return type(v).__name__



def short(v, width: int = 40) -> str:
    if isinstance(v, list):
        items = ", ".join(short(x, 12) for x in v[:6])
        return f"[{items}{', ...' if len(v) > 6 else ''}]" + (f" ({len(v)} items)" if len(v) > 6 else "")
    s = repr(v)
    return s if len(s) <= width else s[: width - 3] + "..."



def first_line(e) -> str:
    s = str(e).strip().splitlines()
    return s[0][:200] if s else type(e).__name__
