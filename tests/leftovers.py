"""What a reader of a report page should never see (issue 35): leftovers of running code and internal codes.

    >>> leftovers("path: PosixPath('/x/03.headline.json')")
    ["a Python repr: PosixPath('"]
    >>> leftovers("capture: 100%|#####| 16/16")
    ['a progress bar: 100%|#####|']
    >>> leftovers("verdict: the SGLang server feeds L1,L3,L4")
    []
"""

import re

PATTERNS = {
    "a Python repr": r"PosixPath\('|WindowsPath\('|\bTarget\(\w+, path=|<workbench\.[\w.]+ object at 0x",
    "a progress bar": r"\d+%\|[#█▏▎▍▌▋▊▉ ]*\|",
    "a hint to run code": r"see \.?to_frame\(\)|see \.table\b",
    "an internal code": r"\bmatch-other\b|\bmatch-trained\b|\bbelow-all\b|\bserver-not-greedy\b|comparison:? per-request|"
                        r"variant\(s\)|\bengine none\b|none: no GPU cost model|residual is None before",
    "a traceback": r"Traceback \(most recent call last\)",
}


def leftovers(text: str) -> list[str]:
    """One line per kind of leftover found in ``text``: the kind and the first match."""
    out = []
    for kind, pattern in PATTERNS.items():
        m = re.search(pattern, text)
        if m:
            out.append(f"{kind}: {m.group(0)}")
    return out
