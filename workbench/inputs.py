"""Inputs of every run: target, draft and data, each given as a path or as a loaded object, on one device.

    >>> from workbench import inputs
    >>> inputs.is_path("data/demo/val.jsonl"), inputs.is_path([{"input_ids": [1, 2]}])
    (True, False)
    >>> inputs.rows([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}], limit=1)
    [{'input_ids': [1, 2, 3]}]
    >>> # tgt, drf, ds = inputs.load("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl")

The one place that answers "a dataset or rows?" (:func:`rows`); "is this a path?" is
:func:`workbench.files.is_path` (here as ``inputs.is_path``). The CLI, the notebooks' headers and the library entry points (``acceptance.accept``,
``diagnose.diagnose_files``, ``rewire.rewire``, ``sglang_live.compare``, ``fake_sglang.serve``) load
through :func:`load`. The target goes to ``device`` (``device_map`` spreads a large one over GPUs;
dtype fp32 on CPU, bf16 on CUDA by default), the draft to the device and dtype of the target's
embedding, data paths are read with the target's tokenizer and vocab size (ids are checked).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from workbench import capture, checkpoint
from workbench import data as data_mod
from workbench.devices import resolve_device
from workbench.errors import WorkbenchError
from workbench.files import is_path


def rows(data, limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (all when None) of a :class:`~workbench.data.Dataset` or of an iterable
    of row dicts, as a list."""
    if isinstance(data, dict):
        raise WorkbenchError("expected a Dataset or a list of rows, got a single row dict (wrap it in a list)")
    if limit is not None and int(limit) < 0:
        raise WorkbenchError(f"limit={limit}: expected a number of rows >= 0 (or None for all)")
    if hasattr(data, "rows"):
        return data.rows(limit)
    return list(itertools.islice(iter(data), None if limit is None else int(limit)))


def target(t, *, device: str | None = "cpu", dtype=None, device_map=None, trust_remote_code: bool = False,
           progress: bool = True):
    """A :class:`~workbench.capture.Target`: ``t`` itself, or loaded from the folder ``t``."""
    if not is_path(t):
        return t
    dev = resolve_device(device) if device_map is None else device
    return capture.load_target(t, device=dev, dtype=dtype, device_map=device_map,
                               trust_remote_code=trust_remote_code, progress=progress)


def draft(d, tgt):
    """An :class:`~workbench.draft.Eagle3Draft`: ``d`` itself, or loaded from the folder ``d`` for the
    target ``tgt`` (its embedding; the device and dtype of the target's embedding)."""
    if not is_path(d):
        return d
    return checkpoint.load_draft(d, tgt, device=tgt.device, dtype=tgt.dtype)


def dataset(data, tgt):
    """``data`` itself (a Dataset, a list of rows or None), or the file ``data`` read with the target's
    tokenizer and vocab size."""
    if data is None or not is_path(data):
        return data
    return data_mod.load(data, tokenizer=tgt.tokenizer, vocab_size=tgt.vocab_size)


@dataclass
class Inputs:
    """Loaded inputs; unpacks as ``target, draft, data``."""

    target: object
    draft: object = None
    data: object = None

    def __iter__(self):
        return iter((self.target, self.draft, self.data))


def load(target_, draft_=None, data=None, *, device: str | None = "cpu", dtype=None, device_map=None,
         trust_remote_code: bool = False, progress: bool = True) -> Inputs:
    """Target, draft and data from paths or objects (module docstring); missing ones stay None."""
    tgt = target(target_, device=device, dtype=dtype, device_map=device_map, trust_remote_code=trust_remote_code,
                 progress=progress)
    return Inputs(tgt, None if draft_ is None else draft(draft_, tgt), dataset(data, tgt))


__all__ = ["is_path", "rows", "target", "draft", "dataset", "Inputs", "load"]
