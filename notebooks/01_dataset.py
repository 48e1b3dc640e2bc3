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
# # 01 · Dataset
#
# The answer first (what the server feeds the draft, what it costs, the fix), then the data it rests on: its
# schema, a validation report, prompt and response lengths by source, one decoded sample with its prompt /
# response spans, and how far its responses are from the target's own greedy output (greedy agreement).
# Every parameter defaults to the built-in demo (`workbench demo`); set `data`, `tokenizer`, `target` and `draft`
# to look at your own files (an empty `demo` parameter then skips the demo entirely).

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
data = ""            # .jsonl / .jsonl.gz / .parquet / save_to_disk folder, empty: <demo>/val.jsonl
tokenizer = ""       # local tokenizer folder, empty: <demo>/tokenizer
sample = 0           # dataset row to decode
target = ""          # target model folder (HF format) for the greedy agreement, empty: <demo>/target
draft = ""           # EAGLE-3 draft folder for the answer, empty: <demo>/draft-mismatched
engine = "vllm"      # the serving engine and version every answer is for (`workbench wiring --engines`): vllm (the demo serves it live) | vllm-0.21 | sglang | ...
speed = ""           # tokens/s measured on a real vLLM (`workbench vllm speed --json`), empty: vllm-speed.json beside the draft's folder, if any
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
run = wb.diagnose(paths["target"], paths["draft"], paths["data"], engine=engine, K=steps, speed=speed, device=device,
                  evidence="this page: the data the answer rests on (greedy agreement ≥ 0.98: a server would see "
                            "the same); the accept lengths and the fix measured: notebook 03")
run.show()

# %%
page = run.data_view(tokenizer=paths["tokenizer"], demo=demo)
page.show()

# %% [markdown]
# ## Schema
# Every key of the raw rows, its type(s), how many rows carry it, and an example value.

# %%
page.schema

# %% [markdown]
# ## Validation
# Bad rows are named by `file:line` and field; they are left out of everything below.

# %%
print(page.validation)

# %% [markdown]
# ## Lengths by source

# %%
page.lengths

# %%
page.plot_lengths()

# %% [markdown]
# ## A decoded sample
# Grey: prompt (loss_mask 0); green: response tokens in the loss. Hover a token for its id.

# %%
page.explore(sample)

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
page.show_agreement()

# %%
page.plot_agreement()

# %% [markdown]
# ## Data the target did not write
# The parameter `foreign` holds the same kind of prompts with responses the target did not write (the demo's
# `val-foreign.jsonl`: the stdlib text itself). Its agreement is far below 1, and the acceptance the
# estimators report on it changes meaning. Regenerating it (the target's greedy continuation of each
# prompt) brings the agreement back to 1 and the estimates back to what a server would see.

# %%
page.foreign(foreign)

# %% [markdown]
# Regenerate the foreign file: keep each prompt, replace its response with the target's greedy continuation
# (`workbench regenerate`, a KV cache; the first rows, as many as the parameter `regenerate_limit` says, seconds
# on the smoke demo), then compare the acceptance of the demo's draft on those rows before and after:
# every-position and decode-path accept length.

# %%
page.regenerate(limit=regenerate_limit, device=device)

# %% [markdown]
# ## Conversations through the target's chat template
# Most data is held as conversations, not token ids. The parameter `chat` is tokenised with the target's own chat
# template (transformers' `apply_chat_template`), one row per reply with its history as the server sees it
# (`workbench prepare` writes the same rows to a file; docs/data.md). The loss mask covers the replies: from
# the template's `{% generation %}` tags when it has them (mask method **generation**), else from speculators'
# per-turn prefix method (**prefix**: the history with the generation prompt must be a token prefix of the
# history with the reply). The demo's tokenizer carries its template in two variants, with the tags
# (`default`) and without (`plain`): both must give the same rows. Below, the rendered template of one row:
# green, the masked reply tokens the draft is measured on; grey, the template's text and the history.

# %%
page.chat(chat, chat_templates)

# %%
page.explore_chat(0)

# %%
page.chat_agreement()
wb.record_headline("01_dataset", page.headline());
