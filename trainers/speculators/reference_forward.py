"""Draft logits computed by speculators itself: an independent reference for workbench's draft forward.

    .venv-speculators/bin/python trainers/speculators/reference_forward.py forward CKPT FEATURES OUT --K 4
    .venv-speculators/bin/python trainers/speculators/reference_forward.py write-random OUT --type eagle3 \
        --verifier tests/data/smoke-demo/target --seed 0 [--norm-before-fc] [--fc-norm] [--norm-output]

Run it with the speculators venv (``make trainers`` / ``make test`` installs speculators 0.9.0 there), from
the repository root or anywhere: a relative verifier path in the checkpoint's config that does not exist
from the current directory is looked up from the repository root.

``forward``: load the speculators checkpoint CKPT with speculators' own loader
(``SpeculatorModel.from_pretrained``, which picks ``PEagleDraftModel`` / ``Eagle3DraftModel`` from
``speculators_model_type``), in float32, attention ``sdpa`` (``--attn``; speculators' default flex
attention is what ``trainers/speculators/run.py`` also replaces on CPU). FEATURES is a safetensors file
with ``hidden_states`` [T, 3H] float32 (the three target taps h_0..h_{T-1}) and ``input_ids`` [T] int64
(x_0..x_{T-1}). The batch is built as speculators' data pipeline builds one (a single document,
``document_ids`` 0, ``loss_mask`` 1, ``position_ids`` 0..T-1) and passed through speculators' own
``shift_batch`` (models/eagle3/data.py; train/cli.py uses it for eagle3 and peagle), which pairs h_p with
x_{p+1} and drops the last hidden state: the pairing workbench uses. So there are n = T-1 start positions.
The model's own ``forward`` runs; a forward hook on ``lm_head`` captures its logits. OUT (safetensors) gets

* ``logits`` [n, K, draft_vocab] float32: ``logits[p, k]`` = the draft's step-k logits for the start p
  (features h_0..h_p, bonus token x_{p+1});
* ``d2t`` [draft_vocab] (target id = draft id + d2t[draft id]) when the checkpoint maps a draft vocab.

P-EAGLE (``speculators_model_type`` "peagle"): ``PEagleDraftModel.forward`` samples (anchor, depth) pairs
with COD (``generate_cod_sample_indices``, random). Here that function is replaced, in the module that
calls it, by one returning every anchor 0..n-1 at every depth 0..K-1 (depth 0 first, then depth 1, ...),
so the one forward is speculators' parallel drafting for every start: depth 0 = real token x_{p+1} +
real hidden h_p, depth d >= 1 = ``mask_token_id`` + ``mask_hidden`` at position p+d, under speculators'
own mask (``create_peagle_mask_mod``). The inputs are padded by K-1 tail positions only so that
speculators' gather ``input_ids[0, anchor + depth]`` stays in range for the masked slots (the gathered
value is replaced by the mask token there; the padding is never a depth-0 slot, so nothing attends to
it). ``verifier_last_hidden_states`` (required by the forward for its loss) are zeros: the loss is
ignored, the logits do not depend on them.

EAGLE-3 (``"eagle3"``): ``Eagle3DraftModel.forward`` with ``ttt_steps=K`` and no verifier states (its
inference branch): the training-time-test steps with teacher forcing, step k feeding the data's own token
x_{p+1+k} (0 past the end, as speculators pads) and the draft's own hidden of step k-1. Comparable with
workbench ``unroll(..., teacher=...)`` for teacher[p, k] = x_{p+1+k}. speculators' rotary positions start
at 1 after ``shift_batch`` (workbench: 0); a constant shift, so the logits agree up to float rounding.

``write-random``: a speculators EAGLE-3 or P-EAGLE checkpoint with random weights, built as ``speculators
train`` builds a fresh draft (train/cli.py ``create_transformer_layer_config`` for ``--draft-arch llama``, one
layer, then ``Eagle3DraftModel`` / ``PEagleDraftModel.from_training_args``) and saved by ``save_pretrained``:
the layout of a trained checkpoint, with the EAGLE-3.1 options asked for (norm weights drawn away from 1 so
that no norm is an identity; ``mask_hidden`` random too; ``--draft-vocab`` maps the first ids).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def _resolve_verifier(path: str | None) -> str | None:
    if path is None or Path(path).is_absolute() or Path(path).exists():
        return path
    alt = REPO / path
    return str(alt) if alt.exists() else path


def load_speculator(ckpt: str, attn: str = "sdpa", verifier: str | None = None):
    """speculators' own loader in float32, with attention ``attn`` and the verifier path resolved."""
    from speculators import SpeculatorModel, SpeculatorModelConfig

    config = SpeculatorModelConfig.from_pretrained(ckpt)
    config.transformer_layer_config._attn_implementation = attn  # noqa: SLF001
    ver = config.speculators_config.verifier
    ver.name_or_path = _resolve_verifier(verifier or ver.name_or_path)
    model = SpeculatorModel.from_pretrained(ckpt, config=config, dtype=torch.float32)
    return model.float().eval()


def shifted_batch(hidden_states: torch.Tensor, input_ids: torch.Tensor, hidden_size: int) -> dict:
    """One document as speculators' dataset yields it, through speculators' own ``shift_batch``."""
    from speculators.models.eagle3.data import shift_batch

    T = int(input_ids.shape[0])
    sample = {
        "hidden_states": hidden_states.float(),
        "input_ids": input_ids.long(),
        "verifier_last_hidden_states": torch.zeros(T, hidden_size),
        "loss_mask": torch.ones(T, dtype=torch.long),
        "lengths": torch.tensor([T]),
        "position_ids": torch.arange(T),
    }
    return shift_batch(sample)


def _capture(module):
    out: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _m, _i, o: out.append(o.detach().float().clone()))
    return out, handle


def peagle_logits(model, batch: dict, K: int) -> torch.Tensor:
    """[n, K, Vd]: PEagleDraftModel.forward with every anchor at every depth (see the module docstring)."""
    import speculators.models.peagle.core as peagle_core
    from speculators.losses import resolve_loss_config

    n = int(batch["input_ids"].shape[0])
    pad = K - 1

    def every_anchor_every_depth(seq_length, loss_mask, num_depths=8, **_kw):
        assert num_depths == K and seq_length == n + pad, (num_depths, seq_length)
        anchors = torch.arange(n).repeat(K)
        depth = torch.arange(K).repeat_interleave(n)
        return anchors, depth

    def padded(x):
        return torch.cat([x, x.new_zeros((pad, *x.shape[1:]))]).unsqueeze(0)

    call = {
        "hidden_states": padded(batch["hidden_states"]),
        "input_ids": padded(batch["input_ids"]),
        "verifier_last_hidden_states": padded(batch["verifier_last_hidden_states"]),
        "loss_mask": padded(batch["loss_mask"]),
        "document_ids": torch.zeros(1, n + pad, dtype=torch.long),
        "position_ids": padded(batch["position_ids"]),
    }
    original = peagle_core.generate_cod_sample_indices
    out, handle = _capture(model.lm_head)
    peagle_core.generate_cod_sample_indices = every_anchor_every_depth
    try:
        with torch.no_grad():
            # the loss (discarded) in its eager form: the default fused one needs triton
            model(**call, num_depths=K, loss_config=resolve_loss_config("kl_div", "eager"))
    finally:
        peagle_core.generate_cod_sample_indices = original
        handle.remove()
    (logits,) = out                                   # [1, K*n, Vd], depth-major
    return logits[0].view(K, n, -1).transpose(0, 1).contiguous()


def eagle3_logits(model, batch: dict, K: int) -> torch.Tensor:
    """[n, K, Vd]: Eagle3DraftModel.forward, ttt_steps=K, teacher tokens x_{p+1+k} (its own shifting)."""
    n = int(batch["input_ids"].shape[0])
    out, handle = _capture(model.lm_head)
    try:
        with torch.no_grad():
            model(hidden_states=batch["hidden_states"][None], input_ids=batch["input_ids"][None],
                  document_ids=torch.zeros(1, n, dtype=torch.long), loss_mask=batch["loss_mask"][None],
                  position_ids=batch["position_ids"][None], ttt_steps=K)
    finally:
        handle.remove()
    assert len(out) == K, len(out)
    return torch.stack([o[0] for o in out], dim=1)


def forward(ckpt: str, features: str, out_path: str, K: int, attn: str = "sdpa",
            verifier: str | None = None) -> dict:
    from safetensors.torch import load_file, save_file

    feats = load_file(features)
    model = load_speculator(ckpt, attn, verifier)
    kind = model.config.speculators_model_type
    batch = shifted_batch(feats["hidden_states"], feats["input_ids"], model.config.transformer_layer_config.hidden_size)
    if kind == "peagle":
        logits = peagle_logits(model, batch, K)
    elif kind == "eagle3":
        logits = eagle3_logits(model, batch, K)
    else:
        raise SystemExit(f"{ckpt}: speculators_model_type {kind!r}; expected 'peagle' or 'eagle3'")
    result = {"logits": logits.contiguous()}
    if getattr(model, "d2t", None) is not None:
        result["d2t"] = model.d2t.detach().long().contiguous()
    save_file(result, out_path, metadata={"speculators_model_type": kind, "K": str(K), "attn": attn})
    return result


def write_random(out: str, verifier: str, seed: int = 0, *, kind: str = "eagle3", norm_before_fc=False,
                 fc_norm=False, norm_output=False, norm_before_residual=False, draft_vocab: int | None = None,
                 ids=None, mask_token_id: int | None = None) -> None:
    """A random-weight speculators checkpoint (``kind`` "eagle3" or "peagle"), built the way
    ``speculators train`` builds a fresh draft (train/cli.py ``create_transformer_layer_config`` with
    ``--draft-arch llama``, one layer, then the model class's ``from_training_args``), its weights then
    drawn at random, saved with ``save_pretrained``."""
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.peagle import PEagleDraftModel
    from speculators.train.cli import create_transformer_layer_config

    verifier = _resolve_verifier(verifier)
    layer_cfg = create_transformer_layer_config(
        verifier_name_or_path=verifier, num_layers=1, draft_arch="llama", hidden_act=None,
        sliding_window=2048, full_attention_indices=[])
    vocab = layer_cfg.vocab_size
    dv = draft_vocab or vocab
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:dv] = True                                # a reduced vocab: the first dv target ids
    d2t = torch.zeros(dv, dtype=torch.long)
    model_cls = {"eagle3": Eagle3DraftModel, "peagle": PEagleDraftModel}[kind]
    torch.manual_seed(seed)
    model = model_cls.from_training_args(
        verifier_config=layer_cfg, t2d=t2d if dv != vocab else None, d2t=d2t if dv != vocab else None,
        verifier_name_or_path=verifier, draft_vocab_size=dv, target_layer_ids=list(ids) if ids else None,
        norm_before_residual=norm_before_residual, norm_before_fc=norm_before_fc, fc_norm=fc_norm,
        norm_output=norm_output, ttt_steps=4, num_depths=4, draft_attn_impl="sdpa",
        mask_token_id=(vocab - 1 if mask_token_id is None else mask_token_id) if kind == "peagle" else None)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("verifier_"):
                continue
            if "norm" in name:                     # norms: 1 + noise, so that none is an identity
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_((1.0 if name == "mask_hidden" else 0.2) * torch.randn(p.shape, generator=g))
    model.save_pretrained(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("forward", help="speculators' draft logits [T-1, K, draft_vocab] for a features file")
    f.add_argument("ckpt")
    f.add_argument("features")
    f.add_argument("out")
    f.add_argument("--K", type=int, default=4)
    f.add_argument("--attn", default="sdpa", choices=["sdpa", "eager", "simple_flex_attention"])
    f.add_argument("--verifier", default=None, help="override the checkpoint's verifier path")
    w = sub.add_parser("write-random", help="a random speculators checkpoint (speculators' own classes)")
    w.add_argument("out")
    w.add_argument("--type", default="eagle3", choices=["eagle3", "peagle"])
    w.add_argument("--mask-token-id", type=int, default=None, help="peagle: default vocab_size - 1")
    w.add_argument("--verifier", required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--draft-vocab", type=int, default=None)
    w.add_argument("--ids", type=int, nargs=3, default=None)
    for flag in ("norm-before-fc", "fc-norm", "norm-output", "norm-before-residual"):
        w.add_argument(f"--{flag}", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    if a.cmd == "forward":
        r = forward(a.ckpt, a.features, a.out, a.K, a.attn, a.verifier)
        print(f"wrote {a.out}: logits {list(r['logits'].shape)}", file=sys.stderr)
    else:
        write_random(a.out, a.verifier, a.seed, kind=a.type, norm_before_fc=a.norm_before_fc,
                     fc_norm=a.fc_norm, norm_output=a.norm_output, norm_before_residual=a.norm_before_residual,
                     draft_vocab=a.draft_vocab, ids=a.ids, mask_token_id=a.mask_token_id)
        print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
