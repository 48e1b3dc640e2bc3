"""What a measurement assumed: drafting shape, engine, sampling, estimator, bonus token. Carried by every result.

    >>> from workbench.setting import Setting
    >>> s = Setting(steps=4, engine="sglang")
    >>> s.describe()
    'chain drafting (topk 1), K=4; greedy (temperature 0); engine sglang; estimator every-position; bonus token counted'
    >>> Setting.from_dict(s.to_dict()) == s
    True

A result answers "accept length under WHICH setting?". The fields:

- drafting shape: ``shape`` "chain" with ``steps`` = K (topk 1), or "tree" with ``steps`` (SGLang's
  ``speculative_num_steps``), ``eagle_topk`` and ``num_draft_tokens``. Today only chains are simulated;
- ``engine`` and ``engine_version``: the serving engine whose behaviour the result stands for (None:
  no engine, e.g. a wiring given by hand);
- sampling: ``temperature`` (0 = greedy), ``top_p``, ``top_k`` (None = no cut). Today greedy only;
- ``estimator``: "every-position" (every counted chain) or "decode-path" (the verify steps a server
  makes on a target-greedy sample). Results that hold per-chain tables report both; this names the
  headline one;
- ``bonus``: whether the accept length counts the bonus token (E[A]+1, SGLang/vLLM) or not (E[A]).

The coming features (trees, engine versions, sampling) add fields here instead of keyword
arguments scattered over the simulation and the results. :meth:`Setting.check_simulable` says
in one line what the simulation cannot do yet.

``SCHEMA_VERSION`` is written into every JSON result (``"schema_version"``); bump it when a JSON
result changes shape.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields, replace

from workbench.errors import WorkbenchError

SCHEMA_VERSION = 1
SHAPES = ("chain", "tree")
ESTIMATORS = ("every-position", "decode-path")


@dataclass(frozen=True)
class Setting:
    """The conditions of a measurement (module docstring). Immutable; :meth:`replace` for a variant."""

    steps: int = 4                        # chain: K drafted tokens; tree: speculative_num_steps
    shape: str = "chain"
    eagle_topk: int = 1                   # tree only (> 1)
    num_draft_tokens: int | None = None   # tree only
    engine: str | None = None
    engine_version: str | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    estimator: str = "every-position"
    bonus: bool = True

    def __post_init__(self):
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise WorkbenchError(f"setting steps={self.steps!r}: expected an integer >= 1")
        if self.shape not in SHAPES:
            raise WorkbenchError(f"setting shape={self.shape!r}: expected one of {', '.join(SHAPES)}")
        if self.shape == "chain" and (self.eagle_topk != 1 or self.num_draft_tokens not in (None, self.steps + 1)):
            raise WorkbenchError(f"a chain drafts with eagle_topk 1 and steps+1 draft tokens (got eagle_topk="
                                 f"{self.eagle_topk}, num_draft_tokens={self.num_draft_tokens}): use shape='tree'")
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
        """Raise a one-line WorkbenchError when the offline simulation cannot (yet) measure this setting."""
        if self.shape != "chain":
            raise WorkbenchError(f"{self.shape} drafting (eagle_topk {self.eagle_topk}) is not simulated yet: "
                                 f"the simulation drafts chains (topk 1)")
        if not self.greedy:
            raise WorkbenchError(f"temperature {self.temperature}: the simulation is greedy only (temperature 0)")

    def describe(self) -> str:
        """One line for summaries."""
        if self.shape == "chain":
            shape = f"chain drafting (topk 1), K={self.steps}"
        else:
            shape = (f"tree drafting, steps {self.steps}, topk {self.eagle_topk}, "
                     f"{self.num_draft_tokens} draft tokens")
        if self.greedy:
            sampling = "greedy (temperature 0)"
        else:
            sampling = f"temperature {self.temperature:g}, top_p {self.top_p:g}" + \
                ("" if self.top_k is None else f", top_k {self.top_k}")
        engine = "engine " + (self.engine or "none") + ("" if self.engine_version is None else
                                                         f" {self.engine_version}")
        bonus = "bonus token counted" if self.bonus else "bonus token not counted"
        return f"{shape}; {sampling}; {engine}; estimator {self.estimator}; {bonus}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Setting":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise WorkbenchError(f"setting: unknown key(s) {', '.join(unknown)} (expected {', '.join(sorted(known))})")
        return cls(**d)


def resolve_setting(K=None, setting: Setting | None = None) -> Setting:
    """The setting of a run given ``K`` and/or ``setting`` (default: chain K=4, greedy).

        >>> resolve_setting(3).steps, resolve_setting(None, Setting(steps=2)).steps
        (3, 2)
    """
    if setting is None:
        if K is not None and (isinstance(K, bool) or not isinstance(K, numbers.Integral) or int(K) < 1):
            raise WorkbenchError(f"steps K={K!r}: expected an integer K >= 1")
        return Setting(steps=4 if K is None else int(K))
    if K is not None and int(K) != setting.steps:
        raise WorkbenchError(f"steps K={K} differs from the setting's K={setting.steps}: give one of them")
    return setting


def chain(K: int, **kw) -> Setting:
    """Today's setting: chain drafting of depth ``K``, greedy. ``chain(4, engine="sglang")``."""
    return Setting(steps=int(K), **kw)


__all__ = ["Setting", "chain", "resolve_setting", "SCHEMA_VERSION", "SHAPES", "ESTIMATORS"]
