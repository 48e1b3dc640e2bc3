"""Inputs of every run: target, draft and data, each given as a path or as a loaded object, on one device.

    >>> from workbench.load import inputs
    >>> inputs.is_path("data/demo/val.jsonl"), inputs.is_path([{"input_ids": [1, 2]}])
    (True, False)
    >>> inputs.rows([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}], limit=1)
    [{'input_ids': [1, 2, 3]}]
    >>> # tgt, drf, ds = inputs.load("data/demo/target", "data/demo/draft-aligned", "data/demo/val.jsonl")

The one place that answers "a dataset or rows?" (:func:`rows`); "is this a path?" is
:func:`workbench.files.is_path` (here as ``inputs.is_path``). The CLI, the notebooks' headers and the library entry points (``acceptance.accept``,
``diagnose.diagnose_files``, ``rewire.rewire``, ``sglang_live.compare``, and the tests' stand-in servers) load
through :func:`load`. The target goes to ``device`` (``device_map`` spreads a large one over GPUs;
dtype fp32 on CPU, bf16 on CUDA by default), the draft to the device and dtype of the target's
embedding, data paths are read with the target's tokenizer and vocab size (ids are checked).

Relative paths (:func:`resolve`): a path that exists from the working directory is used as it is;
otherwise, when it exists under the project root (the nearest folder at or above the working directory
holding ``pyproject.toml``), that one is used. So a notebook whose kernel starts in ``notebooks/`` finds
``data/demo`` at the repository root, and a command run from a sub-folder finds the repository's files.
A path found in neither place is left as given (the error then names it).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from workbench import rows as data_mod
from workbench.core.devices import resolve_device
from workbench.core.errors import WorkbenchError
from workbench.core.files import is_path
from workbench.load import chat
from workbench.model import capture, checkpoint
from workbench.rows import conversations


def project_root(start=None) -> Path | None:
    """The nearest folder at or above ``start`` (default: the working directory) that holds ``pyproject.toml``,
    or None."""
    here = Path(start or os.getcwd()).resolve()
    return next((d for d in (here, *here.parents) if (d / "pyproject.toml").is_file()), None)


def resolve(path, *, create: bool = False):
    """``path`` as the module docstring's rule finds it (unchanged when absolute or found from the cwd).

    ``create=True`` is for a folder about to be made (the demo): one found nowhere goes under the project
    root, where ``make demo`` builds it, rather than under the working directory.

        >>> import os, tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "pyproject.toml").touch(); (root / "nb").mkdir()
        >>> (root / "data").mkdir(); _ = os.getcwd(); os.chdir(root / "nb")
        >>> resolve("data") == str(root.resolve() / "data"), resolve("nope"), resolve("new", create=True) == str(root.resolve() / "new")
        (True, 'nope', True)
        >>> os.chdir(_)
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path) or os.path.isabs(path) or os.path.exists(path):
        return path
    root = project_root()
    if root is None or (not create and not (root / path).exists()):
        return path
    return str(root / path) if isinstance(path, str) else root / path


def same_path(a, b) -> bool:
    """True when ``a`` and ``b`` name the same file or folder, each found by :func:`resolve` (the one rule for
    relative paths) and then made absolute with symlinks followed. Compare paths only with this:
    ``fill_paths`` makes a notebook's ``target`` absolute while its ``demo`` stays ``"data/demo"``, so a string
    comparison of the two is false in a kernel started in ``notebooks/`` and true from the project root.

        >>> import os, tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "pyproject.toml").touch(); (root / "nb").mkdir()
        >>> (root / "data" / "demo" / "target").mkdir(parents=True); _ = os.getcwd(); os.chdir(root / "nb")
        >>> same_path(str(root / "data/demo/target"), "data/demo/target"), same_path("data/demo", "data/demo/target")
        (True, False)
        >>> os.chdir(_)
    """
    if not a or not b:
        return False
    return os.path.realpath(os.fspath(resolve(a))) == os.path.realpath(os.fspath(resolve(b)))


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
    t = resolve(t)
    dev = resolve_device(device) if device_map is None else device
    return capture.load_target(t, device=dev, dtype=dtype, device_map=device_map,
                               trust_remote_code=trust_remote_code, progress=progress)


def draft(d, tgt):
    """An :class:`~workbench.draft.Eagle3Draft`: ``d`` itself, or loaded from the folder ``d`` for the
    target ``tgt`` (its embedding; the device and dtype of the target's embedding)."""
    if not is_path(d):
        return d
    return checkpoint.load_draft(resolve(d), tgt, device=tgt.device, dtype=tgt.dtype)


def dataset(data, tgt):
    """``data`` itself (a Dataset, a list of rows or None), or the file ``data`` read with the target's
    tokenizer and vocab size. A conversation file (or ``hf:`` name) is tokenised here with the target's chat
    template, one row per reply (:func:`workbench.load.chat.chat_dataset`); a prompt-only file raises (its
    replies must be the target's: ``workbench regenerate``). A :class:`~workbench.load.chat.ChatFile` names the
    chat template (and its variables) to use instead of the tokenizer's default."""
    spec = data if isinstance(data, chat.ChatFile) else None
    if spec is None and (data is None or not is_path(data)):
        return data
    data = resolve(spec.path if spec is not None else data)
    kind = conversations.sniff(data)
    if spec is not None and kind not in ("chat", "prompts"):
        raise WorkbenchError(f"{data}: --chat-template/--chat-template-kwargs apply to conversation files, and this "
                             f"one holds tokenised rows (expected conversations: docs/data.md)")
    if kind in ("chat", "prompts"):
        if tgt.tokenizer is None:
            raise WorkbenchError(f"{data}: conversations need the target's tokenizer and chat template (the target "
                                 f"has no tokenizer)")
        return chat.chat_dataset(data, tgt.tokenizer, vocab_size=tgt.vocab_size,
                                 chat_template=spec.template if spec is not None else None,
                                 chat_template_kwargs=spec.kwargs if spec is not None else None)
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


__all__ = ["project_root", "resolve", "same_path", "is_path", "rows", "target", "draft", "dataset", "Inputs", "load"]
