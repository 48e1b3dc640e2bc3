"""One rendering for every result: ``summary()`` is the text; ``str()`` and notebooks show it.

    >>> from workbench.core.render import Rendered
    >>> class R(Rendered):
    ...     def summary(self):
    ...         return "accept length 2.1 <K=4>"
    >>> str(R()), R()._repr_html_()
    ('accept length 2.1 <K=4>', '<pre>accept length 2.1 &lt;K=4&gt;</pre>')

A result class inherits :class:`Rendered` and defines ``summary()``; ``print(result)`` and a
notebook cell ending in ``result`` (``_repr_html_``, the text HTML-escaped in a ``<pre>``) then show
the same lines. Figures of results live in :mod:`workbench.report.plots`.
"""

from __future__ import annotations

import html


class Rendered:
    """Mixin for result objects: ``__str__`` and ``_repr_html_`` from ``summary()``."""

    def summary(self) -> str:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.summary())}</pre>"
