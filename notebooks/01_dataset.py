# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Dataset
#
# The data the draft is trained and evaluated on: its schema, a validation report, prompt and
# response lengths by source, one decoded sample with its prompt / response spans, and how far its
# responses are from the target's own greedy output (greedy agreement).
# Every parameter defaults to the built-in demo (`workbench demo`); set `data`, `tokenizer` and
# `target` to look at your own files (`demo = ""` then skips the demo entirely).

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
data = ""            # .jsonl / .jsonl.gz / .parquet / save_to_disk folder, empty: <demo>/val.jsonl
tokenizer = ""       # local tokenizer folder, empty: <demo>/tokenizer
sample = 0           # dataset row to decode
target = ""          # target model folder (HF format) for the greedy agreement, empty: <demo>/target
device = "cpu"       # cpu, cuda, cuda:N (the target's one pass for the agreement)
foreign = ""         # data the target did not write, shown next to `data`, empty: <demo>/val-foreign.jsonl if the demo has it
regenerate_limit = 64  # foreign rows to regenerate and compare before/after (0: all)
chat = ""            # conversations (SpecForge / ShareGPT / OpenAI messages), empty: <demo>/val-chat.jsonl if the demo has it
chat_templates = ""  # chat templates of `tokenizer` to compare, comma-separated (e.g. "default,plain"), empty: all it has

# %%
from workbench.report import record_headline, setup_notebook

setup_notebook()
from workbench import rows as wb_data
from workbench.demo import fill_paths
from workbench.report import plots, widgets
import pandas as pd
from IPython.display import display

data, tokenizer, target = fill_paths(demo, size, data=data, tokenizer=tokenizer, target=target).values()
ds = wb_data.load(data, tokenizer=tokenizer, on_error="skip")
inspection = ds.inspect()
print(f"{data}: {len(ds)} rows")

# %% [markdown]
# ## Schema
# Every key of the raw rows, its type(s), how many rows carry it, and an example value.

# %%
inspection.description

# %% [markdown]
# ## Validation
# Bad rows are named by `file:line` and field; they are left out of everything below.

# %%
print(inspection.validation)

# %% [markdown]
# ## Lengths by source

# %%
rows = ds.rows()
inspection.summary

# %%
plots.lengths_by_source(rows)

# %% [markdown]
# ## A decoded sample
# Grey: prompt (loss_mask 0); green: response tokens in the loss. Hover a token for its id.

# %%
widgets.sample_explorer(ds, sample=sample)

# %% [markdown]
# ## Greedy agreement: is this the target's own output?
# The share of response tokens where the data's token equals the target's greedy (argmax) choice
# given everything before it: one teacher-forced pass of the target, the same pass the acceptance
# estimators make (they report the same numbers). The decode-path estimator, the exact speculative loop
# and the live comparison assume it is 1: each response is the target's greedy output. Below 0.98 the
# every-position estimator measures teacher-forced acceptance on *this* data and the decode path is
# an approximation; `workbench regenerate` replaces the responses with the target's own
# (docs/regenerate.md). Rows whose `generation` key records sampling (T > 0) are judged by those
# settings instead.

# %%
from workbench.load import agreement, inputs

tgt = inputs.target(target, device=device, progress=False)
agree = agreement.measure(tgt, ds)
print(agree.headline())
print(agreement.data_note(ds) or "")
from workbench.report import agreement_table, table

agreement_table(agree)

# %%
plots.agreement_by_sample(agree)

# %% [markdown]
# ## Data the target did not write
# `foreign` holds the same kind of prompts with responses the target did not write (the demo's
# `val-foreign.jsonl`: the stdlib text itself). Its agreement is far below 1, and the acceptance the
# estimators report on it changes meaning. Regenerating it (the target's greedy continuation of each
# prompt) brings the agreement back to 1 and the estimates back to what a server would see.

# %%
import os

from workbench.load import resolve

demo_dir = resolve(demo) if demo else ""
foreign = foreign or (os.path.join(demo_dir, "val-foreign.jsonl") if demo_dir else "")
if not foreign:
    print("no foreign data: set `foreign` to a file of responses the target did not write")
elif not os.path.exists(foreign):
    print(f"{foreign} does not exist: this demo was built before the demo gained its foreign-data file "
          f"(rebuild it with `make demo`), or set `foreign` to a file of your own; skipping this section")
    foreign = ""
else:
    agree_foreign = agreement.measure(tgt, foreign)
    print(f"{os.path.basename(str(data))}: {agree.headline()}")
    print(f"{os.path.basename(foreign)}: {agree_foreign.headline()}")
    shares = {name: {k: v["share"] for k, v in a.by_source().items()} for name, a in (("data", agree), ("foreign", agree_foreign))}
    display(table(pd.DataFrame([{"source": k, "data": shares["data"].get(k), "foreign": shares["foreign"].get(k)}
                                for k in dict.fromkeys(list(shares["data"]) + list(shares["foreign"]))]),
                  {"source": "the rows' source ((all): every row)", "data": f"greedy agreement of {os.path.basename(str(data))}",
                   "foreign": f"greedy agreement of {os.path.basename(foreign)}"}))
    display(plots.agreement_by_sample(agree, others={"foreign": agree_foreign}))

# %%
# Regenerate the foreign file: keep each prompt, replace its response with the target's greedy continuation
# (workbench.live.regenerate, a KV cache; the first `regenerate_limit` rows, seconds on the smoke demo), then compare
# the acceptance of the demo's draft on those rows before and after: every-position and decode-path accept length.
regenerated = None
if foreign:
    import tempfile

    from workbench.simulate import acceptance
    from workbench.live.regenerate import regenerate

    regenerated = os.path.join(tempfile.mkdtemp(prefix="wb-regen-"), "foreign-regenerated.jsonl")
    n_regen = regenerate_limit or None
    print(f"regenerating {'all' if n_regen is None else f'the first {n_regen}'} rows of {foreign} with the target's "
          f"greedy continuation into {regenerated} ...")
    regen = regenerate(tgt, foreign, regenerated, limit=n_regen, batch_size=32, progress=False)
    print(regen.summary())
    agree_before = agreement.measure(tgt, foreign, limit=n_regen)          # the same rows, before
    agree_regen = agreement.measure(tgt, regenerated)
    print(f"before: {agree_before.headline()}\nafter:  {agree_regen.headline()}")
    draft_dir = os.path.join(demo_dir, "draft-aligned") if demo_dir else ""
    if draft_dir and os.path.isdir(draft_dir) and str(target).startswith(str(demo_dir)):
        _, drf, _ = inputs.load(tgt, draft_dir, None, device=device, progress=False)
        moved = {}
        for name, path in (("foreign", foreign), ("regenerated", regenerated)):
            r = next(iter(acceptance.simulate(tgt, drf, inputs.dataset(path, tgt), None, K=4, limit=n_regen,
                                              progress=False, engine="sglang").values()))
            moved[name] = {"greedy agreement": r.greedy_agreement, "accept length (every position)": r.accept_length,
                           "decode-path accept length": r.decode_path["accept_length"], "samples": r.n_samples}
        display(table(pd.DataFrame([{"data": name, **v} for name, v in moved.items()]), {
            "data": "the rows: foreign (as given) or regenerated (the target's greedy continuation)",
            "greedy agreement": "share of response tokens equal to the target's greedy choice",
            "accept length (every position)": "E[A]+1 over every counted chain (K=4, draft-aligned, SGLang's taps)",
            "decode-path accept length": "E[A]+1 along the decode path: what a server reports on its own output",
            "samples": "rows evaluated"}))
    else:
        print("(the estimates before/after need the demo's draft: shown for the demo target only)")

# %% [markdown]
# ## Conversations through the target's chat template
# Most data is held as conversations, not token ids. `chat` is tokenised with the target's own chat template
# (transformers' `apply_chat_template`), one row per reply with its history as the server sees it
# (`workbench prepare` writes the same rows to a file; docs/data.md). The loss mask covers the replies: from
# the template's `{% generation %}` tags when it has them (mask method **generation**), else from speculators'
# per-turn prefix method (**prefix**: the history with the generation prompt must be a token prefix of the
# history with the reply). The demo's tokenizer carries its template in two variants, with the tags
# (`default`) and without (`plain`): both must give the same rows. Below, the rendered template of one row:
# green, the masked reply tokens the draft is measured on; grey, the template's text and the history.

# %%
from workbench.load import chat as wb_chat

chat = chat or (os.path.join(demo_dir, "val-chat.jsonl") if demo_dir else "")
chat_cmp = None
if not chat:
    print("no conversations: set `chat` to a conversation file (docs/data.md lists the layouts)")
elif not os.path.exists(chat):
    print(f"{chat} does not exist: this demo was built before the demo gained its chat file (rebuild it with "
          f"`make demo`), or set `chat` to a file of your own; skipping this section")
else:
    print(wb_chat.describe_conversations(chat, tokenizer, limit=None))
    chat_cmp = wb_chat.compare_templates(chat, tokenizer, [n for n in chat_templates.split(",") if n] or None)
    display(table(chat_cmp.to_frame(), {
        "template": "the tokenizer's chat template (default, or a named one: --chat-template NAME)",
        "generation tags": "does the template mark the replies with {% generation %}?",
        "mask method": "how the reply tokens were found: generation tags, else the per-turn prefix method",
        "rows": "one row per reply", "masked tokens": "reply tokens in the loss mask",
        f"same rows as {next(iter(chat_cmp.datasets))}": "the same token ids and masks as the first template"}))
    print("every template gives the same rows" if chat_cmp.agree else
          "the templates give different rows: the mask methods disagree on what a reply is")

# %%
chat_ds = next(iter(chat_cmp.datasets.values())) if chat_cmp is not None else None
widgets.sample_explorer(chat_ds, sample=0) if chat_ds is not None else None

# %%
if chat_ds is not None:
    agree_chat = agreement.measure(tgt, chat_ds)
    print(f"{os.path.basename(chat)}: {agree_chat.headline()}")
    print("(a reply stored as text is tokenised again: where the target wrote a word in pieces the tokenizer would "
          "merge, e.g. 'l','e' -> 'le', the ids differ from what it generated; `workbench regenerate` on the "
          "conversation file writes the generated ids themselves)" if agree_chat.share < 0.98 else "")

# %%
v = inspection.validation
record_headline("01_dataset", {
    "data": str(data), "rows": v.n_rows, "valid rows": v.n_valid, "invalid rows": v.n_invalid,
    "sources": sorted({r["source"] for r in rows}),
    "tokens": sum(r["seq_len"] for r in rows),
    "median response length": sorted(r["n_response_tokens"] for r in rows)[len(rows) // 2] if rows else None,
    "greedy agreement": agree.share,
    **({"greedy agreement · foreign (before → after regenerate)":
        f"{agree_before.share:.3f} → {agree_regen.share:.3f}"} if regenerated else {}),
    **({"chat file": os.path.basename(chat), "chat mask methods": {n: d.chat["methods"] for n, d in chat_cmp.datasets.items()},
        "chat templates agree": chat_cmp.agree, "chat greedy agreement": agree_chat.share} if chat_cmp is not None else {}),
});
