#!/usr/bin/env bash
# swiftbox front door: installs on first use, then runs `python -m swiftbox "$@"`.
# No arguments opens the menu; ./launch.sh --help lists the commands.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SWIFTBOX_VENV:-$ROOT/.venv}"
"$ROOT/install.sh"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# gptqmodel crashes on <=2 cores without an explicit worker count
if [ -z "${GPTQMODEL_CPU_WORKERS:-}" ] && [ "$(nproc 2>/dev/null || echo 4)" -le 2 ]; then export GPTQMODEL_CPU_WORKERS=2; fi
exec "$VENV/bin/python" -m swiftbox "$@"
