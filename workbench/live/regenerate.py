"""Replace each response with the target's own continuation: greedy (default) or sampled, HF or a live server.

    >>> # res = regenerate("data/demo/target", "val-foreign.jsonl", "val-regen.jsonl")            # HF, KV cache
    >>> # res = regenerate("T", "in.jsonl", "out.jsonl", url="http://127.0.0.1:30000")            # SGLang /generate
    >>> # res = regenerate("T", "in.jsonl", "out.jsonl", url="http://127.0.0.1:8000", server="vllm")  # vLLM
    >>> # res = regenerate("T", "in.jsonl", "out.jsonl", sampling=Sampling(0.7, top_p=0.95, seed=1))
    >>> # print(res.summary())

Each row keeps its prompt (the leading ``loss_mask == 0`` run) and its other keys; everything after
the prompt is replaced by the target's continuation, which ends at an EOS token (kept, as servers
return it) or after ``max_new_tokens`` (default: the row's original response length), whichever
comes first. ``input_ids``, ``loss_mask`` (0 on the prompt, 1 on the new response), ``seq_len`` and
``n_*`` are rewritten; a ``generation`` key records how the row was made (data.GENERATION_FIELDS
plus ``finish``, ``input_row`` and ``replaced``: the old response's length and greedy agreement).

Generation, two ways:

- **HF target** (:func:`generate_hf`): batches of prompts of neighbouring lengths, left-padded (the
  prompts end in the same column, positions counted from each row's first real token), one prefill
  and then one step per token with a KV cache; finished rows leave the batch. The prefill also runs
  over the old response, so the *agreement before* (share of old response tokens equal to the
  target's argmax) costs no extra forward; the cache is then cropped back to the prompt. The
  lm_head runs in position chunks there (``chunks.head_chunks``, as in the capture pass), so a long
  response never materialises its ``[B, R, V]`` logits.
  :func:`generate_reference` is the exact reference (one row, no cache, a full forward per token).
- **Live server** (:func:`generate_server`): SGLang's ``POST /generate`` through ``sglang_live.Client``, or
  vLLM's ``POST /v1/completions`` on token ids (``return_token_ids``) through ``vllm_live.Client``
  (``server="vllm"``; the model id from ``GET /v1/models``), retries, concurrency, every sampling parameter
  sent explicitly in the server's own names.

Sampling follows SGLang's rule (:mod:`workbench.core.sampling`); each row draws from its own generator
seeded from ``(seed, input row)``, so results do not depend on batching or interruption.

Safe to interrupt: rows go to ``OUT.part`` (one JSON line each, in input order, flushed and fsynced
every ``flush_every`` rows) next to a ``OUT.part.json`` that names the run's settings; a re-run with
the same settings skips the rows already there (a torn last line is dropped); at the end ``OUT.part``
is renamed to ``OUT`` in one step, so ``OUT`` exists only complete.

Rows that cannot be regenerated are skipped and counted (or, with ``on_error="raise"``, stop the
run with a one-line error): no prompt (``loss_mask`` starts with 1), a prompt that fills the
target's maximum positions. Multi-turn tokenised rows (zeros inside the response) keep only their first
prompt: the later turns are replaced too, and counted. Rows written by ``workbench prepare --all-turns`` are
refused with one line (:func:`make_job`); conversation and prompt-only files (MT-bench, GSM8K, ...) go through
:mod:`workbench.live.chat_regen`, which asks each turn after the target's own earlier answers.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from workbench import rows as dmod
from workbench.core.errors import WorkbenchError
from workbench.core.files import input_fingerprint, is_path, write_json
from workbench.core.sampling import Sampling, draw, row_generator
from workbench.live.sglang_live import Client as SglangClient
from workbench.live.vllm_live import Client as VllmClient
from workbench.load import inputs
from workbench.load.agreement import greedy_matches_reference
from workbench.model import capture
from workbench.model.chunks import head_chunks

SKIP_REASONS = {"no_prompt": "no prompt (loss_mask starts with 1)",
                "prompt_too_long": "prompt fills the target's max positions",
                "bad_row": "unreadable or invalid row"}
_SETTINGS = ("by", "model", "temperature", "top_p", "top_k", "seed", "dtype", "max_new_tokens", "ignore_eos")


# ───────────────────────────── target facts ─────────────────────────────

@dataclass
class TargetInfo:
    """What regenerate needs to know about the target, with or without its weights."""

    name: str
    vocab_size: int
    max_positions: int | None
    eos_ids: frozenset
    dtype: str | None = None


def _text_config(config):
    """The text part of a multimodal config (``get_text_config``), else the config itself."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _ids(v) -> set:
    if v is None:
        return set()
    if isinstance(v, int) and not isinstance(v, bool):
        return {v}
    if isinstance(v, (list, tuple)):
        return {int(x) for x in v if isinstance(x, int) and not isinstance(x, bool)}
    return set()


def eos_ids_of(config, generation_config=None, tokenizer=None) -> frozenset:
    """SGLang's stop set: config ``eos_token_id`` ∪ generation_config's ∪ the tokenizer's.

    (``sglang/srt/configs/model_config.py`` ``_get_hf_eos_token_id`` takes the union of the first two;
    the scheduler's ``Req.check_finished`` also stops at ``tokenizer.eos_token_id``.)

        >>> sorted(eos_ids_of(type("C", (), {"eos_token_id": [2, 7]})()))
        [2, 7]
    """
    out = _ids(getattr(config, "eos_token_id", None)) | _ids(getattr(_text_config(config), "eos_token_id", None))
    out |= _ids(getattr(generation_config, "eos_token_id", None))
    out |= _ids(getattr(tokenizer, "eos_token_id", None))
    return frozenset(out)


_DTYPE_NAMES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def target_info(target) -> TargetInfo:
    """From a loaded :class:`workbench.capture.Target`, or from a model folder without loading weights."""
    if not is_path(target):
        gen_cfg = getattr(target.model, "generation_config", None)
        return TargetInfo(name=os.path.basename(os.path.normpath(target.path)) if target.path else type(target.model).__name__,
                          vocab_size=target.vocab_size, max_positions=target.max_positions,
                          eos_ids=eos_ids_of(target.config, gen_cfg, target.tokenizer),
                          dtype=_DTYPE_NAMES.get(str(target.dtype), str(target.dtype)))
    import transformers

    path = os.fspath(target)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise WorkbenchError(f"target {path!r}: no config.json (expected an HF model folder)")
    try:
        cfg = transformers.AutoConfig.from_pretrained(path)
    except (ValueError, OSError) as e:
        raise WorkbenchError(f"target {path!r}: cannot read config.json ({str(e).splitlines()[0]})") from None
    gen_cfg = tok = None
    try:
        gen_cfg = transformers.GenerationConfig.from_pretrained(path)
    except (OSError, ValueError):
        pass
    if any(os.path.isfile(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        try:
            tok = transformers.AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError):
            tok = None
    text = _text_config(cfg)
    mp = getattr(text, "max_position_embeddings", None)
    return TargetInfo(name=os.path.basename(os.path.normpath(path)), vocab_size=int(text.vocab_size),
                      max_positions=int(mp) if mp else None, eos_ids=eos_ids_of(cfg, gen_cfg, tok))


# ───────────────────────────── jobs ─────────────────────────────

@dataclass
class Job:
    """One row to regenerate."""

    row: int
    where: str
    source: str
    prompt: list[int]
    old: list[int]                 # the old response (everything after the prompt)
    old_mask: list[int]
    max_new: int
    record: dict                   # the canonical row (keys to keep)
    capped: bool = False
    multi_turn: bool = False


@dataclass
class Generated:
    tokens: list[int]
    finish: str                    # "eos" | "length" | the server's finish type
    matches: int | None = None     # greedy agreement of the old response: matches / counted tokens
    counted: int | None = None


def make_job(row: dict, *, max_new_tokens: int | None, info: TargetInfo) -> Job | str:
    """A :class:`Job`, or the skip reason (a key of :data:`SKIP_REASONS`). An all-turns row (``workbench prepare
    --all-turns``) is refused: regenerating its first reply changes every later reply's history, so its replies
    must be asked one after the other from the conversation (pass the conversation file: ``live.chat_regen``)."""
    prep = row.get("prepared")
    if isinstance(prep, dict) and prep.get("layout") == "all-turns" and int(prep.get("replies") or 1) > 1:
        raise WorkbenchError(f"{row['_where']}: an all-turns row ({prep['replies']} replies in one row): regenerating "
                             f"a reply changes the history of every later one; regenerate the conversation file "
                             f"{prep.get('file') or ''} itself (each turn is asked after the target's own answers), "
                             f"or per-turn rows (workbench prepare without --all-turns)")
    ids, mask, npt = row["input_ids"], row["loss_mask"], int(row["n_prompt_tokens"])
    if npt == 0:
        return "no_prompt"
    if info.max_positions and npt >= info.max_positions:
        return "prompt_too_long"
    m = int(max_new_tokens) if max_new_tokens else int(row["n_response_tokens"])
    capped = False
    if info.max_positions and npt + m > info.max_positions:
        m, capped = info.max_positions - npt, True
    old, old_mask = list(ids[npt:]), list(mask[npt:])
    return Job(int(row["_row"]), row["_where"], row["source"], list(ids[:npt]), old, old_mask, max(m, 1), row,
               capped, 0 in old_mask)


# ───────────────────────────── HF generation ─────────────────────────────

def _cache_kw(model) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _choose(logits, sampling: Sampling, gens):
    import torch

    if sampling.greedy:
        return logits.float().argmax(-1)
    u = torch.stack([torch.rand((), generator=g) for g in gens])
    return draw(logits, sampling, u)


def _finished(tok: int, n: int, max_new: int, eos: frozenset, ignore_eos: bool) -> str | None:
    if not ignore_eos and tok in eos:
        return "eos"
    return "length" if n >= max_new else None


def generate_reference(target, prompt: list[int], max_new: int, *, eos_ids=frozenset(), ignore_eos: bool = False,
                       sampling: Sampling = Sampling(), row: int = 0) -> Generated:
    """The exact reference: one row, no KV cache, a full forward over the whole sequence per new token.

        >>> # generate_reference(target, [1, 5, 9], 16).tokens
    """
    import torch

    gen = [row_generator(sampling.seed, row)] if not sampling.greedy else []
    ids, out = list(prompt), []
    with torch.no_grad():
        while True:
            logits = target.model(input_ids=torch.tensor([ids], device=target.device), use_cache=False).logits[:, -1]
            tok = int(_choose(logits, sampling, gen)[0])
            out.append(tok)
            ids.append(tok)
            fin = _finished(tok, len(out), max_new, eos_ids, ignore_eos)
            if fin:
                return Generated(out, fin)


def _prefill(target, ids, att, pos, Lp: int, R: int, *, lean: bool = True):
    """Prefill prompts (columns < Lp) and old responses (R columns after them).

    Returns (logits predicting the first new token ``[B, V]``, the target's argmax over the old
    response ``[B, R]`` (None when R = 0), the KV cache of the prompt columns only).

    The ``lean`` path runs the base model once and its lm_head in position chunks
    (``capture.split_head``, ``chunks.head_chunks``, as the capture pass does): no ``[B, R, V]``
    logits. A model whose logits are not lm_head(base output) (soft-capping, scaling) takes the
    plain path: the model's own logits of the last R + 1 columns. Both agree (tests/test_regenerate.py).
    """
    import torch

    model = target.model
    keep_ok = "logits_to_keep" in inspect.signature(model.forward).parameters
    if lean and R:
        try:
            body, lm_head = capture.split_head(model, ids)
        except WorkbenchError:
            body = None
        if body is not None:
            hdev = lm_head.weight.device
            with torch.no_grad():
                out = body(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
                hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
                cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
                del out
                g = head_chunks(hidden[:, Lp - 1:Lp - 1 + R], lambda h: lm_head(h.to(hdev)),
                                vocab=target.vocab_size).ids
                first = lm_head(hidden[:, Lp - 1].to(hdev))
            del hidden
            cache.crop(-R)                                # keep the prompt columns only (negative = remove)
            return first, g, cache
    kw = {"logits_to_keep": R + 1} if keep_ok else {}     # columns Lp-1 .. Lp+R-1 only
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, **kw)
    logits = out.logits[:, -(R + 1):]                    # column Lp-1+j predicts old[j]
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    g = logits[:, :R].argmax(-1) if R else None
    if R:
        cache.crop(-R)                                    # keep the prompt columns only (negative = remove)
    return logits[:, 0], g, cache


def _batch(target, jobs: list[Job], *, eos_ids, ignore_eos, sampling, agreement: bool,
           lean: bool = True) -> list[Generated]:
    """One batch: left-padded prefill (prompt + old response when ``agreement``), then cached steps."""
    import torch

    model, dev = target.model, target.device
    B = len(jobs)
    Lp = max(len(j.prompt) for j in jobs)
    olds = [j.old[: (target.max_positions or 10 ** 9) - len(j.prompt)] if agreement else [] for j in jobs]
    R = max(len(o) for o in olds)
    ids = torch.zeros(B, Lp + R, dtype=torch.long)
    att = torch.zeros(B, Lp + R, dtype=torch.long)
    for b, (j, o) in enumerate(zip(jobs, olds)):
        ids[b, Lp - len(j.prompt):Lp] = torch.tensor(j.prompt)
        att[b, Lp - len(j.prompt):Lp] = 1
        if o:
            ids[b, Lp:Lp + len(o)] = torch.tensor(o)
            att[b, Lp:Lp + len(o)] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    ids, att, pos = ids.to(dev), att.to(dev), pos.to(dev)
    res = [Generated([], "") for _ in jobs]
    nxt, g, cache = _prefill(target, ids, att, pos, Lp, R, lean=lean)
    if R:
        g = g.cpu()
        for b, (j, o) in enumerate(zip(jobs, olds)):
            n, d = greedy_matches_reference([j.prompt[-1]] + o, g[b, :len(o)].tolist() + [0],
                                            [0] + j.old_mask[:len(o)])
            res[b].matches, res[b].counted = n, d
    att, last = att[:, :Lp], pos[:, Lp - 1]
    gens = [row_generator(sampling.seed, j.row) for j in jobs] if not sampling.greedy else []
    alive = list(range(B))                                # batch slot -> job index
    cache_kw = _cache_kw(model)
    while True:
        tok = _choose(nxt, sampling, gens).cpu().tolist()
        keep = []
        for slot, b in enumerate(alive):
            res[b].tokens.append(int(tok[slot]))
            fin = _finished(int(tok[slot]), len(res[b].tokens), jobs[b].max_new, eos_ids, ignore_eos)
            if fin:
                res[b].finish = fin
            else:
                keep.append(slot)
        if not keep:
            return res
        if len(keep) < len(alive):
            sel = torch.tensor(keep, device=dev)
            cache.batch_select_indices(sel)
            att, last = att[sel], last[sel]
            gens = [gens[s] for s in keep] if gens else gens
        step = torch.tensor([[tok[s]] for s in keep], device=dev)
        alive = [alive[s] for s in keep]
        att = torch.cat([att, torch.ones(len(alive), 1, dtype=att.dtype, device=dev)], dim=1)
        last = last + 1
        with torch.no_grad():
            out = model(input_ids=step, attention_mask=att, position_ids=last[:, None], use_cache=True,
                        **{cache_kw: cache})
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        nxt = out.logits[:, -1]
        del out


def generate_hf(target, jobs: list[Job], *, eos_ids=frozenset(), ignore_eos: bool = False,
                sampling: Sampling = Sampling(), batch_size: int = 8, agreement: bool = True,
                lean: bool = True) -> list[Generated]:
    """Generate every job with the HF target, batched by prompt length; results in the order of ``jobs``.

    Equal to :func:`generate_reference` row by row (tests/test_regenerate.py), up to floating-point
    ties of the argmax (a batched matmul may round differently from a single-row one).
    """
    if int(batch_size) < 1:
        raise WorkbenchError(f"--batch-size {batch_size}: expected an integer >= 1")
    order = sorted(range(len(jobs)), key=lambda i: (len(jobs[i].prompt), i))
    out: list[Generated | None] = [None] * len(jobs)
    for k in range(0, len(order), int(batch_size)):
        idx = order[k:k + int(batch_size)]
        for i, g in zip(idx, _batch(target, [jobs[i] for i in idx], eos_ids=eos_ids, ignore_eos=ignore_eos,
                                     sampling=sampling, agreement=agreement, lean=lean)):
            out[i] = g
    return out


# ───────────────────────────── server generation ─────────────────────────────

SERVERS = {"sglang": SglangClient, "vllm": VllmClient}


def server_client(url: str, server: str = "sglang", *, timeout: float = 120.0, retries: int = 3,
                  concurrency: int = 4):
    """The client of a live ``server`` ("sglang": ``POST /generate``; "vllm": ``POST /v1/completions`` with token
    ids) at ``url``: what :func:`generate_server` asks."""
    if server not in SERVERS:
        raise WorkbenchError(f"--server {server!r}: expected one of {', '.join(SERVERS)}")
    return SERVERS[server](url, timeout=timeout, retries=retries, concurrency=int(concurrency))


def generate_server(client, jobs: list[Job], *, eos_ids=frozenset(), ignore_eos: bool = False,
                    sampling: Sampling = Sampling(), vocab_size: int | None = None) -> list[Generated]:
    """Generate every job with a live server (``client.concurrency`` in flight): SGLang (``POST /generate``,
    ``sglang_live.Client``) or vLLM (``POST /v1/completions`` on token ids with ``return_token_ids``,
    ``vllm_live.Client``); both have ``generate(prompt_ids, max_new, where=, sampling=)`` and ``params``.

    Every sampling parameter is sent, in the server's own names (a server otherwise falls back to
    generation_config.json); with a seed, each row's seed is :func:`workbench.sampling.row_seed`
    (SGLang's ``sampling_seed``, honoured with ``--enable-deterministic-inference``; vLLM's ``seed``);
    ``ignore_eos`` when asked. Tokens after the first EOS are cut, like the HF path.
    """
    path = getattr(client, "PATH", "/generate")

    def one(job: Job) -> Generated:
        sp = client.params(sampling, job.row)            # the live comparison's parameters, row seed included
        if ignore_eos:
            sp["ignore_eos"] = True
        toks, meta = client.generate(job.prompt, job.max_new, where=job.where, sampling=sp)
        toks = [int(x) for x in toks][: job.max_new]
        if vocab_size is not None:
            bad = [x for x in toks if not 0 <= x < vocab_size]
            if bad:
                raise WorkbenchError(f"{client.url}{path} ({job.where}): returned token id {bad[0]} outside the "
                                     f"target vocab 0..{vocab_size - 1}: the server runs another model or tokenizer")
        if not toks:
            raise WorkbenchError(f"{client.url}{path} ({job.where}): no output tokens (expected at least 1)")
        if not ignore_eos:
            cut = next((i for i, x in enumerate(toks) if x in eos_ids), None)
            if cut is not None:
                return Generated(toks[:cut + 1], "eos")
        fr = meta.get("finish_reason") if isinstance(meta, dict) else None
        kind = fr.get("type") if isinstance(fr, dict) else fr           # SGLang: {"type": ...}; vLLM: a string
        return Generated(toks, "length" if len(toks) >= job.max_new else str(kind or "stop"))

    return client.map(one, jobs)


# ───────────────────────────── output rows ─────────────────────────────

def settings_of(by: str, info: TargetInfo, sampling: Sampling, max_new_tokens, ignore_eos: bool, model=None,
                server: str | None = None) -> dict:
    """The ``generation`` settings of a run (``server``: "sglang" or "vllm" when ``by`` is "server")."""
    out = {"by": by, "model": model or info.name, "temperature": 0.0 if sampling.greedy else sampling.temperature,
           "top_p": sampling.top_p, "top_k": sampling.top_k, "seed": sampling.seed, "dtype": info.dtype,
           "max_new_tokens": int(max_new_tokens) if max_new_tokens else None, "ignore_eos": bool(ignore_eos)}
    if server is not None:
        out["server"] = server
    return out


def output_row(job: Job, gen: Generated, settings: dict) -> tuple[dict, list[str]]:
    """The rewritten row, and the token-aligned keys dropped (lists as long as the old row: now stale)."""
    T_old = len(job.prompt) + len(job.old)
    ids = job.prompt + gen.tokens
    row, dropped = {}, []
    for k, v in job.record.items():
        if k in ("_row", "_where", "generation"):
            continue
        if k not in ("input_ids", "loss_mask") and isinstance(v, list) and len(v) == T_old and T_old > 1:
            dropped.append(k)
            continue
        row[k] = v
    row.update(input_ids=ids, loss_mask=[0] * len(job.prompt) + [1] * len(gen.tokens), seq_len=len(ids),
               n_prompt_tokens=len(job.prompt), n_response_tokens=len(gen.tokens), source=job.source)
    row["generation"] = {**settings, "finish": gen.finish, "input_row": job.row,
                         "replaced": {"response_tokens": len(job.old), "trained_tokens": sum(job.old_mask),
                                      "greedy_matches": gen.matches, "agreement_tokens": gen.counted}}
    return row, dropped


# ───────────────────────────── the summary ─────────────────────────────

@dataclass
class RegenerateResult:
    """What a run did: per source old vs new response lengths and the agreement before."""

    out: str
    settings: dict
    n_rows: int = 0                        # rows in OUT
    n_new: int = 0                         # rows generated by this run
    n_resumed: int = 0                     # rows found already written
    skipped: Counter = field(default_factory=Counter)
    first_skipped: dict = field(default_factory=dict)
    n_capped: int = 0
    n_multi_turn: int = 0
    dropped_keys: Counter = field(default_factory=Counter)
    tokens: int = 0                        # tokens generated by this run
    seconds: float = 0.0
    sources: dict = field(default_factory=dict)      # source -> accumulators
    complete: bool = False

    def add(self, row: dict) -> None:
        g = row["generation"]
        rep = g.get("replaced") or {}
        s = self.sources.setdefault(row["source"], {"rows": 0, "old": [], "new": [], "eos": 0, "matches": 0,
                                                    "counted": 0, "measured": 0})
        s["rows"] += 1
        s["old"].append(int(rep.get("response_tokens") or 0))
        s["new"].append(int(row["n_response_tokens"]))
        s["eos"] += g.get("finish") == "eos"
        if rep.get("greedy_matches") is not None:
            s["matches"] += int(rep["greedy_matches"])
            s["counted"] += int(rep.get("agreement_tokens") or 0)
            s["measured"] += 1
        self.n_rows += 1

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    def by_source(self) -> dict:
        import numpy as np

        out = {}
        for src in sorted(self.sources):
            s = self.sources[src]
            o, n = np.array(s["old"]), np.array(s["new"])
            out[src] = {"rows": s["rows"], "old_mean": float(o.mean()), "old_p50": float(np.median(o)),
                        "new_mean": float(n.mean()), "new_p50": float(np.median(n)), "ended_at_eos": s["eos"],
                        "agreement_before": s["matches"] / s["counted"] if s["counted"] else None,
                        "agreement_rows": s["measured"]}
        return out

    def to_dict(self) -> dict:
        return {"out": self.out, "complete": self.complete, "settings": self.settings, "rows": self.n_rows,
                "new": self.n_new, "resumed": self.n_resumed, "skipped": dict(self.skipped),
                "first_skipped": self.first_skipped, "capped": self.n_capped, "multi_turn": self.n_multi_turn,
                "dropped_keys": dict(self.dropped_keys), "tokens_generated": self.tokens, "seconds": self.seconds,
                "tokens_per_second": self.tokens_per_second, "by_source": self.by_source()}

    def to_frame(self):
        import pandas as pd

        df = pd.DataFrame.from_dict(self.by_source(), orient="index")
        df.index.name = "source"
        return df

    def summary(self) -> str:
        st = self.settings
        how = "greedy" if st["temperature"] == 0 else (f"T={st['temperature']:g} top_p={st['top_p']:g} "
                                                       f"top_k={st['top_k']} seed={st['seed']}")
        lines = [f"regenerate ({st['by']} {st['model']}, {how}): {self.out}: {self.n_rows} rows "
                 f"({self.n_new} new, {self.n_resumed} already written)"
                 + ("" if self.complete else " [incomplete: re-run to resume]")]
        if self.n_new:
            where = "a server" if st["by"] != "target" else "the target in this process"
            lines.append(f"  generated {self.tokens} tokens in {self.seconds:.1f} s by {where} ({self.tokens_per_second:.1f} "
                         f"tokens/s of regeneration, not a serving speed)")
        lines.append(f"  {'source':<16} {'rows':>6} {'old resp p50/mean':>18} {'new resp p50/mean':>18} "
                     f"{'ended at EOS':>12} {'agreement before':>16}")
        for src, v in self.by_source().items():
            ag = "n/a" if v["agreement_before"] is None else f"{v['agreement_before']:.3f}"
            lines.append(f"  {src:<16} {v['rows']:>6} {v['old_p50']:>8.0f} / {v['old_mean']:<7.1f} "
                         f"{v['new_p50']:>8.0f} / {v['new_mean']:<7.1f} {v['ended_at_eos']:>12} {ag:>16}")
        for k, n in self.skipped.items():
            lines.append(f"  skipped {n} rows: {SKIP_REASONS.get(k, k)} (first: {self.first_skipped.get(k)})")
        if self.n_capped:
            lines.append(f"  {self.n_capped} rows: max_new_tokens capped so prompt + response fits the target's max positions")
        if self.n_multi_turn:
            lines.append(f"  {self.n_multi_turn} multi-turn rows: everything after the first prompt was replaced "
                         "(later turns are not kept)")
        if self.dropped_keys:
            lines.append("  dropped token-aligned keys (stale after the rewrite): "
                         + ", ".join(f"{k} ({n} rows)" for k, n in self.dropped_keys.items()))
        return "\n".join(lines)


# ───────────────────────────── the resumable writer ─────────────────────────────

def read_part(part: str, *, repair: bool = True) -> list[dict]:
    """Rows already in ``part``; a torn last line (a kill mid-write) is cut off the file when ``repair``."""
    if not os.path.exists(part):
        return []
    with open(part, "rb") as f:
        data = f.read()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        if not repair:
            raise WorkbenchError(f"{part}: the last line is not terminated (a truncated file?); "
                                 "choose another --out, or delete it to regenerate")
        with open(part, "r+b") as f:
            f.truncate(end)
    rows = []
    for n, line in enumerate(data[:end].splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise WorkbenchError(f"{part}:{n}: not valid JSON; delete {part} to start over") from None
    return rows


def check_same(found: dict, want: dict, where: str, fix: str) -> None:
    """A one-line WorkbenchError naming the first key of ``want`` whose value ``found`` does not share."""
    diff = [k for k in want if found.get(k) != want[k]]
    if diff:
        k = diff[0]
        raise WorkbenchError(f"{where} was made with other settings ({k}: {found.get(k)!r}, now {want[k]!r}); {fix}")


def claim_part(out: str, ident: dict) -> tuple[str, str]:
    """(``OUT.part``, ``OUT.part.json``) of a resumable run: the state file is written with ``ident`` (``settings``,
    ``data``: the input's fingerprint, any other keys) when new; when it exists, it must name the same run, else
    a one-line WorkbenchError says what differs."""
    part, state = out + ".part", out + ".part.json"
    if not os.path.exists(state):
        write_json(state, ident)
        return part, state
    try:
        with open(state, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, json.JSONDecodeError):
        raise WorkbenchError(f"{state}: unreadable; delete it and {part} to start over") from None
    fix = f"use the same settings to resume, or delete {part} and {state} to start over"
    check_same(found.get("settings", {}), ident["settings"], f"the unfinished run in {part}", fix)
    if found.get("data") != ident["data"]:
        raise WorkbenchError(f"the unfinished run in {part} read another --data ({(found.get('data') or {}).get('path')}, "
                             f"or that file changed); delete {part} and {state} to start over")
    check_same(found, {k: v for k, v in ident.items() if k not in ("settings", "data")},
               f"the unfinished run in {part}", fix)
    return part, state


def generate_jobs(jobs: list[Job], *, target, client, info, ignore_eos: bool, sampling, batch_size: int,
                  agreement: bool = False) -> list:
    """Every job generated by the live server (``client`` given: :func:`generate_server`) or by the HF
    target (:func:`generate_hf`): the one place a regeneration picks its generator."""
    if client is not None:
        return generate_server(client, jobs, eos_ids=info.eos_ids, ignore_eos=ignore_eos, sampling=sampling,
                               vocab_size=info.vocab_size)
    return generate_hf(target, jobs, eos_ids=info.eos_ids, ignore_eos=ignore_eos, sampling=sampling,
                       batch_size=batch_size, agreement=agreement)


def regenerate(target, data, out, *, max_new_tokens: int | None = None, url: str | None = None,
               sampling: Sampling | None = None, ignore_eos: bool = False, batch_size: int = 8,
               flush_every: int = 64, agreement: bool = True, on_error: str = "raise", limit: int | None = None,
               device: str = "cpu", dtype=None, trust_remote_code: bool = False, concurrency: int = 4,
               timeout: float = 120.0, retries: int = 3, progress: bool = True, client=None,
               server: str = "sglang") -> RegenerateResult:
    """Regenerate ``data`` into ``out`` (JSON Lines); see the module docstring. Resumes a killed run.

    ``target``: a model folder or a loaded :class:`workbench.capture.Target` (with ``url`` only its
    config and tokenizer are read). ``server``: what runs at ``url``, "sglang" or "vllm" (:func:`server_client`). ``on_error``: "raise" stops at the first row that cannot be
    regenerated, "skip" counts it and goes on.
    """
    from tqdm.auto import tqdm

    sampling = sampling or Sampling()
    if on_error not in ("raise", "skip"):
        raise WorkbenchError(f"on_error={on_error!r}: expected 'raise' or 'skip'")
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or int(max_new_tokens) < 1):
        raise WorkbenchError(f"--max-new-tokens {max_new_tokens}: expected an integer >= 1")
    if int(flush_every) < 1:
        raise WorkbenchError(f"flush_every {flush_every}: expected an integer >= 1")
    out = os.fspath(out)
    if not is_path(data):
        raise WorkbenchError("regenerate: data must be a file path (the output is resumable against it)")
    if inputs.same_path(data, out):
        raise WorkbenchError(f"--out {out}: the same file as --data (expected a new file)")

    if url is not None:
        client = client or server_client(url, server, timeout=timeout, retries=retries, concurrency=concurrency)
        info = target_info(target)
        settings = settings_of("server", info, sampling, max_new_tokens, ignore_eos,
                               model=client.served_model() or info.name, server=client.KIND.lower())
    else:
        target = inputs.target(target, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                               progress=progress)
        info = target_info(target)
        settings = settings_of("target", info, sampling, max_new_tokens, ignore_eos)

    ds = dmod.load(data, vocab_size=info.vocab_size, on_error=on_error)   # unusable input: one-line error here
    result = RegenerateResult(out=out, settings=settings)
    ident = {"version": 1, "settings": settings, "data": input_fingerprint(data)}
    if os.path.exists(out):
        rows = read_part(out, repair=False)
        if rows:
            check_same(rows[0].get("generation") or {}, {k: settings[k] for k in _SETTINGS}, out,
                        "choose another --out, or delete it to regenerate")
        for r in rows:
            result.add(r)
        result.n_resumed, result.complete = len(rows), True
        return result
    part, state = claim_part(out, ident)
    done_rows = read_part(part)
    done = {int(r["generation"]["input_row"]) for r in done_rows if isinstance(r.get("generation"), dict)
            and isinstance(r["generation"].get("input_row"), int)}
    for r in done_rows:
        result.add(r)
    result.n_resumed = len(done_rows)

    total = len(ds) if limit is None else min(len(ds), int(limit))
    bar = tqdm(total=total, desc="regenerate", unit="row", disable=not progress, initial=0)
    t0 = time.perf_counter()
    pending: list[Job] = []

    def flush(f):
        if not pending:
            return
        gens = generate_jobs(pending, target=target, client=client if url is not None else None, info=info,
                             ignore_eos=ignore_eos, sampling=sampling, batch_size=batch_size, agreement=agreement)
        for job, gen in zip(pending, gens):
            row, dropped = output_row(job, gen, settings)
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
            result.add(row)
            result.n_new += 1
            result.tokens += len(gen.tokens)
            result.n_capped += job.capped
            result.n_multi_turn += job.multi_turn
            result.dropped_keys.update(dropped)
        f.flush()
        os.fsync(f.fileno())
        bar.update(len(pending))
        result.seconds = time.perf_counter() - t0
        bar.set_postfix_str(f"{result.tokens_per_second:.0f} tok/s", refresh=False)
        pending.clear()

    try:
        with open(part, "a", encoding="utf-8") as f:
            seen = 0
            for row in ds:
                if limit is not None and seen >= int(limit):
                    break
                seen += 1
                if int(row["_row"]) in done:
                    bar.update(1)
                    continue
                job = make_job(row, max_new_tokens=max_new_tokens, info=info)
                if isinstance(job, str):
                    what = f"{row['_where']}: {SKIP_REASONS[job]}"
                    if job == "prompt_too_long":
                        what += f" ({row['n_prompt_tokens']} tokens >= {info.max_positions})"
                    if on_error == "raise":
                        raise WorkbenchError(f"{what}; cannot regenerate it [on_error='skip' / --on-error skip "
                                             "skips and counts such rows]")
                    result.skipped[job] += 1
                    result.first_skipped.setdefault(job, what)
                    bar.update(1)
                    continue
                pending.append(job)
                if len(pending) >= int(flush_every):
                    flush(f)
            flush(f)
    finally:
        bar.close()
        result.seconds = time.perf_counter() - t0
    if ds.n_skipped:
        result.skipped["bad_row"] += ds.n_skipped
        result.first_skipped.setdefault("bad_row", f"{ds.n_skipped} rows (see the warning above)")
    os.replace(part, out)                                # OUT appears only complete
    os.remove(state)
    result.complete = True
    return result


__all__ = ["regenerate", "server_client", "SERVERS", "read_part", "check_same", "claim_part", "generate_jobs", "generate_hf", "generate_reference", "generate_server", "RegenerateResult", "Job",
           "Generated", "make_job", "target_info", "TargetInfo", "eos_ids_of", "output_row", "SKIP_REASONS"]
