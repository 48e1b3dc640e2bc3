# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Wiring
#
# Which target hidden states ("taps") feed the draft: the answer first (what the server feeds, what it costs, the
# fix), then the evidence: the target, the draft, what each serving engine would feed it (with warnings where
# they differ from what the draft was trained on), and per-tap feature statistics. The embedding output has a
# much smaller norm and points in another direction than the layer outputs: a draft trained with `embed` among
# its taps and served with layer outputs (or the reverse) shows up here at a glance.

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
target = ""          # target model folder (HF format), empty: <demo>/target
draft = ""           # EAGLE-3 draft folder, empty: <demo>/draft-mismatched
data = ""            # dataset for the answer and the tap statistics, empty: <demo>/val.jsonl
limit = 32           # rows used for the tap statistics (0: all); the answer uses every row, as notebook 03 does
steps = 4            # K: draft tokens per chain for the answer's accept lengths (notebook 03's default)
device = "cpu"       # cpu, cuda, cuda:N
engine = "vllm"      # the serving engine and version every answer is for (`workbench wiring --engines`): vllm (the demo serves it live) | vllm-0.21 | sglang | ...
speed = ""           # tokens/s measured on a real vLLM (`workbench vllm speed --json`), empty: vllm-speed.json beside the draft's folder, if any
train_data = ""      # training data for the rewire the answer measures, empty: train.jsonl beside the draft
fidelity = ""        # engine-vs-HF features JSON (`workbench vllm capture --fidelity`), empty: engine-fidelity.json beside the draft's folder, if any

# %%
import workbench as wb

wb.setup_notebook()
target, draft, data = wb.fill_paths(demo, size, target=target, draft=draft, data=data).values()
run = wb.diagnose(target, draft, data, engine=engine, K=steps, speed=speed, train_data=train_data or None, device=device,
                  evidence="this page: what each engine feeds the draft and why, and how unlike each other the "
                            "taps are; the accept lengths behind the cost: notebook 03")
run.show()

# %% [markdown]
# ## The target

# %%
page = run.wiring_view()
page.target()

# %% [markdown]
# ## The draft

# %%
page.draft()

# %% [markdown]
# ## What each engine feeds this draft
# `taps`: the target hidden states concatenated into the draft's `fc` (embed, L*k* = output of decoder layer *k*,
# 0-based; final = after the final norm). An engine that serves the draft may still feed it taps it was not
# trained on: the warnings above the table say which.

# %%
page.engines()

# %% [markdown]
# ## Drafts that real trainers made
# With the demo folder `data/demo-real`, after `make foreign-drafts`: the drafts NVIDIA ModelOpt and
# vllm-project/speculators trained for the same target, exactly as they exported them (docs/foreign-drafts.md). For
# each: who wrote it and how it counts layer ids, the config keys read, and what each engine feeds it against the
# taps the trainer captured. An engine that feeds other taps makes the wiring bug these pages measure, with two real tools; the fix is
# one line.

# %%
foreign = run.foreign_drafts()
foreign.show()

# %% [markdown]
# ## Tap feature statistics
# Norm distribution of every tap and the mean cosine similarity between taps at the same token.

# %%
taps = page.taps(limit=limit)
taps.plot()

# %%
taps.table()

# %% [markdown]
# ## Features from the serving engine
# The taps a real vLLM captured for these rows (`workbench vllm capture`), against the HF hooks' features above:
# the difference per tap, and each wiring's accept length from either. A gap at float32's rounding step is the
# kernels' summation order; it matters only where it flips a greedy token.

# %%
engine_features = page.fidelity(fidelity)
engine_features.show()
engine_features.plot()

# %%
wb.record_headline("02_wiring", {**page.headline(), **foreign.headline()});

# %% [markdown]
# ## Next step
# The fix the answer names, measured on held-out data, and the accept lengths behind its cost: notebook 03
# (`03_acceptance`). Whether a running server really feeds what this page says: notebook 04 (`04_live_server`).
