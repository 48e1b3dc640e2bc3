"""workbench: tells you why an EAGLE-3 draft underperforms when served, before you serve it.

    >>> import workbench
    >>> workbench.__version__
    '0.1.0'
"""

__version__ = "0.1.0"
