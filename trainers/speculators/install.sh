#!/usr/bin/env bash
# Install speculators 0.9.0 (vllm-project/speculators) into its own venv, CPU torch 2.13.0.
#   bash trainers/speculators/install.sh [VENV]      (default: .venv-speculators beside the repo root)
# Idempotent: reuses the venv, pip skips what is already satisfied; a second run takes ~10 s.
# Order matters: torch==2.13.0 first (this machine's local +cpu wheel) so nothing pulls a CUDA torch.
# speculators and hs-connectors go in --no-deps, then speculators' declared requirements less
# torchvision/torchaudio (built for another torch; nothing on the train path imports them).
# transformers is capped at 5.19 by speculators (the project's own venv has 5.25: keep them apart).
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${1:-$HERE/../../.venv-speculators}"
PYTHON="${PYTHON:-python3}"
LOG="$VENV/install.log"
start=$(date +%s)

fail() { echo "install.sh: FAILED at: $1 (log: $LOG)"; exit 1; }
STAMP="$VENV/.speculators-installed"
STAMP_TEXT="torch==2.13.0 speculators==0.9.0 hs-connectors==0.9.0 transformers<=5.19.0"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] && "$VENV/bin/python" -c "from importlib.metadata import version as v; assert v('speculators') == '0.9.0' and v('torch').startswith('2.13.0')" 2>/dev/null; then
  echo "install.sh: $VENV already installed ($STAMP_TEXT)"; exit 0
fi

mkdir -p "$VENV" 2>/dev/null && : > "$LOG" 2>/dev/null || { echo "install.sh: FAILED at: cannot write $LOG"; exit 1; }
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV" >> "$LOG" 2>&1 || fail "creating venv $VENV with $PYTHON"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install torch==2.13.0 >> "$LOG" 2>&1 || fail "pip install torch==2.13.0"
"${PIP[@]}" install --no-deps speculators==0.9.0 hs-connectors==0.9.0 >> "$LOG" 2>&1 \
  || fail "pip install --no-deps speculators==0.9.0 hs-connectors==0.9.0"
"${PIP[@]}" install torch==2.13.0 aiohttp click "datasets>=4.0.0,<=5.1.0" httpx huggingface-hub \
  "loguru>=0.7.2,<=0.7.3" "numpy>=2.0.0,<=2.5.4" "openai>=2.0.0" protobuf psutil "pydantic>=2.0.0" \
  "pydantic-settings>=2.0.0" rich safetensors "tqdm>=4.66.3,<=4.70.1" "transformers>=5.0.0,<=5.19.0" \
  "typer>=0.12.0" >> "$LOG" 2>&1 || fail "pip install speculators' requirements"
"$VENV/bin/python" - >> "$LOG" 2>&1 <<'EOF' || fail "import check (torch CPU 2.13.0, speculators 0.9.0, transformers<=5.19)"
import sys, torch, transformers, speculators.train.cli, speculators.__main__
from importlib.metadata import version
ok = (torch.__version__.startswith("2.13.0") and torch.version.cuda is None
      and version("speculators") == "0.9.0")
print("torch", torch.__version__, "transformers", transformers.__version__, "speculators", version("speculators"))
sys.exit(0 if ok else "wrong torch or speculators version")
EOF
echo "$STAMP_TEXT" > "$STAMP"
echo "speculators 0.9.0 ready in $VENV ($(tail -1 "$LOG"); $(( $(date +%s) - start )) s)"
