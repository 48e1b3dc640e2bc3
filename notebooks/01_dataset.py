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
# response lengths by source, and one decoded sample with its prompt / response spans.
# Every parameter defaults to the built-in demo (`workbench demo`); set `data` and `tokenizer`
# to look at your own files (`demo = ""` then skips the demo entirely).

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
data = ""            # .jsonl / .jsonl.gz / .parquet / save_to_disk folder, empty: <demo>/val.jsonl
tokenizer = ""       # local tokenizer folder, empty: <demo>/tokenizer
sample = 0           # dataset row to decode

# %%
from workbench.report import record_headline, setup_notebook

setup_notebook()
from workbench import data as wb_data
from workbench.demo import fill_paths
from workbench import plots, widgets

data, tokenizer = fill_paths(demo, size, data=data, tokenizer=tokenizer).values()
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

# %%
v = inspection.validation
record_headline("01_dataset", {
    "data": str(data), "rows": v.n_rows, "valid rows": v.n_valid, "invalid rows": v.n_invalid,
    "sources": sorted({r["source"] for r in rows}),
    "tokens": sum(r["seq_len"] for r in rows),
    "median response length": sorted(r["n_response_tokens"] for r in rows)[len(rows) // 2] if rows else None,
});
