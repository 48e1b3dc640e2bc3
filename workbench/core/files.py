"""Writing results: atomic writes, JSON-ready values, JSON files.

    >>> from workbench.core.files import atomic_write
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x.json")
    >>> with atomic_write(p) as f:
    ...     _ = f.write("{}")
    >>> open(p).read()
    '{}'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

from workbench.core.errors import WorkbenchError


def is_path(x) -> bool:
    """The one test for "is this a path?": a str, bytes or ``os.PathLike`` (not a loaded object).

        >>> is_path("data/demo/val.jsonl"), is_path([{"input_ids": [1]}])
        (True, False)
    """
    return isinstance(x, (str, bytes, os.PathLike))


@contextlib.contextmanager
def atomic_write(path, mode: str = "w", encoding: str | None = "utf-8"):
    """Write ``path`` atomically: a temp file in the same folder, fsync, then ``os.replace``.

    A crash mid-write leaves the old file (or no file), never a truncated one.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def jsonable(x):
    """Plain JSON types from numpy/torch values and tuples; NaN and inf become null.

        >>> import numpy as np
        >>> jsonable({"a": np.arange(2), "b": float("nan"), 3: (np.int64(4),)})
        {'a': [0, 1], 'b': None, '3': [4]}
    """
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist"):  # numpy scalars and arrays, torch tensors
        return jsonable(x.tolist())
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if x is None or isinstance(x, (bool, int, str)):
        return x
    return str(x)


def write_json(path, obj, *, indent: int = 2) -> None:
    """Write ``jsonable(obj)`` to ``path`` atomically (see :func:`atomic_write`), newline-terminated."""
    with atomic_write(path) as f:
        json.dump(jsonable(obj), f, indent=indent)
        f.write("\n")


def beside(folder, name: str) -> Path | None:
    """``name`` in the folder that holds ``folder``, when that file exists (a demo's measurement beside its draft).

        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "draft").mkdir(); (d / "x.json").touch()
        >>> beside(d / "draft/", "x.json") == d / "x.json", beside(d / "draft", "y.json")
        (True, None)
    """
    path = Path(str(folder).rstrip("/")).resolve().parent / name
    return path if path.is_file() else None


def check_output(path, *, folder: bool = False, what: str = "output") -> None:
    """Raise a one-line ``WorkbenchError`` unless ``path`` can be written, before any work starts.

    A file: not an existing folder, and its parent folder exists and is writable. A folder (``folder=True``):
    not an existing file, and the nearest existing folder at or above it is writable (it is created).

        >>> check_output("/no/such/folder/x.json")
        Traceback (most recent call last):
        ...
        workbench.core.errors.WorkbenchError: output /no/such/folder/x.json: folder /no/such/folder does not exist (create it first)
    """

    p = os.path.abspath(os.fspath(path))
    if folder:
        if os.path.exists(p) and not os.path.isdir(p):
            raise WorkbenchError(f"{what} {path}: exists and is not a folder (expected an output folder)")
        near = p
        while not os.path.exists(near):
            near = os.path.dirname(near)
        if not os.path.isdir(near) or not os.access(near, os.W_OK | os.X_OK):
            raise WorkbenchError(f"{what} {path}: {near} is not a writable folder")
        return
    if os.path.isdir(p):
        raise WorkbenchError(f"{what} {path}: is a folder, expected a file name")
    parent = os.path.dirname(p)
    if not os.path.isdir(parent):
        raise WorkbenchError(f"{what} {path}: folder {parent} does not exist (create it first)")
    try:                        # the real test: a temporary file where atomic_write will put one (os.access
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".wb-check-", suffix=".tmp")   # says yes to root on /proc)
    except OSError as e:
        raise WorkbenchError(f"{what} {path}: folder {parent} is not writable ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(tmp)


def content_digest(path) -> str:
    """A hash of what a file or folder holds (every file's relative name and whole bytes, recursively; dot-files
    and ``__pycache__`` skipped), never of where it lies: the resume and cache keys of work that reads it.

        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "w.bin").write_bytes(b"ab")
        >>> a = content_digest(d); _ = (d / "w.bin").write_bytes(b"ac"); a == content_digest(d)
        False
    """
    p = Path(path)
    if not p.exists():
        raise WorkbenchError(f"{p}: no such file or folder")
    h = hashlib.blake2b(digest_size=12)
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                                           and not any(x.startswith(".") for x in f.relative_to(p).parts))
    for f in files:
        h.update(f"{f.relative_to(p) if f != p else ''}\0".encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def input_fingerprint(path) -> dict:
    """Which input a run read: path, size and a hash of its first MiB (a folder: its files' names and sizes)."""
    p = os.fspath(path)
    if not os.path.exists(p):                       # a hub name (hf:...): the name is all there is
        return {"path": p, "bytes": None, "head_sha256": None}
    h = hashlib.sha256()
    if os.path.isdir(p):
        size = 0
        for name in sorted(os.listdir(p)):
            q = os.path.join(p, name)
            n = os.path.getsize(q) if os.path.isfile(q) else 0
            size += n
            h.update(f"{name}:{n}\n".encode())
    else:
        size = os.path.getsize(p)
        with open(p, "rb") as f:
            h.update(f.read(1 << 20))
    return {"path": os.path.abspath(p), "bytes": size, "head_sha256": h.hexdigest()[:16]}
