"""What a reader of a report page should never see (issue 35): leftovers of running code and internal codes.

    >>> leftovers("path: PosixPath('/x/03.headline.json')")
    ["a Python repr: PosixPath('"]
    >>> leftovers("capture: 100%|#####| 16/16")
    ['a progress bar: 100%|#####|']
    >>> leftovers("verdict: the SGLang server feeds L1,L3,L4")
    []
    >>> leftovers("conditional α_k: [0.817, 0.878, 0.894, 0.908]; ids [0, 2, 8]")
    ['a list of numbers in prose: [0.817, 0.878, 0.894, 0.908]']
    >>> leftovers("Parameters: demo='data/demo'")
    ["a name='value' repr: demo='data/demo'"]
    >>> leftovers("the server at http://127.0.0.1:35551 answered")
    ["a local server's URL (stopped when the page ended): http://127.0.0.1:35551"]
"""

import re

PATTERNS = {
    "a Python repr": r"PosixPath\('|WindowsPath\('|\bTarget\(\w+, path=|<workbench\.[\w.]+ object at 0x|"
                     r"\{'\w+': |(?<![a-z])\(\d+, \d+, \d+\)",
    "a temporary path": r"wb-regen-|wb-vllm-|/tmp/tmp\w{6}",
    "a progress bar": r"\d+%\|[#█▏▎▍▌▋▊▉ ]*\|",
    "a hint to run code": r"see \.?to_frame\(\)|see \.table\b",
    "an internal code": r"\bmatch-other\b|\bmatch-trained\b|\bbelow-all\b|\bserver-not-greedy\b|comparison:? per-request|"
                        r"variant\(s\)|\bengine none\b|none: no GPU cost model|residual is None before",
    "a traceback": r"Traceback \(most recent call last\)",
    # issue 58: what a reader cannot use
    "a list of numbers in prose": r"\[-?\d*\.\d+(?:, -?\d*\.\d+){2,}\]",
    "a name='value' repr": r"\b[a-z_]\w*='[^']*'",
    "a figure without alt text": r"No description has been provided for this image",
    # a server the product started binds a free (ephemeral) port and is stopped when the page ends; 30000 or 8000
    # in an example is a user's own server
    "a local server's URL (stopped when the page ended)":
        r"https?://(?:127\.0\.0\.1|localhost):(?:3[2-9]\d{3}|[4-6]\d{4})\b",
}


SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")


def table_leftovers(html_text: str) -> list[str]:
    """Headers in snake_case, True/False cells and empty header cells of every HTML table (issue 48).

        >>> table_leftovers("<table><tr><th>loss_tokens</th><th>rows</th></tr><tr><td>True</td><td>3</td></tr></table>")
        ['a snake_case header: loss_tokens', 'a True/False cell: True']
    """
    from html.parser import HTMLParser

    out = []

    class P(HTMLParser):
        cell, text = None, ""

        def handle_starttag(self, tag, attrs):
            if tag in ("th", "td"):
                self.cell, self.text = tag, ""

        def handle_data(self, data):
            if self.cell:
                self.text += data

        def handle_endtag(self, tag):
            if tag == self.cell:
                t = " ".join(self.text.split())
                if tag == "th" and SNAKE.match(t):
                    out.append(f"a snake_case header: {t}")
                if tag == "td" and t in ("True", "False"):
                    out.append(f"a True/False cell: {t}")
                self.cell = None

    P().feed(html_text)
    return list(dict.fromkeys(out))


def prose_leftovers(markdown: str, parameters) -> list[str]:
    """A notebook parameter's name used as code in prose (``ratio > 0``, ``server = "x"``): a reader sees a
    variable, not a meaning (issue 48). ``the `ratio` parameter`` is fine.

        >>> prose_leftovers("set `ratio` > 0 to fix it", ["ratio"])
        ['a parameter name in prose: `ratio` > 0']
        >>> prose_leftovers("a positive `ratio` parameter", ["ratio"])
        []
    """
    out = []
    for p in parameters:
        m = re.search(rf"`?\b{re.escape(p)}\b`?\s*(?:=|>|<|≥|≤)\s*\S", markdown)
        if m:
            out.append(f"a parameter name in prose: {m.group(0)}")
    return out


def repeated(text: str, min_chars: int = 80) -> list[str]:
    r"""Paragraphs (lines of at least ``min_chars`` characters, spaces folded) that appear more than once in one
    page's text: an answer box, a verdict or a check said again (issue 58).

        >>> line = "agreement 1.000 on 128 rows: the target wrote these replies, so a server sees the same tokens"
        >>> repeated(f"{line}\nother\n{line}")
        ['said 2 times: agreement 1.000 on 128 rows: the target wrote these replies,…']
        >>> repeated("short\nshort")
        []
    """
    from collections import Counter

    lines = [" ".join(x.split()) for x in text.splitlines()]
    counts = Counter(x for x in lines if len(x) >= min_chars)
    return [f"said {n} times: {x[:60]}…" for x, n in counts.items() if n > 1]


def page_text(page: str, *, tokens: bool = True) -> str:
    r"""The text a reader sees on an HTML page: every text node outside <style> and <script>; without ``tokens``,
    also outside the token spans (``class="wb-tok"``: a row's own text, which may hold anything a writer wrote,
    a list of floats or the same docstring in two rows). Block ends become line breaks (what :func:`repeated`
    compares).

        >>> page_text('<p>a</p><div><span class="wb-tok">[1.0, 2.0, 3.0]</span></div>', tokens=False)
        'a\n\n'
    """
    from html.parser import HTMLParser

    chunks, hidden = [], []
    blocks = ("p", "div", "pre", "tr", "li", "h1", "h2", "h3", "dt", "dd", "table")

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag in ("style", "script") or (not tokens and tag == "span" and "wb-tok" in (dict(attrs).get("class") or "")):
                hidden.append(tag)
            elif hidden and tag == hidden[-1]:
                hidden.append(tag)
            if tag == "br":
                chunks.append("\n")

        def handle_endtag(self, tag):
            if hidden and tag == hidden[-1]:
                hidden.pop()
            elif tag in blocks and not hidden:
                chunks.append("\n")

        def handle_data(self, data):
            if not hidden:
                chunks.append(data)

    P(convert_charrefs=True).feed(page)
    return "".join(chunks)


def scan_page(page: str) -> list[str]:
    """Everything issue 58's scans find on one exported HTML page, a line each: leftovers of running code outside
    the token text, a paragraph said twice, snake_case headers and True/False cells, figures without alt text, a
    section that says it was skipped."""
    text = page_text(page, tokens=False)
    found = leftovers(text) + repeated(text) + table_leftovers(page)
    missing = page.count("<img") - page.count('alt="A figure')
    if missing:
        found.append(f"figures without alt text: {missing}")
    if "skipped:" in text:
        found.append("a section that says it was skipped")
    return found


def leftovers(text: str) -> list[str]:
    """One line per kind of leftover found in ``text``: the kind and the first match."""
    out = []
    for kind, pattern in PATTERNS.items():
        m = re.search(pattern, text)
        if m:
            out.append(f"{kind}: {m.group(0)}")
    return out


if __name__ == "__main__":       # python tests/leftovers.py reports/real: the scans on every page of a report folder
    import sys
    from pathlib import Path

    bad = 0
    for folder in sys.argv[1:]:
        for f in sorted(Path(folder).glob("*.html")):
            found = scan_page(f.read_text(encoding="utf-8"))
            bad += len(found)
            print(f"{f}: " + ("clean" if not found else "\n  " + "\n  ".join(found)))
    sys.exit(1 if bad else 0)
