"""The flag advisor: SGLang's (steps, eagle_topk, num_draft_tokens) swept offline from ONE target pass.

    >>> # from workbench.analysis.tune import sweep
    >>> # sw = sweep(target, draft, ds, "L1,L3,L4", cost_model="cost.json")
    >>> # sw.table.head(), sw.recommended_flags, plots.tree_sweep(sw)

What SGLang's ``scripts/playground/bench_speculative.py`` does against a live GPU server (launch,
benchmark, relaunch for every flag combination), done offline: per batch ONE target pass, then per
eagle_topk k ONE draft run at the deepest steps S_max (``tree.draft_trees``; chains through
``draft.run_chains``) and every smaller shape from it without new draft work:

- a tree with S' <= S_max steps and N verified tokens is ``TreeOutput.select(N, steps=S')``: the
  first k + (S'−1)k² scored nodes of a depth-S_max run are exactly those of a depth-S' run (slot
  choices at a depth never depend on S), then SGLang's top-(N−1) selection (tested:
  tests/test_tree.py, and here: a sweep cell equals :func:`workbench.acceptance.simulate` of that
  shape);
- a chain of K' <= K steps is the first K' tokens of the K-step chain.

Each shape's A per start is counted exactly as ``simulate`` does (the same statistics, intervals
and decode path). Speed-ups come from the one cost model (:mod:`workbench.stats.cost`): tokens per step ·
verify(1) / (S·draft(k) + verify(N)). Only a model measured on a GPU recommends flags; otherwise
the table is ranked by accept length (and says so): a fixed ratio cannot price N, and CPU timings
do not choose GPU flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench import engines
from workbench.core.devices import resolve_device
from workbench.core.errors import WorkbenchError
from workbench.core.files import jsonable, write_json
from workbench.core.render import Rendered
from workbench.core.sampling import apply_sampling
from workbench.core.setting import SCHEMA_VERSION, Setting
from workbench.engines.flags import auto_notice, target_architecture
from workbench.engines.wiring import apply_engine, as_wirings, choose_wiring
from workbench.load import inputs
from workbench.load.agreement import Agreement, warn_once
from workbench.model import capture
from workbench.model.draft import run_chains
from workbench.model.tree import draft_trees
from workbench.simulate.sampled import data_next_tokens
from workbench.simulate.tree_verify import tree_accepted_counts
from workbench.stats.cost import CostModel, as_cost_model, measure
from workbench.stats.counts import accepted_counts, batch_reply_starts
from workbench.stats.statistics import AcceptanceResult

STEPS = tuple(range(1, 9))
TOPKS = (1, 2, 4, 8)
MAX_TOKENS = 64
N_GRID = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def shapes(steps=STEPS, topks=TOPKS, max_tokens: int = MAX_TOKENS, n_grid=N_GRID) -> list[tuple[int, int, int]]:
    """The (S, k, N) grid: chains (k = 1, N = S+1) and, for k > 1, every N of ``n_grid`` up to
    ``max_tokens`` that the shape can fill (N − 1 <= k + (S−1)·k²).

        >>> len(shapes()), shapes(steps=(2,), topks=(1, 2), n_grid=(2, 4, 8))
        (210, [(2, 1, 3), (2, 2, 2), (2, 2, 4)])
    """
    out = []
    for k in topks:
        for S in steps:
            if k == 1:
                out.append((int(S), 1, int(S) + 1))
                continue
            top = k + (S - 1) * k * k
            out += [(int(S), int(k), int(N)) for N in n_grid if 2 <= N <= min(int(max_tokens), top + 1)]
    return out


@dataclass
class SweepResult(Rendered):
    """Every swept shape's acceptance (``results[(S, k, N)]``), the ranked ``table`` and the advice."""

    spec: str
    results: dict
    cost_model: CostModel | None = None
    engine: str | None = None
    notes: list = field(default_factory=list)

    @property
    def agreement(self):
        """The data's greedy agreement with the target (one target pass, shared by every shape), or None."""
        return next(iter(self.results.values())).agreement if self.results else None

    @property
    def setting(self):
        """The sampling every shape shares (the first shape's :class:`~workbench.setting.Setting`), or None."""
        return next(iter(self.results.values())).setting if self.results else None

    @property
    def ranks_by_speed(self) -> bool:
        """True when the cost model may choose flags (measured on a GPU)."""
        return self.cost_model is not None and self.cost_model.chooses_flags

    @property
    def table(self):
        """One row per shape: S, k, N, accept length with its 95% interval, decode-path accept length,
        starts counted, projected speed-up (if a cost model); ranked (``rank`` 1 = best)."""
        import pandas as pd

        rows = []
        for (S, k, N), r in self.results.items():
            iv = r.intervals(n_boot=200)
            row = {"steps": S, "eagle_topk": k, "num_draft_tokens": N, "accept_length": r.accept_length,
                   "low": iv["accept_length"][0], "high": iv["accept_length"][1],
                   "decode_path": r.decode_path["accept_length"], "n": r.n_chains}
            if self.cost_model is not None:
                row["speedup"] = self.cost_model.speedup(r.accept_length, S, k, N)
            rows.append(row)
        df = pd.DataFrame(rows)
        key = "speedup" if self.ranks_by_speed else "accept_length"
        # ties: the cheaper shape first (fewer verified tokens, fewer steps, narrower)
        df = df.sort_values([key, "num_draft_tokens", "steps", "eagle_topk"],
                            ascending=[False, True, True, True], kind="stable").reset_index(drop=True)
        df.insert(0, "rank", range(1, len(df) + 1))
        return df

    @property
    def sampling(self) -> str:
        """The sampling the numbers stand for: "greedy" or "temperature T, top_p P, top_k K" (the results' setting)."""
        st = next(iter(self.results.values())).setting if self.results else None
        if st is None or st.greedy:
            return "greedy"
        return (f"temperature {st.temperature:g}, top_p {st.top_p:g}, top_k {-1 if st.top_k is None else st.top_k} "
                f"(drafts matched against the data's tokens)")

    def best(self, n: int = 1) -> list[tuple[int, int, int]]:
        t = self.table.head(n)
        return [(int(a), int(b), int(c)) for a, b, c in zip(t["steps"], t["eagle_topk"], t["num_draft_tokens"])]

    @staticmethod
    def flags(shape) -> str:
        S, k, N = shape
        return f"--speculative-num-steps {S} --speculative-eagle-topk {k} --speculative-num-draft-tokens {N}"

    @property
    def recommended_flags(self) -> str | None:
        """SGLang flags of the best shape by projected speed-up; None unless a GPU cost model ranks them."""
        return self.flags(self.best()[0]) if self.ranks_by_speed else None

    def summary(self, max_rows: int = 12, data: bool = True) -> str:
        """The ranked shapes as text; ``data``: with the data's greedy agreement line (a page that shows it in its
        own section passes False)."""
        t = self.table
        lines = [f"flag sweep for wiring {self.spec}: {len(self.results)} shapes (steps {t['steps'].min()}.."
                 f"{t['steps'].max()}, eagle_topk {sorted(set(t['eagle_topk']))}, N <= {t['num_draft_tokens'].max()}), "
                 f"{self.sampling}, accept length = E[A]+1"]
        if self.cost_model is not None:
            lines.append(self.cost_model.describe())
        lines.append("ranked by " + ("projected speed-up" if self.ranks_by_speed else
                                     "accept length at every position (no GPU cost model: the speed-up cannot "
                                     "choose flags)") + "; path = accept length on the decode path (what a server "
                     "reports); every = at every position (teacher-forced), with its 95% interval")
        has = "speedup" in t
        lines.append(" #  steps  topk    N   path   every   95% interval  starts" + ("  speed-up" if has else ""))
        for _, r in t.head(max_rows).iterrows():
            lines.append(f"{int(r['rank']):2d}  {int(r['steps']):5d}  {int(r['eagle_topk']):4d}  "
                         f"{int(r['num_draft_tokens']):3d}  {r['decode_path']:5.3f}  {r['accept_length']:6.3f}  "
                         f"{r['low']:6.3f}–{r['high']:<6.3f}  {int(r['n']):6d}" + (f"  {r['speedup']:8.3f}" if has else ""))
        if len(t) > max_rows:
            lines.append(f"    ... {len(t) - max_rows} more shapes, lower in the ranking (not shown)")
        if self.recommended_flags:
            lines.append(f"recommended SGLang flags: {self.recommended_flags}")
        else:
            lines.append("best shapes by accept length: " + "; ".join(
                f"steps {S}, topk {k}, N {N}" for S, k, N in self.best(3)) +
                " (recommended flags need a cost model measured on the serving GPU: workbench tune "
                "--measure-cost-model cost.json --device cuda, then --cost-model cost.json)")
        a = self.agreement
        if a is not None and data:
            lines.append(a.headline(self.setting))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self, path=None) -> dict:
        out = {"schema_version": SCHEMA_VERSION, "wiring": self.spec, "engine": self.engine,
               "ranked_by": "speedup" if self.ranks_by_speed else "accept_length",
               "cost_model": None if self.cost_model is None else self.cost_model.to_dict(),
               "recommended_flags": self.recommended_flags, "best": [list(s) for s in self.best(3)],
               "table": self.table.to_dict(orient="records"), "notes": list(self.notes),
               "agreement": None if self.agreement is None else self.agreement.to_dict(self.setting),
               "convention": ("greedy (temperature 0)" if self.sampling == "greedy" else self.sampling)
                             + "; accept_length = E[A]+1 (bonus counted); every-position estimator; 95% bootstrap "
                               "over samples"}
        out = jsonable(out)
        if path is not None:
            write_json(path, out, indent=2)
        return out


def _count_shapes(draft, feats, ids, att, next_token, loss_mask, lengths, grid, max_memory=None):
    """{(S, k, N): A [B, T]} for every shape of ``grid`` from one draft run per k (module docstring)."""
    import torch


    out = {}
    dev = ids.device
    nt, lm, ln = next_token.to(dev), loss_mask.to(dev), lengths.to(dev)
    for k in sorted({k for _, k, _ in grid}):
        mine = [(S, kk, N) for S, kk, N in grid if kk == k]
        S_max = max(S for S, _, _ in mine)
        with torch.no_grad():
            if k == 1:
                toks = run_chains(draft, feats, ids, att, S_max, max_memory=max_memory).tokens
                for S, _, N in mine:
                    out[(S, 1, N)] = accepted_counts(toks[:, :, :S], nt, lm, ln, S)
                continue
            deep = draft_trees(draft, feats, ids, att, S_max, k, 2, max_memory=max_memory)
            for S, _, N in mine:
                out[(S, k, N)] = tree_accepted_counts(deep.select(N, steps=S), nt, lm, ln)
    return out


def sweep(target, draft, dataset, wiring, *, steps=STEPS, topks=TOPKS, max_tokens: int = MAX_TOKENS,
          n_grid=N_GRID, limit: int | None = None, batch_size: int = 8, progress: bool = True, cost_model=None,
          cost_ratio=None, engine: str | None = None, max_memory=None, seed: int = 0, sampling=None) -> SweepResult:
    """Acceptance of every shape of :func:`shapes` for one wiring, from one target pass (module docstring).

    ``sampling`` (a :class:`workbench.sampling.Sampling` at T > 0): every shape's drafts are matched
    against the data's next tokens (``sampled.data_next_tokens``: the decode path of SGLang's lossless
    verify, exact when the data is sampled at these settings); the settings carry the sampling.
    """
    from tqdm.auto import tqdm


    grid = shapes(steps, topks, max_tokens, n_grid)
    if not grid:
        raise WorkbenchError(f"empty sweep grid (steps {list(steps)}, eagle_topk {list(topks)}, N <= {max_tokens})")
    cm = as_cost_model(cost_model, cost_ratio)
    (w,) = as_wirings(wiring, target.n_layers)
    capture.check_width(w.taps, target, draft.fc_width, where="the draft's fc")
    k_max = max(k for _, k, _ in grid)
    if k_max > draft.draft_vocab_size:
        raise WorkbenchError(f"eagle_topk {k_max} exceeds the draft vocab ({draft.draft_vocab_size} tokens)")
    rows = inputs.rows(dataset, limit)
    if not rows:
        raise WorkbenchError("the dataset has no rows")
    settings = {s: apply_sampling(Setting(steps=s[0], eagle_topk=s[1], num_draft_tokens=s[2] if s[1] > 1 else None,
                                          engine=engine), sampling) for s in grid}
    hot = not settings[grid[0]].greedy
    parts = {s: [] for s in grid}
    ddev, ddtype = draft.device, draft.dtype
    it = capture.extract(target, rows, [w.spec], batch_size=batch_size, progress=False, max_memory=max_memory)
    bar = tqdm(total=len(rows), desc="tune", unit="sample", disable=not progress)
    gens = {int(r.get("_row", i)): r.get("generation") for i, r in enumerate(rows)}
    for batch in it:
        agr = Agreement().add(batch, [gens.get(int(r)) for r in batch.rows])    # from this pass's next_token
        starts = batch_reply_starts(batch.loss_mask, batch.lengths)       # the decode path restarts at each reply
        feats = batch.concat(w.taps).to(device=ddev, dtype=ddtype)
        counts = _count_shapes(draft, feats, batch.input_ids.to(ddev), batch.attention_mask.to(ddev),
                               data_next_tokens(batch.input_ids, batch.attention_mask) if hot else batch.next_token,
                               batch.loss_mask, batch.lengths, grid, max_memory=max_memory)
        for s, A in counts.items():
            parts[s].append(AcceptanceResult.from_counts(A, K=s[0], spec=w.spec, taps=w.taps, rows=batch.rows,
                                                         n_prompt_tokens=batch.n_prompt_tokens,
                                                         sources=batch.sources, setting=settings[s],
                                                         agreement=agr, reply_starts=starts))
        bar.update(len(batch.rows))
        del feats, counts
    bar.close()
    results = {}
    for s in grid:
        r = AcceptanceResult.concat(parts[s])
        r.seed, r.cost_model = seed, cm
        results[s] = r
    notes = []
    if cm is not None and cm.indicative:
        notes.append("the cost model was measured on a CPU: its speed-ups are indicative only")
    return SweepResult(spec=w.spec, results=results, cost_model=cm, engine=engine, notes=notes)


def tune(target, draft, data, *, wiring=None, engine=None, device="cpu", dtype=None, limit=None, batch_size=8,
         cost_model=None, cost_ratio=None, progress=True, trust_remote_code=False, max_memory=None, sampling=None,
         **grid) -> tuple[SweepResult, str]:
    """Everything behind ``workbench tune``: load, pick the wiring, :func:`sweep`. Returns (sweep, wiring note).

    ``engine``: what that engine feeds and computes (``wiring.apply_engine``: taps, Eagle-3.1 options,
    rotary offset, so the trees run at the engine's rotary positions); ``wiring`` overrides the taps.
    """

    cm = as_cost_model(cost_model, cost_ratio)                   # a bad file fails before loading models
    tgt, d, ds = inputs.load(target, draft, data, device=resolve_device(device), dtype=dtype,
                             trust_remote_code=trust_remote_code, progress=progress)
    if engine is not None:
        w, note = apply_engine(tgt, d, engine, wiring)
        engine = engines.get(engine).name
    else:
        w, note = choose_wiring(tgt, d, wiring)
    sw = sweep(tgt, d, ds, w, limit=limit, batch_size=batch_size, progress=progress, cost_model=cm, engine=engine,
               max_memory=max_memory, sampling=sampling, **grid)
    if engine:
        n = auto_notice(engine, target_architecture(tgt))
        if n:
            sw.notes.append(n.split("; simulated here")[0])
    warn_once(sw.agreement, sw.setting)              # once per run, in plain words (workbench.load.agreement)
    return sw, note


def measure_cost_model(target, draft, out, *, device="cpu", dtype=None, trust_remote_code=False, progress=True,
                       **probes) -> CostModel:
    """``workbench tune --measure-cost-model out.json``: load target and draft, :func:`workbench.cost.measure`,
    write the JSON."""

    tgt, d, _ = inputs.load(target, draft, device=resolve_device(device), dtype=dtype,
                            trust_remote_code=trust_remote_code, progress=progress)
    cm = measure(tgt, d, progress=progress, **probes)
    cm.target, cm.draft = str(target), str(draft)
    cm.save(out)
    return cm


def best_by_accept_length(sw: SweepResult, n: int = 3) -> list[tuple[int, int, int]]:
    """The ``n`` shapes with the highest accept length (the advice without a GPU cost model)."""
    t = sw.table.sort_values(["accept_length", "num_draft_tokens"], ascending=[False, True], kind="stable")
    return [(int(a), int(b), int(c)) for a, b, c in zip(t["steps"], t["eagle_topk"], t["num_draft_tokens"])][:n]


__all__ = ["shapes", "sweep", "tune", "SweepResult", "measure_cost_model", "best_by_accept_length", "STEPS",
           "TOPKS", "MAX_TOKENS", "N_GRID"]
