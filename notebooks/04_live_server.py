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
# A running SGLang server against the offline simulation, request by request. Each sample's prompt
# is sent to the server's `/generate` (as `input_ids`, temperature 0, `max_new_tokens` = the
# sample's response length). Each reply's `meta_info` is its **fingerprint** (verify steps, accepted
# drafts, accept histogram: whatever the server's version reports). Offline, the same request
# (prompt + the server's own output) is decoded as a server on each candidate wiring would decode
# it: chain or tree as the server is configured, the last verify steps included. The wiring that
# reproduces the most requests, separated from the runner-up by an exact sign test, is the wiring
# the server really feeds the draft; otherwise the verdict is "undecided" and says how many more
# requests would decide. Servers without per-request fields get the weaker aggregate comparison.
#
# Without `server_url` this notebook starts a loopback stand-in server (`workbench.live.fake_sglang`)
# that decodes with the workbench's exact speculative loop (the real tree when `topk` > 1) and
# feeds the draft what SGLang would (`L1,L7,L12` on the default demo; `server_wiring` to override),
# so the page renders without a GPU.

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
server_url = ""      # a running SGLang server, e.g. http://127.0.0.1:30000 (empty: start the loopback stand-in)
target = ""          # target model folder the server runs, empty: <demo>/target
draft = ""           # EAGLE-3 draft folder the server runs, empty: <demo>/draft-mismatched
data = ""            # samples (prompts + response lengths), empty: <demo>/val.jsonl
limit = 16           # samples to send (0: all); a sign test needs at least 6 that tell two wirings apart
steps = 3            # stand-in only: --speculative-num-steps (a real server's comes from /server_info)
topk = 1             # stand-in only: --speculative-eagle-topk (> 1: SGLang's tree)
num_draft_tokens = 0 # stand-in only, tree: --speculative-num-draft-tokens (0: steps + 1)
server_wiring = ""   # stand-in only: taps it feeds the draft (empty: what SGLang would feed)
variant = "new"      # stand-in only: meta_info fields, old | new | renamed | newest | aggregate
temperature = 0.0    # sampling temperature sent with every request (0: greedy); > 0 compares against the server's own samples
top_p = 1.0          # nucleus cut sent with every request (1: off)
top_k = -1           # sampling top-k sent with every request (-1: off; not the tree's eagle_topk)
concurrency = 4      # requests in flight at most
timeout = 120.0      # seconds per request
device = "cpu"       # cpu, cuda, cuda:N for the offline side

# %%
from workbench.report import record_headline, setup_notebook

setup_notebook()
import contextlib

from workbench.load import inputs
from workbench.report import plots
from workbench.demo import fill_paths
from workbench.live import serve
from workbench.live import compare

target, draft, data = fill_paths(demo, size, target=target, draft=draft, data=data).values()
tgt, drf, ds = inputs.load(target, draft, data, device=device)

# %% [markdown]
# ## Live and offline, side by side

# %%
if server_url:
    server = contextlib.nullcontext(server_url)
else:  # the loopback stand-in: real speculative decoding on CPU, with the wiring SGLang would use
    server = serve(tgt, drf, server_wiring or None, K=steps, variant=variant, topk=topk,
                   num_draft_tokens=num_draft_tokens or None)
with server as url:
    where = url if server_url else f"loopback stand-in (wiring {url.state.wiring}, variant {variant})"
    cmp = compare(url, tgt, drf, ds, limit=limit or None, concurrency=concurrency, timeout=timeout,
                  temperature=temperature, top_p=top_p, top_k=top_k)
print("server:", where)
print(cmp.summary())

# %% [markdown]
# ## Request by request
# Each column is one request, each row a candidate wiring (best first): green when that wiring
# reproduces the server's fingerprint of the request exactly, yellow when it differs only where the
# target's top two logits are within the served dtype's resolution (a near-tie, not evidence),
# red when it differs.

# %%
plots.live_requests(cmp)

# %% [markdown]
# Accept length per request: black is what the server reported; dashed, each wiring's offline decode
# of the same request.

# %%
plots.live_comparison(cmp)

# %%
plots.live_histograms(cmp)

# %%
from workbench.report import table as report_table

frame = cmp.to_frame()
key = {"sample": "dataset row of the request", "source": "the row's data source",
       "n_prompt": "prompt tokens sent", "n_output": "tokens the server generated",
       "verify_ct": "the server's verify steps for this request (meta_info spec_verify_ct)",
       "live_accept_length": "tokens per verify step of this request as the workbench reads the reply: mean(A)+1 "
                             "from the accept histogram when there is one, else (accepted drafts + verify steps) / "
                             "verify steps, else completion_tokens / spec_verify_ct (counts the prefill token)",
       "server_accept_length": "the server's own spec_accept_length field, as reported (— when this server version "
                               "has none)",
       "live_histogram": "verify steps that accepted exactly a = 0..K drafts (— when not reported)",
       "fingerprint": "the per-request fields the offline decode must reproduce",
       "seconds": "wall time of the request"}
for c in cmp.candidates:
    key[f"offline {c.spec}"] = (f"the offline decode of the same request with wiring {c.spec}: "
                                f"{cmp.setting.accept_label('decode-path')}")
    key[f"status {c.spec}"] = "identical / tie / differs: does that decode reproduce the request's fingerprint"
report_table(frame, key)

# %% [markdown]
# ## Verdict

# %%
print(cmp.verdict)
record_headline("04_live_server", {
    "server": "loopback stand-in" if not server_url else server_url, "K": cmp.K, "samples": len(cmp.samples),
    "live accept length": cmp.live_accept_length, "comparison": cmp.mode,
    **{f"identical · {d['wiring']}": f"{d['identical']}/{d['n']}" for d in cmp.ranking()},
    **{f"offline · {c.spec} · {cmp.setting.accept_label('decode-path')}": cmp.offline_accept_length(c.spec)
       for c in cmp.candidates},
    "verdict": cmp.verdict_code, "matched wiring": cmp.matched or "none",
});
