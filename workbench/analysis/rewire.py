"""Rewire a mis-wired EAGLE-3 draft: refit its ``fc`` so the taps the server feeds (B) stand in for the
taps it was trained on (A), optionally fine-tune briefly, export, and measure what was recovered.

    >>> import torch
    >>> from workbench.analysis.rewire import NormalEquations, fit_ridge
    >>> _ = torch.manual_seed(0)
    >>> X = torch.randn(200, 6); Y = X @ torch.randn(6, 3) + 0.5
    >>> fit, held = NormalEquations(6, 3, intercept=True), NormalEquations(6, 3, intercept=True)
    >>> fit.update(X[:150], Y[:150]); held.update(X[150:], Y[150:])
    >>> ridge = fit_ridge(fit, held)
    >>> round(ridge.r2_heldout, 6), tuple(ridge.weight.shape)     # weight is fc-shaped: [out, in]
    (1.0, (3, 6))

The draft's first operation is linear: ``h = fc(concat(taps A))``. Over the response positions
(``loss_mask`` 1) of the user's training data we capture taps A and B in ONE target pass
(:func:`workbench.capture.extract` on their union), take ``Y = fc_old(x_A)`` (the fc OUTPUT, bias
included) and ``X = x_B`` (per-tap RMSNorm'd first when the draft has ``fc_norm``), and solve the
ridge problem ``min ||X Wᵀ + b - Y||² + λ||W||²`` from streamed normal equations (XᵀX, XᵀY, sums,
accumulated batch by batch in float64: memory does not grow with the data). λ is chosen on a held-out
split of the samples (every 5th ``_row`` by default) from a grid relative to ``tr(XᵀX)/d``; the final
weight is refit on all samples. ``b`` is fitted only when the old ``fc`` has a bias (the checkpoint
format does not change).

Export: the same checkpoint format (:func:`workbench.checkpoint.save_draft`) with the config's
ids set so that vLLM (top-level key, its convention) and SGLang (``eagle_config``, its convention) both
feed taps B (:func:`config_for_taps`, checked with :mod:`workbench.engines.records`; refused when the named
engine cannot, e.g. ``embed`` for SGLang) and a
note ``"workbench": {"rewired_from": A, "trained_taps": B, "method": ...}``. Acceptance on held-out
data (:func:`workbench.acceptance.simulate`): before (old draft fed B), after (the exported checkpoint,
reloaded, fed B), reference (old draft fed A); ``recovered = (after - before) / (reference - before)``
on the accept length (E[A]+1, every counted chain).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass, field

import torch

from workbench import engines
from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json
from workbench.core.render import Rendered
from workbench.core.setting import SCHEMA_VERSION, Setting
from workbench.engines.wiring import Wiring, resolve, trained_wiring_from_config
from workbench.load import inputs
from workbench.model import capture, checkpoint
from workbench.model.draft import Eagle3Draft
from workbench.model.train import deterministic, train_on_batches
from workbench.simulate.acceptance import simulate

#: λ grid, relative to tr(XᵀX)/d (the mean feature energy): scale free.
ALPHAS = (1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
FINETUNE_PARTS = ("fc", "all")


# ─────────────────────────────── streamed ridge regression ───────────────────────────────

@dataclass
class NormalEquations:
    """Streamed sufficient statistics of a multi-output least-squares problem ``Y ≈ X W + b``.

        >>> ne = NormalEquations(2, 1)
        >>> ne.update(torch.tensor([[1., 0.], [0., 1.], [1., 1.]]), torch.tensor([[1.], [2.], [3.]]))
        >>> ne.n, [round(w, 6) for w in ne.solve(0.0)[0].flatten().tolist()]
        (3, [1.0, 2.0])

    Everything is float64 on the device of the first update. ``intercept=True`` fits ``b`` (the
    solve centres the statistics; ``b`` is not penalised).
    """

    d_in: int
    d_out: int
    intercept: bool = False
    n: int = 0
    xtx: torch.Tensor | None = field(default=None, repr=False)
    xty: torch.Tensor | None = field(default=None, repr=False)
    sx: torch.Tensor | None = field(default=None, repr=False)
    sy: torch.Tensor | None = field(default=None, repr=False)
    yty: float = 0.0                                   # Σ ||y||²

    def _init(self, device) -> None:
        f = dict(dtype=torch.float64, device=device)
        self.xtx = torch.zeros(self.d_in, self.d_in, **f)
        self.xty = torch.zeros(self.d_in, self.d_out, **f)
        self.sx = torch.zeros(self.d_in, **f)
        self.sy = torch.zeros(self.d_out, **f)

    def update(self, X: torch.Tensor, Y: torch.Tensor) -> None:
        """Add rows ``X [n, d_in]``, ``Y [n, d_out]`` (any float dtype; accumulated in float64)."""
        if X.dim() != 2 or Y.dim() != 2 or X.shape[0] != Y.shape[0] or X.shape[1] != self.d_in \
                or Y.shape[1] != self.d_out:
            raise WorkbenchError(f"normal equations: got X {list(X.shape)} and Y {list(Y.shape)}, expected "
                                 f"[n, {self.d_in}] and [n, {self.d_out}]")
        if self.xtx is None:
            self._init(X.device)
        X = X.to(device=self.xtx.device, dtype=torch.float64)
        Y = Y.to(device=self.xtx.device, dtype=torch.float64)
        self.xtx += X.T @ X
        self.xty += X.T @ Y
        self.sx += X.sum(0)
        self.sy += Y.sum(0)
        self.yty += float((Y * Y).sum())
        self.n += int(X.shape[0])

    def __add__(self, other: "NormalEquations") -> "NormalEquations":
        if (self.d_in, self.d_out, self.intercept) != (other.d_in, other.d_out, other.intercept):
            raise WorkbenchError("normal equations of different shapes cannot be merged")
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        return NormalEquations(self.d_in, self.d_out, self.intercept, self.n + other.n, self.xtx + other.xtx,
                               self.xty + other.xty, self.sx + other.sx, self.sy + other.sy, self.yty + other.yty)

    def _centred(self):
        if not self.intercept:
            return self.xtx, self.xty
        mx, my = self.sx / self.n, self.sy / self.n
        return self.xtx - self.n * torch.outer(mx, mx), self.xty - self.n * torch.outer(mx, my)

    def scale(self) -> float:
        """``tr(XᵀX)/d`` of the (centred) statistics: the unit of the relative ridge grid."""
        return float(torch.diagonal(self._centred()[0]).sum()) / self.d_in

    def solve(self, lam: float) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(W [d_in, d_out], b [d_out] or None)`` minimising ``||XW + b - Y||² + lam·||W||²``.

        Raises WorkbenchError when there are no rows or the system is singular at this ``lam``.
        """
        if self.n == 0:
            raise WorkbenchError("normal equations: no rows were accumulated (no response positions?)")
        A, B = self._centred()
        A = A + float(lam) * torch.eye(self.d_in, dtype=A.dtype, device=A.device)
        L, info = torch.linalg.cholesky_ex(A)
        if int(info) != 0:
            raise WorkbenchError(f"normal equations are singular at ridge λ={lam:g} ({self.n} rows for "
                                 f"{self.d_in} inputs): use more data or a larger λ")
        W = torch.cholesky_solve(B, L)
        b = (self.sy - self.sx @ W) / self.n if self.intercept else None
        return W, b

    def sse(self, W: torch.Tensor, b: torch.Tensor | None = None) -> float:
        """Σ ||y - (xW + b)||² over the accumulated rows, from the statistics alone."""
        W = W.to(self.xtx)
        out = self.yty - 2 * float((W * self.xty).sum()) + float((W * (self.xtx @ W)).sum())
        if b is not None:
            b = b.to(self.xtx)
            out += -2 * float(b @ self.sy) + 2 * float(b @ (W.T @ self.sx)) + self.n * float(b @ b)
        return max(out, 0.0)

    def sst(self) -> float:
        """Σ ||y - ȳ||² (total variance of Y around its mean)."""
        return max(self.yty - float(self.sy @ self.sy) / self.n, 0.0) if self.n else 0.0


@dataclass
class RidgeFit:
    """The chosen refit: ``weight [d_out, d_in]`` and ``bias`` (fc layout), λ and the held-out table."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    lam: float
    alpha: float
    grid: list[dict]                 # one {alpha, lam, heldout_mse, heldout_r2} per tried λ
    r2_heldout: float                # 1 - SSE/SST on the held-out split at the chosen λ
    n_fit: int
    n_heldout: int

    def to_dict(self) -> dict:
        return {"lam": self.lam, "alpha": self.alpha, "r2_heldout": self.r2_heldout, "n_fit": self.n_fit,
                "n_heldout": self.n_heldout, "grid": self.grid}


def fit_ridge(fit: NormalEquations, held: NormalEquations, alphas=ALPHAS) -> RidgeFit:
    """Pick λ = α·tr(XᵀX)/d on ``held`` (lowest held-out MSE), then refit on ``fit + held``.

        >>> # ridge = fit_ridge(fit_stats, heldout_stats); ridge.lam, ridge.r2_heldout
    """
    if fit.n == 0 or held.n == 0:
        raise WorkbenchError(f"ridge: need positions in both the fit and held-out splits (got {fit.n} and "
                             f"{held.n}); use more samples")
    scale = fit.scale() or 1.0
    sst = held.sst()
    grid, best = [], None
    for a in alphas:
        lam = float(a) * scale
        try:
            W, b = fit.solve(lam)
        except WorkbenchError:
            grid.append({"alpha": float(a), "lam": lam, "heldout_mse": None, "heldout_r2": None})
            continue
        sse = held.sse(W, b)
        mse = sse / (held.n * held.d_out)
        grid.append({"alpha": float(a), "lam": lam, "heldout_mse": mse,
                     "heldout_r2": 1 - sse / sst if sst > 0 else float("nan")})
        if best is None or mse < best[0]:
            best = (mse, float(a), lam, 1 - sse / sst if sst > 0 else float("nan"))
    if best is None:
        raise WorkbenchError(f"ridge: the normal equations are singular for every λ in the grid "
                             f"({fit.n} positions for {fit.d_in} inputs)")
    _, alpha, _, r2 = best
    total = fit + held
    lam = alpha * (total.scale() or 1.0)
    W, b = total.solve(lam)
    return RidgeFit(weight=W.T.contiguous(), bias=b, lam=lam, alpha=alpha, grid=grid, r2_heldout=r2,
                    n_fit=fit.n, n_heldout=held.n)


# ─────────────────────────────── the refit on real captures ───────────────────────────────

def _fc_input(draft, feats: torch.Tensor) -> torch.Tensor:
    """What ``fc`` multiplies: the concatenated taps, per-tap RMSNorm'd first when ``fc_norm`` is on."""
    x = feats.to(draft.fc.weight.dtype)
    if draft.spec.fc_norm:
        x = torch.cat([n(c) for n, c in zip(draft.fc_norm, x.chunk(3, dim=-1))], dim=-1)
    return x


def is_heldout(row: int, holdout: float) -> bool:
    """The deterministic held-out split: sample ``row`` is held out when ``row % round(1/holdout) == 0``.

        >>> [r for r in range(12) if is_heldout(r, 0.2)]
        [0, 5, 10]
    """
    return row % max(2, round(1 / holdout)) == 0


def refit_fc(target, draft, dataset, from_taps, to_taps, *, holdout: float = 0.2, alphas=ALPHAS,
             batch_size: int = 8, limit: int | None = None, progress: bool = True) -> tuple[RidgeFit, dict]:
    """Ridge-refit ``fc`` so ``fc_new(taps B) ≈ fc_old(taps A)`` over response positions; ONE target pass.

        >>> # ridge, info = refit_fc(target, draft, ds, "embed,L1,L3", "L1,L3,L4")
        >>> # ridge.weight.shape == draft.fc.weight.shape; info["r2_naive"]   # B through the old fc

    Returns the :class:`RidgeFit` and ``{"positions", "samples", "r2_naive", "seconds"}`` where
    ``r2_naive`` is the held-out R² of simply feeding B to the old ``fc`` (what the server does).
    """
    if not 0 < holdout < 1:
        raise WorkbenchError(f"holdout must be a fraction in (0, 1), got {holdout!r}")
    A, B = list(from_taps), list(to_taps)
    d_in, d_out = int(draft.fc.in_features), int(draft.fc.out_features)
    intercept = draft.fc.bias is not None
    fit, held = NormalEquations(d_in, d_out, intercept), NormalEquations(d_in, d_out, intercept)
    t0 = time.monotonic()
    n_samples = 0
    dev = draft.fc.weight.device
    with torch.no_grad():
        for batch in capture.extract(target, dataset, [",".join(A), ",".join(B)], batch_size=batch_size,
                                     limit=limit, progress=progress):
            use = (batch.loss_mask.bool() & batch.attention_mask.bool()).to(dev)
            Y = draft.project(batch.concat(A).to(dev))[use]
            X = _fc_input(draft, batch.concat(B).to(dev))[use]
            sel = torch.tensor([is_heldout(r, holdout) for r in batch.rows], device=dev)
            rows_held = sel[:, None].expand_as(use)[use]
            fit.update(X[~rows_held], Y[~rows_held])
            held.update(X[rows_held], Y[rows_held])
            n_samples += len(batch.rows)
    if fit.n + held.n == 0:
        raise WorkbenchError("refit: the data has no response positions (loss_mask is 0 everywhere)")
    ridge = fit_ridge(fit, held, alphas)
    W_old = draft.fc.weight.detach().to(torch.float64).T
    b_old = draft.fc.bias.detach().to(torch.float64) if intercept else None
    sst = held.sst()
    r2_naive = 1 - held.sse(W_old, b_old) / sst if sst > 0 else float("nan")
    return ridge, {"positions": fit.n + held.n, "samples": n_samples, "r2_naive": r2_naive,
                   "seconds": time.monotonic() - t0}


# ─────────────────────────────── config ids for an engine ───────────────────────────────

_KEY = "eagle_aux_hidden_state_layer_ids"


def config_for_taps(config: dict, engine: str, taps, target):
    """A copy of the draft ``config`` whose layer ids make both vLLM and SGLang feed exactly ``taps``,
    and what ``engine`` (the named record) then feeds.

        >>> cfg, r = config_for_taps({"eagle_config": {_KEY: [0, 3, 4]}}, "sglang", ["L1", "L3", "L4"], 8)
        >>> cfg[_KEY], cfg["eagle_config"][_KEY], r.spec        # vLLM's convention top-level, SGLang's nested
        ([2, 4, 5], [1, 3, 4], 'L1,L3,L4')

    Each engine reads its own key in its own convention (facts page, section 1): vLLM reads the
    top-level key first (id k = ``L{k-1}``), SGLang reads only ``eagle_config`` (+1, or as is after
    PR #25454 when the first id is not 1). So the top level gets vLLM's ids and ``eagle_config`` gets
    SGLang's, whatever ``engine`` is named (:func:`workbench.engines.ids_for_taps`). SGLang's ids are
    the ones both SGLang versions read alike when there are such; else those of the named SGLang
    version (current SGLang when another engine is named), with a warning; those of the other version
    when only it can. A key whose engine cannot feed ``taps`` (e.g. ``embed`` for SGLang) is removed and the Resolution warns; ``engine`` itself must
    feed them (else WorkbenchError).
    """
    taps = tuple(taps)
    e = engines.get(engine)
    cfg = json.loads(json.dumps(config))
    warnings = []
    named = e.name if e.name.startswith("sglang") else "sglang"
    other = "sglang-2026.04" if named == "sglang" else "sglang"
    s_named, s_other = engines.ids_for_taps(named, taps, target), engines.ids_for_taps(other, taps, target)
    s_ids = s_named.ids
    if not s_named.feasible and s_other.feasible:
        s_ids = s_other.ids
        warnings.append(f"eagle_config ids {s_ids} are for {other} ({s_named.reason})")
    elif s_named.feasible and s_other.feasible and s_other.ids != s_named.ids:
        if engines.taps_for_ids(named, s_other.ids, target).taps == taps:
            s_ids = s_other.ids                      # read alike by both SGLang versions
        else:
            warnings.append(f"eagle_config ids {s_ids} are for {named}; {other} needs {s_other.ids}")
    v = engines.ids_for_taps("vllm", taps, target)
    if v.feasible:
        cfg[_KEY] = list(v.ids)
    else:
        cfg.pop(_KEY, None)
        warnings.append(f"no top-level ids: {v.reason}")
    eagle = dict(cfg.get("eagle_config") or {})
    if s_ids is not None:
        eagle.update({_KEY: list(s_ids), "use_aux_hidden_state": True})
    else:
        eagle.pop(_KEY, None)
        warnings.append(f"no eagle_config ids: {s_named.reason} (SGLang would feed its default taps)")
    if eagle:
        cfg["eagle_config"] = eagle
    else:
        cfg.pop("eagle_config", None)
    r = engines.wiring_for(e, cfg, target)
    if not r.feasible or r.taps != taps:
        why = engines.ids_for_taps(e, taps, target).reason or f"its ids are not written by this export ({r.explanation})"
        raise WorkbenchError(f"{e.name} cannot be made to feed {','.join(taps)}: {why}; choose taps it can "
                             f"(see `workbench wiring`)")
    r.warnings.extend(warnings)
    return cfg, r


# ─────────────────────────────── draft surgery, fine-tune ───────────────────────────────

def with_fc(draft, weight: torch.Tensor, bias: torch.Tensor | None, config: dict):
    """A new :class:`~workbench.draft.Eagle3Draft` with ``config``, the old weights and this ``fc``."""
    p = draft.fc.weight
    new = Eagle3Draft(config, where="rewired config")
    if draft.mask_hidden is not None:            # P-EAGLE: the mask slots go through the new fc too
        new.set_mask_hidden(draft.mask_hidden)
    new.load_state_dict(draft.state_dict())
    new.drafting = draft.drafting
    new.has_embed, new.embed_source = draft.has_embed, draft.embed_source
    new.notes = list(draft.notes)
    new.to(device=p.device, dtype=p.dtype)
    with torch.no_grad():
        new.fc.weight.copy_(weight.to(new.fc.weight))
        if bias is not None:
            new.fc.bias.copy_(bias.to(new.fc.bias))
    new.eval()
    return new


def finetune(draft, target, dataset, taps, steps: int, *, part: str = "fc", K: int = 4, lr: float = 1e-3,
             batch_size: int = 8, seed: int = 0, max_seconds: float | None = None, progress: bool = True):
    """Continue training ``draft`` on ``taps`` for ``steps`` optimizer steps (training-time test, K steps).

        >>> # log = finetune(new_draft, target, ds, ["L1", "L3", "L4"], 200, part="fc", max_seconds=120)

    ``part``: "fc" (only ``fc`` learns) or "all" (the whole draft; the embedding stays frozen). Reuses
    :func:`workbench.train.train_on_batches`; the data is cycled (one target pass per epoch).
    Returns its :class:`~workbench.train.TrainLog`.
    """
    if part not in FINETUNE_PARTS:
        raise WorkbenchError(f"finetune part {part!r}: expected one of {', '.join(FINETUNE_PARTS)}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise WorkbenchError(f"finetune steps must be a positive integer, got {steps!r}")
    if not lr > 0:
        raise WorkbenchError(f"finetune lr must be positive, got {lr!r}")
    taps = list(taps)
    frozen = []
    if part == "fc":
        for name, p in draft.named_parameters():
            if not name.startswith("fc.") and p.requires_grad:
                p.requires_grad_(False)
                frozen.append(p)

    def cycle():
        while True:
            yield from capture.extract(target, dataset, taps, batch_size=batch_size, progress=False)

    deadline = time.monotonic() + max_seconds if max_seconds else None
    try:
        with deterministic(seed):
            opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=lr)
            log = train_on_batches(draft, itertools.islice(cycle(), steps), taps, K=K, optimizer=opt,
                                   deadline=deadline)
    finally:
        for p in frozen:
            p.requires_grad_(True)
    if progress:
        last = f"{log.losses[-1]:.4f}" if log.losses else "n/a"
        print(f"  fine-tune ({part}): {log.steps} steps in {log.seconds:.1f} s, last loss {last}", flush=True)
    return log


# ─────────────────────────────── the whole flow ───────────────────────────────

def recovered_share(before: float, after: float, reference: float) -> float:
    """``(after - before) / (reference - before)``; NaN when there is no gap to recover.

        >>> recovered_share(1.5, 1.875, 2.0)
        0.75
    """
    gap = reference - before
    if not (gap > 1e-9) or any(map(math.isnan, (before, after, reference))):
        return float("nan")
    return (after - before) / gap


@dataclass
class RewireResult(Rendered):
    """What :func:`rewire` did and measured. Accept lengths are E[A]+1 over every counted chain."""

    from_taps: tuple[str, ...]
    to_taps: tuple[str, ...]
    engine: str
    resolution: str                       # how the engine reads the exported config
    out: str | None
    ridge: RidgeFit
    refit_info: dict
    finetune: dict | None = None          # {"part", "steps", "seconds", "losses"} when fine-tuned
    K: int = 4
    before: object = None                 # AcceptanceResult: old draft fed B
    after: object = None                  # exported checkpoint fed B
    reference: object = None              # old draft fed A
    after_closed_form: object = None      # the closed form alone (only when fine-tuned)
    seconds: float = 0.0
    setting: Setting | None = None        # of the before/after/reference acceptance (chain K, greedy)
    draft: object = field(default=None, repr=False)   # the rewired draft itself (in memory, or loaded from out)

    def __post_init__(self):
        if self.setting is None:
            self.setting = Setting(steps=int(self.K), engine=self.engine)

    @property
    def recovered(self) -> float:
        """Share of the accept-length gap recovered by the exported draft, on the decode path (what a server
        reports; NaN without evaluation)."""
        if self.before is None:
            return float("nan")
        return recovered_share(*(_dp(r) for r in (self.before, self.after, self.reference)))

    @property
    def recovered_closed_form(self) -> float:
        """The same share for the closed-form refit alone."""
        cf = self.after_closed_form if self.after_closed_form is not None else self.after
        if self.before is None or cf is None:
            return float("nan")
        return recovered_share(*(_dp(r) for r in (self.before, cf, self.reference)))

    def to_dict(self) -> dict:
        def acc(r):
            return None if r is None else {"accept_length": r.accept_length,
                                           "decode_path_accept_length": r.decode_path["accept_length"],
                                           "conditional": [float(x) for x in r.conditional],
                                           "n_chains": r.n_chains}
        nan = lambda x: None if isinstance(x, float) and math.isnan(x) else x  # noqa: E731
        return {"schema_version": SCHEMA_VERSION, "from_taps": list(self.from_taps), "to_taps": list(self.to_taps),
                "engine": self.engine, "setting": self.setting.to_dict(),
                "resolution": self.resolution, "out": self.out, "K": self.K, "ridge": self.ridge.to_dict(),
                "refit": {k: nan(v) for k, v in self.refit_info.items()}, "finetune": self.finetune,
                "acceptance": {"before": acc(self.before), "after": acc(self.after),
                               "reference": acc(self.reference), "after_closed_form": acc(self.after_closed_form)},
                "recovered": nan(self.recovered), "recovered_closed_form": nan(self.recovered_closed_form),
                "convention": "accept_length = E[A]+1 over every counted chain (chain, greedy, bonus counted); "
                              "decode_path_accept_length = the same over the chains a server verifies; "
                              "recovered = (after - before) / (reference - before) on the decode path",
                "seconds": self.seconds}

    def to_json(self, path=None) -> dict:
        out = self.to_dict()
        if path is not None:
            write_json(path, out, indent=2)
        return out

    def table(self) -> str:
        """Before / after / reference as the markdown table the README quotes ('' without evaluation)."""
        if self.before is None:
            return ""
        A, B = ",".join(self.from_taps), ",".join(self.to_taps)
        rows = [("before (trained on `%s`, fed `%s`)" % (A, B), self.before)]
        if self.after_closed_form is not None:
            rows.append(("closed form only (fed `%s`)" % B, self.after_closed_form))
        rows += [("after (rewired checkpoint, fed `%s`)" % B, self.after), ("reference (fed `%s`)" % A, self.reference)]
        lines = [f"| K={self.K} | accept length | decode path |", "|---|---|---|"]
        lines += [f"| {name} | {r.accept_length:.3f} | {r.decode_path['accept_length']:.3f} |" for name, r in rows]
        return "\n".join(lines)

    def summary(self) -> str:
        A, B = ",".join(self.from_taps), ",".join(self.to_taps)
        r = self.ridge
        lines = [f"rewired {A} → {B} for {self.engine}: {self.resolution}",
                 f"closed form: fc refit by ridge regression (least squares with a penalty λ={r.lam:.3g} on the "
                 f"weights, α={r.alpha:g} times the features' scale, chosen on held-out positions) on "
                 f"{self.refit_info['positions']} response positions; held-out R² {r.r2_heldout:.4f} (old fc fed "
                 f"{B}: {self.refit_info['r2_naive']:.4f})"]
        if self.finetune:
            f = self.finetune
            lines.append(f"fine-tune ({f['part']}): {f['steps']} steps in {f['seconds']:.1f} s")
        if self.before is not None:
            fmt = lambda x: f"{_dp(x):.3f} (every position {x.accept_length:.3f})"  # noqa: E731
            lines += [f"{self.setting.accept_label('decode-path')}, engine {self.engine} (the every-position "
                      f"estimate beside each)",
                      f"  before    (draft trained on {A}, fed {B}): {fmt(self.before)}"]
            if self.after_closed_form is not None:
                lines.append(f"  closed form only (fed {B}):               {fmt(self.after_closed_form)}  "
                             f"{_share(self.recovered_closed_form)}")
            lines += [f"  after     (rewired checkpoint, fed {B}):     {fmt(self.after)}  "
                      f"{_share(self.recovered)}",
                      f"  reference (draft fed {A}):                 {fmt(self.reference)}"]
        if self.out:
            lines.append(f"wrote {self.out}")
        return "\n".join(lines)


def _dp(result) -> float:
    """The decode-path accept length of an acceptance result: the one estimator a rewire is judged on."""
    return float(result.decode_path["accept_length"])


def _share(x) -> str:
    """'recovered 57.0% of the gap', or why there is no share to report."""
    return "no gap to recover (before >= reference)" if x is None or x != x else f"recovered {x:.1%} of the gap"


def resolve_taps(target, draft, *, taps=None, engine=None, from_taps=None):
    """``(A, B, engine)``: the taps the draft was trained on, the taps to rewire to, the export engine.

    A: ``from_taps`` or the draft config's ``workbench.trained_taps``. B: ``taps``, else what ``engine``
    feeds this draft today. The export engine is ``engine``, else the draft's own format engine
    (:func:`workbench.engines.default_engine`: vllm for speculators drafts, specforge for EAGLE-3 ones);
    the export carries ids for vLLM and SGLang either way (:func:`config_for_taps`). Refuses when
    A == B or the widths do not match the target.
    """
    n = target.n_layers
    if int(draft.target_hidden_size) != int(target.hidden_size):
        raise WorkbenchError(f"the draft's fc expects target hidden size {draft.target_hidden_size} (input "
                             f"{draft.fc_width}) but the target has hidden size {target.hidden_size}: "
                             f"a rewire cannot change widths")
    if from_taps is not None:
        A = Wiring.parse(from_taps, n)
    else:
        A = trained_wiring_from_config(draft.config, n)
        if A is None:
            raise WorkbenchError("the draft config has no 'workbench.trained_taps': pass the taps it was trained "
                                 "on (--from-taps, e.g. embed,L1,L3)")
    if taps is None and engine is None:
        raise WorkbenchError("give the taps to rewire to (--taps L1,L3,L4) or the engine that serves the draft "
                             "(--engine sglang)")
    if taps is not None:
        B = Wiring.parse(taps, n)
    else:
        r = resolve(engine, target.config, draft.raw_config)
        if not r.feasible or not r.taps:
            raise WorkbenchError(f"{engine} cannot feed this draft as configured ({r.explanation}; "
                                 f"{'; '.join(r.warnings)}): pass --taps")
        B = Wiring.parse(r.taps, n)
    width = draft.fc_width
    capture.check_width(A.taps, target, width, where=f"the draft's fc (trained taps {A.spec})")
    capture.check_width(B.taps, target, width, where=f"the draft's fc (new taps {B.spec})")
    if A.taps == B.taps:
        raise WorkbenchError(f"taps to rewire to ({B.spec}) are the taps the draft was trained on: nothing to "
                             f"rewire (the draft already matches)")
    return A.taps, B.taps, engines.get(engine or engines.default_engine(draft.raw_config)).name


def rewire(target, draft, data, *, taps=None, engine: str | None = None, from_taps=None, eval_data=None,
           out=None, K: int = 4, finetune_steps: int = 0, finetune_part: str = "fc",
           finetune_seconds: float | None = None, lr: float = 1e-3, holdout: float = 0.2, alphas=ALPHAS,
           batch_size: int = 8, limit: int | None = None, eval_limit: int | None = None, seed: int = 0,
           device: str | None = None, dtype=None,
           trust_remote_code: bool = False, progress: bool = True) -> RewireResult:
    """Refit, (fine-tune), export and evaluate. Everything behind ``workbench rewire``.

        >>> # res = rewire("data/demo/target", "data/demo/draft-mismatched", "data/demo/train.jsonl",
        >>> #              engine="sglang", eval_data="data/demo/val.jsonl", out="out/draft-rewired")
        >>> # res.recovered                                    # share of the accept-length gap

    ``target``/``draft``/``data`` are loaded objects or paths. ``out`` None: nothing is written and
    "after" is measured on the in-memory draft.
    """
    t0 = time.monotonic()
    if not isinstance(K, int) or isinstance(K, bool) or K < 1:
        raise WorkbenchError(f"steps K must be a positive integer, got {K!r}")
    if finetune_part not in FINETUNE_PARTS:
        raise WorkbenchError(f"--finetune {finetune_part!r}: expected one of {', '.join(FINETUNE_PARTS)}")
    if not isinstance(finetune_steps, int) or finetune_steps < 0:
        raise WorkbenchError(f"finetune steps must be a non-negative integer, got {finetune_steps!r}")
    target, old, train_ds = inputs.load(target, draft, data, device=device or "cpu", dtype=dtype,
                                        trust_remote_code=trust_remote_code, progress=progress)
    A, B, export_engine = resolve_taps(target, old, taps=taps, engine=engine, from_taps=from_taps)
    cfg, res = config_for_taps(old.config, export_engine, B, target.config)
    eval_ds = inputs.dataset(eval_data, target)

    ridge, info = refit_fc(target, old, train_ds, A, B, holdout=holdout, alphas=alphas, batch_size=batch_size,
                           limit=limit, progress=progress)
    method = f"closed-form ridge refit of fc (lambda={ridge.lam:.4g}, heldout R2={ridge.r2_heldout:.4f})"
    new = with_fc(old, ridge.weight, ridge.bias, cfg)
    cf_draft = ft = None
    if finetune_steps:
        if eval_ds is not None:
            cf_draft = with_fc(old, ridge.weight, ridge.bias, cfg)
        log = finetune(new, target, train_ds, B, finetune_steps, part=finetune_part, K=K, lr=lr,
                       batch_size=batch_size, seed=seed, max_seconds=finetune_seconds, progress=progress)
        ft = {"part": finetune_part, "steps": log.steps, "seconds": log.seconds, "lr": lr,
              "stopped_early": log.stopped_early, "losses": [round(x, 5) for x in log.losses],
              "acc_per_step": log.acc_per_step}
        method += f" + {log.steps} fine-tune steps ({finetune_part}, training-time test K={K})"
    note = {"rewired_from": list(A), "trained_taps": list(B), "method": method, "engine": export_engine}
    new.config["workbench"] = dict(cfg.get("workbench") or {}, **note)
    out_path = None
    if out is not None:
        out_path = str(checkpoint.save_draft(new, out, extra_config={"workbench": new.config["workbench"]}))
        new = checkpoint.load_draft(out_path, target, device=str(old.device), dtype=old.dtype)
    result = RewireResult(from_taps=A, to_taps=B, engine=export_engine, resolution=res.explanation, out=out_path,
                          ridge=ridge, refit_info=info, finetune=ft, K=K, draft=new)
    if eval_ds is not None:
        a_spec, b_spec = Wiring(A).spec, Wiring(B).spec
        sim = dict(limit=eval_limit, batch_size=batch_size, progress=progress, acc_topk=0, seed=seed,
                   setting=result.setting)
        base = simulate(target, old, eval_ds, [b_spec, a_spec], **sim)
        result.before, result.reference = base[b_spec], base[a_spec]
        result.after = simulate(target, new, eval_ds, [b_spec], **sim)[b_spec]
        if cf_draft is not None:
            result.after_closed_form = simulate(target, cf_draft, eval_ds, [b_spec], **sim)[b_spec]
    result.seconds = time.monotonic() - t0
    return result


__all__ = ["NormalEquations", "RidgeFit", "fit_ridge", "refit_fc", "config_for_taps", "with_fc", "finetune",
           "recovered_share", "RewireResult", "resolve_taps", "rewire", "is_heldout", "ALPHAS"]
