"""Scale out with torchrun: deterministic shards of the samples, resumable per-rank results, exact merge.

    $ torchrun --standalone --nproc-per-node 2 -m workbench accept --target data/demo/target \\
        --draft data/demo/draft-aligned --data data/demo/val.jsonl --json acc.json

    >>> from workbench.simulate.distributed import shard_plan
    >>> shard_plan([5, 3, 9, 3, 7], batch_size=2, world_size=2)      # sample lengths -> indices per rank
    [[1, 3, 2], [0, 4]]

**Sharding rule.** The samples (after ``limit``) are sorted by token length (stable, capped at the
target's max positions) and cut into batches of ``batch_size``: exactly the batches a single process
builds in :func:`workbench.capture.extract`. Batch j goes to rank ``j % world_size``. Every rank thus
runs the very batches a single process would run (same padding, same numerics), and round-robin over
length-sorted batches balances the tokens per rank to within one batch.

**Merge.** Each rank's result is its per-chain table (:class:`~workbench.statistics.AcceptanceResult`,
sample ids = GLOBAL dataset rows); rank 0 gathers the tables over a gloo group, concatenates them and
restores the single-process order, so every statistic, the JSON and the per-chain file are those of
one process (the measured cost ratio is the mean of the ranks' ratios: timings are the one thing
that differs).

**Resume.** With ``out_dir``, each rank writes ``rank-R-of-W.npz`` atomically (no pickle) with a key
of target, draft, its rows, wirings, K, limit, batch size, device and dtype; a re-run whose key
matches loads the file instead of recomputing. ``WORKBENCH_FAIL_RANK=r`` makes rank r stop before
its shard (fault injection for the resume test).
"""

from __future__ import annotations

import datetime
import hashlib
import io
import itertools
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbench.core.devices import resolve_device
from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write
from workbench.core.setting import Setting
from workbench.load import inputs
from workbench.simulate.sampled import PerDepth
from workbench.stats.cost import CostModel
from workbench.stats.statistics import CHAIN_COLUMNS, SAMPLE_COLUMNS, AcceptanceResult

SHARD_VERSION = 3     # 3: the per-sample greedy-agreement columns (workbench.load.agreement)
FAIL_ENV = "WORKBENCH_FAIL_RANK"
TIMEOUT_ENV = "WORKBENCH_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 6 * 3600      # ranks wait at the gather for the slowest shard


# --------------------------------------------------------------------------------------------------
# torchrun detection and the process group
# --------------------------------------------------------------------------------------------------

def torchrun_env(environ=None) -> dict | None:
    """``{rank, world_size, local_rank, local_world_size}`` from torchrun's variables, or None.

        >>> torchrun_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})["rank"]
        1
        >>> torchrun_env({}) is None
        True
    """
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" not in env and "RANK" not in env:
        return None
    out = {}
    for key, var, default in (("world_size", "WORLD_SIZE", None), ("rank", "RANK", None),
                              ("local_rank", "LOCAL_RANK", "0"), ("local_world_size", "LOCAL_WORLD_SIZE", None)):
        raw = env.get(var, default)
        if raw is None and key == "local_world_size":
            raw = env.get("WORLD_SIZE")
        if raw is None:
            raise WorkbenchError(f"environment variable {var} is missing (torchrun sets RANK and WORLD_SIZE "
                                 f"together; launch with torchrun or unset both)")
        try:
            out[key] = int(raw)
        except ValueError:
            raise WorkbenchError(f"environment variable {var}={raw!r}: expected an integer") from None
    if out["world_size"] < 1 or not 0 <= out["rank"] < out["world_size"]:
        raise WorkbenchError(f"RANK={out['rank']} WORLD_SIZE={out['world_size']}: expected 0 <= RANK < WORLD_SIZE")
    return out


def rank_device(device: str | None, local_rank: int, *, cuda_available: bool | None = None) -> str:
    """The device of one rank: "auto"/"cuda" → ``cuda:LOCAL_RANK`` when CUDA is present; else as given.

        >>> rank_device("cuda", 3, cuda_available=True), rank_device("auto", 3, cuda_available=False)
        ('cuda:3', 'cpu')
    """
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if device in (None, "auto", "cuda"):
        if cuda_available:
            return f"cuda:{int(local_rank)}"
        if device == "cuda":
            raise WorkbenchError("device 'cuda' requested but CUDA is not available (use --device cpu)")
        return "cpu"
    return resolve_device(device)


@dataclass
class Context:
    """Where this process stands: rank, world size, its device and (when W > 1) the process group.

        >>> ctx = Context()            # a single process: rank 0 of 1
        >>> ctx.is_main, ctx.gather("x")
        (True, ['x'])
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: str = "cpu"
    backend: str | None = None                 # "gloo" (CPU) or "nccl" (CUDA) when a group is up
    _group: object = field(default=None, repr=False)   # gloo group for objects (also under nccl)
    _owned: bool = field(default=False, repr=False)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier(group=self._group)

    def gather(self, obj) -> list | None:
        """Every rank's ``obj`` as a list on rank 0 (rank order); None on the other ranks."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0, group=self._group)
        return out

    def all_gather(self, obj) -> list:
        """Every rank's ``obj`` as a list (rank order) on every rank."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self._group)
        return out

    def log(self, msg: str) -> None:
        prefix = f"[rank {self.rank}/{self.world_size}] " if self.distributed else ""
        print(prefix + msg, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._owned:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._owned = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def init(device: str | None = "cpu", *, device_map=None, timeout_s: float | None = None) -> Context:
    """A :class:`Context` for this process; under torchrun, joins the process group (use as ``with``).

        >>> with init("cpu") as ctx:                # outside torchrun: rank 0 of 1, no group
        ...     ctx.world_size, ctx.device
        (1, 'cpu')

    Backend chosen automatically: nccl when the rank's device is CUDA, gloo on CPU; results always
    travel over a gloo group (CPU objects). ``device`` "auto"/"cuda" becomes ``cuda:LOCAL_RANK``.
    With ``device_map`` (e.g. "auto": one target spread over all visible GPUs) run one process per
    node. The collective timeout is ``timeout_s`` (default ${WORKBENCH_DIST_TIMEOUT_S} or 6 h).
    """
    import torch

    env = torchrun_env()
    if env is None:
        env = {"rank": 0, "world_size": 1, "local_rank": 0, "local_world_size": 1}
    if device_map is not None:
        if env["local_world_size"] > 1:
            raise WorkbenchError(f"--device-map {device_map} spreads one target over every visible GPU, but this node "
                                 f"runs {env['local_world_size']} processes: use torchrun --nproc-per-node 1 "
                                 f"(one process per node) with --nnodes for more nodes")
        dev = "cuda:0" if torch.cuda.is_available() else "cpu"
    else:
        dev = rank_device(device, env["local_rank"])
    ctx = Context(rank=env["rank"], world_size=env["world_size"], local_rank=env["local_rank"],
                  local_world_size=env["local_world_size"], device=dev)
    if dev.startswith("cuda"):
        torch.cuda.set_device(torch.device(dev))
    if not ctx.distributed:
        return ctx
    import torch.distributed as dist

    if timeout_s is None:
        raw = os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
        try:
            timeout_s = float(raw)
        except ValueError:
            raise WorkbenchError(f"environment variable {TIMEOUT_ENV}={raw!r}: expected seconds") from None
    timeout = datetime.timedelta(seconds=float(timeout_s))
    ctx.backend = "nccl" if dev.startswith("cuda") else "gloo"
    if dist.is_initialized():                    # the caller's group (a notebook, a test harness)
        ctx.backend = dist.get_backend()
    else:
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in os.environ:
                raise WorkbenchError(f"environment variable {var} is missing: launch with torchrun "
                                     f"(e.g. torchrun --standalone --nproc-per-node 2 -m workbench ...)")
        extra = {"device_id": torch.device(dev)} if ctx.backend == "nccl" else {}
        dist.init_process_group(ctx.backend, init_method="env://", rank=ctx.rank, world_size=ctx.world_size,
                                timeout=timeout, **extra)
        ctx._owned = True
    ctx._group = dist.new_group(backend="gloo", timeout=timeout) if ctx.backend != "gloo" else None
    return ctx


# --------------------------------------------------------------------------------------------------
# The sharding rule
# --------------------------------------------------------------------------------------------------

def shard_plan(lengths, batch_size: int, world_size: int, max_positions: int | None = None) -> list[list[int]]:
    """Sample indices for each rank: length-sorted batches (as ``capture.extract``), batch j → rank j % W.

    Each rank's list is in plan order (its batches one after another), so ``extract`` on those rows
    rebuilds exactly the same batches.
    """
    if int(batch_size) < 1:
        raise WorkbenchError(f"batch_size must be >= 1, got {batch_size}")
    if int(world_size) < 1:
        raise WorkbenchError(f"world_size must be >= 1, got {world_size}")
    cap = (lambda n: min(n, int(max_positions))) if max_positions else (lambda n: n)
    lengths = [cap(int(n)) for n in lengths]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out = [[] for _ in range(int(world_size))]
    for j, start in enumerate(range(0, len(order), int(batch_size))):
        out[j % int(world_size)].extend(order[start:start + int(batch_size)])
    return out


def global_rows(dataset, limit: int | None = None) -> list[dict]:
    """The rows a single process would use (first ``limit``), each with its GLOBAL ``_row``."""
    rows = inputs.rows(dataset, limit)
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise WorkbenchError(f"row {i}: expected a dict with input_ids, got {type(r).__name__}")
        if "_row" not in r:
            r = dict(r, _row=i)
        out.append(r)
    return out


def shard_rows(rows: list[dict], rank: int, world_size: int, batch_size: int,
               max_positions: int | None = None) -> list[dict]:
    """The rows of ``rank`` under :func:`shard_plan` (input_ids lengths), in plan order."""
    lengths = []
    for i, r in enumerate(rows):
        ids = r.get("input_ids")
        if not hasattr(ids, "__len__"):
            raise WorkbenchError(f"{r.get('_where', f'row {i}')}: input_ids must be a list of ints")
        lengths.append(len(ids))
    return [rows[i] for i in shard_plan(lengths, batch_size, world_size, max_positions)[int(rank)]]


# --------------------------------------------------------------------------------------------------
# Shard files: the per-chain tables of several wirings, npz without pickle
# --------------------------------------------------------------------------------------------------



def encode_results(results: dict, key: dict | None = None) -> bytes:
    """``{spec: AcceptanceResult}`` (+ a JSON-able key) → npz bytes (sources as codes; no pickle)."""
    arrays, meta = {}, {"version": SHARD_VERSION, "key": key or {}, "results": []}
    for i, (spec, r) in enumerate(results.items()):
        names = sorted(set(map(str, r.chains["source"].tolist())) | set(map(str, r.samples["source"].tolist())))
        code = {n: c for c, n in enumerate(names)}
        for prefix, table, cols in (("c", r.chains, CHAIN_COLUMNS), ("s", r.samples, SAMPLE_COLUMNS)):
            for col in cols:
                v = table[col]
                if col == "source":
                    v = np.asarray([code[str(s)] for s in v.tolist()], np.int32)
                arrays[f"{i}.{prefix}.{col}"] = np.asarray(v)
        if r.per_depth is not None:                  # T > 0: the per-depth table (workbench.simulate.sampled)
            for col, v in r.per_depth.chains.items():
                arrays[f"{i}.pd.{col}"] = np.asarray(v)
        meta["results"].append({"key": spec, "spec": r.spec, "taps": list(r.taps), "steps": int(r.steps),
                                "cost_ratio": r.cost_ratio, "seed": int(r.seed), "sources": names,
                                "setting": r.setting.to_dict(),
                                "cost_model": None if r.cost_model is None else r.cost_model.to_dict()})
    arrays["meta"] = np.asarray(json.dumps(meta))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def decode_results(data: bytes) -> tuple[dict, dict]:
    """Inverse of :func:`encode_results`: ``({spec: AcceptanceResult}, key)``."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        if meta.get("version") != SHARD_VERSION:
            raise ValueError(f"shard version {meta.get('version')!r}, expected {SHARD_VERSION}")
        out = {}
        for i, m in enumerate(meta["results"]):
            names = np.asarray(m["sources"] + [""], dtype=object)
            tables = []
            for prefix, cols in (("c", CHAIN_COLUMNS), ("s", SAMPLE_COLUMNS)):
                t = {c: z[f"{i}.{prefix}.{c}"] for c in cols}
                t["source"] = names[t["source"]] if len(t["source"]) else np.zeros(0, dtype=object)
                tables.append(t)
            out[m["key"]] = AcceptanceResult(spec=m["spec"], taps=tuple(m["taps"]), steps=m["steps"],
                                             chains=tables[0], samples=tables[1], cost_ratio=m["cost_ratio"],
                                             seed=m["seed"], setting=Setting.from_dict(m["setting"]),
                                             cost_model=CostModel.from_dict(m["cost_model"]) if m.get("cost_model")
                                             else None)
            if f"{i}.pd.s" in z.files:

                out[m["key"]].per_depth = PerDepth(steps=m["steps"], chains={c: z[f"{i}.pd.{c}"] for c in
                                                                             ("sample", "t", "matched", "on_path", "s")},
                                                   seed=m["seed"])
    return out, meta["key"]


def shard_path(out_dir, rank: int, world_size: int, name: str | None = None) -> Path:
    """``<out_dir>/rank-R-of-W.npz`` (``<out_dir>/<name>.rank-R-of-W.npz`` with a ``name``)."""
    return Path(out_dir) / f"{name + '.' if name else ''}rank-{int(rank)}-of-{int(world_size)}.npz"


def save_shard(path, results: dict, key: dict) -> None:
    """Write one rank's results atomically (a crash leaves no half file)."""
    data = encode_results(results, key)
    with atomic_write(path, "wb") as f:
        f.write(data)


def load_shard(path, key: dict) -> tuple[dict | None, str]:
    """``(results, "reused")`` when ``path`` holds results for exactly ``key``; else ``(None, why)``."""
    path = Path(path)
    if not path.is_file():
        return None, "no shard file"
    try:
        results, got = decode_results(path.read_bytes())
    except Exception as e:                      # a foreign or damaged file is recomputed, never trusted
        return None, f"unreadable shard file ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if got != key:
        diff = sorted(k for k in set(key) | set(got) if key.get(k) != got.get(k))
        return None, f"stale shard file (differs in {', '.join(diff)})"
    return results, "reused"


# --------------------------------------------------------------------------------------------------
# Fingerprints
# --------------------------------------------------------------------------------------------------

PATH_KEYS = ("_name_or_path", "name_or_path")   # where a model was loaded from: never a result's input


def config_for_key(config):
    """``config`` without the keys that say where it was loaded from (:data:`PATH_KEYS`, at any depth), so a key does
    not change with the path or the working directory (notebooks/ opens data/demo/target as ../data/demo/target).

        >>> config_for_key({"_name_or_path": "../data/demo/target", "text_config": {"_name_or_path": "x", "n": 2}})
        {'text_config': {'n': 2}}
    """
    if isinstance(config, dict):
        return {k: config_for_key(v) for k, v in config.items() if k not in PATH_KEYS}
    if isinstance(config, list):
        return [config_for_key(v) for v in config]
    return config


def module_fingerprint(module, config=None) -> str:
    """A hash of a torch module: its config (:func:`config_for_key`: no load path), and every parameter's and
    buffer's name, shape, dtype and whole bytes (blake2b: about 1 GB/s), so two modules that differ in any value,
    however far into a tensor, never share it."""
    import torch

    h = hashlib.blake2b(json.dumps(config_for_key(config), sort_keys=True, default=str).encode(), digest_size=16)
    with torch.no_grad():
        for name, p in itertools.chain(module.named_parameters(), module.named_buffers()):
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
            t = p.detach().cpu().contiguous()
            if t.numel():
                h.update(t.reshape(-1).view(torch.uint8).numpy())          # the bytes in place: no copy
    return h.hexdigest()[:16]


def rows_fingerprint(rows: list[dict]) -> str:
    """Hash of the rows' ids, tokens, masks, prompt lengths and sources."""
    h = hashlib.sha256()
    for r in rows:
        ids, lm = r.get("input_ids"), r.get("loss_mask")
        h.update(json.dumps([int(r["_row"]), list(map(int, ids)), None if lm is None else list(map(int, lm)),
                             int(r.get("n_prompt_tokens", 0) or 0), str(r.get("source", "") or "")],
                            separators=(",", ":")).encode() + b"\n")
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# The mechanism: shard, compute or reuse, gather, merge
# --------------------------------------------------------------------------------------------------

def _reorder(r, position: dict):
    """``r`` with samples in global plan order and chains by (plan position of sample, t)."""
    big = len(position)
    pos = lambda s: np.asarray([position.get(int(x), big + int(x)) for x in s], np.int64)  # noqa: E731
    so = np.argsort(pos(r.samples["sample"]), kind="stable")
    co = np.lexsort((r.chains["t"], pos(r.chains["sample"]))) if len(r.chains["t"]) else np.zeros(0, np.int64)
    return AcceptanceResult(spec=r.spec, taps=r.taps, steps=r.steps, chains={k: v[co] for k, v in r.chains.items()},
                            samples={k: v[so] for k, v in r.samples.items()}, cost_ratio=r.cost_ratio, seed=r.seed,
                            setting=r.setting, cost_model=r.cost_model, per_depth=r.per_depth)


def gather_results(parts: list[dict], order: list[int] | None = None) -> dict:
    """Exact merge of the ranks' ``{spec: AcceptanceResult}`` (disjoint samples) into one dict.

        >>> from workbench.stats.statistics import AcceptanceResult as R
        >>> a = {"L1": R.from_arrays("L1", 2, sample=[2], t=[0], accepted=[1])}
        >>> b = {"L1": R.from_arrays("L1", 2, sample=[0, 0], t=[1, 0], accepted=[2, 0])}
        >>> m = gather_results([a, b])["L1"]
        >>> m.chains["sample"].tolist(), m.chains["t"].tolist(), m.histogram.tolist()
        ([0, 0, 2], [0, 1, 0], [1, 1, 1])

    ``order``: global row ids in single-process order (default: ascending row id); samples and
    chains are put back in that order, so even the per-chain file equals a single process's.
    """
    parts = [p for p in parts if p is not None]
    if not parts:
        raise WorkbenchError("nothing to merge: no rank returned results")
    specs = list(parts[0])
    for i, p in enumerate(parts[1:], 1):
        if list(p) != specs:
            raise WorkbenchError(f"rank {i} returned wirings {list(p)}: expected {specs} (all ranks must "
                                 f"evaluate the same wirings)")
    if order is None:
        order = sorted({int(s) for p in parts for r in p.values() for s in r.samples["sample"].tolist()})
    position = {int(s): i for i, s in enumerate(order)}
    return {spec: _reorder(AcceptanceResult.concat([p[spec] for p in parts]), position) for spec in specs}


def default_shard_dir(output) -> Path | None:
    """``<output>.shards`` next to the result file (None without one)."""
    return None if not output else Path(os.fspath(output) + ".shards")


def sharded(rows: list[dict], fn, *, ctx: Context | None = None, batch_size: int, key: dict | None = None,
            out_dir=None, name: str | None = None, max_positions: int | None = None,
            everywhere: bool = False) -> dict | None:
    """Run ``fn(shard_rows) -> {spec: AcceptanceResult}`` on this rank's shard; merged dict on rank 0.

        >>> # res = sharded(rows, lambda rs: simulate(target, draft, rs, wirings, K=4, batch_size=8),
        >>> #               ctx=ctx, batch_size=8, key={...}, out_dir="acc.json.shards")

    ``rows`` are ALL the rows (global ``_row`` ids); each rank keeps its shard (:func:`shard_plan`),
    reuses ``out_dir/rank-R-of-W.npz`` when its key matches (else computes and writes it atomically),
    then rank 0 gathers every shard and merges them exactly. Other ranks return None, unless
    ``everywhere`` (every rank gets the merged dict: for a later stage that depends on it).
    ``name`` tells the shard files of several stages apart. ``fn`` must accept an empty list (a rank
    with no batch) and return the same wirings.
    """
    ctx = ctx or Context()
    mine = shard_rows(rows, ctx.rank, ctx.world_size, batch_size, max_positions)
    path = shard_path(out_dir, ctx.rank, ctx.world_size, name) if out_dir is not None else None
    full_key = None if path is None else dict(key or {}, version=SHARD_VERSION, rank=ctx.rank,
                                              world_size=ctx.world_size, batch_size=int(batch_size),
                                              rows=rows_fingerprint(mine), n_rows=len(mine))
    results, why = load_shard(path, full_key) if path is not None else (None, "")
    if results is not None:
        ctx.log(f"reused {path} ({len(mine)} samples)")
    else:
        fail = os.environ.get(FAIL_ENV)
        if fail is not None and fail.strip() == str(ctx.rank):
            ctx.log(f"{FAIL_ENV}={fail}: stopping before computing this shard (fault injection)")
            ctx.barrier()                          # the other ranks have written their shards
            raise SystemExit(3)
        if path is not None and why != "no shard file":
            ctx.log(f"{path}: {why}; recomputing")
        results = fn(mine)
        if path is not None:
            save_shard(path, results, full_key)
            ctx.log(f"wrote {path} ({len(mine)} samples)")
        if fail is not None:
            ctx.barrier()
    try:
        payload = encode_results(results) if ctx.distributed else results
        parts = ctx.all_gather(payload) if everywhere else ctx.gather(payload)
    except RuntimeError as e:                   # a peer died (gloo/nccl): say so in one line
        kept = f"finished shards are kept in {out_dir}: re-run to resume" if out_dir is not None else \
            "no --shard-dir, nothing kept"
        raise WorkbenchError(f"rank {ctx.rank}: lost the other ranks while gathering results "
                             f"({str(e).splitlines()[0][:120]}); {kept}") from None
    if parts is None:
        return None
    parts = [decode_results(p)[0] if isinstance(p, bytes) else p for p in parts]
    single = shard_plan([len(r["input_ids"]) for r in rows], batch_size, 1, max_positions)[0]
    return gather_results(parts, [int(rows[i]["_row"]) for i in single])   # single-process order


__all__ = ["Context", "init", "torchrun_env", "rank_device", "shard_plan", "shard_rows", "global_rows",
           "encode_results", "decode_results", "save_shard", "load_shard", "shard_path", "module_fingerprint",
           "config_for_key",
           "rows_fingerprint", "gather_results", "default_shard_dir", "sharded"]
