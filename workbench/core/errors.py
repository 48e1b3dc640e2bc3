"""The one user-facing error type: bad input the user can fix, reported in one line.

    >>> from workbench.core.errors import WorkbenchError
    >>> str(WorkbenchError("val.jsonl line 3: key 'input_ids' missing"))
    "val.jsonl line 3: key 'input_ids' missing"

File helpers (atomic writes, JSON) live in :mod:`workbench.core.files`, device helpers in
:mod:`workbench.core.devices`.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """Bad input the user can fix. The message is one line naming the file/line/key/shape and
    what was expected; the CLI prints it as ``error: <message>`` and exits 2."""
