"""Tokens/s at the user's load and context length: a cost surface measured on the server, every cell predicted
from it, the crossover concurrency and the best K at each concurrency (``workbench vllm load``, issue 56).

    >>> # grid = measure("data/demo-real/target", {"draft-mismatched": "data/demo-real/draft-mismatched"},
    >>> #                {"data": "data/demo-real/val.jsonl", "1024": "data/demo-real/val-long.jsonl"}, ks=[1, 2],
    >>> #                concurrency=[1, 2, 4, 8, 16], out="vllm-load.json")

The model (:mod:`workbench.stats.load_surface`): at concurrency C a pass takes fixed + per_step x (verify steps /
C) baseline passes, both costs read off the server's own request timers.

**The surface** is those costs measured on servers of the drafts' **shape twins** (:mod:`workbench.model.shape_twin`:
a verify step costs the same whatever the weights), for every cell (context bucket, C, K), with the baseline's
tokens/s beside each. It is a file of its own (:func:`surface`, keyed by the target's bytes, the engine and its
release, the machine, the dtype and the twin's shape): measured once, it predicts every draft and wiring of that
shape from its offline accept length alone (:func:`predict`), never from the draft's own passes.

**The grid** (:func:`measure`): one baseline server for the whole run; for each K, the twin's server and each
draft's server in turn beside it; on each, every cell: a warm-up, then ``repeats`` interleaved pairs (baseline
pass, speculative pass) of ``max(C, min_requests)`` requests of that bucket. Every finished cell is written at
once (atomic); the same command resumes after a server died, and redoes only the missing cells. Cells whose C x
prompt tokens exceed ``in_flight`` are left out and listed (prefill-bound on a CPU: minutes per pass).

Then per draft: the **crossover** (the lowest C where no K is faster than no speculation: measured, when the
passes call the side, and predicted) and the **best K at each C** (measured, when the top two's spreads do not
overlap, and predicted), and one line (:func:`answer_line`): "pays up to concurrency 4 at K=2; past 8 it costs 12%".
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from workbench.core.devices import cpu_model
from workbench.core.errors import WorkbenchError
from workbench.core.files import content_digest, write_json
from workbench.live import vllm_server
from workbench.live.vllm_live import Client, parse_spec_decoding, pick_engine
from workbench.live.vllm_speed import (Pass, check_inputs, compare_passes, cut_rows, find_result, offline, one_pass,
                                       read_result, stop_server)
from workbench.load import inputs
from workbench.model import shape_twin
from workbench.rows.dataset import load
from workbench.stats.load_surface import answer_line, best_k_by_c, cell_cost, crossover, predict  # noqa: F401

CONCURRENCY = (1, 2, 4, 8, 16)
IN_FLIGHT = 8192        # prompt tokens in flight at most (C x bucket prompt length); more is prefill-bound here
MIN_REQUESTS = 4        # requests per pass at least (C of them in flight)
PREFIX_SD = "metrics.speculative_decoding"
FILE_NAME = "vllm-load.json"
SURFACE_KEYS = ("target", "engine", "machine", "dtype", "twins")


# ─────────────────────────────────────── the cells ───────────────────────────────────────

def buckets(target, contexts: dict, max_tokens: int, n_rows: int = 16) -> dict:
    """``{name: rows cut to max_tokens}`` per context bucket: the first ``n_rows`` rows whose reply holds
    ``max_tokens`` tokens (the offline accept length needs the target's own token for every generated one).
    ``contexts``: ``{name: file}``; a numeric name keeps the file's rows whose prompt is within 15% of that many
    tokens (a long-rows file, :mod:`workbench.demo.long_rows`), ``data`` keeps every row. A bucket longer than the
    target's positions is refused in one line."""
    cfg = json.loads((Path(target) / "config.json").read_text())
    max_pos = int(cfg.get("max_position_embeddings") or 0)
    out = {}
    for name, path in contexts.items():
        if not Path(path).is_file():
            raise WorkbenchError(f"context {name}: {path}: no such file")
        rows = load(path).rows()
        if str(name).isdigit():
            n = int(name)
            rows = [r for r in rows if 1 in r["loss_mask"] and abs(r["loss_mask"].index(1) - n) <= 0.15 * n]
            if not rows:
                raise WorkbenchError(f"context {name}: {path} has no rows with a prompt of about {name} tokens")
        rows = [r for r in rows if sum(r["loss_mask"]) >= int(max_tokens)][:int(n_rows)]
        if not rows:
            raise WorkbenchError(f"context {name}: {path} has no row with a reply of {max_tokens} tokens or more")
        cut, _ = cut_rows(rows, max_tokens, path)
        longest = max(len(r["input_ids"]) for r in cut)
        if max_pos and longest > max_pos:
            raise WorkbenchError(f"context {name}: a row of {longest} tokens (prompt + {max_tokens}) is longer than the "
                                 f"target's max_position_embeddings {max_pos}")
        out[str(name)] = cut
    return out


def prompt_tokens(rows) -> int:
    """A bucket's prompt length: the median row's."""
    return int(statistics.median(r["n_prompt_tokens"] for r in rows))


def cells(bucket_rows: dict, concurrency, in_flight: int = IN_FLIGHT) -> tuple[list, list]:
    """The (bucket, C) cells to measure, and those left out because C x prompt tokens > ``in_flight``."""
    keep, out = [], []
    for b, rows in bucket_rows.items():
        for c in sorted({int(x) for x in concurrency}):
            (keep if c * prompt_tokens(rows) <= in_flight or c == 1 else out).append((b, c))
    return keep, out


def requests_of(rows, concurrency: int, min_requests: int = MIN_REQUESTS) -> list:
    """A cell's prompts: ``max(C, min_requests)`` of the bucket's rows, cycled when it has fewer."""
    n = max(int(concurrency), int(min_requests))
    prompts = [r["input_ids"][:r["n_prompt_tokens"]] for r in rows]
    return [prompts[i % len(prompts)] for i in range(n)]


def _pair(base: Pass, spec: Pass) -> dict:
    b, s = base.totals(), spec.totals()
    return {"baseline_wall": b["wall"], "baseline_tokens": base.tokens, "baseline_decode": b["decode"],
            **s, "tokens": spec.tokens, "concurrency": spec.concurrency, "requests": len(spec.requests)}


# ─────────────────────────────────────── the run ───────────────────────────────────────

def resume_key(target, drafts: dict, ks, bucket_rows: dict, settings: dict, where: dict | None = None) -> dict:
    """What changes a cell, and nothing that does not (no path): drafts' bytes, Ks, target bytes, every bucket's
    prompts, the grid's settings, the machine (``where``: the servers' when they run elsewhere; default this
    one). The vLLM release is checked when the baseline answers."""
    import hashlib

    prompts = {b: hashlib.blake2b(json.dumps([r["input_ids"] for r in rows]).encode(), digest_size=12).hexdigest()
               for b, rows in sorted(bucket_rows.items())}
    return {"drafts": {n: content_digest(p) for n, p in sorted(drafts.items())}, "ks": sorted(int(k) for k in ks),
            "target": content_digest(target), "buckets": prompts, **settings,
            "machine": json.loads(json.dumps(where if where is not None else machine()))}


def machine() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "avx512": "avx512f" in vllm_server.cpu_flags()}


def remote_servers(urls: dict, ks, twins: dict, drafts: dict) -> dict:
    """``{"baseline": URL, (server name, K): URL}`` from ``--url`` names: ``baseline``, ``twin@K`` (the one shape
    twin; ``twin-<key>@K`` when the drafts have several shapes) and ``DRAFT@K``. One line for a name that is none of
    those, and for a K of ``ks`` with no twin: the surface needs the twin at every K (the line says where the twin
    folder to serve was written)."""
    out = {}
    for name, url in urls.items():
        if name == "baseline":
            out["baseline"] = url
            continue
        who, _, k = name.rpartition("@")
        if not k.isdigit() or int(k) < 1:
            raise WorkbenchError(f"--url {name}={url}: expected baseline=URL, twin@K=URL or DRAFT@K=URL (K a draft "
                                 f"depth, e.g. twin@2)")
        if who == "twin" and len(twins) == 1:
            who = next(iter(twins))
        if who not in twins and who not in drafts:
            raise WorkbenchError(f"--url {name}={url}: {who!r} is neither the baseline, a twin "
                                 f"({', '.join(twins)}) nor a --draft ({', '.join(drafts)})")
        if int(k) not in ks:
            raise WorkbenchError(f"--url {name}={url}: K={k} is not among -K {','.join(map(str, ks))}")
        out[(who, int(k))] = url
    if "baseline" not in out:
        raise WorkbenchError("--url: no baseline=URL (a server of the target without speculation: every cell is "
                             "measured in its units)")
    for t, folder in twins.items():
        for k in ks:
            if (t, k) not in out:
                raise WorkbenchError(f"--url: no {'twin' if len(twins) == 1 else t}@{k}=URL: serve the shape twin "
                                     f"written at {folder} as the draft at num_speculative_tokens {k} (with "
                                     f"--per-request-spec-decode-metrics detailed), then give its URL")
    return out


def _remote_start(at: dict, names: dict):
    """A ``start`` for :func:`measure` that starts nothing: it checks the server the user started at the URL for
    that (server, K) and returns it (``pid`` None: nothing here stops it)."""
    def start(target, folder, *, k, say=None, **_):
        name = None if folder is None else names[str(folder)]
        url = at["baseline"] if name is None else at[(name, int(k))]
        check_remote(Client(url), None if name is None else int(k), "baseline" if name is None else f"{name}@{k}")
        if say:
            say(f"{'baseline' if name is None else f'{name} at K={k}'}: the server at {url}")
        return SimpleNamespace(url=url, pid=None)

    return start


def check_remote(client: Client, k: int | None, name: str) -> None:
    """One request (4 tokens, greedy) to a server the user started: the baseline must not speculate, and a
    speculative one must report its verify steps per request (``--per-request-spec-decode-metrics detailed``) at
    ``k`` tokens; one line naming the URL otherwise."""
    out, reply = client.complete([1, 2, 3, 4], 4, sampling={"temperature": 0.0, "ignore_eos": True}, where=name)
    sd = (reply.get("metrics") or {}).get("speculative_decoding") if isinstance(reply.get("metrics"), dict) else None
    if k is None:
        if sd:
            raise WorkbenchError(f"--url baseline={client.url}: this server speculates ({PREFIX_SD} in its reply); the "
                                 f"baseline is the target alone")
        return
    if not sd:
        raise WorkbenchError(f"--url {name}={client.url}: its replies carry no {PREFIX_SD}: start it with "
                             f"--per-request-spec-decode-metrics detailed (each pass's verify steps are read from them)")
    got = parse_spec_decoding(sd, where=name).spec_tokens
    if got is not None and int(got) != int(k):
        raise WorkbenchError(f"--url {name}={client.url}: it drafts {got} tokens per step, not {k} "
                             f"(num_speculative_tokens)")


def _resume(out, key: dict) -> dict:
    fresh = {"key": key, "cells": [], "complete": False}
    if out and Path(out).is_file():
        try:
            old = json.loads(Path(out).read_text())
        except (OSError, ValueError):
            raise WorkbenchError(f"{out}: unreadable load grid (remove it to start again)") from None
        mine = json.loads(json.dumps(key))
        if old.get("key") == mine:
            return {**fresh, "cells": old.get("cells", []), **{k: old[k] for k in ("engine", "wall_s") if k in old}}
        theirs = old.get("key") or {}
        differs = [k for k in mine if theirs.get(k) != mine[k]] or ["its key"]
        raise WorkbenchError(f"{out}: a load grid of another {', '.join(differs)}; use another --json or remove it")
    return fresh


def measure(target, drafts: dict, contexts: dict, ks, *, concurrency=CONCURRENCY, max_tokens: int = 32,
            repeats: int = 3, min_requests: int = MIN_REQUESTS, in_flight: int = IN_FLIGHT, out=None,
            server_kw: dict | None = None, say=None, start=None, stop=None, urls: dict | None = None,
            server_machine: str | None = None) -> dict:
    """Measure the grid (module docstring), then predict every draft cell from the surface; returns (and writes
    to ``out``) the whole state: ``cells``, ``surface``, ``predictions``, ``crossover``, ``best_k``.

    ``urls``: servers the user started (a GPU box), measured instead of starting any: ``{"baseline": URL,
    "twin@K": URL, "DRAFT@K": URL}`` (:func:`remote_servers`); ``server_machine`` says what they run on (it keys
    the surface in place of this machine). Drafts without a URL are predicted, not measured."""
    say = say or (lambda m: None)
    start, stop = start or vllm_server.start, stop or vllm_server.stop
    check_inputs(target, drafts, next(iter(contexts.values())))
    ks = sorted({int(k) for k in ks})
    conc = sorted({int(c) for c in concurrency})
    if not ks or ks[0] < 1 or not conc or conc[0] < 1:
        raise WorkbenchError(f"-K {ks} --concurrency {conc}: expected positive numbers")
    kw = {"enforce_eager": True, "dtype": "float32", **(server_kw or {})}
    if urls is not None and not (server_machine or "").strip():
        raise WorkbenchError("--url: say what the servers run on with --server-machine (e.g. '1x H100 80GB'): it keys "
                             "the surface, which describes that machine, not this one")
    if "max_num_seqs" in kw and int(kw["max_num_seqs"]) < conc[-1]:
        raise WorkbenchError(f"--concurrency {conc[-1]} is above the server's --max-num-seqs {kw['max_num_seqs']}: "
                             f"the server would queue the rest, and the cell would measure concurrency "
                             f"{kw['max_num_seqs']}")
    rows = buckets(target, contexts, max_tokens, max(conc[-1], int(min_requests)))
    todo_cells, left_out = cells(rows, conc, in_flight)
    kw.setdefault("max_num_seqs", conc[-1])
    kw.setdefault("max_model_len", max(512, max(len(r["input_ids"]) for b in rows.values() for r in b) + 16))
    settings = {"max_tokens": int(max_tokens), "repeats": int(repeats), "concurrency": conc,
                "min_requests": int(min_requests), "in_flight": int(in_flight), "dtype": kw["dtype"]}
    key = resume_key(target, drafts, ks, rows, settings,
                     where=None if urls is None else {"server": str(server_machine).strip(), "remote": True})
    state = _resume(out, key)
    state.update({"settings": {**settings, "contexts": {b: {"file": str(contexts[b]), "rows": len(r),
                                                            "prompt_tokens": prompt_tokens(r)}
                                                        for b, r in rows.items()}},
                  "left_out": [{"context": b, "concurrency": c, "why": f"{c} x {prompt_tokens(rows[b])} prompt tokens "
                                f"in flight > {in_flight}"} for b, c in left_out]})
    logs = (Path(out).parent, Path(out).stem) if out else (Path(tempfile.mkdtemp(prefix="wb-load-")), "vllm-load")
    twin_dir = {n: shape_twin.make(p, logs[0] / f"{logs[1]}-twins") for n, p in drafts.items()}
    state["twins"] = {n: f.name for n, f in twin_dir.items()}
    servers = [(f.name, f) for f in {f.name: f for f in twin_dir.values()}.values()] + list(drafts.items())
    done = {(c["server"], c["k"], c["context"], c["concurrency"]) for c in state["cells"]}
    jobs = [(name, folder, k) for k in ks for name, folder in servers
            if any((name, k, b, c) not in done for b, c in todo_cells)]
    if urls is not None:
        at = remote_servers(urls, ks, {f.name: f for f in twin_dir.values()}, drafts)
        jobs = [j for j in jobs if (j[0], j[2]) in at]
        start, stop = _remote_start(at, {str(f): n for n, f in servers}), (lambda pid: None)
    if done:
        say(f"resuming: {len(done)} cells measured ({out})")

    def log(what):
        return str(logs[0] / f"{logs[1]}-{what}.log")

    base_srv, t0 = None, time.perf_counter()
    try:
        if jobs:
            base_srv = start(target, None, k=1, say=say, log=log("baseline"), **kw)
            base = Client(base_srv.url)
            version = base.version()
            record, said = pick_engine(None, version)
            old = (state.get("engine") or {}).get("version")
            if done and old and old != version:
                raise WorkbenchError(f"{out}: its cells were measured on vLLM {old}, this server is vLLM {version}; "
                                     f"use another --json or remove it")
            state["engine"] = {"version": version, "record": record}
            say(said)
            one_pass(base, requests_of(next(iter(rows.values())), 1, 1), max_tokens)      # warm-up, excluded
        for name, folder, k in jobs:
            srv = None
            try:
                say(f"{name} at K={k}: starting its server")
                srv = start(target, folder, k=k, say=say, log=log(f"{name}-k{k}"), **kw)
                client = Client(srv.url)
                for b, c in todo_cells:
                    if (name, k, b, c) in done:
                        continue
                    prompts = requests_of(rows[b], c, min_requests)
                    one_pass(client, prompts[:c], max_tokens, c)             # warm-up, excluded
                    one_pass(base, prompts[:c], max_tokens, c)               # the baseline idled: excluded
                    base_p, spec_p = [], []
                    for _ in range(int(repeats)):
                        base_p.append(one_pass(base, prompts, max_tokens, c))
                        spec_p.append(one_pass(client, prompts, max_tokens, c))
                    m = compare_passes(base_p, spec_p)
                    cell = {"server": name, "k": k, "context": b, "concurrency": c,
                            "kind": "twin" if name not in drafts else "draft",
                            **{x: m[x] for x in ("measured_tokens_per_s", "measured_spread", "baseline_tokens_per_s",
                                                 "baseline_spread", "measured_speedup", "speedup_spread", "too_noisy",
                                                 "side_p")},
                            "passes": [_pair(bp, sp) for bp, sp in zip(base_p, spec_p)]}
                    state["cells"].append(cell)
                    done.add((name, k, b, c))
                    _save(out, state)
                    say(f"{name} K={k} context {b} C={c}: {m['measured_tokens_per_s']} tokens/s, baseline "
                        f"{m['baseline_tokens_per_s']}, speed-up {m['measured_speedup']}x")
            except WorkbenchError as e:
                raise WorkbenchError(f"vllm load: {name} at K={k}: {e} ({len(state['cells'])} finished cells kept in "
                                     f"{out}; the same command resumes)") from None
            finally:
                if srv is not None:
                    stop_server(stop, srv)
    finally:
        if base_srv is not None:
            stop_server(stop, base_srv)
        if jobs:
            state["wall_s"] = round(state.get("wall_s", 0.0) + time.perf_counter() - t0, 1)   # every resumed part
            _save(out, state)
    m = state["key"]["machine"]
    where = m["server"] if "server" in m else f"{m['cpu']}, {m['cores']} cores{' (AVX-512)' if m['avx512'] else ''}"
    state["measured_on"] = f"{where}, vLLM {(state.get('engine') or {}).get('version', '?')}, {state['settings']['dtype']}"
    state["surface"] = surface(state, target)
    accept = offline_accept(target, drafts, rows, ks, max_tokens, (state.get("engine") or {}).get("record", "vllm"))
    state["offline"] = accept
    state.update(predict(state["surface"], accept, drafts_twins=state["twins"], max_tokens=max_tokens,
                         measured=[c for c in state["cells"] if c["kind"] == "draft"]))
    state["complete"] = True
    _save(out, state)
    return state


def _save(out, state: dict) -> None:
    if out:
        write_json(out, state)


def offline_accept(target, drafts: dict, rows: dict, ks, max_tokens: int, engine: str, *, cache: bool = True) -> dict:
    """``{draft: {K: {context: {served, trained, served_wiring, trained_wiring}}}}``: the decode path's accept length
    of each draft at each K on each bucket's rows, as the served release reads the draft and as it was trained.

    ``cache``: the target's features on a bucket's rows are captured once per tap set and kept (a temporary folder)
    for every K and draft that reads those taps: one target pass per (bucket, wiring), not per (draft, K, bucket,
    wiring). ``cache=False`` recaptures every time (the reference; the same numbers, tested)."""
    tgt = inputs.load(target, None, None, device="cpu", progress=False).target
    out = {}
    with tempfile.TemporaryDirectory(prefix="wb-load-features-") as tmp:
        for name, path in drafts.items():
            for k in ks:
                for b, r in rows.items():
                    off = offline(tgt, path, r, k, None, engine=engine, cache_dir=tmp if cache else None)
                    out.setdefault(name, {}).setdefault(str(k), {})[b] = {
                        "served": off["served_accept_length"], "trained": off["trained_accept_length"],
                        "served_wiring": off["served_wiring"], "trained_wiring": off["trained_wiring"]}
    return out


# ─────────────────────────────────────── the surface ───────────────────────────────────────

def surface(state: dict, target) -> dict:
    """The twins' cells as a surface file: ``{key: {target, engine, machine, dtype, twins}, cells: [{twin, k,
    context, prompt_tokens, concurrency, fixed, per_step, baseline_tokens_per_s, requests, max_tokens}]}``."""
    ctx = state["settings"]["contexts"]
    rows = []
    for c in state["cells"]:
        if c["kind"] != "twin":
            continue
        rows.append({"twin": c["server"], "k": c["k"], "context": c["context"],
                     "prompt_tokens": ctx[c["context"]]["prompt_tokens"], "concurrency": c["concurrency"],
                     **cell_cost(c["passes"]), "baseline_tokens_per_s": c["baseline_tokens_per_s"],
                     "requests": c["passes"][0]["requests"], "max_tokens": state["settings"]["max_tokens"]})
    return {"key": {"target": content_digest(target), "engine": state.get("engine"), "machine": state["key"]["machine"],
                    "dtype": state["settings"]["dtype"], "twins": sorted(set(state["twins"].values()))},
            "cells": rows}


def check_surface(surf: dict, *, target=None, twin: str | None = None, engine_version: str | None = None,
                  here: bool = True) -> None:
    """One line naming what differs between a surface file and what it is asked to predict: another target's bytes,
    another machine, another engine release, a twin shape it does not hold."""
    key = surf.get("key") or {}
    if target is not None and key.get("target") != content_digest(target):
        raise WorkbenchError(f"surface: measured with another target (its bytes differ from {target})")
    if here and key.get("machine") != json.loads(json.dumps(machine())):
        raise WorkbenchError(f"surface: measured on another machine ({key.get('machine')}, this one is {machine()}); "
                             f"measure it here (workbench vllm load)")
    if engine_version and (key.get("engine") or {}).get("version") != engine_version:
        raise WorkbenchError(f"surface: measured on vLLM {(key.get('engine') or {}).get('version')}, not "
                             f"{engine_version}")
    if twin is not None and twin not in key.get("twins", []):
        raise WorkbenchError(f"surface: holds the shape twins {', '.join(key.get('twins', [])) or 'none'}, not {twin} "
                             f"(the draft's shape differs: its verify step costs are not measured)")


def from_surface(path, target, drafts: dict, contexts: dict, *, engine_version: str | None = None,
                 any_machine: bool = False) -> dict:
    """Predict ``drafts`` from a surface file measured before (``workbench vllm load`` wrote it beside its
    ``--json``), without a server: each draft's offline accept length on the buckets' rows at each K the surface
    holds. One line when the surface is another target's, machine's (unless ``any_machine``), release's, or holds
    no twin of a draft's shape."""
    try:
        surf = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"--surface {path}: not a surface file ({e})") from None
    if not isinstance(surf, dict) or not surf.get("cells"):
        raise WorkbenchError(f"--surface {path}: no cells (expected the -surface.json `workbench vllm load` writes)")
    twins = {}
    for name, folder in drafts.items():
        twins[name] = shape_twin.twin_name(folder)
        check_surface(surf, target=target, twin=twins[name], engine_version=engine_version, here=not any_machine)
    have = {c["context"] for c in surf["cells"]}
    missing = [b for b in have if b not in contexts]
    if missing:
        raise WorkbenchError(f"--surface {path}: its context bucket {missing[0]} has no --context rows here")
    n_tok = int(surf["cells"][0]["max_tokens"])
    n_rows = max(int(c["requests"]) for c in surf["cells"])
    rows = buckets(target, {b: contexts[b] for b in have}, n_tok, n_rows)
    ks = sorted({int(c["k"]) for c in surf["cells"]})
    record = ((surf.get("key") or {}).get("engine") or {}).get("record", "vllm")
    accept = offline_accept(target, drafts, rows, ks, n_tok, record)
    return {"twins": twins, "surface_file": str(path), "offline": accept,
            **predict(surf, accept, drafts_twins=twins, max_tokens=n_tok)}


def load_grid(path) -> dict:
    """A finished ``workbench vllm load --json`` file (one line naming it when it is not one)."""
    state = read_result(path, "load grid", "workbench vllm load")
    if not state.get("complete") or not state.get("predictions"):
        raise WorkbenchError(f"{path}: an unfinished load grid: run the same `workbench vllm load` command again")
    return state


def find(path="", draft="") -> dict | None:
    """The grid at ``path``; with no path, ``vllm-load.json`` beside the draft's folder (a demo's), else None."""
    return find_result(path, draft, FILE_NAME, load_grid)


HOW = ("`workbench vllm load` with your target, draft and data and `--json vllm-load.json` beside the draft's folder "
       "measures them over concurrency 1-16 (docs/load.md; about an hour on 2 cores for two drafts, K=1,2 and four "
       "context buckets; `make bench-load` for the real demo).")


def table(state: dict) -> str:
    """The grid as a Markdown table: per draft, K, context and C, the measured and predicted tokens/s."""
    lines = ["| draft | K | context (prompt tokens) | C | no speculation tokens/s | measured tokens/s | predicted (served) "
             "| error | predicted (trained wiring) | per request tokens/s | ms / token |", "|" + "---|" * 11]
    for p in state.get("predictions", []):
        m = p.get("measured")
        lines.append(f"| {p['draft']} | {p['k']} | {p['context']} ({p['prompt_tokens']}) | {p['concurrency']} | "
                     f"{m['baseline_tokens_per_s'] if m else p['baseline_tokens_per_s']} | "
                     + (f"{m['measured_tokens_per_s']} [{m['measured_spread']['min']}–{m['measured_spread']['max']}] | "
                        if m else "– | ")
                     + f"{p.get('predicted_tokens_per_s', p['served']['tokens_per_s'])} | "
                     + (f"{p['error'] * 100:+.1f}% | " if "error" in p else "– | ")
                     + f"{p['trained']['tokens_per_s']} | {p['served']['per_request_tokens_per_s']} | "
                     f"{p['served']['ms_per_output_token']} |")
    return "\n".join(lines)


__all__ = ["CONCURRENCY", "IN_FLIGHT", "HOW", "find", "load_grid", "from_surface", "buckets", "cells", "requests_of", "measure", "surface", "check_surface",
           "predict", "answer_line", "table"]
