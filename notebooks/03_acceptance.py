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
# Why is the accept length low? The answer comes first; the evidence follows it. Convention: chain drafting
# (topk 1), greedy; accept length = E[A]+1 (bonus token counted, as SGLang and vLLM report it). Every accept length
# names its estimator: *decode path* (the chains a server verifies: what it reports) or *every position* (all
# chains of the data: what the diagnosis ranks wirings by).

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
import workbench as wb

wb.setup_notebook()
target, draft, data = wb.fill_paths(demo, size, target=target, draft=draft, data=data).values()
run = wb.diagnose(target, draft, data, engine=engine, K=steps, limit=limit or None, train_data=train_data or None,
                  rewire_limit=rewire_limit or None, device=device,
                  evidence="this page: the diagnosis, the rewire measured on held-out data, then per-position "
                            "acceptance, trees and temperature for the fixed wiring; the live check: notebook 04")
run.show()

# %% [markdown]
# ## The evidence: the diagnosis
# Every candidate wiring (engine presets, the trained wiring, their off-by-one neighbours) screened by step-1
# acceptance α1, the best few with full K-step curves; `*` marks what the engine feeds, `=` the wirings tied for
# best. The verdict line says the same as the answer above, with the every-position accept length the ranking uses.
# The same as `workbench diagnose`.

# %%
print(run.diagnosis.summary())

# %% [markdown]
# ## The fix, measured: rewire
# The draft's `fc` refitted (closed-form ridge regression, one target pass over training data) so that the served
# taps stand in for the trained ones, without retraining: `workbench rewire`. Before: the draft fed what the engine
# feeds; after: the rewired draft fed the same; reference: the draft fed the taps it was trained on.

# %%
if run.rewired is not None:
    print(run.rewired.summary())
else:
    print(f"no rewire measured here: {run.answer.fix}")
run.plot()

# %% [markdown]
# ## The verdict in full

# %%
run.verdict()

# %% [markdown]
# ## Candidate wirings, side by side
# From here on each figure shows the wiring the engine feeds today, the trained wiring the fix restores, and the
# other engines' wirings. One cost model is measured for this draft and target, and every speed-up below uses it.

# %%
tgt, drf, ds = run.target, run.draft, run.data
trained = run.diagnosis.trained_wiring
found = wb.serving_candidates(tgt.config, drf.raw_config, wb.trained_wiring(drf.raw_config, tgt.n_layers),
                              [w.strip() for w in wirings.split(";") if w.strip()])
candidates = [c.spec for c in found if not wirings or "given" in c.engines]
cm = wb.cost.CostModel.fixed(ratio, source="the ratio parameter") if ratio else wb.cost.measure(
    tgt, drf, verify_probes=tuple(sorted({*range(1, steps + 2), 6, 8})), lane_probes=(1, 2, 4), repeats=9)
results = wb.accept(tgt, drf, ds, candidates, K=steps, limit=limit or None, cost_model=cm, engine=engine,
                      progress=False)
print("\n".join(f"candidate {c.spec}: {', '.join(c.engines)}" for c in found if c.spec in candidates))

# %%
for r in results.values():
    print(r.summary(), end="\n\n")

# %% [markdown]
# ### The data: the target's own greedy output?
# Greedy agreement: the share of response tokens equal to the target's greedy choice, counted on the
# same target pass as the results above (the same for every wiring). Below 0.98 the every-position
# estimator measures teacher-forced acceptance on this data and the decode path is an approximation:
# `workbench regenerate` (docs/regenerate.md; notebook 01 shows it on the demo's foreign data).

# %%
first = next(iter(results.values()))
print(first.agreement.headline(first.setting))
print(first.data_note() or "")
wb.agreement_table(first.agreement)

# %% [markdown]
# ### Data the target did not write: how the estimates move
# The demo's `val-foreign.jsonl` holds the same prompts as `val.jsonl` with the standard library's own
# text as responses; `val.jsonl` is exactly that file regenerated by the target (greedy, the same
# response lengths). The every-position number on foreign data is teacher-forced acceptance on text the
# server never sees; the decode path there is an approximation. Your own data: `workbench regenerate`.

# %%
import os

foreign_file = os.path.join(os.path.dirname(target), "val-foreign.jsonl")
if os.path.basename(target) != "target" or not os.path.exists(foreign_file):
    print(f"skipped: no {foreign_file} (`make demo` rebuilds the demo with it; your own data: compare it with "
          f"its `workbench regenerate` output)")
else:
    foreign_results = wb.accept(tgt, drf, wb.dataset(foreign_file, tgt), candidates, K=steps,
                                  limit=limit or None, progress=False, cost_model=cm)
    print("val-foreign.jsonl:", next(iter(foreign_results.values())).agreement.headline().removeprefix("data: "))
    display(wb.evidence.foreign(foreign_results, results))

# %% [markdown]
# ## Per-position acceptance

# %%
wb.plots.acceptance_curves(results)

# %% [markdown]
# ## Accept-length histograms

# %%
wb.plots.accept_length_histogram(results)

# %% [markdown]
# ## Every position vs the decode path
# Every position: all chains of the data. Decode path: only the chains a server verifies when the response is the
# target's greedy output. They estimate different things and need not agree. A server's steps skip the tokens
# inside an accepted run and pile up where the draft misses, so the decode path weights the hard spots more and is
# usually the lower of the two; the gap grows with how unevenly acceptance spreads along a response. The decode
# path is what a server reports; the diagnosis ranks wirings by every position, which uses every chain.

# %%
wb.plots.decode_path_comparison(results)

# %% [markdown]
# ## By source

# %%
wb.plots.by_source(results)

# %% [markdown]
# ## Ranking of the wirings
# Best first. Wirings whose 95% interval overlaps the leader's are tied for best; among them the trained wiring
# comes first. The intervals are the ones the summaries above print (computed once per result).

# %%
order, ranking = wb.evidence.ranking(results, trained)
ranking

# %% [markdown]
# ## Speed-up projection
# Tokens per verify step with K' drafted = E[min(A, K')]+1, divided by the cost of one verify step
# (1 target forward over K'+1 tokens + K' draft steps), with the one cost model measured above (interleaved
# probes after warm-up; `ratio` > 0 fixes it instead). Bars: the accept length's 95% interval and the timing
# spread together. A best K' is named only when it is clearly best among at least two, and only when the
# timings are steady enough to rank; when they are not, no speed-up here is a verdict. On a CPU the costs are
# indicative only: they do not choose GPU flags.

# %%
print(cm.summary())
for spec, r in results.items():
    print(f"{spec}: {wb.cost.projection(r, cm, n_boot=200)['text']}")
wb.plots.speedup_projection(results, cost_model=cm)

# %% [markdown]
# ## One sample, token by token
# Each token is coloured by how many of the K draft tokens after it the target accepts
# (red: none, green: all K). Grey: no counted chain starts there (prompt, last tokens).

# %%
evaluated = [r for r in ds.rows(limit or None) if (results[candidates[0]].chains["sample"] == r["_row"]).any()]
wb.widgets.acceptance_explorer(results, evaluated, tgt.tokenizer, wiring=order[0],
                               sample=min(sample, len(evaluated) - 1))

# %% [markdown]
# ## After the fix: what SGLang drafts
# The rest of this page analyses the wiring the server runs **once the fix is applied** (the answer above), not the
# wiring it just called wrong. With `--speculative-eagle-topk` > 1 SGLang drafts a **tree** (steps S, branching k,
# N verified tokens including the root; docs/trees.md); Llama targets get one by default (steps 5, topk 4, 8 draft
# tokens when the flags are unset). Here: the chain and the engine's tree, from the same samples.

# %%
fixed_draft, fixed, fixed_words = run.fixed
print(f"analysed from here on: {fixed_words}")
arch = wb.target_architecture(tgt)
try:
    auto = wb.auto_flags(engine, arch)
except Exception:                      # an engine without a record: no default drafting shape
    auto = None
tree_shape = auto if auto and auto[1] > 1 else (5, 4, 8)

# %%
tree_setting = wb.Setting(steps=tree_shape[0], eagle_topk=tree_shape[1], num_draft_tokens=tree_shape[2],
                          engine=engine)
tree_res = wb.accept(tgt, fixed_draft, ds, [fixed], setting=tree_setting, limit=limit or None,
                       progress=False, cost_model=cm)[fixed]
chain_res = wb.accept(tgt, fixed_draft, ds, [fixed], K=tree_shape[0], limit=limit or None, progress=False,
                        cost_model=cm, engine=engine)[fixed]

# %%
print(f"{engine} on {arch}: its default drafting shape {auto}; simulated {tree_setting.label}")
print(tree_res.summary())
for res in (chain_res, tree_res):
    p = wb.cost.projection(res, cm, n_boot=200)
    print(f"speed-up, {res.setting.label}: {p['text']} ({p['rows'][-1]['tokens_per_step']:.3f} tokens/step)")
wb.plots.acceptance_curves({f"{fixed} · {chain_res.setting.label}": chain_res,
                            f"{fixed} · {tree_setting.label}": tree_res})

# %% [markdown]
# ## Which flags, after the fix? The sweep
# Every (steps, eagle_topk, num_draft_tokens) shape from one target pass and one draft run per
# eagle_topk (a reduced grid here: steps 1..6, topk 1, 2, 4, N ≤ 32; `workbench tune` sweeps steps
# 1..8, topk 1, 2, 4, 8, N ≤ 64), for the fixed wiring. Without a cost model measured on the serving GPU
# (`workbench tune --measure-cost-model cost.json --device cuda`) the shapes are ranked by accept
# length, and no flags are recommended: CPU timings do not choose GPU flags.

# %%
sw = wb.sweep(tgt, fixed_draft, ds, fixed, steps=range(1, 7), topks=(1, 2, 4), max_tokens=32, limit=limit or None,
              progress=False)
print(sw.summary(max_rows=8))
wb.plots.tree_sweep(sw)

# %%
wb.record_headline("03_acceptance", {
    "answer": run.answer.to_dict(), "K": steps, "samples": first.n_samples,
    **{f"{spec} · {r.setting.accept_label('decode-path')}": r.decode_path["accept_length"]
       for spec, r in results.items()},
    "trained wiring": trained or "unknown", f"{engine} wiring": run.diagnosis.engine_wiring or "cannot serve it",
    "suggested fix": run.diagnosis.fix, "after the fix, analysed": fixed_words.replace("`", ""),
    f"after the fix · {fixed} · {tree_res.setting.accept_label('decode-path')}": tree_res.decode_path["accept_length"],
    "recommended SGLang flags": sw.recommended_flags or "not recommended here: flags need a cost model measured on "
                                                       "the serving GPU (workbench tune --measure-cost-model)",
    "best shapes after the fix (steps, topk, N) by accept length": ", ".join(
        f"({a}, {b}, {c})" for a, b, c in wb.best_by_accept_length(sw, 3))});

# %% [markdown]
# ## Drafts that real trainers made: their diagnosis
# With `demo = "data/demo-real"`, after `make foreign-drafts`: the ModelOpt and speculators drafts, exactly as
# exported, each diagnosed on the same rows under the engine that mis-feeds it (this page's engine if it does,
# else the first that does; notebook 02 shows what each engine feeds). The trainer × engine table with live vLLM
# rows: docs/foreign-drafts.md and the report's index.

# %%
foreign = [wb.foreign.read(f, tgt) for f in wb.foreign.beside(draft)]
if not foreign:
    print(wb.foreign.SKIPPED)
for f in foreign:
    judged = f.judge(engine)
    fr = wb.diagnose(tgt, str(f.folder), ds, engine=judged, K=steps, limit=limit or None, rewire=False,
                     device=device)
    print(f"== {f.header()}\n   judged under {wb.engine(judged).label}")
    print(fr.diagnosis.summary(max_rows=6), end="\n\n")
    display(fr.answer)

# %% [markdown]
# ## Acceptance at temperature > 0, after the fix
# Most deployments sample, and accept lengths fall there. At the default thresholds SGLang's verification is
# lossless and uses only the target's probabilities, and the tree is drafted exactly as at T = 0. So on data
# sampled from the target at T, matching the drafts against the data's own tokens (the decode path) gives the
# server's tokens per verify step exactly in distribution; the per-depth (Rao–Blackwellised) estimate is the same
# number with a smaller interval. Here: the engine's drafting shape (the tree above) for the fixed wiring, at
# T = 0, 0.3, 0.7 and 1.0, each on the demo's file sampled at that temperature (`val.jsonl`, `val-T0.3.jsonl`, ...;
# top_p 1, no top_k). From a terminal: `workbench accept ... --data val-T0.7.jsonl --temperature 0.7`.

# %%
temp_files, temp_skip = wb.demo_files(target, wb.TEMPERATURES)
temp_sweep = None if temp_skip else wb.by_temperature(tgt, fixed_draft, temp_files, fixed, tree_setting,
                                                      limit=limit or None)
if temp_sweep is None:
    print(f"skipped: {temp_skip}")
else:
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
