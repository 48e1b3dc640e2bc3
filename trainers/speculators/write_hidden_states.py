"""Write hidden states and a dataset in the exact on-disk format ``speculators train`` reads.

Plain torch + transformers + safetensors + datasets; it does NOT import speculators, so it runs
with the project's venv (/work/main/.venv) as well as with .venv-speculators.

What ``speculators train --data-path DIR`` (speculators 0.9.0) reads:

* ``DIR/`` itself is a HuggingFace ``datasets`` Arrow dataset (``Dataset.save_to_disk``), in torch
  format, with columns ``input_ids`` (int64), ``loss_mask`` (int64, 0/1) and ``seq_len`` (int).
  It is opened with ``datasets.load_from_disk(DIR)`` (speculators/train/data.py:164); ``seq_len``
  feeds the length-packing sampler (data.py:225). Row i of the dataset is sample i.
* ``DIR/hidden_states/hs_{i}.safetensors`` (hs_connectors/transfer.py:142) holds, for row i,
  ``token_ids`` [T] int64 (must equal the row's ``input_ids``, else the sample is dropped,
  data.py:314) and ``hidden_states`` [T, len(aux_ids)+1, H].
  Slots ``0..len(aux_ids)-1`` are the aux taps, slot ``-1`` is the verifier's last hidden state
  (data.py:325-331: ``hidden_states[:, :-1]`` -> the draft's fc input, ``hidden_states[:, -1]`` ->
  ``verifier_last_hidden_states``).
* The split is positional: the first ``int(len * train_data_ratio)`` rows train, the rest
  validate (data.py:172-182; default ratio 0.9). Rows are written here in JSONL order (speculators'
  own ``prepare-data`` shuffles them with its seed; this script does not).
* Optional ``DIR/token_freq.pt``: ``{token_id: count}`` over loss-masked tokens, as
  ``speculators prepare-data --no-skip-token-freq`` writes it (train/vocab_mapping.py:20-56).
  With ``--draft-vocab-size V`` and no ``--d2t-path/--t2d-path``, ``speculators train`` builds
  ``d2t-V.npy``/``t2d-V.npy`` from it and caches them in DIR (train/cli.py:355-393).

Which hidden state goes in which slot (layer ids in vLLM's convention, N = num decoder layers):

* vLLM (0.32, ``model_executor/models/llama.py:427-441`` with ``interfaces.py:1601-1611``) records
  id 0 = the embedding output and id ``idx+1`` = ``hidden_states + residual`` right after decoder
  layer ``idx``; the final norm is applied only afterwards (llama.py:452). So id k (k < N) is the
  INPUT of decoder layer k = HF ``output_hidden_states[k]``.
* speculators' ``scripts/launch_vllm.py`` appends id N (``--include-last-layer``, on by default)
  to the aux ids, so the last slot is id N = the output of the LAST decoder layer BEFORE the final
  RMSNorm. speculators applies the verifier's final norm itself
  (``targets = verifier_lm_head(verifier_norm(verifier_last_hidden_states))``,
  models/eagle3/core.py:250-253), which is why the last slot must be pre-norm.
* HF's ``output_hidden_states[N]`` is AFTER the final norm (checked here at run time), so it must
  NOT go in the last slot: this script captures the input of ``model.model.norm`` with a forward
  pre-hook instead and asserts ``norm(captured) == output_hidden_states[N]``.
* vLLM appends taps in ascending layer order whatever order the ids are listed in, so the aux
  slots are written in ascending id order; pass the same ascending ids to
  ``speculators train --target-layer-ids``.

Example (tiny model, runnable as is; the e2e driver ``e2e_tiny.sh`` does the same)::

    .venv/bin/python trainers/speculators/write_hidden_states.py \\
        --target /tmp/tiny-llama --rows /tmp/rows.jsonl --out /tmp/spec-data \\
        --layer-ids 1 2 3 --dtype bfloat16 --token-freq

    # each line of rows.jsonl: {"input_ids": [1, 5, 9, ...], "loss_mask": [0, 0, 1, ...]}
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import save_file


def read_rows(path: str | Path, seq_length: int | None = None) -> list[dict]:
    """Read JSONL rows with ``input_ids`` and ``loss_mask`` (same length, 0/1 mask).

    Like speculators' ``prepare-data`` pass-through (data_generation/preprocessing.py:378-400),
    rows are clipped to ``seq_length`` and rows with no supervised token are dropped.
    """
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            ids, mask = row["input_ids"], row["loss_mask"]
            if len(ids) != len(mask):
                raise ValueError(f"line {n}: input_ids ({len(ids)}) and loss_mask ({len(mask)}) differ")
            if any(m not in (0, 1) for m in mask):
                raise ValueError(f"line {n}: loss_mask must hold only 0 and 1")
            if seq_length is not None:
                ids, mask = ids[:seq_length], mask[:seq_length]
            if sum(mask) == 0:
                print(f"note: line {n} has no supervised token; dropped (as prepare-data does)", file=sys.stderr)
                continue
            rows.append({"input_ids": [int(t) for t in ids], "loss_mask": [int(m) for m in mask]})
    if not rows:
        raise ValueError(f"no usable rows in {path}")
    return rows


def load_target(target: str | Path):
    """Load an HF causal LM in float32, eval mode, on CPU."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    return model.eval()


def _decoder(model):
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "norm") or not hasattr(inner, "layers"):
        raise TypeError("expected a Llama-like causal LM with .model.layers and .model.norm")
    return inner


@torch.no_grad()
def capture(model, input_ids: list[int], layer_ids: list[int]) -> torch.Tensor:
    """Return [T, len(layer_ids)+1, H] float32: the taps (vLLM ids), then the pre-norm last state."""
    inner = _decoder(model)
    n_layers = len(inner.layers)
    captured: dict = {}
    handles = [inner.norm.register_forward_pre_hook(lambda _m, args: captured.__setitem__("pre_norm", args[0]))]
    for k in layer_ids:  # the input of decoder layer k, to check HF's hidden_states[k] against

        def grab(_m, args, kwargs, k=k):
            captured[k] = args[0] if args else kwargs["hidden_states"]

        handles.append(inner.layers[k].register_forward_pre_hook(grab, with_kwargs=True))
    try:
        out = model(torch.tensor([input_ids]), output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    hs = out.hidden_states  # (embeddings, input of layer 1, ..., input of layer N-1, post-norm)
    if len(hs) != n_layers + 1:
        raise RuntimeError(f"expected {n_layers + 1} hidden states, got {len(hs)}")
    pre_norm = captured["pre_norm"]
    # HF's last entry is the final norm's output: the pre-norm state is the norm's input.
    if not torch.allclose(inner.norm(pre_norm), hs[n_layers], atol=1e-5, rtol=1e-4):
        raise RuntimeError("HF hidden_states[N] is not norm(input of the final norm): unexpected model layout")
    for k in layer_ids:  # vLLM id k = input of decoder layer k = HF hidden_states[k]
        if not torch.equal(hs[k], captured[k]):
            raise RuntimeError(f"HF hidden_states[{k}] is not the input of decoder layer {k}")
    taps = [hs[k][0] for k in layer_ids] + [pre_norm[0]]
    return torch.stack(taps, dim=1)


def check_layer_ids(layer_ids: list[int], n_layers: int) -> list[int]:
    if not layer_ids or len(set(layer_ids)) != len(layer_ids):
        raise ValueError(f"layer ids must be distinct and non-empty, got {layer_ids}")
    if min(layer_ids) < 0 or max(layer_ids) >= n_layers:
        raise ValueError(
            f"aux layer ids must lie in [0, {n_layers - 1}] (id {n_layers}, the pre-norm last state, "
            f"is always appended as the last slot), got {layer_ids}"
        )
    if layer_ids != sorted(layer_ids):
        print(f"note: vLLM stores taps in ascending order; writing {sorted(layer_ids)}", file=sys.stderr)
    return sorted(layer_ids)


def default_layer_ids(n_layers: int) -> list[int]:
    """speculators' default taps (models/utils.py:111): [2, N//2, N-3]."""
    return [2, n_layers // 2, n_layers - 3]


def write_dataset(rows: list[dict], out: Path) -> None:
    """Arrow dataset at ``out`` in torch format, as ``prepare-data`` saves it."""
    from datasets import Dataset

    ds = Dataset.from_dict(
        {
            "input_ids": [r["input_ids"] for r in rows],
            "loss_mask": [r["loss_mask"] for r in rows],
            "seq_len": [len(r["input_ids"]) for r in rows],
        }
    )
    ds.set_format(type="torch")
    ds.save_to_disk(str(out))


def token_frequencies(rows: list[dict]) -> dict[int, int]:
    """{token_id: count} over tokens whose loss_mask is 1 (vocab_mapping.py:44-54)."""
    freq: Counter[int] = Counter()
    for r in rows:
        freq.update(t for t, m in zip(r["input_ids"], r["loss_mask"]) if m)
    return dict(freq)


def write_all(
    target: str | Path,
    rows_path: str | Path,
    out: str | Path,
    layer_ids: list[int] | None = None,
    dtype: str = "bfloat16",
    seq_length: int | None = 8192,
    token_freq: bool = False,
    overwrite: bool = False,
) -> dict:
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} is not empty (pass --overwrite to replace it)")
        shutil.rmtree(out)
    torch_dtype = getattr(torch, dtype)
    rows = read_rows(rows_path, seq_length)
    model = load_target(target)
    n_layers = len(_decoder(model).layers)
    ids = check_layer_ids(layer_ids if layer_ids else default_layer_ids(n_layers), n_layers)

    write_dataset(rows, out)  # save_to_disk first: it wants to own the folder
    hs_dir = out / "hidden_states"
    hs_dir.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(rows):
        hs = capture(model, r["input_ids"], ids).to(torch_dtype).contiguous()
        token_ids = torch.tensor(r["input_ids"], dtype=torch.long)
        save_file({"hidden_states": hs, "token_ids": token_ids}, str(hs_dir / f"hs_{i}.safetensors"))
    if token_freq:
        torch.save(token_frequencies(rows), out / "token_freq.pt")
    info = {
        "rows": len(rows),
        "aux_layer_ids_vllm": ids,
        "last_slot": f"id {n_layers}: output of decoder layer {n_layers - 1}, before the final norm",
        "hidden_states_shape": f"[T, {len(ids) + 1}, {model.config.hidden_size}]",
        "dtype": dtype,
    }
    (out / "workbench_hidden_states.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="HF Llama-like target folder")
    p.add_argument("--rows", required=True, help="JSONL with input_ids and loss_mask per line")
    p.add_argument("--out", required=True, help="data dir for `speculators train --data-path`")
    p.add_argument("--layer-ids", type=int, nargs="+", default=None,
                   help="aux ids, vLLM convention (id k = input of layer k); default [2, N//2, N-3]")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--seq-length", type=int, default=8192)
    p.add_argument("--token-freq", action="store_true", help="also write token_freq.pt")
    p.add_argument("--overwrite", action="store_true")
    a = p.parse_args(argv)
    info = write_all(a.target, a.rows, a.out, a.layer_ids, a.dtype, a.seq_length, a.token_freq, a.overwrite)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
