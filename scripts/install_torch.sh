#!/usr/bin/env bash
# Install PyTorch into the environment of $PYTHON (default: python) unless it has it already.
# With a GPU visible (nvidia-smi), the default index's build, which on Linux is the CUDA one.
# Without, the CPU build from PyTorch's CPU wheel index (about 200 MB, where the default index's
# Linux wheel brings several GB of CUDA libraries); when that index cannot be reached, the
# default index, saying so. TORCH_SPEC names another version, TORCH_INDEX_URL another index.
set -euo pipefail
python=${PYTHON:-python}
if "$python" -c "import torch" 2>/dev/null; then
  exit 0
fi
CPU_INDEX=https://download.pytorch.org/whl/cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  spec=${TORCH_SPEC:-torch} index=${TORCH_INDEX_URL:-}
else
  spec=${TORCH_SPEC:-torch==2.13.0} index=${TORCH_INDEX_URL:-$CPU_INDEX}
fi
if [ -z "$index" ]; then
  echo "installing $spec (a GPU is visible: the CUDA build)"
  "$python" -m pip install --quiet "$spec"
  exit 0
fi
reachable() {  # the index answers within 15 s
  "$python" - "$1" 2>/dev/null <<'PY'
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=15)
PY
}
if reachable "$index"; then
  echo "installing $spec from $index"
  "$python" -m pip install --quiet --index-url "$index" "$spec" && exit 0
fi
echo "$index cannot be reached (or lacks $spec): installing $spec from the default index" \
     "instead (on Linux its wheel brings CUDA libraries, several GB)"
"$python" -m pip install --quiet "$spec"
