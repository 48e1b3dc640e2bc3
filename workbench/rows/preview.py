"""One row shown: its tokens decoded, the prompt and the response told apart, as text or escaped HTML.

    >>> from workbench import rows
    >>> pv = rows.load([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}]).preview(0)
    >>> pv.n_prompt_tokens
    1

Without a tokenizer the ids are shown as numbers; ``write_html`` writes the preview atomically.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write
from workbench.rows.schema import first_line, short


@dataclass
class Preview:
    """One decoded sample; ``.text`` for the terminal, ``.html`` (escaped) for notebooks."""
    row: int
    where: str
    source: str
    input_ids: list[int]
    loss_mask: list[int]
    n_prompt_tokens: int
    tokens: list[str]                      # decoded text of each token
    spans: list[tuple[int, int, int]]      # (start, end, mask value) runs of equal loss_mask
    span_texts: list[str]                  # decoded text of each span
    text: str = ""
    html: str = ""

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, p, cycle) -> None:     # IPython's plain-text view: the decoded text, never the fields
        p.text(self.text)

    def _repr_html_(self) -> str:
        return self.html



def write_html(pv: Preview, path) -> None:
    """Write a preview as a standalone HTML page (atomically)."""
    with atomic_write(path) as f:
        f.write(f"<!doctype html><meta charset='utf-8'><title>{html.escape(pv.where)}</title>{pv.html}\n")



def vocab_size_of(tok) -> int:
    try:
        return len(tok)
    except TypeError:
        if hasattr(tok, "get_vocab_size"):
            return tok.get_vocab_size()
        raise WorkbenchError(f"tokenizer {type(tok).__name__} has no len() (expected a transformers/tokenizers tokenizer)") from None



def decode_ids(tok, ids: list[int]) -> str:
    try:
        return tok.decode(ids)
    except Exception as e:
        raise WorkbenchError(f"tokenizer cannot decode ids {short(ids)} ({type(e).__name__}: {first_line(e)})") from None



def preview_text(pv: Preview) -> str:
    n_loss = sum(pv.loss_mask)
    head = (f"row {pv.row} ({pv.where}) source {pv.source!r}: {len(pv.input_ids)} tokens = {pv.n_prompt_tokens} prompt "
            f"+ {len(pv.input_ids) - pv.n_prompt_tokens} response, {n_loss} in the loss")
    out = [head]
    for (a, b, m), text in zip(pv.spans, pv.span_texts):
        kind = "prompt" if b <= pv.n_prompt_tokens else ("response, trained" if m else "response, not trained")
        out.append(f"--- {kind} (loss_mask {m}, tokens {a}..{b - 1}) ---")
        out.append(text)
    return "\n".join(out)



def token_html(text: str) -> str:
    """A token's text, escaped; in a token that is only whitespace (an indent, ``"\\n   "``) the spaces become
    no-break spaces, since an HTML export (nbconvert re-parses the page) collapses whitespace-only text.

        >>> token_html("\\n  "), token_html(" <b>")
        ('\\n\xa0\xa0', ' &lt;b&gt;')
    """
    out = html.escape(text)
    return out.replace(" ", "\u00a0") if not text.strip() else out


def preview_html(pv: Preview) -> str:
    colours = {0: "#e6e6e6", 1: "#c8f0c8"}
    toks = []
    for p, (x, t, m) in enumerate(zip(pv.input_ids, pv.tokens, pv.loss_mask)):
        title = html.escape(f"pos {p} · id {x} · loss_mask {m}", quote=True)
        toks.append(f'<span class="wb-tok wb-loss{m}" title="{title}" style="background:{colours[m]};'
                    f'border-right:1px solid #fff">{token_html(t)}</span>')
    n_loss = sum(pv.loss_mask)
    lead = "" if str(pv.where).endswith(f"row {pv.row}") else f"row {pv.row} · "     # the row named once
    head = html.escape(f"{lead}{pv.where} · source: {pv.source} · {len(pv.input_ids)} tokens: "
                       f"{pv.n_prompt_tokens} prompt + {len(pv.input_ids) - pv.n_prompt_tokens} response, {n_loss} in the loss")
    legend = (f'<span style="background:{colours[0]}">&nbsp;loss_mask 0 (prompt / not trained)&nbsp;</span> '
              f'<span style="background:{colours[1]}">&nbsp;loss_mask 1 (trained)&nbsp;</span>')
    return (f'<div class="wb-preview"><div style="font-weight:bold">{head}</div><div>{legend}</div>'
            f'<div style="font-family:monospace;white-space:pre-wrap;line-height:1.7">{"".join(toks)}</div></div>')
