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
# # 03 · Acceptance
#
# How many draft tokens the target would accept, offline, for each candidate wiring: per-position
# acceptance (conditional and cumulative) with 95% intervals, accept-length histograms, every
# position vs the decode path a server follows, by source, the ranking of the wirings, the projected
# speed-up against K, and one sample's tokens coloured by how many draft tokens were accepted after
# each. Convention: chain drafting (topk 1), greedy; accept length = E[A]+1 (bonus token counted,
# as SGLang and vLLM report it).

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
target = ""          # target model folder (HF format), empty: <demo>/target
draft = ""           # EAGLE-3 draft folder, empty: <demo>/draft-mismatched
data = ""            # evaluation data, empty: <demo>/val.jsonl
wirings = ""         # candidate wirings separated by semicolons, e.g. embed,L1,L3;L1,L3,L4 (empty: every engine plus the trained one)
steps = 4            # K: draft tokens per chain
limit = 0            # rows to evaluate (0: all)
device = "cpu"       # cpu, cuda, cuda:N
ratio = 0.0          # draft-step / target-forward cost for the speed-up projection (0: measured here)
sample = 0           # which evaluated sample to colour
engine = "sglang"    # engine and version whose wiring the diagnosis judges (`workbench wiring --engines`): sglang, sglang-2026.04, vllm, ...
train_data = ""      # training data for the rewire refit, empty: <demo>/train.jsonl (only with the demo's target)
rewire_limit = 64    # training rows the rewire refit reads (0: all)

# %%
from workbench.report import record_headline, setup_notebook

setup_notebook()
import pandas as pd

from workbench import acceptance, inputs, plots, sglang_live, widgets, wiring
from workbench.demo import fill_paths

target, draft, data = fill_paths(demo, size, target=target, draft=draft, data=data).values()
tgt, drf, ds = inputs.load(target, draft, data, device=device, progress=False)

# %% [markdown]
# ## Candidate wirings

# %%
# the trained taps and what every engine record (engine and version) feeds this draft as configured
trained = wiring.trained_wiring_from_config(drf.raw_config, tgt.n_layers)
extra = [w.strip() for w in wirings.split(";") if w.strip()] if wirings else []
found = sglang_live.candidates(tgt.config, drf.raw_config, trained, extra)
candidates = [c.spec for c in found if not extra or "given" in c.engines]
print("trained on:", trained.spec if trained is not None else "unknown (not in the draft config)")
for c in found:
    if c.spec in candidates:
        print(f"candidate {c.spec}: {', '.join(c.engines)}")

# %%
results = acceptance.simulate(tgt, drf, ds, candidates, K=steps, limit=limit or None)
for r in results.values():
    print(r.summary(), end="\n\n")

# %% [markdown]
# ### The data: the target's own greedy output?
# Greedy agreement: the share of response tokens equal to the target's greedy choice, counted on the
# same target pass as the results above (the same for every wiring). Below 0.98 the every-position
# estimator measures teacher-forced acceptance on this data and the decode path is an approximation:
# `workbench regenerate` (docs/regenerate.md; notebook 01 shows it on the demo's foreign data).

# %%
data_agreement = next(iter(results.values())).agreement
print(data_agreement.headline(next(iter(results.values())).setting))
print(next(iter(results.values())).data_note() or "")
pd.DataFrame(data_agreement.by_source()).T[["samples", "tokens", "share", "min_sample"]]

# %% [markdown]
# ## Per-position acceptance

# %%
plots.acceptance_curves(results)

# %% [markdown]
# ## Accept-length histograms

# %%
plots.accept_length_histogram(results)

# %% [markdown]
# ## Every position vs the decode path
# Every position: all chains of the data. Decode path: only the chains a server would verify when
# the response is the target's greedy output. They should agree within their intervals.

# %%
plots.decode_path_comparison(results)

# %% [markdown]
# ## By source

# %%
plots.by_source(results)

# %% [markdown]
# ## Ranking of the wirings
# Best first. Wirings whose 95% interval overlaps the leader's are tied for best (`tied`); among
# them the trained wiring comes first. What this means for your engine: the diagnosis below.

# %%
from IPython.display import Markdown, display

from workbench.diagnose import rank_tied
from workbench.report import table as report_table

setting = results[candidates[0]].setting
stats = {}
for spec, r in results.items():
    lo, hi = r.intervals(n_boot=200)["accept_length"]
    stats[spec] = {"accept_length": r.accept_length, "accept_length_low": lo, "accept_length_high": hi,
                   "alpha1": r.cumulative[0]}
order = rank_tied(list(results), stats, trained=trained.spec if trained is not None else None)
ranking = pd.DataFrame([{
    "wiring": spec, "accept length": results[spec].accept_length,
    "95% interval": f"{stats[spec]['accept_length_low']:.2f}–{stats[spec]['accept_length_high']:.2f}",
    "tied": not (stats[order[0]]["accept_length_low"] > stats[spec]["accept_length_high"]),
    "decode path": results[spec].decode_path["accept_length"], "step-1 top-1": results[spec].top1,
    "trained on": trained is not None and spec == trained.spec, "chains": results[spec].n_chains,
} for spec in order])
report_table(ranking, {
    "wiring": "the taps fed to the draft", "accept length": setting.accept_label("every-position"),
    "95% interval": "bootstrap over samples of the accept length", "tied": "its interval overlaps the leader's",
    "decode path": setting.accept_label("decode-path"),
    "step-1 top-1": "share of chains whose first draft token is the target's greedy token",
    "trained on": "the draft config's trained taps (workbench.trained_taps)", "chains": "counted chains"})

# %% [markdown]
# ## Diagnosis
# Every candidate wiring (engine presets, the trained wiring, their off-by-one neighbours) screened by
# step-1 acceptance α1, the best few with full K-step curves; `*` marks what the engine feeds.
# The verdict says whether that is (within the 95% intervals) as good as the best wiring found,
# and what to change when it is not. The same as `workbench diagnose`.

# %%
from workbench.diagnose import diagnose

dx = diagnose(tgt, drf, ds, engine=engine, K=steps, limit=limit or None, progress=False)
print(dx.summary())

# %% [markdown]
# ## Rewire
# When the engine feeds worse taps than the draft was trained on, the draft's `fc` can be refitted
# (closed-form ridge regression, one target pass over training data) so the served taps stand in for
# the trained ones, without retraining: `workbench rewire`. Before: the draft fed what the engine
# feeds; after: the rewired draft fed the same; reference: the draft fed the taps it was trained on.
# Accept lengths on the evaluation data above.

# %%
from workbench.rewire import rewire

train_data = train_data or (f"{demo}/train.jsonl" if target == f"{demo}/target" else "")
rw = None
if dx.engine_ok:
    print(f"nothing to rewire: {dx.verdict}")
elif dx.engine_wiring is None:
    print(f"cannot rewire for {engine}: it cannot feed this draft as configured ({dx.engine_explanation})")
elif dx.trained_wiring is None:
    print("cannot rewire: the draft config does not say which taps it was trained on (workbench.trained_taps)")
elif not train_data:
    print("set train_data (the draft's training data) to rewire it")
else:
    rw = rewire(tgt, drf, train_data, engine=engine, eval_data=ds, K=steps, limit=rewire_limit or None,
                eval_limit=limit or None, progress=False)
    print(rw.summary())
    display(plots.rewire_bars(rw))

# %% [markdown]
# ## What to do
# Written from the results above (`Diagnosis.narrative`): the cheapest sufficient fix, in this order:
# ids that make the engine feed the trained taps; else `workbench rewire` (with the recovery measured
# above, when it was); else retraining on the engine's taps. A wiring is suggested only when its 95%
# interval lies entirely above the engine's.

# %%
dx.advise(rw)
display(Markdown(dx.narrative()))

# %% [markdown]
# ## Speed-up projection
# Tokens per verify step with K' drafted = E[min(A, K')]+1, divided by the cost of one verify step
# (1 target forward over K'+1 tokens + K' draft steps). The cost model (`workbench.cost`) is measured
# once for this draft and target (repeated probes: median and spread; `ratio` > 0 fixes it instead)
# and is the same for every wiring. Bars: the accept length's 95% interval and the timing spread
# together. A best K' is named only when it is clearly best; otherwise the K' within noise. On a CPU
# the costs are indicative only: they do not choose GPU flags.

# %%
from workbench import cost

cm = cost.CostModel.fixed(ratio, source="the ratio parameter") if ratio else \
    cost.measure(tgt, drf, verify_probes=tuple(range(1, steps + 2)), lane_probes=(1,), repeats=7)
print(cm.summary())
for spec, r in results.items():
    print(f"{spec}: {cost.projection(r, cm, n_boot=200)['text']}")
plots.speedup_projection(results, cost_model=cm)

# %% [markdown]
# ## One sample, token by token
# Each token is coloured by how many of the K draft tokens after it the target accepts
# (red: none, green: all K). Grey: no counted chain starts there (prompt, last tokens).

# %%
evaluated = [r for r in ds.rows(limit or None) if (results[candidates[0]].chains["sample"] == r["_row"]).any()]
widgets.acceptance_explorer(results, evaluated, tgt.tokenizer, wiring=ranking["wiring"][0],
                            sample=min(sample, len(evaluated) - 1))

# %%
best = ranking.iloc[0]
headline = {                           # recorded at the end, with the tree section's numbers
    "K": steps, "samples": results[candidates[0]].n_samples,
    **{f"{spec} · {r.setting.accept_label('decode-path')}": r.decode_path["accept_length"]
       for spec, r in results.items()},    # the decode path: what a server reports
    "best wiring": best["wiring"],
    "trained wiring": trained.spec if trained is not None else "unknown",
    f"{dx.engine} wiring": dx.engine_wiring or "none",
    "verdict": dx.verdict, "suggested fix": dx.fix,
    **({f"rewired · {rw.setting.accept_label('decode-path')} (before → after, reference)":
        f"{rw.before.decode_path['accept_length']:.2f} → {rw.after.decode_path['accept_length']:.2f} "
        f"({rw.reference.decode_path['accept_length']:.2f})"}
       if rw is not None else {}),
}

# %% [markdown]
# ## Trees: what SGLang drafts
# With `--speculative-eagle-topk` > 1 SGLang drafts a **tree** (steps S, branching k, N verified
# tokens including the root; docs/trees.md); Llama targets get one by default (steps 5, topk 4, 8
# draft tokens when the flags are unset). The chain above is then not what the server reports. Here:
# the chain and the engine's tree for the wiring the engine feeds, from the same samples (the same
# start positions: a paired comparison).

# %%
from workbench import engines
from workbench.flags import target_architecture
from workbench.setting import Setting
from workbench.tune import sweep

arch = target_architecture(tgt)
try:
    auto = engines.auto_flags(engine, arch)
except Exception:                      # an engine without a record: no auto-defaults
    auto = None
tree_shape = auto if auto and auto[1] > 1 else (5, 4, 8)
served = dx.engine_wiring or ranking["wiring"][0]
tree_setting = Setting(steps=tree_shape[0], eagle_topk=tree_shape[1], num_draft_tokens=tree_shape[2], engine=engine)
tree_res = acceptance.simulate(tgt, drf, ds, [served], setting=tree_setting, limit=limit or None,
                               progress=False)[served]
chain_res = acceptance.simulate(tgt, drf, ds, [served], K=tree_shape[0], limit=limit or None, progress=False)[served]
print(f"{engine} on {arch}: auto-defaults {auto}; simulated tree {tree_setting.label}")
print(tree_res.summary())
plots.acceptance_curves({f"{served} · {chain_res.setting.label}": chain_res,
                         f"{served} · {tree_setting.label}": tree_res})

# %% [markdown]
# ## Which flags? The sweep
# Every (steps, eagle_topk, num_draft_tokens) shape from one target pass and one draft run per
# eagle_topk (a reduced grid here: steps 1..6, topk 1, 2, 4, N ≤ 32; `workbench tune` sweeps steps
# 1..8, topk 1, 2, 4, 8, N ≤ 64). Without a cost model measured on the serving GPU
# (`workbench tune --measure-cost-model cost.json --device cuda`) the shapes are ranked by accept
# length, and no flags are recommended: CPU timings do not choose GPU flags.

# %%
sw = sweep(tgt, drf, ds, served, steps=range(1, 7), topks=(1, 2, 4), max_tokens=32, limit=limit or None,
           progress=False)
print(sw.summary(max_rows=8))
plots.tree_sweep(sw)

# %% [markdown]
# The report index's headline: flags are recommended only from a cost model measured on a GPU;
# otherwise the best shapes by accept length (with a CPU cost model, CPU timings do not choose GPU flags).

# %%
from workbench.tune import best_by_accept_length

record_headline("03_acceptance", {
    **headline,
    f"{served} · {tree_res.setting.accept_label('decode-path')}": tree_res.decode_path["accept_length"],
    "recommended SGLang flags": sw.recommended_flags or "none: no GPU cost model (see best shapes)",
    "best shapes (steps, topk, N) by accept length": ", ".join(f"({a}, {b}, {c})"
                                                               for a, b, c in best_by_accept_length(sw, 3)),
})

# %% [markdown]
# ## Acceptance at temperature > 0
# Most deployments sample, and accept lengths fall there. At the default thresholds SGLang's
# verification is lossless and uses only the target's probabilities, and the tree is drafted exactly
# as at T = 0. So on data sampled from the target at T, matching the drafts against the data's own
# tokens (the decode path) gives the server's tokens per verify step exactly in distribution, with no
# extra target forward; the per-depth (Rao–Blackwellised) estimate is the same number with a smaller
# interval (at T = 0 it is the count itself). Here: the engine's drafting shape (the tree above) for
# the wiring the engine feeds, at T = 0, 0.3, 0.7 and 1.0, each on the demo's file sampled at that
# temperature (`val.jsonl`, `val-T0.3.jsonl`, `val-T0.7.jsonl`, `val-T1.0.jsonl`: the same prompts,
# responses sampled by `workbench demo` through `workbench regenerate`, top_p 1, no top_k). From a
# terminal: `workbench accept ... --data val-T0.7.jsonl --temperature 0.7` (docs/sampling.md).

# %%
from IPython.display import display

from workbench.temperature import TEMPERATURES, by_temperature, demo_files

temp_files, temp_skip = demo_files(target, TEMPERATURES)
temp_sweep = None
if temp_skip:
    print(f"skipped: {temp_skip}")
else:
    temp_sweep = by_temperature(tgt, drf, temp_files, served, tree_setting, limit=limit or None)
    print(temp_sweep.summary())
    display(temp_sweep.table())
    display(temp_sweep.plot())

# %% [markdown]
# ### Per depth: greedy against sampled
# P(A ≥ k) for each draft depth k: at T = 0 the counts (Wilson bands), at T > 0 the
# Rao–Blackwellised estimate from the one teacher-forced target pass (bootstrap bands over samples).
# Sampling lowers every depth, the deeper ones most in proportion: a deep node is reached only when every
# token above it was sampled onto the tree.

# %%
if temp_sweep is not None:
    display(temp_sweep.per_depth_plot())
