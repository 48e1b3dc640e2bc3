"""Feature statistics of the target's taps: per-tap norms and the cosine similarity between taps.

    >>> import torch
    >>> from types import SimpleNamespace
    >>> b = SimpleNamespace(features={"embed": torch.ones(1, 2, 4), "L0": 2 * torch.ones(1, 2, 4)},
    ...                     attention_mask=torch.ones(1, 2, dtype=torch.long))
    >>> st = tap_statistics([b])
    >>> [round(x, 2) for x in st.norm_mean] if hasattr(st, "norm_mean") else sorted(st.taps)
    ['L0', 'embed']

The wiring notebook draws these (``plots.tap_stats_figure``): the embedding output's much smaller norm and
its direction are how a wrong first tap shows up before any draft runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.engines.taps import tap_sort_key


@dataclass
class TapStats:
    """Per-tap feature statistics over real (unpadded) tokens.

    ``norms[tap]``: L2 norm of each token's feature vector; ``cosine[i, j]``: mean over tokens of
    cos(h_i, h_j) between taps i and j at the same position; ``n_tokens``: tokens used;
    ``centered_cosine``: the same after subtracting each tap's mean vector (the part that varies with
    the context; a large shared component makes raw cosines look close to 1), only when asked.
    """

    taps: list[str]
    norms: dict
    cosine: np.ndarray
    n_tokens: int
    centered_cosine: np.ndarray | None = None

    def cos(self, a: str, b: str, *, centered: bool = False) -> float:
        """Mean cosine between taps ``a`` and ``b`` (``centered``: of the centred features)."""
        m = self.centered_cosine if centered else self.cosine
        if m is None:
            raise WorkbenchError("centred cosines were not computed: tap_statistics(..., centered=True)")
        return float(m[self.taps.index(a), self.taps.index(b)])

    def story(self, taps, pairs) -> dict:
        """The demo manifest's summary: mean norm per tap, cosine of each tap with the next in ``taps``,
        and raw/centred cosines of each (trained, served) tap pair in ``pairs`` (rounded to 3 places)."""
        taps = list(taps)
        return {"norm": {t: round(float(self.norms[t].mean()), 3) for t in taps},
                "cos_next": {a: round(self.cos(a, b), 3) for a, b in zip(taps, taps[1:])},
                "slots": {f"{a}->{b}": round(self.cos(a, b), 3) for a, b in pairs},
                "slots_centered": {f"{a}->{b}": round(self.cos(a, b, centered=True), 3) for a, b in pairs},
                "n_tokens": self.n_tokens}

    def to_frame(self):
        """One row per tap: mean/median/std of the feature norm and mean cosine to every other tap."""
        import pandas as pd

        rows = []
        for i, t in enumerate(self.taps):
            v = self.norms[t]
            others = [self.cosine[i, j] for j in range(len(self.taps)) if j != i]
            rows.append({"tap": t, "norm_mean": float(v.mean()), "norm_median": float(np.median(v)),
                         "norm_std": float(v.std()),
                         "mean_cos_to_others": float(np.mean(others)) if others else math.nan})
        return pd.DataFrame(rows).set_index("tap")

    def cosine_frame(self):
        import pandas as pd

        return pd.DataFrame(self.cosine, index=self.taps, columns=self.taps)



def tap_statistics(batches, taps=None, *, centered: bool = False) -> TapStats:
    """Feature norms and tap-to-tap cosine similarity from ``capture.extract`` batches.

        >>> import torch
        >>> from types import SimpleNamespace
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> x = torch.randn(1, 4, 8)
        >>> b = SimpleNamespace(features={"embed": 0.01 * torch.randn(1, 4, 8), "L1": x, "L2": 2 * x},
        ...                     attention_mask=torch.ones(1, 4, dtype=torch.long))
        >>> s = tap_statistics([b])
        >>> round(float(s.cosine[1, 2]), 3), s.n_tokens
        (1.0, 4)

    ``taps``: which taps (default: every tap in the first batch, ordered embed, L0.., final).
    ``centered``: also the cosines of the centred features (keeps every token's features in memory
    until the end: meant for demo-sized data).
    """
    import torch

    norms: dict = {}
    dot = None
    n_tok = 0
    kept = []
    for b in batches:
        feats = b.features
        if taps is None:
            taps = sorted(feats, key=tap_sort_key)
        missing = [t for t in taps if t not in feats]
        if missing:
            raise WorkbenchError(f"tap {missing[0]!r} was not captured in this batch (captured: "
                                 f"{', '.join(sorted(feats, key=tap_sort_key))})")
        mask = b.attention_mask.bool()
        # [n_taps, N_tokens, H] unit vectors; float64 so the sums are exact enough for many tokens
        vecs = torch.stack([feats[t][mask].double().cpu() for t in taps])
        nrm = vecs.norm(dim=-1)
        for i, t in enumerate(taps):
            norms.setdefault(t, []).append(nrm[i].numpy())
        unit = vecs / nrm.clamp_min(1e-12)[..., None]
        c = torch.einsum("anh,bnh->ab", unit, unit).numpy()
        dot = c if dot is None else dot + c
        n_tok += int(mask.sum())
        if centered:
            kept.append(vecs)
    if not n_tok:
        raise WorkbenchError("tap statistics: no tokens in the batches (empty dataset or all padding)")
    cc = None
    if centered:
        allv = torch.cat(kept, dim=1)
        allv = allv - allv.mean(dim=1, keepdim=True)
        unit = allv / allv.norm(dim=-1).clamp_min(1e-12)[..., None]
        cc = torch.einsum("anh,bnh->ab", unit, unit).numpy() / n_tok
    return TapStats(taps=list(taps), norms={t: np.concatenate(v) for t, v in norms.items()},
                    cosine=dot / n_tok, n_tokens=n_tok, centered_cosine=cc)
