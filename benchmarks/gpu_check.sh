#!/usr/bin/env bash
# The checks a lent CUDA machine is for, in one call, each step under its own time limit so that
# a slow one leaves the rest their turn: the gpu-marked tests; training throughput on the GPU
# (ours with the fast engine and without, against Hugging Face MarianMT, then compiled); two
# revisions' training steps A/B on the GPU (is the CPU speed work slowing CUDA?); the default
# test suite, which hides the GPU and runs on the CPU (tests/conftest.py), on that machine's
# packages. Logs and JSON go to OUT.
#
#   git archive REV translate recipes | tar -x -C .gpu/base     # here, with the history
#   cp -r ../shared/data/multi30k .gpu/                          # the data does not travel
#   bash benchmarks/gpu_check.sh .gpu/multi30k "$OUT" .gpu/base  # there (the device tool's OUT)
set -uo pipefail
data=$1 out=$2 base=${3:-}
cd "$(dirname "$0")/.."  # the repository, importable by the benchmarks
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

step() {  # step NAME SECONDS COMMAND...: run it, log it, note its exit status
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%T), limit ${limit}s)"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  grep -E "FAILED|ERROR" "$out/$name.log" | head -n 40
  tail -n 25 "$out/$name.log"
  echo "== $name: exit $rc"
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
step gpu_tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
step train_speed 180 python3 benchmarks/train_speed.py --device cuda --data "$data" \
  --precisions fp32,bf16 --max-tokens 16384 --rounds 5 --steps 8 \
  --json "$out/train_speed-cuda.json"
if [ -n "$base" ]; then
  step ab_train 150 python3 benchmarks/ab_train.py "$base" . --device cuda --precisions bf16 \
    --data "$data" --rounds 5 --steps 8 --json "$out/ab_train-cuda.json"
fi
step train_speed_compiled 150 python3 benchmarks/train_speed.py --device cuda --data "$data" \
  --precisions bf16 --max-tokens 16384 --rounds 5 --steps 8 --compile \
  --json "$out/train_speed-cuda-compiled.json"
step test_suite 240 python3 -m pytest -v -p no:cacheprovider -rfE -n 8 tests  # -v: each failure named as it comes
