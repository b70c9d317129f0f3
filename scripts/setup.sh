#!/usr/bin/env bash
# Create .venv (or $VENV) and install translate into it, with the test extras.
# PyTorch (scripts/install_torch.sh): an existing install is kept; otherwise the CUDA build where
# nvidia-smi sees a GPU, and elsewhere the CPU build (torch==2.13.0, or $TORCH_SPEC) from
# PyTorch's CPU wheel index, falling back, with a line saying so, to the default index when that
# cannot be reached. TORCH_INDEX_URL picks another index.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
PYTHON=python bash scripts/install_torch.sh
python -m pip install --quiet -e ".[test,plots,serve,export]"
python -c "import torch, translate; print(f'translate {translate.__version__}, torch {torch.__version__}')"
