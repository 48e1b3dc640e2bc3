"""What a measurement assumed: drafting shape, engine, sampling, estimator, bonus token. Carried by every result.

    >>> from workbench.core.setting import Setting
    >>> s = Setting(steps=4, engine="sglang")
    >>> s.describe()
    'chain drafting (eagle_topk 1), K=4; greedy (temperature 0); engine sglang; estimator every-position; bonus token counted'
    >>> Setting.from_dict(s.to_dict()) == s
    True
    >>> t = Setting(steps=5, eagle_topk=4, num_draft_tokens=8)
    >>> t.shape, t.label, t.tree
    ('tree', 'tree 5×4 N=8', {'steps': 5, 'topk': 4, 'num_draft_tokens': 8})

A result answers "accept length under WHICH setting?". The fields:

- drafting shape: ``shape`` "chain" with ``steps`` = K (eagle_topk 1), or "tree" with ``steps`` (SGLang's
  ``speculative_num_steps``), ``eagle_topk`` and ``num_draft_tokens`` (docs/trees.md). ``eagle_topk`` > 1
  makes the shape "tree" by itself; ``shape="tree"`` with ``eagle_topk`` 1 runs the tree code on a
  chain (the same numbers as the chain: tested);
- ``engine`` and ``engine_version``: the serving engine whose behaviour the result stands for (None:
  no engine, e.g. a wiring given by hand);
- sampling: ``temperature`` (0 = greedy), ``top_p``, ``top_k`` (None = no cut). At T > 0 the decode
  path matches the drafts against the data's tokens (``workbench.simulate.sampled``; docs/sampling.md);
- ``estimator``: "every-position" (every counted chain) or "decode-path" (the verify steps a server
  makes on a target-greedy sample). Results that hold per-chain tables report both; this names the
  headline one;
- ``bonus``: whether the accept length counts the bonus token (E[A]+1, SGLang/vLLM) or not (E[A]);
- ``drafting``: None (the draft's own: parallel for a P-EAGLE checkpoint, else sequential), "sequential"
  (a chain: each step feeds the previous one's token and hidden) or "parallel" (P-EAGLE: K tokens in one
  draft pass, vLLM ``parallel_drafting``; docs/families.md).

The coming features (engine versions, sampling) add fields here instead of keyword
arguments scattered over the simulation and the results. :meth:`Setting.check_simulable` says
in one line what the simulation cannot do yet.

``SCHEMA_VERSION`` is written into every JSON result (``"schema_version"``); bump it when a JSON
result changes shape.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields, replace

from workbench.core.errors import WorkbenchError

SCHEMA_VERSION = 1
SHAPES = ("chain", "tree")
DRAFTINGS = ("sequential", "parallel")
ESTIMATORS = ("every-position", "decode-path")


@dataclass(frozen=True)
class Setting:
    """The conditions of a measurement (module docstring). Immutable; :meth:`replace` for a variant."""

    steps: int = 4                        # chain: K drafted tokens; tree: speculative_num_steps
    shape: str | None = None              # None: "tree" when eagle_topk > 1, else "chain"
    eagle_topk: int = 1                   # tree only (> 1)
    num_draft_tokens: int | None = None   # tree only
    engine: str | None = None
    engine_version: str | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    estimator: str = "every-position"
    bonus: bool = True
    drafting: str | None = None           # None: the draft's own; "parallel": P-EAGLE's one-pass K tokens (vLLM)

    def __post_init__(self):
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise WorkbenchError(f"setting steps={self.steps!r}: expected an integer >= 1")
        k = self.eagle_topk
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise WorkbenchError(f"setting eagle_topk={k!r}: expected an integer >= 1")
        if self.shape is None:
            object.__setattr__(self, "shape", "tree" if k > 1 else "chain")
        if self.shape not in SHAPES:
            raise WorkbenchError(f"setting shape={self.shape!r}: expected one of {', '.join(SHAPES)}")
        if self.shape == "chain" and (self.eagle_topk != 1 or self.num_draft_tokens not in (None, self.steps + 1)):
            raise WorkbenchError(f"a chain drafts with eagle_topk 1 and steps+1 draft tokens (got eagle_topk="
                                 f"{self.eagle_topk}, num_draft_tokens={self.num_draft_tokens}): use shape='tree'")
        if self.shape == "tree":
            N, top = self.num_draft_tokens, k + (self.steps - 1) * k * k
            if k == 1 and N is None:
                object.__setattr__(self, "num_draft_tokens", self.steps + 1)
            elif k == 1 and N != self.steps + 1:
                raise WorkbenchError(f"setting eagle_topk 1 with num_draft_tokens={N}: eagle_topk 1 verifies "
                                     f"steps + 1 = {self.steps + 1} tokens (SGLang forces it)")
            elif isinstance(N, bool) or not isinstance(N, int) or not 2 <= N <= top + 1:
                raise WorkbenchError(f"setting num_draft_tokens={N!r}: expected 2..{top + 1} for steps "
                                     f"{self.steps}, eagle_topk {k} (N-1 <= k + (S-1)*k^2 = {top})")
        if self.drafting is not None and self.drafting not in DRAFTINGS:
            raise WorkbenchError(f"setting drafting={self.drafting!r}: expected one of {', '.join(DRAFTINGS)}")
        if self.drafting == "parallel" and self.shape != "chain":
            raise WorkbenchError("parallel drafting (P-EAGLE) drafts a chain of K tokens in one pass: no engine "
                                 "serves it as a tree (SGLang does not serve P-EAGLE; vLLM drafts chains)")
        if self.estimator not in ESTIMATORS:
            raise WorkbenchError(f"setting estimator={self.estimator!r}: expected one of {', '.join(ESTIMATORS)}")
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise WorkbenchError(f"setting temperature={self.temperature!r}: expected a number >= 0")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise WorkbenchError(f"setting top_p={self.top_p!r}: expected 0 < top_p <= 1")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes) -> "Setting":
        """A copy with some fields changed (checked again)."""
        return replace(self, **changes)

    def check_simulable(self) -> None:
        """Raise a one-line WorkbenchError when the offline simulation cannot (yet) measure this setting.

        Temperature > 0 is simulated (``workbench.simulate.sampled``: the decode path on the data's tokens and the
        per-depth estimator); ``top_k`` must then be None/-1 or >= 1."""
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or (k < 1 and k != -1)):
            raise WorkbenchError(f"setting top_k={k!r}: expected None/-1 (off) or an integer >= 1")

    @property
    def tree(self) -> dict:
        """{steps, topk, num_draft_tokens}: SGLang's three flags for this shape (a chain: topk 1, steps+1)."""
        return {"steps": self.steps, "topk": self.eagle_topk,
                "num_draft_tokens": self.num_draft_tokens or self.steps + 1}

    @property
    def label(self) -> str:
        """A short name of the drafting shape for legends and tables: ``chain K=4``, ``tree 5×4 N=8``."""
        if self.shape == "chain":
            return f"{'parallel ' if self.drafting == 'parallel' else ''}chain K={self.steps}"
        return f"tree {self.steps}×{self.eagle_topk} N={self.num_draft_tokens}"

    def accept_label(self, estimator: str | None = None, *, what: str = "accept length") -> str:
        """THE name of an accept-length number, everywhere it is shown (report index, manifest, CLI, JSON,
        figure titles): the estimator (``estimator``, default the setting's), the drafting shape, the
        sampling and whether the bonus token is counted.

            >>> Setting(steps=4).accept_label("decode-path")
            'accept length (decode path, chain K=4, greedy, bonus counted)'
            >>> Setting(steps=5, eagle_topk=4, num_draft_tokens=8, bonus=False).accept_label()
            'accept length (every position, tree 5×4 N=8, greedy, bonus not counted)'
            >>> Setting(steps=3, temperature=0.7).accept_label(what="E[A]+1")
            'E[A]+1 (every position, chain K=3, temperature 0.7, bonus counted)'
        """
        est = self.estimator if estimator is None else estimator
        if est not in ESTIMATORS:
            raise WorkbenchError(f"estimator={est!r}: expected one of {', '.join(ESTIMATORS)}")
        sampling = "greedy" if self.greedy else f"temperature {self.temperature:g}"
        bonus = "bonus counted" if self.bonus else "bonus not counted"
        return f"{what} ({est.replace('-', ' ')}, {self.label}, {sampling}, {bonus})"

    def describe(self) -> str:
        """One line for summaries."""
        if self.shape == "chain" and self.drafting == "parallel":
            shape = f"parallel drafting (P-EAGLE: K={self.steps} tokens in one draft pass)"
        elif self.shape == "chain":
            shape = f"chain drafting (eagle_topk 1), K={self.steps}"
        else:
            shape = (f"tree drafting, steps {self.steps}, eagle_topk {self.eagle_topk}, "
                     f"{self.num_draft_tokens} draft tokens")
        if self.greedy:
            sampling = "greedy (temperature 0)"
        else:
            sampling = f"temperature {self.temperature:g}, top_p {self.top_p:g}" + \
                ("" if self.top_k is None else f", top_k {self.top_k}")
        engine = ("engine " + self.engine + ("" if self.engine_version is None else f" {self.engine_version}")
                  if self.engine else "no engine's own rules applied")
        bonus = "bonus token counted" if self.bonus else "bonus token not counted"
        return f"{shape}; {sampling}; {engine}; estimator {self.estimator}; {bonus}"

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["drafting"] is None:          # results and cache keys written before P-EAGLE stay as they were
            del d["drafting"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Setting":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise WorkbenchError(f"setting: unknown key(s) {', '.join(unknown)} (expected {', '.join(sorted(known))})")
        return cls(**d)


def resolve_setting(K=None, setting: Setting | None = None, *, eagle_topk: int | None = None,
                    num_draft_tokens: int | None = None) -> Setting:
    """The setting of a run given ``K`` and/or ``setting`` (default: chain K=4, greedy), and optionally
    the tree's ``eagle_topk``/``num_draft_tokens`` (``eagle_topk`` 1: a chain, N forced to K+1).

        >>> resolve_setting(3).steps, resolve_setting(None, Setting(steps=2)).steps
        (3, 2)
        >>> resolve_setting(5, eagle_topk=4, num_draft_tokens=8).label
        'tree 5×4 N=8'
    """
    if setting is None:
        if K is not None and (isinstance(K, bool) or not isinstance(K, numbers.Integral) or int(K) < 1):
            raise WorkbenchError(f"steps K={K!r}: expected an integer K >= 1")
        steps = 4 if K is None else int(K)
        if eagle_topk is None or eagle_topk == 1:
            if num_draft_tokens is not None and eagle_topk is None:
                raise WorkbenchError(f"num_draft_tokens={num_draft_tokens} without eagle_topk: give eagle_topk too "
                                     "(1 = chain, N = steps + 1)")
            return Setting(steps=steps)
        return Setting(steps=steps, eagle_topk=eagle_topk, num_draft_tokens=num_draft_tokens)
    if K is not None and int(K) != setting.steps:
        raise WorkbenchError(f"steps K={K} differs from the setting's K={setting.steps}: give one of them")
    for name, v in (("eagle_topk", eagle_topk), ("num_draft_tokens", num_draft_tokens)):
        if v is not None and v != getattr(setting, name):
            raise WorkbenchError(f"{name}={v} differs from the setting's {name}={getattr(setting, name)}: "
                                 f"give one of them")
    return setting


def chain(K: int, **kw) -> Setting:
    """Today's setting: chain drafting of depth ``K``, greedy. ``chain(4, engine="sglang")``."""
    return Setting(steps=int(K), **kw)


__all__ = ["Setting", "chain", "resolve_setting", "SCHEMA_VERSION", "SHAPES", "ESTIMATORS"]
