"""Greedy agreement: how far the data's responses are from the target's own greedy output.

    >>> import torch
    >>> from workbench.load.agreement import Agreement
    >>> x = torch.tensor([[1, 2, 3, 4, 5]])               # input ids x_0..x_4
    >>> g = torch.tensor([[9, 3, 3, 5, 0]])               # next_token: g_{p+1} at p
    >>> m = torch.tensor([[0, 0, 1, 1, 1]])               # response = x_2, x_3, x_4
    >>> a = Agreement.from_tensors(x, g, m, rows=[7], sources=["chat"])
    >>> a.n_match.tolist(), a.n_tokens.tolist(), a.share   # x_2 == g_2 and x_4 == g_4, x_3 != g_3
    ([2], [3], 0.6666666666666666)
    >>> a.by_source()["chat"]["share"]
    0.6666666666666666

The **greedy agreement** of a sample is the share of its response tokens (``loss_mask == 1``,
position j >= 1) where ``x_j == g_j``, the target's argmax given ``x_0..x_{j-1}``. It comes from
the one teacher-forced target pass the estimators already make (``capture.Batch.next_token``,
``g_j = next_token[j-1]``): no extra forward. Per source it is pooled over tokens.

Why it matters: the decode-path estimator, the exact-loop equality and the live comparison assume
each response is the target's greedy output (agreement 1). Below :data:`THRESHOLD` (0.98) the
every-position estimator measures teacher-forced acceptance on *this* data, and the decode path
is only an approximation of what a server sees; :meth:`Agreement.check` says so once, in plain
words, and points at ``workbench regenerate``. Data sampled at a temperature > 0 (its per-row
``generation`` key says so) is judged by those recorded settings, not by agreement: a sample of
the target is *expected* to disagree with its argmax.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.load import inputs
from workbench.model import capture

THRESHOLD = 0.98


class AgreementWarning(UserWarning):
    """Greedy decoding was asked for, but the data's responses are not the target's greedy output."""


def greedy_matches(input_ids, next_token, loss_mask, attention_mask=None):
    """Per sample ``(n_match, n_tokens)`` as int64 tensors ``[B]`` (the fast path, vectorised).

        >>> import torch
        >>> n, d = greedy_matches(torch.tensor([[4, 5, 6]]), torch.tensor([[5, 0, 0]]), torch.tensor([[0, 1, 1]]))
        >>> n.tolist(), d.tolist()
        ([1], [2])

    Position j (>= 1) counts when ``loss_mask[j] == 1`` (and ``attention_mask[j] == 1`` when given);
    it matches when ``input_ids[j] == next_token[j-1]``.
    """
    import torch

    x, g, m = (torch.as_tensor(t) for t in (input_ids, next_token, loss_mask))
    if x.dim() != 2 or g.shape != x.shape or m.shape != x.shape:
        raise WorkbenchError(f"greedy agreement: input_ids {tuple(x.shape)}, next_token {tuple(g.shape)} and "
                             f"loss_mask {tuple(m.shape)} must all be [B, T]")
    counted = m[:, 1:].bool()
    if attention_mask is not None:
        counted &= torch.as_tensor(attention_mask)[:, 1:].to(counted.device).bool()
    hit = (x[:, 1:] == g[:, :-1].to(x.device)) & counted.to(x.device)
    return hit.sum(1).long().cpu(), counted.sum(1).long().cpu()


def greedy_matches_reference(input_ids: list[int], next_token: list[int], loss_mask: list[int]) -> tuple[int, int]:
    """One sample, a plain loop over positions: the exact reference :func:`greedy_matches` is tested against.

        >>> greedy_matches_reference([4, 5, 6], [5, 0, 0], [0, 1, 1])
        (1, 2)
    """
    n = d = 0
    for j in range(1, len(input_ids)):
        if loss_mask[j]:
            d += 1
            n += int(input_ids[j] == next_token[j - 1])
    return n, d


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def generation_settings(generation) -> tuple[float, float, int] | None:
    """``(temperature, top_p, top_k)`` a row's ``generation`` key records (top_p 1 and top_k -1 when
    absent: off), or None when it records no temperature.

        >>> generation_settings({"by": "target", "temperature": 0.7, "top_k": 20}), generation_settings({"by": "human"})
        ((0.7, 1.0, 20), None)
    """
    if not isinstance(generation, dict) or not _number(generation.get("temperature")):
        return None
    p, k = generation.get("top_p"), generation.get("top_k")
    return (float(generation["temperature"]), float(p) if _number(p) else 1.0,
            int(k) if _number(k) and int(k) == k else -1)


def _sampled(settings) -> bool:
    return settings is not None and settings[0] >= 1e-6 and settings[2] != 1


def is_sampled(generation) -> bool:
    """True when a row's recorded ``generation`` says it was sampled (temperature > 0, top_k != 1).

        >>> is_sampled({"by": "target", "temperature": 0.7}), is_sampled({"by": "target", "temperature": 0}), is_sampled(None)
        (True, False, False)
    """
    return _sampled(generation_settings(generation))


def sampling_label(settings) -> str:
    """``T=0.7 top_p=0.95 top_k=20`` for ``(0.7, 0.95, 20)`` (the cuts only when on).

        >>> sampling_label((0.7, 1.0, -1)), sampling_label((1.0, 0.95, 20))
        ('T=0.7', 'T=1 top_p=0.95 top_k=20')
    """
    t, p, k = settings
    return f"T={t:g}" + (f" top_p={p:g}" if p < 1 else "") + (f" top_k={k}" if k not in (-1, None) else "")


def _setting_triple(setting) -> tuple[float, float, int]:
    """A :class:`workbench.setting.Setting`'s (temperature, top_p, top_k), top_k -1 when off."""
    k = getattr(setting, "top_k", None)
    return (float(setting.temperature), float(setting.top_p), -1 if k is None else int(k))


def sampling_note(groups: dict, n_samples: int, setting=None) -> str | None:
    """What the data's *recorded* sampling means for a run of ``setting`` (greedy when None), or None.

        >>> print(sampling_note({(0.7, 1.0, -1): 20}, 20))
        all 20 samples were sampled by their writer at T=0.7 (their 'generation' key), not decoded greedily: they are judged by those settings, not by greedy agreement. This run asks for greedy decoding, so its estimates are teacher-forced acceptance on sampled text; evaluate at the recorded settings, or regenerate the responses greedily (workbench regenerate).

    ``groups``: ``{(temperature, top_p, top_k): samples}`` of the samples recorded as sampled
    (:func:`generation_settings`). Greedy ``setting`` and no sampled sample: None (greedy agreement
    judges the data then: :meth:`Agreement.message`). Sampled ``setting``: whether the data was
    sampled at exactly those settings (what the sampling estimators need), else what it was.
    """
    n = sum(groups.values())
    asked = None if setting is None or getattr(setting, "greedy", True) else _setting_triple(setting)
    if not n and asked is None:
        return None
    labels = ", ".join(f"{sampling_label(g)} ({c})" if len(groups) > 1 else sampling_label(g)
                       for g, c in sorted(groups.items(), key=lambda kv: -kv[1]))
    who = f"all {n} samples were" if n == n_samples else f"{n} of {n_samples} samples were"
    if asked is None:
        return (f"{who} sampled by their writer at {labels} (their 'generation' key), not decoded greedily: they "
                f"are judged by those settings, not by greedy agreement. This run asks for greedy decoding, so its "
                f"estimates are teacher-forced acceptance on sampled text; evaluate at the recorded settings, or "
                f"regenerate the responses greedily (workbench regenerate).")
    want = sampling_label(asked)
    fix = (f"workbench regenerate --temperature {asked[0]:g} --top-p {asked[1]:g} --top-k {asked[2]} --seed 0 "
           f"gives such data")
    if n == n_samples and set(groups) == {asked}:
        return (f"{who} sampled at {want} (their 'generation' key), the settings this run evaluates: samples of "
                f"the served distribution, as the sampling estimators need.")
    if not n:
        return (f"this run evaluates sampling at {want}, but no sample records being sampled (no 'generation' key "
                f"with a temperature > 0): the sampling estimators need samples of the served distribution; {fix}.")
    return (f"this run evaluates sampling at {want}, but {who.replace('all ', '')} sampled at {labels}"
            f"{'' if n == n_samples else ' (the others are not recorded as sampled)'}: the sampling estimators need "
            f"samples at the served settings; {fix}.")


def data_note(dataset_or_rows, setting=None, *, limit: int | None = None) -> str | None:
    """What a run of ``setting`` (a :class:`workbench.setting.Setting`; None: greedy) should say about
    the data from its rows' recorded ``generation`` keys alone (no model needed), or None.

        >>> rows = [{"input_ids": [1, 2], "generation": {"by": "target", "temperature": 0.7, "seed": 1}}]
        >>> data_note(rows).split(":")[0]
        "all 1 samples were sampled by their writer at T=0.7 (their 'generation' key), not decoded greedily"
        >>> data_note([{"input_ids": [1, 2]}]) is None                      # greedy agreement decides
        True

    The stable entry point for other modules (the sampling estimators use it to say what sampled data
    was sampled at); :func:`sampling_note` words it. A run's full verdict, with the greedy agreement
    measured on the target pass, is :meth:`Agreement.note`.
    """
    groups, n = Counter(), 0
    for row in inputs.rows(dataset_or_rows, limit):
        n += 1
        gs = generation_settings(row.get("generation") if isinstance(row, dict) else None)
        if _sampled(gs):
            groups[gs] += 1
    return sampling_note(dict(groups), n, setting)


def warning_text(share: float, n_tokens: int, *, threshold: float = THRESHOLD, sources: dict | None = None) -> str:
    """The plain-words warning for low agreement (what is measured then, and how to fix it).

        >>> print(warning_text(0.41, 1200).splitlines()[0])
        greedy agreement 0.410 < 0.98: 59% of the 1200 response tokens differ from the target's greedy choice, so this data is not the target's own greedy output.
    """
    worst = ""
    if sources and len(sources) > 1:
        lo = sorted(sources.items(), key=lambda kv: kv[1])[:3]
        worst = " By source: " + ", ".join(f"{k} {v:.3f}" for k, v in lo) + "."
    return (f"greedy agreement {share:.3f} < {threshold:g}: {1 - share:.0%} of the {n_tokens} response tokens differ "
            f"from the target's greedy choice, so this data is not the target's own greedy output.{worst}\n"
            "  - The every-position estimator then measures teacher-forced acceptance on your data: each chain is "
            "judged against contexts a server decoding greedily would never produce.\n"
            "  - The decode path is an approximation: after the first disagreement a server would continue from "
            "its own tokens, not from this data's.\n"
            "  - To fix it, replace the responses with the target's greedy continuation: "
            "workbench regenerate --target TARGET --data IN.jsonl --out OUT.jsonl, then run again on OUT.jsonl.")


@dataclass
class Agreement:
    """Per-sample greedy agreement counts; build with :meth:`from_tensors` / :meth:`add` / :meth:`from_batches`."""

    rows: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    n_match: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    n_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sampled: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))   # recorded as sampled
    generations: Counter = field(default_factory=Counter)     # rows: sampled / greedy / not recorded
    sampling: list = field(default_factory=list)              # per sample: (T, top_p, top_k) recorded, or None
    _warned: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def from_tensors(cls, input_ids, next_token, loss_mask, *, rows, sources, attention_mask=None,
                     generations=None) -> "Agreement":
        a = cls()
        a.add_tensors(input_ids, next_token, loss_mask, rows=rows, sources=sources, attention_mask=attention_mask,
                      generations=generations)
        return a

    def add_tensors(self, input_ids, next_token, loss_mask, *, rows, sources, attention_mask=None,
                    generations=None) -> "Agreement":
        n, d = greedy_matches(input_ids, next_token, loss_mask, attention_mask)
        if len(rows) != len(n) or len(sources) != len(n):
            raise WorkbenchError(f"greedy agreement: {len(n)} samples but {len(rows)} rows and {len(sources)} sources")
        self.rows += [int(r) for r in rows]
        self.sources += [str(s) for s in sources]
        self.n_match = np.concatenate([self.n_match, n.numpy()])
        self.n_tokens = np.concatenate([self.n_tokens, d.numpy()])
        gens = list(generations) if generations is not None else [None] * len(n)
        self._add_settings([generation_settings(x) for x in gens])
        return self

    def _add_settings(self, settings: list) -> None:
        self.sampling += list(settings)
        self.sampled = np.concatenate([self.sampled, np.array([_sampled(x) for x in settings], dtype=bool)])
        for x in settings:
            self.generations["not recorded" if x is None else "sampled" if _sampled(x) else "greedy"] += 1

    @classmethod
    def from_samples(cls, samples: dict) -> "Agreement | None":
        """From an :class:`~workbench.statistics.AcceptanceResult`'s per-sample columns (``n_agree``,
        ``n_agree_tokens``, ``gen_*``); None when no sample was measured (e.g. the exact loop)."""
        ok = np.asarray(samples["n_agree_tokens"]) >= 0
        if not ok.any():
            return None
        t, p, k = (np.asarray(samples[c])[ok] for c in ("gen_temperature", "gen_top_p", "gen_top_k"))
        a = cls(rows=[int(x) for x in np.asarray(samples["sample"])[ok]],
                sources=[str(x) for x in np.asarray(samples["source"])[ok]],
                n_match=np.asarray(samples["n_agree"], np.int64)[ok],
                n_tokens=np.asarray(samples["n_agree_tokens"], np.int64)[ok])
        a._add_settings([None if ti < 0 else (float(ti), float(pi), int(ki)) for ti, pi, ki in zip(t, p, k)])
        return a

    def columns(self) -> dict:
        """The per-sample columns :meth:`from_samples` reads (-1, -1, 0 where nothing is recorded)."""
        s = [x or (-1.0, -1.0, 0) for x in self.sampling]
        return {"n_agree": self.n_match.astype(np.int64), "n_agree_tokens": self.n_tokens.astype(np.int64),
                "gen_temperature": np.asarray([x[0] for x in s], np.float64),
                "gen_top_p": np.asarray([x[1] for x in s], np.float64),
                "gen_top_k": np.asarray([x[2] for x in s], np.int64)}

    def add(self, batch, generations=None) -> "Agreement":
        """Add one :class:`workbench.capture.Batch` (its ``next_token`` from the pass already made)."""
        return self.add_tensors(batch.input_ids, batch.next_token, batch.loss_mask, rows=batch.rows,
                                sources=batch.sources, attention_mask=batch.attention_mask, generations=generations)

    @classmethod
    def from_batches(cls, batches, generations: dict | None = None) -> "Agreement":
        """From capture batches; ``generations`` maps ``_row`` to the row's ``generation`` key (if any)."""
        a = cls()
        for b in batches:
            a.add(b, None if generations is None else [generations.get(r) for r in b.rows])
        return a

    # -- statistics ---------------------------------------------------------------------------------
    @property
    def n_samples(self) -> int:
        return len(self.rows)

    @property
    def share(self) -> float:
        """Pooled over all response tokens (NaN when there are none)."""
        d = int(self.n_tokens.sum())
        return float(self.n_match.sum()) / d if d else float("nan")

    @property
    def per_sample(self) -> np.ndarray:
        """Each sample's share (NaN for a sample without counted response tokens)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.n_tokens > 0, self.n_match / np.maximum(self.n_tokens, 1), np.nan)

    def by_source(self) -> dict[str, dict]:
        """``{source: {samples, tokens, matches, share, min_sample}}``, plus ``(all)`` when several sources."""
        src = np.asarray(self.sources)
        out = {}
        keys = sorted(set(self.sources))
        for k in keys + (["(all)"] if len(keys) > 1 else []):
            sel = np.ones(len(src), bool) if k == "(all)" else src == k
            n, d = int(self.n_match[sel].sum()), int(self.n_tokens[sel].sum())
            ps = self.per_sample[sel]
            out[k] = {"samples": int(sel.sum()), "tokens": d, "matches": n, "share": n / d if d else None,
                      "min_sample": float(np.nanmin(ps)) if np.isfinite(ps).any() else None}
        return out

    def to_frame(self):
        """One row per sample: row, source, response tokens, matches, share."""
        import pandas as pd

        return pd.DataFrame({"row": self.rows, "source": self.sources, "tokens": self.n_tokens,
                             "matches": self.n_match, "share": self.per_sample})

    def sampled_groups(self) -> dict:
        """``{(temperature, top_p, top_k): samples}`` of the samples recorded as sampled."""
        return dict(Counter(x for x in self.sampling if _sampled(x)))

    def lowest(self, n: int = 5) -> list[dict]:
        """Up to ``n`` samples that disagree somewhere, lowest agreement first (ties by row):
        ``[{row, source, tokens, share}]``; empty when every response is the target's greedy output."""
        ps = self.per_sample
        order = [i for i in np.lexsort((np.asarray(self.rows), np.where(np.isnan(ps), np.inf, ps)))
                 if ps[i] < 1]                                            # ties: by row, whatever the order
        return [{"row": self.rows[i], "source": self.sources[i], "tokens": int(self.n_tokens[i]),
                 "share": float(ps[i])} for i in order[:n]]

    def to_dict(self, setting=None) -> dict:
        """JSON-ready: threshold, pooled share, tokens, samples, ``by_source``, ``lowest`` samples, how the
        rows were made (``generations``, ``sampled_at``) and ``note`` (:meth:`note` for ``setting``)."""
        return {"threshold": THRESHOLD, "share": None if np.isnan(self.share) else self.share,
                "tokens": int(self.n_tokens.sum()), "samples": self.n_samples, "by_source": self.by_source(),
                "lowest": self.lowest(), "generations": dict(self.generations),
                "sampled_at": {sampling_label(g): c for g, c in self.sampled_groups().items()},
                "note": self.note(setting)}

    def summary(self) -> str:
        lines = [f"greedy agreement {self.share:.3f} over {int(self.n_tokens.sum())} response tokens, "
                 f"{self.n_samples} samples"]
        for k, v in self.by_source().items():
            share = "n/a" if v["share"] is None else f"{v['share']:.3f}"
            lines.append(f"  {k}: {share} ({v['tokens']} tokens, {v['samples']} samples)")
        return "\n".join(lines)

    def headline(self, setting=None) -> str:
        """One line for a result's summary: the share (by source when several) and what it means.

            >>> import torch
            >>> a = Agreement.from_tensors(torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, 0]]),
            ...                            torch.tensor([[0, 1, 1]]), rows=[0], sources=["chat"])
            >>> a.headline()
            "data: greedy agreement 1.000 (2 response tokens): the target's own greedy output, as the decode path assumes"
        """
        by = {k: v for k, v in self.by_source().items() if k != "(all)"}
        per = "" if len(by) < 2 else "; by source " + ", ".join(
            f"{k or '(none)'} {'n/a' if v['share'] is None else format(v['share'], '.3f')}" for k, v in by.items())
        head = f"data: greedy agreement {_share(self.share)} ({int(self.n_tokens.sum())} response tokens{per})"
        greedy = setting is None or getattr(setting, "greedy", True)
        low = self.message(greedy=greedy) is not None
        what = (f"< {THRESHOLD:g}: not the target's greedy output, so every-position = teacher-forced acceptance "
                f"on this data and the decode path is an approximation (fix: workbench regenerate)")
        sampled = sampling_note(self.sampled_groups(), self.n_samples, setting)
        if sampled:                                   # its first sentence: what the data was sampled at
            first = sampled.split(". ")[0].split(": ")[0]
            return f"{head}: {first}" + (f"; the other samples' agreement is {what}" if low else "")
        if low:
            return f"{head} {what}"
        if np.isnan(self.share):
            return f"{head}: no response tokens to judge"
        if not greedy:
            return f"{head}"
        return f"{head}: the target's own greedy output, as the decode path assumes"

    def note(self, setting=None, *, threshold: float = THRESHOLD) -> str | None:
        """The run's verdict on its data for ``setting`` (None: greedy): the recorded-sampling note
        (:func:`sampling_note`) and/or the low-agreement warning (:meth:`message`), or None."""
        greedy = setting is None or getattr(setting, "greedy", True)
        parts = [sampling_note(self.sampled_groups(), self.n_samples, setting),
                 self.message(greedy=greedy, threshold=threshold)]
        parts = [p for p in parts if p]
        return "\n".join(parts) if parts else None

    # -- the verdict --------------------------------------------------------------------------------
    def message(self, *, greedy: bool = True, threshold: float = THRESHOLD) -> str | None:
        """The warning text when it applies, else None.

        It applies when greedy decoding is asked for (``greedy=True``, the default) and the pooled
        agreement of the rows *not* recorded as sampled is below ``threshold``. Rows whose
        ``generation`` key records a temperature > 0 are judged by those settings, not by agreement.
        """
        keep = ~self.sampled
        if not greedy or not keep.any():
            return None
        sub = self if keep.all() else Agreement([r for r, k in zip(self.rows, keep) if k],
                                                [s for s, k in zip(self.sources, keep) if k],
                                                self.n_match[keep], self.n_tokens[keep], self.sampled[keep])
        if np.isnan(sub.share) or sub.share >= threshold:
            return None
        by = {k: v["share"] for k, v in sub.by_source().items() if k != "(all)" and v["share"] is not None}
        return warning_text(sub.share, int(sub.n_tokens.sum()), threshold=threshold, sources=by)

    def check(self, *, greedy: bool = True, threshold: float = THRESHOLD, warn: bool = True,
              setting=None) -> str | None:
        """:meth:`message`, also emitted as an :class:`AgreementWarning` (once per object) when ``warn``.

        With ``setting`` (a :class:`workbench.setting.Setting`) ``greedy`` is ``setting.greedy``."""
        if setting is not None:
            greedy = getattr(setting, "greedy", True)
        msg = self.message(greedy=greedy, threshold=threshold)
        if msg and warn and not self._warned:
            self._warned = True
            warnings.warn(msg, AgreementWarning, stacklevel=2)
        return msg


def measure(target, data, *, limit: int | None = None, batch_size: int = 8, progress: bool = False) -> "Agreement":
    """The greedy agreement of ``data`` (a Dataset, rows or a path) with ``target`` on its own: one
    target pass (``capture.extract``), for looking at data before any draft is involved (notebook 01).

        >>> # a = measure(tgt, "data/demo/val.jsonl"); a.share, a.by_source(), a.to_frame()

    The estimators (``accept``, ``diagnose``, ``tune``) do not call it: they count the same numbers
    from the target pass they already make (:attr:`workbench.statistics.AcceptanceResult.agreement`).
    """
    rows = inputs.rows(inputs.dataset(data, target), limit)
    if not rows:
        raise WorkbenchError("greedy agreement: the data has no rows")
    gens = {int(r.get("_row", i)): r.get("generation") for i, r in enumerate(rows)}
    a = Agreement()
    for b in capture.extract(target, rows, "embed", batch_size=batch_size, progress=progress):
        a.add(b, [gens.get(int(r)) for r in b.rows])
    return a


def _share(x: float) -> str:
    return "n/a" if x is None or np.isnan(x) else f"{x:.3f}"


def warn_once(agreement: "Agreement | None", setting=None) -> str | None:
    """The one warning of a run (``accept``, ``diagnose``, ``tune`` call it once, at the end): an
    :class:`AgreementWarning` when greedy decoding is asked for and the data's agreement is low.

        >>> warn_once(None) is None                                    # nothing measured: nothing to say
        True
    """
    return None if agreement is None else agreement.check(setting=setting)


@contextmanager
def plain_warnings(stream=None):
    """Inside: each :class:`AgreementWarning` is printed once as ``warning: <text>`` (to ``stream``,
    default stderr), without Python's source-line decoration; other warnings are shown as usual.
    The CLI commands run inside it."""
    shown, previous = set(), warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, AgreementWarning):
            if str(message) not in shown:
                shown.add(str(message))
                print(f"warning: {message}", file=stream or sys.stderr)
            return
        previous(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", AgreementWarning)
        warnings.showwarning = show
        try:
            yield
        finally:
            warnings.showwarning = previous


__all__ = ["THRESHOLD", "Agreement", "AgreementWarning", "data_note", "generation_settings", "greedy_matches",
           "greedy_matches_reference", "is_sampled", "measure", "plain_warnings", "sampling_label", "sampling_note",
           "warn_once", "warning_text"]
