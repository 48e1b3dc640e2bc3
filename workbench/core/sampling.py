"""Sampling settings and the distribution SGLang samples from: temperature, then top-k and top-p.

    >>> import torch
    >>> from workbench.core.sampling import Sampling, served_probs, draw
    >>> s = Sampling(temperature=1.0, top_k=2, top_p=1.0, seed=0)
    >>> [round(x, 3) for x in served_probs(torch.tensor([[2.0, 1.0, 0.0, -1.0]]), s)[0].tolist()]
    [0.731, 0.269, 0.0, 0.0]
    >>> draw(torch.tensor([[2.0, 1.0, 0.0, -1.0]]), s, torch.tensor([0.9])).tolist()   # u above 0.731
    [1]
    >>> Sampling().greedy, Sampling(temperature=0.7).greedy
    (True, False)

The rule is SGLang's (``python/sglang/srt/layers/sampler.py``,
``top_k_top_p_min_p_sampling_from_probs_torch``, and the flashinfer kernel it stands in for with
``filter_apply_order="joint"``): ``p = softmax(logits / T)``; sort descending; keep the first
``top_k``; keep a token while the mass *before* it is ``<= top_p`` (both cuts on the same
untruncated cumulative sum, so the result is the intersection); renormalise; sample. ``top_k = -1``
is the whole vocabulary; ``temperature < 1e-6`` is greedy (SGLang sets ``top_k = 1`` then,
``sampling/sampling_params.py``). min_p is not used (0) and no penalties are applied.

Reproducibility: a draw takes uniforms ``u`` in [0, 1) and inverts the cumulative distribution, so
the token is a function of the probabilities and ``u``. :func:`row_generator` gives every data row
its own stream, seeded from ``(seed, row)``: the same row gets the same tokens whatever the batch
it was generated in, and a resumed run reproduces an uninterrupted one.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

from workbench.core.errors import WorkbenchError

GREEDY_EPS = 1e-6          # SGLang: sampling_params._SAMPLING_EPS; below it the request is greedy


@dataclass(frozen=True)
class Sampling:
    """Decoding settings: ``temperature`` 0 = greedy; ``top_k`` -1 = all; ``seed`` None = unseeded.

        >>> Sampling(temperature=0.6, top_p=0.95, top_k=20, seed=1).sglang_params()
        {'temperature': 0.6, 'top_p': 0.95, 'top_k': 20, 'min_p': 0.0, 'repetition_penalty': 1.0, 'frequency_penalty': 0.0, 'presence_penalty': 0.0}
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None

    def __post_init__(self):
        t, p, k, s = self.temperature, self.top_p, self.top_k, self.seed
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 or t != t or t == float("inf"):
            raise WorkbenchError(f"--temperature {t!r}: expected a number >= 0 (0 = greedy)")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise WorkbenchError(f"--top-p {p!r}: expected a number in (0, 1] (1 = off)")
        if isinstance(k, bool) or not isinstance(k, int) or (k < 1 and k != -1):
            raise WorkbenchError(f"--top-k {k!r}: expected -1 (off) or an integer >= 1")
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 0):
            raise WorkbenchError(f"--seed {s!r}: expected an integer >= 0")
        object.__setattr__(self, "temperature", float(t))
        object.__setattr__(self, "top_p", float(p))

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS or self.top_k == 1

    def sglang_params(self) -> dict:
        """``sampling_params`` for SGLang's ``/generate``, every field explicit (a server otherwise takes
        defaults from the model's generation_config.json)."""
        return {"temperature": 0.0 if self.greedy else self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "min_p": 0.0, "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}

    def vllm_params(self) -> dict:
        """The sampling fields of a vLLM ``/v1/completions`` request, every one explicit (vLLM's names:
        ``top_k`` 0 = off; a server otherwise takes defaults from generation_config.json).

            >>> Sampling(temperature=0.7, top_k=-1).vllm_params()["top_k"], Sampling().vllm_params()["temperature"]
            (0, 0.0)
        """
        return {"temperature": 0.0 if self.greedy else self.temperature, "top_p": self.top_p,
                "top_k": 0 if self.top_k == -1 else self.top_k, "min_p": 0.0, "repetition_penalty": 1.0,
                "frequency_penalty": 0.0, "presence_penalty": 0.0}

    def request_params(self, engine: str = "sglang", row: int | None = None) -> dict:
        """The sampling fields of one request to ``engine`` ("sglang": ``sampling_params`` of ``/generate``;
        "vllm": the body of ``/v1/completions``), plus, when sampling with a seed, the data row's own seed
        (:func:`row_seed`; SGLang's ``sampling_seed``, vLLM's ``seed``).

            >>> Sampling(0.7, seed=3).request_params("vllm", row=5)["seed"] == row_seed(3, 5)
            True
        """
        out = self.vllm_params() if engine == "vllm" else self.sglang_params()
        if self.seed is not None and not self.greedy and row is not None:
            out["seed" if engine == "vllm" else "sampling_seed"] = row_seed(self.seed, int(row))
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def row_seed(seed: int, row: int) -> int:
    """The seed of data row ``row`` under base ``seed`` (stable across runs, Python versions and machines).

        >>> row_seed(0, 3) == row_seed(0, 3) != row_seed(0, 4)
        True
    """
    digest = hashlib.sha256(f"workbench-sampling:{int(seed)}:{int(row)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2 ** 63 - 1)


def row_generator(seed: int | None, row: int):
    """A CPU ``torch.Generator`` for one row (``seed`` None: seeded from the OS, not reproducible)."""
    import torch

    g = torch.Generator()
    if seed is None:
        g.seed()
    else:
        g.manual_seed(row_seed(seed, row))
    return g


def _sorted_kept(logits, s: Sampling):
    """(sorted probabilities with the cut tokens zeroed, their token ids); rows of ``logits [B, V]``."""
    import torch

    x = logits.float()
    if s.greedy:
        idx = x.argmax(-1, keepdim=True)
        return torch.ones_like(idx, dtype=torch.float32), idx
    probs = torch.softmax(x / s.temperature, dim=-1)
    p_sort, idx = probs.sort(dim=-1, descending=True)
    before = torch.cumsum(p_sort, dim=-1) - p_sort             # mass strictly before each token
    keep = before <= s.top_p
    if s.top_k != -1:
        keep &= torch.arange(p_sort.shape[-1], device=p_sort.device) < s.top_k
    return p_sort * keep, idx


def served_probs(logits, s: Sampling):
    """The distribution the server samples from, ``[B, V]`` (rows sum to 1); greedy gives a one-hot."""
    import torch

    kept, idx = _sorted_kept(logits, s)
    out = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
    out.scatter_(-1, idx, kept / kept.sum(-1, keepdim=True))
    return out


def draw(logits, s: Sampling, u):
    """One token per row of ``logits [B, V]``, by inverting the served distribution at ``u [B]`` in [0, 1).

    Greedy settings return the argmax (``u`` unused).
    """
    import torch

    kept, idx = _sorted_kept(logits, s)
    if s.greedy:
        return idx[:, 0]
    cdf = torch.cumsum(kept, dim=-1)
    target = u.to(cdf.device, torch.float32).reshape(-1, 1) * cdf[:, -1:]
    pos = torch.searchsorted(cdf, target, right=True).clamp_(max=kept.shape[-1] - 1)
    # never land on a cut token (u*total == total after rounding): step back to the last kept one
    n_kept = (kept > 0).sum(-1, keepdim=True)
    pos = torch.minimum(pos, n_kept - 1)
    return idx.gather(-1, pos)[:, 0]



def as_sampling(setting) -> Sampling:
    """The :class:`~workbench.sampling.Sampling` of a :class:`~workbench.setting.Setting` (or a Sampling).

        >>> from workbench.core.setting import Setting
        >>> as_sampling(Setting(temperature=0.7, top_p=0.9, top_k=20))
        Sampling(temperature=0.7, top_p=0.9, top_k=20, seed=None)
    """
    if isinstance(setting, Sampling):
        return setting
    k = getattr(setting, "top_k", None)
    return Sampling(temperature=float(setting.temperature), top_p=float(setting.top_p),
                    top_k=-1 if k is None else int(k))



def apply_sampling(setting, sampling):
    """``setting`` with the temperature/top_p/top_k of ``sampling`` (a Sampling, a dict of its fields, or None).

        >>> from workbench.core.setting import Setting
        >>> apply_sampling(Setting(steps=3), {"temperature": 0.7, "top_k": 20}).describe()[:60]
        'chain drafting (eagle_topk 1), K=3; temperature 0.7, top_p 1'
    """
    if sampling is None:
        return setting
    s = sampling if isinstance(sampling, Sampling) else Sampling(**dict(sampling))
    return setting.replace(temperature=s.temperature, top_p=s.top_p, top_k=None if s.top_k == -1 else s.top_k)



def sampled_name(temperature: float) -> str:
    """``val-T0.7.jsonl`` for 0.7.

        >>> sampled_name(1), sampled_name(0.3)
        ('val-T1.0.jsonl', 'val-T0.3.jsonl')
    """
    return f"val-T{float(temperature):.1f}.jsonl"


__all__ = ["Sampling", "served_probs", "draw", "row_seed", "row_generator", "GREEDY_EPS"]
