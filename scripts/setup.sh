#!/usr/bin/env bash
# Create .venv (or $VENV) and install translate into it, with the test extras.
# PyTorch: an existing install is kept; otherwise the CUDA build is installed where nvidia-smi
# sees a GPU, and the CPU build (torch==2.13.0, or $TORCH_SPEC) elsewhere, so a CPU machine
# never downloads the multi-GB CUDA wheels. Set TORCH_INDEX_URL to pick a wheel index, e.g.
# https://download.pytorch.org/whl/cpu on a CPU machine that can reach it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    spec=${TORCH_SPEC:-torch}
  else
    spec=${TORCH_SPEC:-torch==2.13.0}
  fi
  echo "installing $spec"
  python -m pip install --quiet ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$spec"
fi
python -m pip install --quiet -e ".[test,plots,serve,export]"
python -c "import torch, translate; print(f'translate {translate.__version__}, torch {torch.__version__}')"
