"""Hub datasets by name: ``hf:OWNER/NAME[:SPLIT[:N]]`` through ``datasets.load_dataset``.

    >>> parse_spec("hf:HuggingFaceH4/ultrachat_200k:test_sft:100")
    ('HuggingFaceH4/ultrachat_200k', 'test_sft', 100)
    >>> parse_spec("hf:gsm8k")
    ('gsm8k', 'train', None)

With ``N`` the split is streamed and only its first N records are read (nothing else is downloaded); without
it the whole split is loaded (the ``datasets`` cache). Offline (``HF_DATASETS_OFFLINE=1``) with no cached copy,
or with no network, the error says how to provide the data instead: a local file, or a folder written by
``datasets.Dataset.save_to_disk`` (which ``--data`` reads directly). A local folder given after ``hf:`` is read
with ``load_from_disk``.
"""

from __future__ import annotations

import itertools
import os

from workbench.core.errors import WorkbenchError

HOW = ("provide the data locally instead: a .jsonl/.parquet file, or a folder written by "
       "datasets.load_dataset(...)[split].save_to_disk(DIR) on a machine with network (--data DIR)")


def parse_spec(spec: str) -> tuple[str, str, int | None]:
    """``hf:NAME[:SPLIT[:N]]`` → (name, split, N or None); split defaults to ``train``."""
    parts = spec[3:].split(":") if spec.startswith("hf:") else spec.split(":")
    if not parts or not parts[0] or len(parts) > 3:
        raise WorkbenchError(f"{spec}: expected hf:OWNER/NAME[:SPLIT[:N]], e.g. hf:HuggingFaceH4/ultrachat_200k:test_sft:100")
    split = parts[1] if len(parts) > 1 and parts[1] else "train"
    n = None
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 1:
            raise WorkbenchError(f"{spec}: N={parts[2]!r} (expected a number of records >= 1)")
        n = int(parts[2])
    return parts[0], split, n


def hub_records(spec: str) -> list[dict]:
    """The records of ``spec`` as a list of dicts (the first N when given); a one-line error when unreachable."""
    name, split, n = parse_spec(spec)
    try:
        import datasets
    except ImportError:
        raise WorkbenchError(f"{spec}: the datasets package is not installed; {HOW}") from None
    if os.path.isdir(name):
        ds = datasets.load_from_disk(name)
        ds = ds[split] if type(ds).__name__ == "DatasetDict" else ds
        return [dict(r) for r in itertools.islice(iter(ds), n)]
    offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
    try:
        if n is not None and not offline:
            ds = datasets.load_dataset(name, split=split, streaming=True)
            return [dict(r) for r in itertools.islice(iter(ds), n)]
        ds = datasets.load_dataset(name, split=split if n is None else f"{split}[:{n}]")
        return [dict(r) for r in ds]
    except Exception as e:                   # offline, not cached, no such dataset/split: many exception types
        why = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        where = "offline and not in the datasets cache" if offline else "cannot load it"
        raise WorkbenchError(f"{spec}: {where} ({type(e).__name__}: {why}); {HOW}") from None


__all__ = ["parse_spec", "hub_records", "HOW"]
