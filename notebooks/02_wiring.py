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
# Which target hidden states ("taps") feed the draft: the target, the draft, what each serving
# engine would feed it (with warnings where they disagree or differ from what the draft was trained
# on), and per-tap feature statistics. The embedding output has a much smaller norm and points in
# another direction than the layer outputs: a draft trained with `embed` among its taps and served
# with layer outputs (or the reverse) shows up here at a glance.

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
target = ""          # target model folder (HF format), empty: <demo>/target
draft = ""           # EAGLE-3 draft folder, empty: <demo>/draft-mismatched
data = ""            # dataset for the tap statistics, empty: <demo>/val.jsonl
limit = 32           # rows used for the tap statistics (0: all)
device = "cpu"       # cpu, cuda, cuda:N
engine = "sglang"    # the serving engine and version to highlight (`workbench wiring --engines`): sglang | sglang-2026.04 | vllm | ...

# %%
from workbench.report import record_headline, setup_notebook
from workbench.report import table as report_table

setup_notebook()
import pandas as pd

from workbench import engines
from workbench.model import capture
from workbench.load import inputs
from workbench.report import plots
from workbench.stats import tap_statistics
from workbench.engines import wiring
from workbench.demo import fill_paths
from workbench.model import describe_draft

target, draft, data = fill_paths(demo, size, target=target, draft=draft, data=data).values()
tgt, drf, ds = inputs.load(target, draft, data, device=device)
tgt

# %% [markdown]
# ## The draft

# %%
info = describe_draft(drf)
pd.Series({k: v for k, v in info.items() if k not in ("features", "notes")}, name=str(draft)).to_frame()

# %%
for note in info["notes"]:
    print("note:", note)

# %% [markdown]
# ## What each engine feeds this draft
# `taps`: the target hidden states concatenated into the draft's `fc` (embed, L*k* = output of
# decoder layer *k*, 0-based; final = after the final norm).

# %%
table = wiring.table(tgt.config, drf.raw_config)
report_table(pd.DataFrame([{"engine": r.engine, "version": engines.get(r.engine).boundary, "taps": r.spec,
                            "HF indices": r.hf_indices, "works": r.feasible, "explanation": r.explanation}
                           for r in table]),
             {"engine": "the engine record (`workbench wiring --engines`)",
              "version": "the engine versions this record stands for",
              "taps": "the target hidden states it concatenates into the draft's fc, in order",
              "HF indices": "the same taps as indices of HF output_hidden_states",
              "works": "whether this engine can serve the draft as configured",
              "explanation": "how the engine turns the draft config's ids into taps (in full)"})

# %%
for r in table:
    for w in r.warnings:
        print(f"warning [{r.engine}]: {w}")
for note in table.notes:
    print(note)

# %% [markdown]
# ## Tap feature statistics
# Norm distribution of every tap and the mean cosine similarity between taps at the same token.

# %%
n = tgt.n_layers
all_taps = ["embed"] + [f"L{k}" for k in range(n)] + ["final"]
stats = tap_statistics(capture.extract(tgt, ds, all_taps, limit=limit or None), all_taps)
trained = wiring.trained_wiring_from_config(drf.raw_config, n)
served = next(r for r in table if r.engine == engines.get(engine).name)
highlight = {f"{engine} feeds": list(served.taps)}
if trained is not None:
    highlight = {"trained on": list(trained.taps), **highlight}
plots.tap_stats_figure(stats, highlight=highlight)

# %%
stats.to_frame().round(3)

# %%
cos = stats.cosine_frame()
layer_taps = [t for t in all_taps if t.startswith("L")]
record_headline("02_wiring", {
    "target layers": n, "target hidden size": tgt.hidden_size,
    "draft trained on": trained.spec if trained is not None else "unknown (not in the draft config)",
    "SGLang feeds" if engine == "sglang" else f"{engine} feeds": served.spec,
    "engines that disagree with training": sum(1 for r in table if trained is not None and r.taps != trained.taps),
    "warnings": sum(len(r.warnings) for r in table),
    "mean cos(embed, layer taps)": float(cos.loc["embed", layer_taps].mean()),
    "mean cos(L1, other layer taps)": float(cos.loc["L1", [t for t in layer_taps if t != "L1"]].mean()),
});
