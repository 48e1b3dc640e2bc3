"""The report's index page: the answer once, checked live, the other engines, the pages, a glossary.

    >>> from workbench.report.index_page import GLOSSARY, glossary_html
    >>> [term for term, _ in GLOSSARY][:3], "<dt>tap</dt>" in glossary_html()
    (['tap', 'wiring', 'L-numbering'], True)

:func:`write_index` writes ``index.html`` and ``report.json`` for the pages :func:`workbench.report.export.run_report`
ran: a header saying which engine every answer is for and what the inputs are (:func:`about_html`), the answer
block of page 03 once (:func:`answer_html`, with page 04's :func:`live_line`), the other engines' table
(:func:`engines_card`), one card per page with its headline values, and the glossary. Every text is escaped.
"""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

from workbench.core.files import atomic_write, jsonable, write_json
from workbench.engines.candidates import engine_label
from workbench.report.tables import cell_text, wrap_html

_INDEX_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em} .sub{color:#666;margin-top:0}
.card{border:1px solid #ddd;border-radius:8px;padding:.8em 1.1em;margin:1em 0}
.card h2{font-size:1.15em;margin:.1em 0 .3em} .desc{color:#555;margin:.2em 0 .6em}
.status{font-size:.8em;padding:.1em .5em;border-radius:4px;margin-left:.5em;vertical-align:middle}
.ok{background:#e3f4e1;color:#1d6b1a} .failed{background:#fde2e1;color:#9b1c1c} .missing{background:#eee;color:#666}
table{border-collapse:collapse;font-size:.92em} td{padding:.15em .8em .15em 0;vertical-align:top}
td.k{color:#555} .err{color:#9b1c1c;font-family:monospace;font-size:.85em;white-space:pre-wrap}
code{background:#f4f4f4;padding:0 .25em;border-radius:3px}
.answer{border:2px solid #1d6b1a;border-radius:8px;padding:.6em 1.1em;margin:1em 0;background:#f6fbf5;overflow-x:auto}
span.w{white-space:nowrap}
.answer dt{font-weight:600;margin-top:.3em} .answer dd{margin:0 0 .2em 0}
pre.cmd{background:#f4f4f4;padding:.5em;overflow-x:auto;white-space:pre;max-width:100%}
dl.gloss dt{font-weight:600;margin-top:.4em} dl.gloss dd{margin:0 0 .2em 1em;color:#333}
div.scroll{overflow-x:auto;max-width:100%} div.scroll::after{content:"";display:block}
table.foreign th{text-align:left;font-weight:600;padding:.15em .8em .15em 0} table.foreign tr.mis{background:#fff4e0}
"""


def answer_html(answer: dict, where: str = "", live: str = "") -> str:
    """The answer block of a page (``Answer.to_dict()``) as HTML, every text escaped; ``where``: the page it is from;
    ``live``: what a live check of the same engine found (:func:`live_line`), shown under the fix."""
    e = wrap_html           # a line breaks only at spaces and separators (a path never splits at '-')

    out = ['<div class="answer"><h2>The answer' + (f" ({html.escape(where)})" if where else "") + "</h2><dl>"]
    if answer.get("note"):
        out.append(f"<dt>Note</dt><dd>{e(answer['note'])}</dd>")
    for key in ("the server feeds", "what it costs", "the fix"):
        if answer.get(key):
            out.append(f"<dt>{e(key.capitalize())}</dt><dd>{e(answer[key].replace('`', ''))}</dd>")
    if answer.get("command"):
        out.append(f'<dd><pre class="cmd">{html.escape(answer["command"])}</pre></dd>')
    if live:
        out.append(f"<dt>Checked live</dt><dd>{e(live)}</dd>")
    if answer.get("the evidence"):
        evidence = answer["the evidence"].replace("`", "")
        if where:                                          # shown on the index, not on the page it speaks of
            evidence = evidence.replace("this page:", f"{where.removeprefix('from ')}:", 1)
        out.append(f"<dt>The evidence</dt><dd>{e(evidence)}</dd>")
    return "".join(out) + "</dl></div>"


#: The index's glossary (issue 58): every word a page uses that a reader cannot look up elsewhere, complete sentences.
GLOSSARY = (
    ("tap", "a hidden state of the target that the draft reads. An EAGLE-3 draft reads three and concatenates them."),
    ("wiring", "which three taps the server feeds the draft, written like `embed,L1,L7`. The wiring the draft was "
               "trained on and the one the engine feeds can differ: that mismatch is what these pages measure."),
    ("L-numbering", "`L{k}` is the output of decoder layer k, counted from 0 (`L0` is the first layer's output); "
                    "`embed` is the embedding output, before any layer; `final` is after the final norm. Engines and "
                    "trainers number their own layer ids differently; every page converts them to this."),
    ("fc", "the draft's first linear layer: it maps the three concatenated taps (3 × hidden size) to one hidden "
           "state. `workbench rewire` refits it so that other taps stand in for the trained ones."),
    ("accept length", "the tokens a server emits per verify step: the accepted draft tokens plus the one the target "
                      "adds (E[A] + 1, as SGLang and vLLM report it). 1.0 means no draft token is ever accepted."),
    ("decode path", "the estimator every headline uses: the chains a server verifies when the reply is the "
                    "target's greedy output, i.e. what the server reports."),
    ("every position", "the estimator the diagnosis ranks wirings by: a chain started at every position of the "
                       "data (teacher-forced). It is higher than the decode path on the same wiring; neither is "
                       "wrong, and every page says which one a number is."),
    ("α_k", "the conditional acceptance of draft step k: the chance that token k is accepted when tokens 1..k-1 "
            "were (α1 is step 1's)."),
    ("chain K, tree", "chain drafting proposes K tokens in a row (topk 1); a tree proposes topk candidates per step "
                      "for a number of steps and verifies N of them (SGLang's `--speculative-eagle-topk`)."),
    ("shape twin", "a draft with the same config and tensor shapes as yours but seeded random weights. A verify "
                   "step costs the same whatever the weights, so the twin's server measures the step cost that "
                   "predicts your draft's tokens/s without using your draft's own passes."),
)


def glossary_html() -> str:
    """The glossary as an HTML definition list (every text escaped)."""
    items = "".join(f"<dt>{html.escape(k)}</dt><dd>{wrap_html(v.replace('`', ''))}</dd>" for k, v in GLOSSARY)
    return f'<div class="card" id="glossary"><h2>Words these pages use</h2><dl class="gloss">{items}</dl></div>'


def about_html(parameters: dict) -> str:
    """What the report is of, in words (never a repr): the engine it answers for, the demo folder, and what the
    target is (its layers and hidden size read from its config; a toy for the built-in demo)."""
    e = html.escape
    p = dict(parameters or {})
    parts = []
    if p.get("engine"):
        parts.append(f"Every answer is for <b>{e(engine_label(str(p['engine'])))}</b>.")
    demo = p.get("demo")
    if demo:
        cfg = Path(str(p.get("target") or Path(str(demo)) / "target")) / "config.json"
        try:
            c = json.loads(cfg.read_text())
            shape = f"{c['num_hidden_layers']} layers, hidden size {c['hidden_size']}"
        except (OSError, ValueError, KeyError):
            shape = ""
        size = str(p.get("size", ""))
        what = ("the real demo: SmolLM2-135M-Instruct" if size == "real" else
                "the built-in demo: a toy target trained here in minutes, not a production model")
        parts.append(f"Inputs: <code>{e(str(demo))}</code>, {e(what)}" + (f" ({e(shape)}, CPU float32)." if shape
                                                                           else ", CPU float32."))
    return f'<p class="sub">{" ".join(parts)}</p>' if parts else ""


# headline keys the answer box and the engines card already say, in words (report.json keeps them)
ANSWERED = ("answer", "if you serve with", "suggested fix")


def card_rows(headline: dict, said: str) -> list[tuple[str, str]]:
    """(key, text) of a page's headline values for its index card: each said once on the index, so a value the
    answer box or the engines card above already says (``said``: their text) is left out, and the keys
    :data:`ANSWERED` too. A value is "already said" when it is a wiring or a sentence (40 characters or more) found
    there; a short word (an engine's name) may mean something else on the card. An accept length is written to 2
    decimals, as the answer quotes it.

        >>> card_rows({"K": 4, "L0,L6,L11 · accept length (decode path)": 1.8327, "trained wiring": "embed,L1,L7",
        ...            "suggested fix": "ids", "after the fix · L0,L6,L11 · accept length (decode path)": 1.833},
        ...           "it was trained on embed,L1,L7; accept length 1.83")
        [('K', '4'), ('L0,L6,L11 · accept length (decode path)', '1.83')]
        >>> card_rows({"d: engines that feed other taps": "vLLM V1 (current)"}, "vLLM V1 (current) feeds L0,L6,L11")
        [('d: engines that feed other taps', 'vLLM V1 (current)')]
    """
    flat = _plain(said)
    out = []
    for k, v in headline.items():
        if k in ANSWERED:
            continue
        text = f"{v:.2f}" if "accept length" in k and isinstance(v, float) else cell_text(v)
        said_above = (_WIRING.fullmatch(text) or len(text) >= 40) and _plain(text) in flat and "accept length" not in k
        if said_above or \
                any(k.endswith(f" · {k0}") and t0 == text for k0, t0 in out):   # "after the fix · <row above>"
            continue
        out.append((k, text))
    return out


_WIRING = re.compile(r"(?:embed|final|L\d+)(?:,(?:embed|final|L\d+))+")


def _plain(text: str) -> str:
    """``text`` with its parenthetical notes dropped and spaces folded: a sentence said again with a note of its
    own (a speed quoted at the sweep's fastest K "(its fastest measured K; ...)") is still the same sentence."""
    while True:
        t = re.sub(r"\s*\([^()]*\)", "", text)
        if t == text:
            return " ".join(t.split())
        text = t


def _said(parts: list) -> str:
    """The text of HTML parts, tags dropped and entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", " ".join(parts)))


def live_line(pages: list, engine_wiring: str | None, engine: str | None = None) -> str:
    """What the live check (page 04's headline) found, in one sentence, against the wiring the engine's record says
    it feeds (``engine_wiring``); '' when no page checked a server. A server of another engine record than the
    report's ``engine`` checks nothing of this answer, and the line says so."""
    live = next((p.headline for p in pages if p.headline.get("matched wiring")), None)
    if live is None:
        return ""
    served = live.get("server engine")
    if engine and served and served != engine:
        return (f"not checked live: page 04 checked a {engine_label(served)} server, which reads the draft as "
                f"another record than {engine_label(engine)}.")
    matched = live["matched wiring"]
    if matched == "none":
        return f"not decided: {live.get('verdict (in words)', 'no wiring separated from the runner-up')} (page 04)."
    n = live.get(f"identical · {matched}", "")
    said = f"the real server of page 04 fed {matched}" + (f" on {n} requests (identical replies)" if n else "")
    agrees = ("the wiring its record says, confirmed" if engine_wiring and matched == engine_wiring else
              f"not the {engine_wiring} its record says" if engine_wiring else "")
    return said + (f": {agrees}." if agrees else ".")


def engines_card(rows: list) -> str:
    """The "if you serve with another engine" rows (notebook 03's headline) as one compact table card."""
    if not rows:
        return ""
    e = html.escape
    cols = [c for c in rows[0] if c != "source"]
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{wrap_html(str(r.get(c, '')).replace('`', ''))}</td>" for c in cols)
                   + "</tr>" for r in rows)
    return ('<div class="card" id="other-engines"><h2>If you serve with another engine</h2><p class="desc">From each '
            "engine's record (offline; only this report's engine is checked live), on the same rows and the decode "
            f'path as the answer.</p><div class="scroll"><table class="foreign"><tr>{head}</tr>{body}</table></div></div>')


def write_index(out, pages: list, *, parameters: dict | None = None, cards=()) -> Path:
    """Write ``<out>/index.html`` and ``<out>/report.json`` for ``pages``; every text is escaped. ``cards``: more
    cards after the pages', each already HTML (:func:`workbench.report.foreign.card_html`)."""
    out = Path(out)
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>workbench report</title>", f"<style>{_INDEX_CSS}</style></head><body>",
             "<h1>workbench report</h1>",
             f'<p class="sub">Generated {e(time.strftime("%Y-%m-%d %H:%M"))}. Each page is a self-contained '
             f"HTML file (figures embedded; no network needed).</p>"]
    parts.append(about_html(parameters or {}))
    first = next((p for p in sorted(pages, key=lambda p: p.name != "03_acceptance")
                  if isinstance(p.headline.get("answer"), dict)), None)
    if first is not None:                  # the answer first (issue 35): from 03, else the first page that has one
        wiring = next((v for k, v in first.headline.items() if k.endswith(" wiring") and k != "trained wiring"), None)
        parts.append(answer_html(first.headline["answer"], where=f"from {first.name.split('_', 1)[0]} · {first.title}",
                                 live=live_line(pages, wiring, (parameters or {}).get("engine"))))
    others = next((p.headline.get("if you serve with") for p in pages if p.headline.get("if you serve with")), [])
    parts.append(engines_card(others))            # the other engines, once, right under the answer
    said = _said(parts)                           # what the page cards need not say again
    for p in pages:
        heading = e(f"{p.name.split('_', 1)[0]} · {p.title}")
        if p.html is not None:
            heading = f'<a href="{e(p.html.name)}">{heading}</a>'
        label = {"ok": "ok", "failed": "failed", "missing": "not in this report"}[p.status]
        parts.append(f'<div class="card" id="{e(p.name)}"><h2>{heading}'
                     f'<span class="status {e(p.status)}">{e(label)}</span></h2>')
        if p.description:
            parts.append(f'<p class="desc">{e(p.description)}</p>')
        if p.status == "missing":
            parts.append(f'<p class="desc">No notebook <code>notebooks/{e(p.name)}.ipynb</code> yet.</p>')
        if p.error:
            parts.append(f'<p class="err">{e(p.error)}</p>')
        if p.headline:
            rows = "".join(f'<tr><td class="k">{wrap_html(str(k))}</td><td>{wrap_html(text)}</td></tr>'
                           for k, text in card_rows(p.headline, said))
            parts.append(f"<table>{rows}</table>")
        if p.status != "missing":
            parts.append(f'<p class="desc">This page ran in {p.seconds:.1f} s.</p>')
        parts.append("</div>")
    parts.extend(cards)
    parts.append(glossary_html())
    parts.append("</body></html>")
    index = out / "index.html"
    with atomic_write(index) as f:
        f.write("\n".join(parts) + "\n")
    summary = {"parameters": jsonable(parameters or {}), "pages": [
        {"name": p.name, "title": p.title, "status": p.status, "html": p.html.name if p.html else None,
         "headline": jsonable(p.headline), "error": p.error, "seconds": round(p.seconds, 2)} for p in pages]}
    write_json(out / "report.json", summary, indent=1)
    return index


__all__ = ["ANSWERED", "card_rows", "GLOSSARY", "write_index", "answer_html", "about_html", "glossary_html", "live_line", "engines_card"]
