"""Notebook 01's sections beyond one call each: foreign data against its regenerated twin, and conversations through
the target's chat template. Each returns what a cell shows (lines, tables, figures), so a cell stays a few lines.

    >>> from workbench.report.data_page import foreign_file
    >>> foreign_file("", "")
    ('', 'no foreign data: set `foreign` to a file of responses the target did not write')
"""

from __future__ import annotations

import os
import tempfile

import pandas as pd

from workbench.live.regenerate import regenerate
from workbench.load import agreement, chat as chat_rows, inputs
from workbench.report import plots
from workbench.report.tables import table
from workbench.simulate.acceptance import simulate


def foreign_file(foreign: str, demo_dir: str, name: str = "val-foreign.jsonl", *, what: str = "foreign data",
                 param: str = "foreign", holds: str = "responses the target did not write") -> tuple[str, str]:
    """(path, "") of the demo's (or the given) file to show, or ("", why the section is skipped)."""
    foreign = foreign or (os.path.join(demo_dir, name) if demo_dir else "")
    if not foreign:
        return "", f"no {what}: set `{param}` to a file of {holds}"
    if not os.path.exists(foreign):
        return "", (f"{foreign} does not exist: this demo was built before it gained that file (rebuild it with "
                    f"`make demo`), or set the parameter to a file of your own; skipping this section")
    return foreign, ""


def foreign_agreement(tgt, data, agree, foreign) -> tuple[str, object, object]:
    """(lines, table, figure): the greedy agreement of ``data`` and of ``foreign``, by source and by sample."""
    other = agreement.measure(tgt, foreign)
    shares = {name: {k: v["share"] for k, v in a.by_source().items()} for name, a in (("data", agree), ("foreign", other))}
    frame = pd.DataFrame([{"source": k, "data": shares["data"].get(k), "foreign": shares["foreign"].get(k)}
                          for k in dict.fromkeys(list(shares["data"]) + list(shares["foreign"]))])
    tab = table(frame, {"source": "the rows' source ((all): every row)",
                        "data": f"greedy agreement of {os.path.basename(str(data))}",
                        "foreign": f"greedy agreement of {os.path.basename(foreign)}"})
    lines = f"{os.path.basename(str(data))}: {agree.headline()}\n{os.path.basename(foreign)}: {other.headline()}"
    return lines, tab, plots.agreement_by_sample(agree, others={"foreign": other})


def regenerated(tgt, foreign, demo_dir, target, *, limit=None, device: str = "cpu", draft_name: str = "draft-aligned"):
    """Regenerate ``foreign`` (each prompt kept, its response the target's greedy continuation) and compare:
    returns (lines, before, after, table or None); the table (the demo's draft on both files, K=4, SGLang's taps)
    only for the demo's own target."""
    out = os.path.join(tempfile.mkdtemp(prefix="wb-regen-"), "foreign-regenerated.jsonl")
    regen = regenerate(tgt, foreign, out, limit=limit, batch_size=32, progress=False)
    before, after = agreement.measure(tgt, foreign, limit=limit), agreement.measure(tgt, out)
    summary = regen.summary().replace(out, os.path.basename(out)).replace(os.path.dirname(out) + os.sep, "")
    lines = (f"regenerated {'all' if limit is None else f'the first {limit}'} rows of {os.path.basename(foreign)} "
             f"with the target's greedy continuation (into a scratch file in the temporary folder)\n{summary}\n"
             f"before: {before.headline()}\nafter:  {after.headline()}")
    draft_dir = os.path.join(demo_dir, draft_name) if demo_dir else ""
    if not (draft_dir and os.path.isdir(draft_dir) and str(target).startswith(str(demo_dir))):
        return lines + "\n(the estimates before/after need the demo's draft: shown for the demo target only)", \
            before, after, None
    _, drf, _ = inputs.load(tgt, draft_dir, None, device=device, progress=False)
    moved = {}
    for name, path in (("foreign", foreign), ("regenerated", out)):
        r = next(iter(simulate(tgt, drf, inputs.dataset(path, tgt), None, K=4, limit=limit, progress=False,
                               engine="sglang").values()))
        moved[name] = {"greedy agreement": r.greedy_agreement, "accept length (every position)": r.accept_length,
                       "decode-path accept length": r.decode_path["accept_length"], "samples": r.n_samples}
    return lines, before, after, table(pd.DataFrame([{"data": name, **v} for name, v in moved.items()]), {
        "data": "the rows: foreign (as given) or regenerated (the target's greedy continuation)",
        "greedy agreement": "share of response tokens equal to the target's greedy choice",
        "accept length (every position)": "E[A]+1 over every counted chain (K=4, draft-aligned, SGLang's taps)",
        "decode-path accept length": "E[A]+1 along the decode path: what a server reports on its own output",
        "samples": "rows evaluated"})


def chat_templates(chat, tokenizer, names: str = ""):
    """(lines, table, comparison): the conversations of ``chat`` under each chat template of ``tokenizer``."""
    cmp = chat_rows.compare_templates(chat, tokenizer, [n for n in names.split(",") if n] or None)
    tab = table(cmp.to_frame(), {
        "template": "the tokenizer's chat template (default, or a named one: --chat-template NAME)",
        "generation tags": "does the template mark the replies with {% generation %}?",
        "mask method": "how the reply tokens were found: generation tags, else the per-turn prefix method",
        "rows": "one row per reply", "masked tokens": "reply tokens in the loss mask",
        f"same rows as {next(iter(cmp.datasets))}": "the same token ids and masks as the first template"})
    verdict = ("every template gives the same rows" if cmp.agree else
               "the templates give different rows: the mask methods disagree on what a reply is")
    return chat_rows.describe_conversations(chat, tokenizer, limit=None, example=False) + "\n" + verdict, tab, cmp


def chat_agreement(tgt, chat, chat_ds) -> tuple[str, object]:
    """(lines, agreement) of the conversations' replies with the target's greedy choices."""
    agree = agreement.measure(tgt, chat_ds)
    note = ("\n(a reply stored as text is tokenised again: where the target wrote a word in pieces the tokenizer "
            "would merge, e.g. 'l','e' -> 'le', the ids differ from what it generated; `workbench regenerate` on the "
            "conversation file writes the generated ids themselves)" if agree.share < 0.98 else "")
    return f"{os.path.basename(chat)}: {agree.headline()}{note}", agree


__all__ = ["foreign_file", "foreign_agreement", "regenerated", "chat_templates", "chat_agreement"]
