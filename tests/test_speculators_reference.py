"""The workbench draft forward against speculators' own (vllm-project/speculators 0.9.0, the trainer).

    .venv/bin/python -m pytest -q tests/test_speculators_reference.py -p no:cacheprovider

speculators runs in its own venv (``.venv-speculators``, installed by ``make test`` / ``make trainers``):
``trainers/speculators/reference_forward.py`` loads a checkpoint with speculators' loader and runs its
model's forward, writing the logits; these tests compare them with workbench's on the same features
(random, seeded: hidden_states [T, 3H] and input_ids [T], T = 12, K = 4; both fp32):

* the shipped P-EAGLE checkpoint (``tests/data/peagle-smoke/draft-peagle``, trained by speculators):
  workbench ``run_chains`` (parallel drafting, its default for the checkpoint) and ``chain_reference``
  equal speculators' ``PEagleDraftModel.forward`` with every anchor at every depth, for every start
  p and depth k, logits and argmax;
* random P-EAGLE checkpoints with ``norm_before_fc`` / ``fc_norm`` (the masked slots' ``mask_hidden``
  goes through those norms too), written by speculators' own classes;
* random EAGLE-3 checkpoints with ``norm_before_fc``, ``fc_norm``, ``norm_output`` (+
  ``norm_before_residual``) in turn: workbench ``unroll(teacher=...)`` equals speculators'
  training-time-test steps (teacher x_{p+1+k} at step k);
* negative controls: the P-EAGLE checkpoint drafted sequentially, and the norm_output checkpoint run
  without norm_output, differ from speculators at every depth k >= 1 (and still agree at depth 0).

Only positions 0..T-2 are compared: speculators' ``shift_batch`` pairs h_p with x_{p+1} and drops h_{T-1}
(no next token); workbench computes that last start with a placeholder token. Skipped only when
``.venv-speculators/bin/python`` is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from workbench.model.capture import load_target
from workbench.model.checkpoint import load_draft
from workbench.model.draft import chain_reference, run_chains, unroll

REPO = Path(__file__).resolve().parents[1]
SPEC_PY = REPO / ".venv-speculators" / "bin" / "python"
SCRIPT = REPO / "trainers" / "speculators" / "reference_forward.py"
TARGET = REPO / "tests" / "data" / "smoke-demo" / "target"
PEAGLE = REPO / "tests" / "data" / "peagle-smoke" / "draft-peagle"
T, K, ATOL = 12, 4, 1e-4

pytestmark = pytest.mark.skipif(not SPEC_PY.exists(), reason=f"{SPEC_PY.relative_to(REPO)} missing (speculators' "
                                "venv; `make test` or trainers/speculators/install.sh installs it)")

# random checkpoints written by speculators' classes: name -> (type, options)
RANDOM = {
    "eagle3-plain": ("eagle3", {}),
    "eagle3-norm_before_fc": ("eagle3", {"norm_before_fc": True}),
    "eagle3-fc_norm": ("eagle3", {"fc_norm": True}),
    "eagle3-norm_output": ("eagle3", {"norm_output": True, "norm_before_residual": True}),
    "peagle-norm_before_fc": ("peagle", {"norm_before_fc": True}),
    "peagle-fc_norm": ("peagle", {"fc_norm": True}),
}

# one speculators process for all random checkpoints (its import costs seconds)
_BATCH = """
import sys
sys.path.insert(0, {script_dir!r})
import reference_forward as rf
for name, (kind, opts) in {random!r}.items():
    ckpt = {root!r} + "/" + name
    rf.write_random(ckpt, {target!r}, seed=len(name), kind=kind, draft_vocab=200, **opts)
    rf.forward(ckpt, {features!r}, ckpt + ".logits.safetensors", {K})
"""


def _run(args, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="2", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run([str(SPEC_PY), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, **kw)
    if r.returncode != 0:
        pytest.fail(f"speculators run failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return r


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """Features, the workbench target, and speculators' logits for the shipped P-EAGLE checkpoint (through
    the script's CLI) and for the random checkpoints (written and run in one speculators process)."""
    root = tmp_path_factory.mktemp("spec-ref")
    g = torch.Generator().manual_seed(0)
    feats = {"hidden_states": torch.randn(T, 96, generator=g),
             "input_ids": torch.randint(0, 319, (T,), generator=g)}     # 319: the P-EAGLE mask token
    features = root / "features.safetensors"
    save_file(feats, str(features))
    _run([str(SCRIPT), "forward", str(PEAGLE), str(features), str(root / "peagle.safetensors"), "--K", str(K)])
    _run(["-c", _BATCH.format(script_dir=str(SCRIPT.parent), random=RANDOM, root=str(root), target=str(TARGET),
                              features=str(features), K=K)])
    return {"root": root, "feats": feats, "target": load_target(str(TARGET))}


def _workbench_parallel(draft, feats):
    ones = torch.ones(1, T, dtype=torch.long)
    out = run_chains(draft, feats["hidden_states"][None], feats["input_ids"][None], ones, K, return_logits=True)
    return out.logits[0, : T - 1].float()


def _teacher(ids):
    teacher = torch.zeros(1, T, K, dtype=torch.long)
    for p in range(T):
        for k in range(K):
            if p + 1 + k < T:
                teacher[0, p, k] = ids[p + 1 + k]          # speculators: 0 past the end, too
    return teacher


def _workbench_teacher_forced(draft, feats):
    ones = torch.ones(1, T, dtype=torch.long)
    with torch.no_grad():
        steps = list(unroll(draft, feats["hidden_states"][None], feats["input_ids"][None], ones, K,
                            teacher=_teacher(feats["input_ids"])))
    return torch.stack(steps, dim=2)[0, : T - 1].float()


def _mismatch(wb: torch.Tensor, spec: torch.Tensor) -> str | None:
    """None when the [T-1, K, Vd] logits agree (atol ATOL, argmax equal everywhere), else where they don't."""
    assert wb.shape == spec.shape, (wb.shape, spec.shape)
    diff = (wb - spec).abs().amax(dim=-1)                           # [T-1, K]
    bad = [(p, k, round(float(diff[p, k]), 6)) for p, k in (diff > ATOL).nonzero().tolist()]
    arg = (wb.argmax(-1) != spec.argmax(-1)).nonzero().tolist()
    if not bad and not arg:
        return None
    return f"logits differ at (p, k, max |diff|) {bad[:8]}{' ...' if len(bad) > 8 else ''}; argmax at {arg[:8]}"


def _load(path, target):
    return load_draft(path, target, dtype=torch.float32)


def test_peagle_checkpoint_parallel_drafting_equals_speculators(ref):
    spec = load_file(str(ref["root"] / "peagle.safetensors"))
    draft = _load(PEAGLE, ref["target"])
    assert draft.drafting == "parallel"                            # loaded as what it was trained for
    assert spec["logits"].shape == (T - 1, K, draft.draft_vocab_size)
    assert torch.equal(spec["d2t"], draft.d2t.cpu())
    wb = _workbench_parallel(draft, ref["feats"])
    assert _mismatch(wb, spec["logits"]) is None, _mismatch(wb, spec["logits"])
    # the sequential KV-cache reference of each chain, too
    for t in range(T - 1):
        tokens, logits = chain_reference(draft, ref["feats"]["hidden_states"], ref["feats"]["input_ids"], t, K,
                                         return_logits=True)
        assert torch.allclose(logits, spec["logits"][t], atol=ATOL, rtol=0), t
        want = spec["logits"][t].argmax(-1)
        assert torch.equal(tokens.cpu(), want + spec["d2t"][want])          # target ids via speculators' d2t


@pytest.mark.parametrize("name", [n for n in RANDOM if n.startswith("peagle")])
def test_peagle_options_equal_speculators(ref, name):
    draft = _load(ref["root"] / name, ref["target"])
    assert draft.drafting == "parallel"
    for option, on in RANDOM[name][1].items():
        assert draft.variant[option] is on
    spec = load_file(str(ref["root"] / f"{name}.logits.safetensors"))["logits"]
    wb = _workbench_parallel(draft, ref["feats"])
    assert _mismatch(wb, spec) is None, _mismatch(wb, spec)


@pytest.mark.parametrize("name", [n for n in RANDOM if n.startswith("eagle3")])
def test_eagle3_teacher_forced_steps_equal_speculators(ref, name):
    draft = _load(ref["root"] / name, ref["target"])
    assert draft.drafting == "sequential"
    for option in ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual"):
        assert draft.variant[option] is RANDOM[name][1].get(option, False), option
    spec = load_file(str(ref["root"] / f"{name}.logits.safetensors"))["logits"]
    wb = _workbench_teacher_forced(draft, ref["feats"])
    assert _mismatch(wb, spec) is None, _mismatch(wb, spec)


def _per_depth(wb, spec):
    return [float((wb[:, k] - spec[:, k]).abs().max()) for k in range(K)]


def test_negative_controls_differ_from_speculators(ref):
    """The comparison can fail: what speculators does not compute differs beyond the tolerance at every
    depth k >= 1, and agrees at depth 0 (no earlier step involved)."""
    spec = load_file(str(ref["root"] / "peagle.safetensors"))["logits"]
    draft = _load(PEAGLE, ref["target"]).set_drafting("sequential")   # a chain of its own tokens/hiddens
    d = _per_depth(_workbench_parallel(draft, ref["feats"]), spec)
    assert d[0] <= ATOL and min(d[1:]) > 1e-2, d
    assert _mismatch(_workbench_parallel(draft, ref["feats"]), spec) is not None

    name = "eagle3-norm_output"
    spec = load_file(str(ref["root"] / f"{name}.logits.safetensors"))["logits"]
    draft = _load(ref["root"] / name, ref["target"]).set_variant(norm_output=False)  # pre-norm hidden fed on
    d = _per_depth(_workbench_teacher_forced(draft, ref["feats"]), spec)
    assert d[0] <= ATOL and min(d[1:]) > 1e-2, d


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
