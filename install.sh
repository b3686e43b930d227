#!/usr/bin/env bash
# Creates .venv, detects the accelerator and installs swiftbox with the matching extras. Idempotent:
# a second run with the same pyproject.toml and extras only checks a stamp.
#   SWIFTBOX_EXTRAS=cpu|cuda|npu|"quant,serve,dev"  override the detected extras
#   SWIFTBOX_VENV=DIR                               venv location (default ./.venv)
#   SWIFTBOX_PYTHON=python3.11                      interpreter for the venv
#   SWIFTBOX_TORCH_INDEX=URL                        extra index for torch (e.g. the PyTorch CPU index)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SWIFTBOX_VENV:-$ROOT/.venv}"
PY="${SWIFTBOX_PYTHON:-python3}"
TORCH_CPU="2.13.0"

detect() {
  if command -v npu-smi >/dev/null 2>&1 && npu-smi info >/dev/null 2>&1; then echo npu
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo cuda
  else echo cpu; fi
}
ACCEL="$(detect)"
case "${SWIFTBOX_EXTRAS:-$ACCEL}" in
  cpu)  EXTRAS="quant,serve,dev" ;;
  cuda) EXTRAS="cuda,dev" ;;
  npu)  EXTRAS="npu,dev" ;;
  *)    EXTRAS="$SWIFTBOX_EXTRAS" ;;
esac

STAMP="$VENV/.swiftbox-installed"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/install.sh" | sha256sum | cut -c1-16) $EXTRAS"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi

echo "swiftbox install: accelerator=$ACCEL extras=[$EXTRAS] venv=$VENV" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
INDEX=()
[ -n "${SWIFTBOX_TORCH_INDEX:-}" ] && INDEX=(--extra-index-url "$SWIFTBOX_TORCH_INDEX")

# 1. torch first, then pin it: nothing later may replace it (a CPU box must never get a CUDA torch,
#    an accelerator image keeps the torch its vendor built: torch_npu and vLLM pair with it).
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  if [ "$ACCEL" = cpu ]; then
    "${PIP[@]}" "${INDEX[@]}" "torch==$TORCH_CPU"
  else
    "${PIP[@]}" "${INDEX[@]}" "torch>=2.11"
  fi
fi
TORCH_VERSION="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
CONSTRAINTS="$VENV/swiftbox-constraints.txt"
echo "torch==$TORCH_VERSION" >"$CONSTRAINTS"
if [ "$ACCEL" = cpu ] && "$VENV/bin/python" -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)'; then
  echo "swiftbox install: warning: torch $TORCH_VERSION is a CUDA build on a machine without a GPU;" \
       "set SWIFTBOX_TORCH_INDEX to the PyTorch CPU index and remove $VENV to reinstall" >&2
fi

# 2. swiftbox and its extras, with torch held where it is
"${PIP[@]}" -c "$CONSTRAINTS" -e "$ROOT[$EXTRAS]"
echo "$WANT" >"$STAMP"
echo "swiftbox install: done (torch $TORCH_VERSION)" >&2
