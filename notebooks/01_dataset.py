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
# The answer first (what the server feeds the draft, what it costs, the fix), then the data it rests on: its
# schema, a validation report, prompt and response lengths by source, one decoded sample with its prompt /
# response spans, and how far its responses are from the target's own greedy output (greedy agreement).
# Every parameter defaults to the built-in demo (`workbench demo`); set `data`, `tokenizer`, `target` and `draft`
# to look at your own files (`demo = ""` then skips the demo entirely).

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
data = ""            # .jsonl / .jsonl.gz / .parquet / save_to_disk folder, empty: <demo>/val.jsonl
tokenizer = ""       # local tokenizer folder, empty: <demo>/tokenizer
sample = 0           # dataset row to decode
target = ""          # target model folder (HF format) for the greedy agreement, empty: <demo>/target
draft = ""           # EAGLE-3 draft folder for the answer, empty: <demo>/draft-mismatched
engine = "sglang"    # the serving engine and version the answer judges: sglang | sglang-2026.04 | vllm | ...
steps = 4            # K: draft tokens per chain for the answer's accept lengths (notebook 03's default)
device = "cpu"       # cpu, cuda, cuda:N (the target's one pass for the agreement)
foreign = ""         # data the target did not write, shown next to `data`, empty: <demo>/val-foreign.jsonl if the demo has it
regenerate_limit = 64  # foreign rows to regenerate and compare before/after (0: all)
chat = ""            # conversations (SpecForge / ShareGPT / OpenAI messages), empty: <demo>/val-chat.jsonl if the demo has it
chat_templates = ""  # chat templates of `tokenizer` to compare, comma-separated (e.g. "default,plain"), empty: all it has

# %%
import workbench as wb

wb.setup_notebook()
paths = wb.fill_paths(demo, size, data=data, tokenizer=tokenizer, target=target, draft=draft)
data, tokenizer, target, draft = paths["data"], paths["tokenizer"], paths["target"], paths["draft"]
run = wb.diagnose(target, draft, data, engine=engine, K=steps, device=device,
                  evidence="this page: the data the answer rests on (greedy agreement ≥ 0.98: a server would see "
                            "the same); the accept lengths and the fix measured: notebook 03")
run.show()

# %%
ds = wb.rows.load(data, tokenizer=tokenizer, on_error="skip")
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
wb.plots.lengths_by_source(rows)

# %% [markdown]
# ## A decoded sample
# Grey: prompt (loss_mask 0); green: response tokens in the loss. Hover a token for its id.

# %%
wb.widgets.sample_explorer(ds, sample=sample)

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
agree = wb.agreement.measure(run.target, ds)
print(agree.headline())
print(wb.agreement.data_note(ds) or "")
wb.agreement_table(agree)

# %%
wb.plots.agreement_by_sample(agree)

# %% [markdown]
# ## Data the target did not write
# `foreign` holds the same kind of prompts with responses the target did not write (the demo's
# `val-foreign.jsonl`: the stdlib text itself). Its agreement is far below 1, and the acceptance the
# estimators report on it changes meaning. Regenerating it (the target's greedy continuation of each
# prompt) brings the agreement back to 1 and the estimates back to what a server would see.

# %%
demo_dir = str(wb.resolve(demo)) if demo else ""
foreign, skipped = wb.data_page.foreign_file(foreign, demo_dir)
if skipped:
    print(skipped)
else:
    lines, tab, fig = wb.data_page.foreign_agreement(run.target, data, agree, foreign)
    print(lines)
    display(tab, fig)

# %% [markdown]
# Regenerate the foreign file: keep each prompt, replace its response with the target's greedy continuation
# (`workbench regenerate`, a KV cache; the first `regenerate_limit` rows, seconds on the smoke demo), then compare
# the acceptance of the demo's draft on those rows before and after: every-position and decode-path accept length.

# %%
regenerated = None
if foreign:
    lines, agree_before, agree_regen, tab = wb.data_page.regenerated(
        run.target, foreign, demo_dir, target, limit=regenerate_limit or None, device=device)
    regenerated = True
    print(lines)
    if tab is not None:
        display(tab)

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
chat, skipped = wb.data_page.foreign_file(chat, demo_dir, "val-chat.jsonl", what="conversations", param="chat",
                                          holds="conversations (docs/data.md lists the layouts)")
chat_cmp = None
if skipped:
    print(skipped)
else:
    lines, tab, chat_cmp = wb.data_page.chat_templates(chat, tokenizer, chat_templates)
    print(lines)
    display(tab)

# %%
chat_ds = next(iter(chat_cmp.datasets.values())) if chat_cmp is not None else None
wb.widgets.sample_explorer(chat_ds, sample=0) if chat_ds is not None else None

# %%
if chat_ds is not None:
    lines, agree_chat = wb.data_page.chat_agreement(run.target, chat, chat_ds)
    print(lines)

# %%
v = inspection.validation
wb.record_headline("01_dataset", {
    "answer": run.answer.to_dict(), "data": str(data), "rows": v.n_rows, "valid rows": v.n_valid,
    "invalid rows": v.n_invalid, "sources": sorted({r["source"] for r in rows}),
    "tokens": sum(r["seq_len"] for r in rows),
    "median response length": sorted(r["n_response_tokens"] for r in rows)[len(rows) // 2] if rows else None,
    "greedy agreement": agree.share,
    **({"greedy agreement · foreign (before → after regenerate)":
        f"{agree_before.share:.3f} → {agree_regen.share:.3f}"} if regenerated else {}),
    **({"chat file": chat.rsplit("/", 1)[-1], "chat mask methods": {n: d.chat["methods"] for n, d in chat_cmp.datasets.items()},
        "chat templates agree": chat_cmp.agree, "chat greedy agreement": agree_chat.share} if chat_cmp is not None else {})});
