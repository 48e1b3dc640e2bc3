"""Open the generated report in headless Chromium: every page renders with no console error, no
network request, no script dialog, and every figure is a non-empty image. Screenshots are saved
under the test's output folder."""

import shutil
from pathlib import Path

import pytest

from test_notebooks import PRESENT, generated_report

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]

# Table cells whose rendered text breaks a line inside a word or a number (issue 29): walk each cell's DOM text
# character by character; a line break (the next character lower than the previous one) is fine only after a
# space or a separator (, ; / · = |) the table wraps at; inside an output block (pre), also after a '-': a long
# command or path there wraps where the browser may break it (after '/' or '-') instead of running off the right
# edge (issue 48), and after a range's dash ('2.02–2.60'); a table cell never breaks there.
BROKEN_WORDS = r"""(sel) => { const bad = [];
  for (const cell of document.querySelectorAll(sel)) { const inPre = !!cell.closest('pre');
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT); let prev = null, n;
    while ((n = walk.nextNode())) { const t = n.textContent;
      for (let i = 0; i < t.length; i++) { const ch = t[i];
        if (/\s/.test(ch)) { prev = {ch: ' ', top: prev ? prev.top : 0}; continue; }
        const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
        const rects = r.getClientRects(); if (!rects.length) continue;
        const top = rects[0].top;
        if (prev && top > prev.top + 2 && !(inPre ? /[\s,;\/·=|\-–]/ : /[\s,;\/·=|]/).test(prev.ch))
          bad.push(cell.innerText.replace(/\s+/g, ' ').slice(0, 80));
        prev = {ch, top}; } } }
  return [...new Set(bad)]; }"""


# Issue 48: a wiring (L0,L6,L11) or a list of ids ([2, 8, 13]) whose characters sit on two lines, anywhere on the page.
BROKEN_WIRINGS = r"""() => { const bad = [];
  const re = /(?:embed|final|L\d+)(?:,(?:embed|final|L\d+))+|\[\d+(?:, ?\d+)+\]/g;
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT); let n;
  while ((n = walk.nextNode())) { const t = n.textContent; let m; re.lastIndex = 0;
    while ((m = re.exec(t))) { const r = document.createRange(); r.setStart(n, m.index);
      r.setEnd(n, m.index + m[0].length);
      const tops = [...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top));
      if (tops.length && Math.max(...tops) - Math.min(...tops) > 2) bad.push(m[0]); } }
  return [...new Set(bad)]; }"""

# Issue 48: text cut at the page's right edge: the page scrolls sideways, or an output or markdown block does.
CUT = r"""() => { const bad = [];
  if (document.documentElement.scrollWidth > window.innerWidth + 1) bad.push('the page is wider than the window');
  for (const el of document.querySelectorAll('.jp-OutputArea-output pre, .jp-RenderedMarkdown, .jp-RenderedMarkdown pre')) {
    if (el.scrollWidth > el.clientWidth + 1) bad.push(el.innerText.replace(/\s+/g, ' ').slice(0, 80)); }
  return bad; }"""


# Issue 58: a table wider than the box it scrolls in hides columns; the reader must see a cue (p.wb-cue above it)
# that says so, or see every column.
HIDDEN_COLUMNS = r"""() => { const bad = [];
  for (const t of document.querySelectorAll('table')) {
    const r = t.getBoundingClientRect(); if (!r.width) continue;
    let el = t.parentElement, clip = null;
    while (el && el !== document.body) { if (getComputedStyle(el).overflowX !== 'visible') { clip = el; break; }
      el = el.parentElement; }
    const right = clip ? clip.getBoundingClientRect().right : window.innerWidth;
    const box = t.closest('.wb-table, .scroll');
    const cue = box && box.querySelector('p.wb-cue') && box.querySelector('p.wb-cue').getBoundingClientRect().width > 0;
    if (r.right > right + 1 && !cue) bad.push((t.innerText || '').replace(/\s+/g, ' ').slice(0, 60)); }
  return bad; }"""


def broken_words(page, selector: str = "td, th") -> list[str]:
    """The cells (their text) of ``page`` in which a word or a number breaks across lines."""
    return page.evaluate(BROKEN_WORDS, selector)


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists() and not shutil.which("chromium"),
                       reason="Debian chromium not installed (make test installs it: apt-get install -y chromium)"),
]


def test_report_renders_in_headless_chromium(tmp_path_factory, smoke_demo, tmp_path):
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    out = generated_report(tmp_path_factory, Path(smoke_demo))
    exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            errors, requests, dialogs = [], [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

            page.goto((out / "index.html").as_uri())
            for width in (1400, 1200, 800):
                page.set_viewport_size({"width": width, "height": 900})
                assert broken_words(page, "td, th, dd, .jp-OutputArea-output pre") == [], f"index at {width} px"
                if width != 1200:
                    assert page.evaluate(CUT) == [], f"index at {width} px: cut at the right edge"
                    assert page.evaluate(HIDDEN_COLUMNS) == [], f"index at {width} px: columns hidden, no cue"
                    assert page.evaluate(BROKEN_WIRINGS) == [], f"index at {width} px: a wiring split"
            page.set_viewport_size({"width": 1200, "height": 900})
            links = page.eval_on_selector_all("a[href$='.html']", "els => els.map(e => e.getAttribute('href'))")
            assert links == [f"{n}.html" for n in PRESENT]
            page.screenshot(path=str(shots / "index.png"), full_page=True)
            n_images = 0
            for href in links:
                page.goto((out / href).as_uri())
                page.wait_for_load_state("load")
                sizes = page.eval_on_selector_all(
                    "img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])")
                assert sizes, f"{href}: no figure"
                assert all(ok and w > 0 and h > 0 for ok, w, h in sizes), f"{href}: empty image {sizes}"
                n_images += len(sizes)
                assert page.title().endswith("workbench")
                for width in (1400, 1200, 800):           # issues 29, 35: no word or number broken inside a table
                    page.set_viewport_size({"width": width, "height": 900})   # cell, an output line or the answer
                    assert broken_words(page, "td, th, dd, .jp-OutputArea-output pre") == [], \
                        f"{href} at {width} px: {broken_words(page, 'td, th, dd, .jp-OutputArea-output pre')}"
                    if width != 1200:                     # issue 48: nothing cut at the right edge, no wiring split
                        assert page.evaluate(CUT) == [], f"{href} at {width} px: cut at the right edge"
                        assert page.evaluate(HIDDEN_COLUMNS) == [], f"{href} at {width} px: columns hidden, no cue"
                        assert page.evaluate(BROKEN_WIRINGS) == [], f"{href} at {width} px: a wiring split"
                page.set_viewport_size({"width": 1200, "height": 900})
                page.screenshot(path=str(shots / href.replace(".html", ".png")), full_page=True)
            assert errors == [], errors
            assert requests == [], f"the report fetched from the network: {requests}"
            assert dialogs == [], "a token's text ran as script"
            assert n_images >= 7  # 01: lengths; 02: tap statistics; 03: five figures and the explorer's curves
        finally:
            browser.close()
    for f in ["index.png"] + [h.replace(".html", ".png") for h in links]:
        assert (shots / f).stat().st_size > 5_000
