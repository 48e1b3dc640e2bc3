#!/usr/bin/env bash
# End to end on CPU: tiny random Llama target -> hidden states (project venv, no speculators) ->
# `speculators train` through run.py (.venv-speculators) -> exported draft: config.json + tensors.
#   bash trainers/speculators/e2e_tiny.sh [WORK_DIR]    (default /tmp/wb-spec-e2e)
# HS_PY picks the python for write_hidden_states.py (default: the project's .venv, else SPEC_PY).
set -eu
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="${1:-/tmp/wb-spec-e2e}"
SPEC_PY="${SPEC_PY:-$ROOT/.venv-speculators/bin/python}"
HS_PY="${HS_PY:-$ROOT/.venv/bin/python}"
test -x "$HS_PY" || HS_PY="$SPEC_PY"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" COLUMNS="${COLUMNS:-160}"
rm -rf "$WORK" && mkdir -p "$WORK"
t0=$(date +%s)

"$SPEC_PY" "$HERE/make_tiny.py" "$WORK" --layers 4 --rows 12
PYTHONDONTWRITEBYTECODE=1 "$HS_PY" "$HERE/write_hidden_states.py" --target "$WORK/target" \
  --rows "$WORK/rows.jsonl" --out "$WORK/data" --layer-ids 1 2 3 --dtype bfloat16 --token-freq
t1=$(date +%s)

# 1 draft layer, reduced draft vocab 128 of 512 (d2t/t2d built by speculators from token_freq.pt),
# a few optimizer steps over 2 epochs (3 packed batches per epoch), sdpa attention, eager loss.
"$SPEC_PY" "$HERE/run.py" --speculator-type eagle3 --verifier-name-or-path "$WORK/target" \
  --data-path "$WORK/data" --save-path "$WORK/ckpt" --target-layer-ids 1 2 3 --num-layers 1 \
  --draft-vocab-size 128 --mask-token-id 0 --total-seq-len 128 --num-workers 0 \
  --epochs 2 --lr 1e-3 --seed 0 --on-missing raise \
  --draft-attn-impl sdpa --loss-implementation eager > "$WORK/train.log" 2>&1 \
  || { tail -30 "$WORK/train.log"; echo "e2e: training FAILED (log $WORK/train.log)"; exit 1; }
t2=$(date +%s)

EXPORT="$WORK/ckpt/checkpoint_best"
echo "== exported draft: $EXPORT -> $(readlink "$EXPORT")"; ls "$EXPORT"
echo "== config.json"; cat "$EXPORT/config.json"
"$SPEC_PY" - "$EXPORT" <<'EOF'
import sys, json, torch
from safetensors import safe_open
d = sys.argv[1]
with safe_open(f"{d}/model.safetensors", "pt") as f:
    print("== tensors")
    for k in sorted(f.keys()):
        t = f.get_tensor(k)
        print(f"{k} {list(t.shape)} {str(t.dtype).replace('torch.', '')}")
    d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
ids = torch.arange(d2t.numel()) + d2t
assert t2d.dtype == torch.bool and d2t.dtype == torch.int64 and int(t2d.sum()) == d2t.numel()
assert torch.equal(torch.nonzero(t2d).flatten(), ids), "d2t offsets and t2d disagree"
from speculators.models.eagle3 import Eagle3DraftModel  # reloads as speculators would
m = Eagle3DraftModel.from_pretrained(d)
print("== reload ok:", type(m).__name__, "aux ids", m.config.eagle_aux_hidden_state_layer_ids,
      "draft vocab", m.config.draft_vocab_size, "d2t/t2d consistent")
EOF
echo "e2e ok: hidden states $((t1 - t0)) s, training+export $((t2 - t1)) s (log $WORK/train.log)"
