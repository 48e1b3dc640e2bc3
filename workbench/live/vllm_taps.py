"""The served wiring read off the tensors: which target hidden states a real vLLM captures for a draft.

    >>> import torch
    >>> from workbench.live.vllm_taps import match_slots
    >>> hf = {"embed": torch.ones(4, 8), "L0": torch.full((4, 8), 2.0), "L1": torch.full((4, 8), 3.0)}
    >>> m = match_slots(torch.stack([hf["L1"], hf["embed"]], dim=1), hf)
    >>> [(s.tap, s.rel) for s in m], round(m[0].next_rel, 3)
    ([('L1', 0.0), ('embed', 0.0)], 0.5)

    res = served_taps("data/target", "data/draft")            # starts vLLM in extraction mode, one request
    res.taps                                                  # ['L0', 'L2', 'L3']
    print(res.summary())      # the engine captures `L0,L2,L3` (max relative difference 2e-7; next best 40%)

vLLM is started with exactly the id keys of the draft's config (``eagle_aux_hidden_state_layer_ids``,
``eagle_config``, ``dflash_config``; :mod:`workbench.live.vllm_extract`), so the engine itself resolves
them as it does when it serves the draft. One prompt goes through it; each captured tensor ``[T, H]`` is
matched against every tap the HF target gives for the same tokens here (``embed`` = HF
``hidden_states[0]``, ``L{k}`` = ``hidden_states[k+1]``, the last layer's raw output by a hook, ``final`` =
``hidden_states[N]``). The relative difference is ``max|engine - hf| / max|hf|``; a slot names a tap when
that is at most :data:`TOLERANCE` and the next best tap is at least :data:`SEPARATION` times farther.
The verdict is set beside the vLLM engine record's reading (``workbench.engines.records``), and both
must agree.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.engines.records import wiring_for
from workbench.engines.taps import load_config, tap_sort_key
from workbench.live import vllm_extract
from workbench.live.vllm_live import Client, pick_engine
from workbench.load import inputs
from workbench.model.capture import tap_hooks

TOLERANCE = 1e-4          # fp32 on CPU: measured 1e-7..1e-6 (vLLM's fused kernels vs HF's)
SEPARATION = 10.0         # the next best tap must be this many times farther


@dataclass
class SlotMatch:
    """One captured tensor: the tap it equals (``rel`` its relative difference) and the runner-up."""

    tap: str | None
    rel: float
    next_tap: str | None
    next_rel: float

    def to_dict(self) -> dict:
        return {"tap": self.tap, "rel": self.rel, "next_tap": self.next_tap, "next_rel": self.next_rel}


@dataclass
class TapsResult:
    taps: list                      # tap per captured slot (None when no tap matched)
    slots: list                     # SlotMatch per slot
    ids: dict                       # the id keys vLLM was given
    expected: str                   # the vLLM record's reading of the same config
    tokens: int
    server: dict = field(default_factory=dict)

    @property
    def resolved(self) -> bool:
        return all(t is not None for t in self.taps)

    @property
    def agrees(self) -> bool:
        return self.resolved and ",".join(self.taps) == self.expected

    def summary(self) -> str:
        spec = ",".join(t or "?" for t in self.taps)
        worst = max((s.rel for s in self.slots), default=0.0)
        runner = min((s.next_rel for s in self.slots), default=float("inf"))
        head = (f"the engine captures `{spec}` (max relative difference {worst:.1e}; the next best layer differs "
                f"by {runner:.1e}, {runner / max(worst, 1e-12):,.0f}x more)" if self.resolved else
                f"the engine's captured states match no tap within {TOLERANCE:g} for every slot: `{spec}`")
        ids = ", ".join(f"{k}={v}" for k, v in self.ids.items()) or "no ids (the model default)"
        lines = [head, f"  ids given to vLLM as served: {ids}",
                 f"  the vLLM engine record reads: {self.expected} -> "
                 + ("agrees" if self.agrees else "DISAGREES with the tensors")]
        for i, s in enumerate(self.slots):
            lines.append(f"  slot {i}: {s.tap or '?'} (rel {s.rel:.1e}); next best {s.next_tap} ({s.next_rel:.1e})")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"taps": list(self.taps), "resolved": self.resolved, "agrees_with_record": self.agrees,
                "expected": self.expected, "ids": self.ids, "tokens": self.tokens,
                "slots": [s.to_dict() for s in self.slots], "tolerance": TOLERANCE, "separation": SEPARATION,
                "server": self.server}


def rel_diff(a, b) -> float:
    """``max|a - b| / max|b|`` (float64)."""
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def match_slots(states, hf: dict) -> list:
    """Each slot of ``states [T, n, H]`` against every HF tap ``{tap: [T, H]}``."""
    out = []
    for j in range(states.shape[1]):
        ranked = sorted((rel_diff(states[:, j], v), t) for t, v in hf.items())
        (best, tap), (second, nxt) = ranked[0], ranked[1] if len(ranked) > 1 else (float("inf"), None)
        ok = best <= TOLERANCE and second >= SEPARATION * max(best, 1e-12)
        out.append(SlotMatch(tap if ok else None, best, nxt, second))
    return out


def hf_taps(target, token_ids) -> dict:
    """Every tap of the HF target for one prompt: ``{"embed", "L0".., "final": Tensor[T, H]}`` (float32)."""
    import torch

    taps = ["embed"] + [f"L{k}" for k in range(target.n_layers)] + ["final"]
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=target.device)
    with torch.no_grad(), tap_hooks(target.model, taps) as feats:
        target.model(input_ids=ids)
        got = {t: feats[t][0].float().cpu() for t in taps}
    return dict(sorted(got.items(), key=lambda kv: tap_sort_key(kv[0])))


def default_prompt(vocab_size: int, n: int = 16) -> list[int]:
    """A fixed prompt of ``n`` distinct-ish token ids below ``vocab_size`` (no tokenizer needed)."""
    return [(7 * i + 3) % int(vocab_size) for i in range(n)]


def served_taps(target_dir, draft, *, tokens=None, store=None, tensor_parallel: int = 1, say=None,
                timeout: float = 400.0) -> TapsResult:
    """Start vLLM in extraction mode with the draft's id keys as served, send one prompt, name the taps."""
    tcfg = load_config(Path(target_dir) / "config.json", "target config")
    dcfg = load_config(Path(draft) / "config.json" if Path(draft).is_dir() else draft, "draft config")
    ids = vllm_extract.served_id_keys(dcfg)
    target = inputs.target(target_dir, device="cpu", dtype="float32", progress=False)
    prompt = [int(t) for t in (tokens or default_prompt(target.vocab_size))]
    if not prompt or max(prompt) >= target.vocab_size or min(prompt) < 0:
        raise WorkbenchError(f"prompt token ids must be in 0..{target.vocab_size - 1}")
    hf = hf_taps(target, prompt)
    with tempfile.TemporaryDirectory(prefix="wb-vllm-taps-", dir=store) as tmp:
        with vllm_extract.running_extractor(target_dir, ids, tmp, tensor_parallel=tensor_parallel, say=say,
                                            timeout=timeout) as srv:
            states = vllm_extract.capture(srv, prompt)
            version = Client(srv.url, timeout=10.0, retries=0).version()
            record, said = pick_engine(None, version)          # the served release's record (GET /version)
            expected = wiring_for(record, dcfg, tcfg)
            info = {"startup_s": srv.startup_s, "tensor_parallel": int(tensor_parallel), "engine_record": said,
                    **vllm_extract.plugin_state(srv.log)}
    if states.shape[-1] != target.hidden_size:
        raise WorkbenchError(f"the engine's states have width {states.shape[-1]}, the target's hidden size is "
                             f"{target.hidden_size}")
    slots = match_slots(states, hf)
    return TapsResult([s.tap for s in slots], slots, ids, expected.spec, len(prompt), info)


__all__ = ["TOLERANCE", "SEPARATION", "SlotMatch", "TapsResult", "rel_diff", "match_slots", "hf_taps",
           "default_prompt", "served_taps"]
