#!/usr/bin/env bash
# Install NVIDIA ModelOpt (EAGLE-3 training + export) into its own venv, CPU only.
# Usage: trainers/modelopt/install.sh [VENV]   (default: .venv-modelopt at the repository root)
# Idempotent: a stamp file records a finished install of exactly these pins; rerunning is a no-op.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${1:-$ROOT/.venv-modelopt}"
PYTHON="${PYTHON:-python3}"

# Pins (see README.md). torch first, so nothing later can pull a CUDA torch.
TORCH="torch==2.13.0"
MODELOPT="nvidia-modelopt==0.47.0"
# transformers <5.15 is what modelopt's [hf] extra allows; 5.25 breaks the eagle forward (rotary 'device' kwarg).
HF_PKGS=(transformers==5.14.0 "tokenizers>=0.22,<0.23" "huggingface-hub>=1.0,<2" accelerate safetensors datasets)
# modelopt core Requires-Dist (METADATA, no extras) + requests, which modelopt/torch/utils/dataset_utils.py imports undeclared:
MO_DEPS=(ninja numpy "nvidia-ml-py>=12" packaging "setuptools>=80" tqdm "PyYAML>=6.0" "omegaconf>=2.3.0" "pulp<4.0" "pydantic>=2.0" regex rich scipy requests)
STAMP_TEXT="$TORCH $MODELOPT ${HF_PKGS[*]} ${MO_DEPS[*]}"
STAMP="$VENV/.modelopt-installed"

fail() { echo "install.sh: FAILED: $*" >&2; exit 1; }
t0=$(date +%s)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] && "$VENV/bin/python" -c "from importlib.metadata import version as v; assert v('nvidia-modelopt') == '0.47.0' and v('torch').startswith('2.13.0') and v('transformers') == '5.14.0'" 2>/dev/null; then
  echo "install.sh: $VENV already installed ($(cat "$STAMP" | cut -c1-60)...)"; exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV" || fail "could not create venv $VENV with $PYTHON"
# pip's output minus this machine's warnings about index folders that do not exist
pipi() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
           | grep -v "is neither a file nor a directory"; return "${PIPESTATUS[0]}"; }
pipi "$TORCH"                                     || fail "pip install $TORCH"
pipi --no-deps "$MODELOPT"                        || fail "pip install --no-deps $MODELOPT"
pipi "$TORCH" "${HF_PKGS[@]}" "${MO_DEPS[@]}"     || fail "pip install transformers stack / modelopt deps"
"$VENV/bin/python" - <<'PY' || fail "import check (torch CPU + modelopt.torch.speculative + transformers)"
import torch, transformers, modelopt, modelopt.torch.speculative, modelopt.torch.export  # noqa: F401
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert torch.version.cuda is None, "a CUDA torch got installed"
print(f"install.sh: torch {torch.__version__}  transformers {transformers.__version__}  modelopt {modelopt.__version__}")
PY
echo "$STAMP_TEXT" > "$STAMP"
echo "install.sh: done in $(( $(date +%s) - t0 ))s -> $VENV"
