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
engine = "sglang"    # the serving engine and version to highlight (`workbench wiring --engines`): sglang | sglang-2026.04 | vllm | ...
train_data = ""      # training data for the rewire the answer measures, empty: train.jsonl beside the draft
fidelity = ""        # engine-vs-HF features JSON (`workbench vllm capture --fidelity`), empty: engine-fidelity.json beside the draft's folder, if any

# %%
import workbench as wb

wb.setup_notebook()
target, draft, data = wb.fill_paths(demo, size, target=target, draft=draft, data=data).values()
run = wb.diagnose(target, draft, data, engine=engine, K=steps, train_data=train_data or None, device=device,
                  evidence="this page: what each engine feeds the draft and why, and how unlike each other the "
                            "taps are; the accept lengths behind the cost: notebook 03")
run.show()

# %% [markdown]
# ## The target

# %%
tgt, drf, ds = run.target, run.draft, run.data
print(tgt.summary())

# %% [markdown]
# ## The draft

# %%
info = wb.describe_draft(drf)
wb.evidence.draft(info)

# %%
for note in info["notes"]:
    print("note:", note)

# %% [markdown]
# ## What each engine feeds this draft
# `taps`: the target hidden states concatenated into the draft's `fc` (embed, L*k* = output of decoder layer *k*,
# 0-based; final = after the final norm). An engine that serves the draft may still feed it taps it was not
# trained on: the warnings under the table say which.

# %%
fed = wb.wiring_table(tgt.config, drf.raw_config)
wb.evidence.engines_fed(fed, wb.engine)

# %%
for r in fed:
    for w in r.warnings:
        print(f"{wb.engine(r.engine).label}: {w}")
for note in fed.notes:
    print(note)

# %% [markdown]
# ## Drafts that real trainers made
# With `demo = "data/demo-real"`, after `make foreign-drafts`: the drafts NVIDIA ModelOpt and vllm-project/speculators
# trained for the same target, exactly as they exported them (docs/foreign-drafts.md). For each: who wrote it and
# how it counts layer ids, the config keys read, and what each engine feeds it against the taps the trainer
# captured. An engine that feeds other taps is the seed's bug, made by two real tools; the fix is one line.

# %%
foreign = [wb.foreign.read(f, tgt) for f in wb.foreign.beside(draft)]
print(wb.foreign.SKIPPED if not foreign else "\n".join(f.header() for f in foreign))
for f in foreign:
    display(f.config_table())
    display(f.engines_table())

# %% [markdown]
# ## Tap feature statistics
# Norm distribution of every tap and the mean cosine similarity between taps at the same token.

# %%
n = tgt.n_layers
all_taps = ["embed"] + [f"L{k}" for k in range(n)] + ["final"]
stats = wb.tap_statistics(wb.extract(tgt, ds, all_taps, limit=limit or None, progress=False), all_taps)
trained = wb.trained_wiring(drf.raw_config, n)
served = next(r for r in fed if r.engine == wb.engine(engine).name)
highlight = {f"{engine} feeds": list(served.taps)}
if trained is not None:
    highlight = {"trained on": list(trained.taps), **highlight}
wb.plots.tap_stats_figure(stats, highlight=highlight)

# %%
stats.to_frame().round(3)

# %%
cos = stats.cosine_frame()
layer_taps = [t for t in all_taps if t.startswith("L")]
wb.record_headline("02_wiring", {
    "answer": run.answer.to_dict(), "target layers": n, "target hidden size": tgt.hidden_size,
    "draft trained on": trained.spec if trained is not None else "unknown (not in the draft config)",
    "SGLang feeds" if engine == "sglang" else f"{engine} feeds": served.spec,
    "engines that disagree with training": sum(1 for r in fed if trained is not None and r.taps != trained.taps),
    "mean cos(embed, layer taps)": float(cos.loc["embed", layer_taps].mean()),
    "mean cos(L1, other layer taps)": float(cos.loc["L1", [t for t in layer_taps if t != "L1"]].mean()),
    **{f"{f.name}: engines that feed other taps than its trainer captured": ", ".join(
        wb.engine(e).label for e in f.misfed()) or "none" for f in foreign},
});

# %% [markdown]
# ## Features from the serving engine
# The taps a real vLLM captured for these rows (`workbench vllm capture`), against the HF hooks' features above:
# the difference per tap, and each wiring's accept length from either. A gap at float32's rounding step is the
# kernels' summation order; it matters only where it flips a greedy token.

# %%
fid = wb.fidelity.find(fidelity, draft)
print(wb.fidelity.NOT_MEASURED if fid is None else "\n".join(fid.lines()))
wb.plots.engine_fidelity(fid) if fid is not None else None

# %% [markdown]
# ## Next step
# The fix the answer names, measured on held-out data, and the accept lengths behind its cost: notebook 03
# (`03_acceptance`). Whether a running server really feeds what this page says: notebook 04 (`04_live_server`).

# %%
run.answer
