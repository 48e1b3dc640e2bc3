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
ratio = 0.0          # draft-step / target-forward cost for the speed-up projection (0: measured here, once, kept beside the draft)
sample = 0           # which evaluated sample to colour
engine = "vllm"      # the serving engine and version every answer is for (`workbench wiring --engines`): vllm (the demo serves it live) | vllm-0.21 | sglang | ...
speed = ""           # tokens/s measured on a real vLLM (`workbench vllm speed --json`), empty: vllm-speed.json beside the draft's folder, if any
train_data = ""      # training data for the rewire refit, empty: <demo>/train.jsonl (only with the demo's target)
rewire_limit = 64    # training rows the rewire refit reads (0: all)


# %%
import workbench as wb

wb.setup_notebook()
target, draft, data = wb.fill_paths(demo, size, target=target, draft=draft, data=data).values()
run = wb.diagnose(target, draft, data, engine=engine, K=steps, speed=speed, limit=limit or None, train_data=train_data or None,
                  rewire_limit=rewire_limit or None, device=device,
                  evidence="this page: the diagnosis, every candidate wiring and each engine's, the fix measured "
                            "where it is a rewire, then the drafting shapes and temperature after the fix; the live "
                            "check: notebook 04")
run.show()

# %% [markdown]
# ## The evidence: the diagnosis
# Every candidate wiring (engine presets, the trained wiring, their off-by-one neighbours) screened by step-1
# acceptance α1, the best few with full K-step curves; `*` marks what the engine feeds, `=` the wirings tied for
# best. The verdict line says the same as the answer above, with the every-position accept length the ranking uses.
# The same as `workbench diagnose`.

# %%
print(run.diagnosis.summary(data=False))   # the greedy agreement: its own section below

# %% [markdown]
# ## The fix, measured: rewire
# The draft's `fc` refitted (closed-form ridge regression, one target pass over training data) so that the served
# taps stand in for the trained ones, without retraining: `workbench rewire`. Before: the draft fed what the engine
# feeds; after: the rewired draft fed the same; reference: the draft fed the taps it was trained on. Computed once
# for this target, draft, data and engine, and kept beside the draft (`.workbench-cache/`): every page reuses it.

# %%
run.show_rewire()

# %% [markdown]
# ## Candidate wirings, side by side
# From here on each figure shows the wiring the engine feeds today, the trained wiring the fix restores, and the
# other engines' wirings. One cost model is measured for this draft and target (once, kept beside the draft), and
# every speed-up below uses it.

# %%
cands = run.candidates(wirings, limit=limit or None, ratio=ratio)
cands.show()

# %% [markdown]
# ## If you serve with another engine
# Each other engine, from its record: the taps it would feed this draft as configured, their accept length on the
# decode path (the same results as above) and the cheapest fix for that engine. Only this report's engine is
# checked live (notebook 04).

# %%
cands.show_other_engines()

# %% [markdown]
# ### The data: the target's own greedy output?
# Greedy agreement: the share of response tokens equal to the target's greedy choice, counted on the
# same target pass as the results above (the same for every wiring). Below 0.98 the every-position
# estimator measures teacher-forced acceptance on this data and the decode path is an approximation:
# `workbench regenerate` (docs/regenerate.md; notebook 01 shows it on the demo's foreign data).

# %%
cands.show_agreement()

# %% [markdown]
# ### Data the target did not write: how the estimates move
# The demo's `val-foreign.jsonl` holds the same prompts as `val.jsonl` with the standard library's own
# text as responses; `val.jsonl` is exactly that file regenerated by the target (greedy, the same
# response lengths). The every-position number on foreign data is teacher-forced acceptance on text the
# server never sees; the decode path there is an approximation. Your own data: `workbench regenerate`.

# %%
cands.foreign_data()

# %% [markdown]
# ## Acceptance at long context
# Accept length by where a chain starts in the context, out to 8k tokens on the real demo's long rows (held-out
# sources and HumanEval files with the target's own replies): where it falls against the length the drafts were
# trained on, and whether the served wiring's loss holds there. Read from `long-context.json` beside the target
# (`python -m bench.long_context`); skipped on the default demo.

# %%
cands.plot_long_context()

# %% [markdown]
# ## Per-position acceptance

# %%
cands.plot_curves()

# %% [markdown]
# ## Accept-length histograms

# %%
cands.plot_histograms()

# %% [markdown]
# ## Every position vs the decode path
# Every position: all chains of the data. Decode path: only the chains a server verifies when the response is the
# target's greedy output. They estimate different things and need not agree. A server's steps skip the tokens
# inside an accepted run and pile up where the draft misses, so the decode path weights the hard spots more and is
# usually the lower of the two; the gap grows with how unevenly acceptance spreads along a response. The decode
# path is what a server reports; the diagnosis ranks wirings by every position, which uses every chain.

# %%
cands.plot_decode_path()

# %% [markdown]
# ## By source

# %%
cands.plot_by_source()

# %% [markdown]
# ## Ranking of the wirings
# Best first. Wirings whose 95% interval overlaps the leader's are tied for best; among them the trained wiring
# comes first. The intervals are the ones the summaries above print (computed once per result).

# %%
cands.ranking()

# %% [markdown]
# ## Speed-up projection
# Tokens per verify step with K' drafted = E[min(A, K')]+1, divided by the cost of one verify step
# (1 target forward over K'+1 tokens + K' draft steps), with the one cost model measured above (interleaved
# probes after warm-up; a positive `ratio` parameter fixes it instead). Bars: the accept length's 95% interval and
# the timing spread together. A best K' is named only when it is clearly best among at least two, and only when
# the timings are steady enough to rank; when they are not, no speed-up here is a verdict. On a CPU the costs are
# indicative only: they do not choose GPU flags.

# %%
cands.show_speed()
cands.plot_speed()

# %% [markdown]
# ## One sample, token by token
# Each token is coloured by how many of the K draft tokens after it the target accepts
# (red: none, green: all K). Grey: no counted chain starts there (prompt, last tokens).

# %%
cands.explore(sample)

# %% [markdown]
# ## After the fix: what the engine drafts
# The rest of this page analyses the wiring the server runs **once the fix is applied** (the answer above), not the
# wiring it just called wrong, in the drafting shape the engine serves; every number names that shape. vLLM drafts
# one chain of K tokens (`num_speculative_tokens`). SGLang drafts a **tree** when `--speculative-eagle-topk` > 1
# (steps S, branching k, N verified tokens including the root; docs/trees.md), and Llama targets get one by
# default (steps 5, topk 4, 8 draft tokens when the flags are unset): then the chain and the tree are shown.

# %%
fixed = run.after_fix(limit=limit or None, cost_model=cands.cost_model)
fixed.show()
fixed.plot()

# %% [markdown]
# ## Which flags, after the fix? The sweep
# Every drafting shape the engine can serve from one target pass and one draft run per eagle_topk, for the fixed
# wiring: K = 1..6 for an engine that drafts chains (vLLM); for SGLang every (steps, eagle_topk,
# num_draft_tokens) with steps 1..6, topk 1, 2, 4, N ≤ 32 (`workbench tune` sweeps steps 1..8, topk 1, 2, 4, 8,
# N ≤ 64). Without a cost model measured on the serving GPU
# (`workbench tune --measure-cost-model cost.json --device cuda`) the shapes are ranked by accept
# length, and no flags are recommended: CPU timings do not choose GPU flags.

# %%
shapes = fixed.sweep()
shapes.show()
shapes.plot()

# %%
wb.record_headline("03_acceptance", {
    "answer": run.answer.to_dict(), "K": steps, **cands.headline(),
    "trained wiring": run.diagnosis.trained_wiring or "unknown",
    f"{engine} wiring": run.diagnosis.engine_wiring or "cannot serve it", "suggested fix": run.diagnosis.fix,
    **fixed.headline()});

# %% [markdown]
# ## Drafts that real trainers made: their diagnosis
# With the demo folder `data/demo-real`, after `make foreign-drafts`: the ModelOpt and speculators drafts, exactly
# as exported, each diagnosed on the same rows under the engine that mis-feeds it (this page's engine if it does,
# else the first that does; notebook 02 shows what each engine feeds). The trainer × engine table with live vLLM
# rows: docs/foreign-drafts.md and the report's index.

# %%
foreign = run.foreign_drafts()
foreign_runs = foreign.diagnose(K=steps, limit=limit or None)

# %% [markdown]
# ## Acceptance at temperature > 0, after the fix
# Most deployments sample, and accept lengths fall there. At the default thresholds the engines' verification
# (SGLang's, vLLM's) is lossless and uses only the target's probabilities, and the drafts are made exactly as at T = 0. So on data
# sampled from the target at T, matching the drafts against the data's own tokens (the decode path) gives the
# server's tokens per verify step exactly in distribution; the per-depth (Rao–Blackwellised: each depth's acceptance
# computed from the target's probabilities instead of one sampled draw) estimate is the same number with a smaller
# interval. Here: the engine's drafting shape (above) for the fixed wiring, at
# T = 0, 0.3, 0.7 and 1.0, each on the demo's file sampled at that temperature (`val.jsonl`, `val-T0.3.jsonl`, ...;
# top_p 1, no top_k). From a terminal: `workbench accept ... --data val-T0.7.jsonl --temperature 0.7`.

# %%
temps = fixed.temperature()
temps.show()

# %%
temps.plot()

# %% [markdown]
# ### Per depth: greedy against sampled
# P(A ≥ k) for each draft depth k: at T = 0 the counts (Wilson bands), at T > 0 the
# Rao–Blackwellised estimate from the one teacher-forced target pass (bootstrap bands over samples).
# Sampling lowers every depth, the deeper ones most in proportion: a deep node is reached only when every
# token above it was sampled onto the tree.

# %%
temps.per_depth_plot()
