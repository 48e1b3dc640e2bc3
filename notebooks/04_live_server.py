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
# # 04 · Live server
#
# A running SGLang server against the offline simulation. Each sample's prompt is sent to the
# server's `/generate` (as `input_ids`, temperature 0, `max_new_tokens` = the sample's response
# length); the accept numbers it reports in `meta_info` are compared with the offline decode-path
# estimate on prompt + the server's own output, under every candidate wiring. The wiring whose
# offline number matches the live one is the wiring the server really feeds the draft.
# Convention: chain drafting (topk 1), greedy; accept length = mean A + 1 (bonus token counted).
#
# Without `server_url` this notebook starts a loopback stand-in server (`workbench.fake_sglang`)
# that decodes with the workbench's exact speculative loop and feeds the draft what SGLang would
# (`server_wiring` to override), so the page renders without a GPU.

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
server_url = ""      # a running SGLang server, e.g. http://127.0.0.1:30000 (empty: start the loopback stand-in)
target = ""          # target model folder the server runs, empty: <demo>/target
draft = ""           # EAGLE-3 draft folder the server runs, empty: <demo>/draft-mismatched
data = ""            # samples (prompts + response lengths), empty: <demo>/val.jsonl
limit = 6            # samples to send (0: all)
steps = 3            # K for the stand-in server (a real server's K comes from /get_server_info)
server_wiring = ""   # stand-in only: taps it feeds the draft (empty: what SGLang would feed)
variant = "new"      # stand-in only: meta_info fields, old | new | renamed | newest
concurrency = 4      # requests in flight at most
timeout = 120.0      # seconds per request
device = "cpu"       # cpu, cuda, cuda:N for the offline side

# %%
from workbench.report import record_headline, setup_notebook

setup_notebook()
import contextlib

from workbench import inputs, plots
from workbench.demo import fill_paths
from workbench.fake_sglang import serve
from workbench.sglang_live import compare

target, draft, data = fill_paths(demo, size, target=target, draft=draft, data=data).values()
tgt, drf, ds = inputs.load(target, draft, data, device=device)

# %% [markdown]
# ## Live and offline, side by side

# %%
if server_url:
    server = contextlib.nullcontext(server_url)
else:  # the loopback stand-in: real speculative decoding on CPU, with the wiring SGLang would use
    server = serve(tgt, drf, server_wiring or None, K=steps, variant=variant)
with server as url:
    where = url if server_url else f"loopback stand-in (wiring {url.state.wiring}, variant {variant})"
    cmp = compare(url, tgt, drf, ds, limit=limit or None, concurrency=concurrency, timeout=timeout)
print("server:", where)
print(cmp.summary())

# %% [markdown]
# ## Per sample
# Black: what the server reported for each sample; dashed: the offline decode path on the same
# output under each wiring. The live line follows the wiring the server really feeds.

# %%
plots.live_comparison(cmp)

# %%
plots.live_histograms(cmp)

# %%
cmp.to_frame()

# %% [markdown]
# ## Verdict

# %%
print(cmp.verdict)
record_headline("04_live_server", {
    "server": "loopback stand-in" if not server_url else server_url, "K": cmp.K, "samples": len(cmp.samples),
    "live accept length": cmp.live_accept_length,
    **{f"offline · {c.spec}": cmp.offline_accept_length(c.spec) for c in cmp.candidates},
    "verdict": cmp.verdict_code, "matched wiring": cmp.matched or "none",
});
