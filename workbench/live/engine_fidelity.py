"""How close a serving engine's captured features are to HF's: per tap, in greedy tokens, and in accept length.

    >>> from workbench.live.engine_fidelity import Fidelity
    >>> f = Fidelity(source="vLLM 0.32 extract_hidden_states", target="data/demo/target", rows=8, K=4,
    ...              taps={"L0": {"max_rel": 3.9e-07, "token_rel_median": 1e-07, "token_rel_max": 4e-07}},
    ...              tokens={"equal": 240, "total": 240}, accept={"L0,L2,L3": {"engine": 2.635, "hf": 2.635}})
    >>> f.lines()[0]
    'engine (vLLM 0.32 extract_hidden_states) against HF hooks, 8 rows of data/demo/target:'

:func:`compare` reads an engine-filled feature cache (``workbench vllm capture``) and the HF hooks' features of
the same rows, taps and batching, and measures, per tap:

- ``max_rel``: ``max|engine - HF| / max|HF|`` over every real position (the ``vllm taps`` measure; a model with
  massive activations makes the denominator large, so small dimensions' errors hide in it);
- ``token_rel_*``: ``‖engine - HF‖ / ‖HF‖`` per token (median and max over tokens): what each draft input sees;

then the greedy next tokens (the engine's against HF's), and the decode-path accept length (what a server reports)
of each wiring on each cache (``simulate(..., cache_dir=...)``: the same draft, K and rows). :class:`Fidelity` saves to and loads from JSON
(``vllm capture --fidelity OUT``), and ``workbench.report.plots.engine_fidelity`` draws it (notebook 02).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import tempfile

import torch

from workbench.core.errors import WorkbenchError
from workbench.core.files import beside, write_json
from workbench.engines.taps import tap_sort_key
from workbench.model import capture
from workbench.simulate.acceptance import simulate

FILE_NAME = "engine-fidelity.json"
HOW = ("`make engine-fidelity-real` captures the real demo's taps through a real vLLM and compares them with HF's; "
       "for your own target, `workbench vllm capture` with `--fidelity engine-fidelity.json` beside the draft's folder "
       "(docs/vllm_capture.md).")


@dataclasses.dataclass
class Fidelity:
    """Engine features against HF's: ``taps`` {tap: {max_rel, token_rel_median, token_rel_max}}, ``tokens``
    {equal, total} (greedy next tokens), ``accept`` {wiring: {engine, hf}} (decode path, chain, greedy, K, bonus counted)."""

    source: str
    target: str
    rows: int
    K: int
    taps: dict
    tokens: dict
    accept: dict
    draft: str = ""
    dtype: str = "float32"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path) -> str:
        write_json(path, self.to_dict(), indent=1)
        return str(path)

    @classmethod
    def load(cls, path) -> "Fidelity":
        try:
            with open(path) as f:
                d = json.load(f)
            return cls(**d)
        except FileNotFoundError:
            raise WorkbenchError(f"{path}: no such file (write it with `workbench vllm capture ... --fidelity {path}`)") from None
        except (json.JSONDecodeError, TypeError) as e:
            raise WorkbenchError(f"{path}: not an engine-fidelity JSON ({e}); expected the keys "
                                 f"{[f.name for f in dataclasses.fields(cls)]}") from None

    @property
    def worst(self) -> float:
        return max((v["max_rel"] for v in self.taps.values()), default=0.0)

    @property
    def accept_gap(self) -> float:
        return max((abs(v["engine"] - v["hf"]) for v in self.accept.values()), default=0.0)

    def lines(self) -> list[str]:
        out = [f"engine ({self.source}) against HF hooks, {self.rows} rows of {self.target}:"]
        for t, v in self.taps.items():
            out.append(f"  {t:>6}: max |diff| / max |HF| {v['max_rel']:.1e}; per token ‖diff‖/‖HF‖ median "
                       f"{v['token_rel_median']:.1e}, max {v['token_rel_max']:.1e}")
        e, n = self.tokens["equal"], self.tokens["total"]
        out.append(f"  greedy next tokens equal at {e}/{n} positions")
        for w, v in self.accept.items():
            out.append(f"  accept length (decode path, chain K={self.K}, greedy) {w}: engine {v['engine']:.3f}, HF {v['hf']:.3f}")
        return out


def find(path="", draft="") -> Fidelity | None:
    """The fidelity JSON at ``path``; with no path, ``engine-fidelity.json`` beside the draft's folder (a demo's),
    else None (not measured)."""
    if path:
        return Fidelity.load(path)
    found = beside(draft, FILE_NAME) if draft else None
    return Fidelity.load(found) if found else None


def engine_source(cache_dir) -> str:
    """The ``source`` an engine wrote into the cache's manifest (one line if none did)."""
    found = set()
    for m in glob.glob(os.path.join(str(cache_dir), "*", "manifest.json")):
        with open(m) as f:
            src = json.load(f).get("source")
        if src:
            found.add(src)
    if len(found) != 1:
        raise WorkbenchError(f"feature cache {cache_dir}: expected the features of one serving engine "
                             f"(`workbench vllm capture`), found sources {sorted(found) or 'none (HF hooks only)'}")
    return found.pop()


def _per_tap(target, rows, wirings, engine_cache, hf_cache, batch_size):
    eng = capture.extract(target, rows, wirings, batch_size=batch_size, cache_dir=engine_cache, progress=False)
    hf = capture.extract(target, rows, wirings, batch_size=batch_size, cache_dir=hf_cache, progress=False)
    diff_max, ref_max, token_rel, equal, total = {}, {}, {}, 0, 0
    for e, h in zip(eng, hf):
        if not e.from_cache:
            raise WorkbenchError(f"feature cache {engine_cache} lacks rows {e.rows[:4]}...: run `workbench vllm "
                                 f"capture` with the same rows, wirings and --batch-size {batch_size} first")
        m = h.attention_mask.bool()
        equal += int((e.next_token[m] == h.next_token[m]).sum())
        total += int(m.sum())
        for t in h.features:
            a, b = e.features[t][m].double(), h.features[t][m].double()
            diff_max[t] = max(diff_max.get(t, 0.0), float((a - b).abs().max()))
            ref_max[t] = max(ref_max.get(t, 0.0), float(b.abs().max()))
            rel = (a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)
            token_rel.setdefault(t, []).append(rel)
    taps = {}
    for t in sorted(diff_max, key=tap_sort_key):
        r = torch.cat(token_rel[t])
        taps[t] = {"max_rel": diff_max[t] / max(ref_max[t], 1e-30), "token_rel_median": float(r.median()),
                   "token_rel_max": float(r.max())}
    return taps, {"equal": equal, "total": total}


def compare(target, draft, rows, wirings, engine_cache, *, hf_cache=None, K: int = 4, batch_size: int = 8,
            draft_path: str = "") -> Fidelity:
    """Engine features in ``engine_cache`` against HF's for the same ``rows`` and ``wirings`` (HF's captured into
    ``hf_cache``, a temporary folder when None), and each wiring's accept length on both."""
    source = engine_source(engine_cache)
    with tempfile.TemporaryDirectory(prefix="wb-hf-features-") as tmp:
        hf_cache = hf_cache or tmp
        taps, tokens = _per_tap(target, rows, wirings, engine_cache, hf_cache, batch_size)
        kw = dict(K=K, batch_size=batch_size, progress=False)
        on_engine = simulate(target, draft, rows, wirings, cache_dir=engine_cache, **kw)
        on_hf = simulate(target, draft, rows, wirings, cache_dir=hf_cache, **kw)
    accept = {w: {"engine": float(on_engine[w].decode_path["accept_length"]),
                  "hf": float(on_hf[w].decode_path["accept_length"])} for w in on_hf}
    return Fidelity(source=source, target=str(target.path), rows=len(rows), K=int(K), taps=taps, tokens=tokens,
                    accept=accept, draft=str(draft_path), dtype=str(target.dtype).replace("torch.", ""))


__all__ = ["Fidelity", "compare", "find", "engine_source", "FILE_NAME", "HOW"]
