"""workbench: tells you why an EAGLE-3 draft underperforms when served, before you serve it.

    >>> import workbench
    >>> workbench.__version__
    '0.1.0'

The library is built in floors, lowest first (ARCHITECTURE.md): ``core`` → ``rows`` → ``engines`` →
``model`` → ``load`` → ``stats`` → ``simulate`` → ``analysis`` | ``live`` → ``report`` → ``demo`` →
``cli``. Each package's ``__init__`` names its public entry points in ``__all__``.

The flat module paths of release 0.1 (``workbench.acceptance``, ``workbench.data``, ...) still import
for one release, with a ``FutureWarning`` naming the new path (docs/migration.md).
"""

from workbench.core.compat import install as _install_old_paths

__version__ = "0.1.0"

_install_old_paths()
