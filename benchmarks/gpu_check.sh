#!/usr/bin/env bash
# The checks a lent CUDA machine is for, in parts that fit a short window (about 15 minutes,
# machine start included, at most 10 a call), each step under its own time limit so that a slow
# one leaves the rest their turn. Logs, JSON and OUT/summary.json (benchmarks/gpu_summary.py)
# go to OUT; plan the next change offline from them.
#
#   bash benchmarks/gpu_check.sh [--parts LIST] [--dry-run] DATA OUT [BASE]
#
# Parts (default speed,tests), with their limits:
#   speed    ~4 min: training throughput and MFU against a bf16 matmul peak timed in the same
#            run, each against MarianMT at the same shapes: the Multi30k model on real batches
#            (fp32, bf16), WMT14 base and big on synthetic batches of 25k tokens (bf16); then a
#            torch.profiler summary of a Multi30k step (top kernels, idle share) as profile.txt
#            (WMT14 shapes also with train.loss_chunk: speed and peak memory without the logits)
#   quality  ~6 min: the Multi30k Transformer recipe trained 5 minutes on the GPU, its best
#            checkpoint scored on test_2016_flickr at beam 5, its dev BLEU against seconds
#   decode   ~3 min: that checkpoint (run quality first, into the same OUT) decoding
#            test_2016_flickr greedy and at beam 5 on the GPU: the plain and gpu engines in
#            fp32 and bf16 against HF generate (and CTranslate2 where its wheel has CUDA)
#   tests    ~2 min: the tests marked gpu (pytest -m gpu)
#   ab       ~3 min: training steps of revision BASE (a folder) against this one, on the GPU
#   suite    ~4 min: the default suite on that machine's packages (it runs on the CPU there)
# --dry-run runs every part but the suite on the CPU with tiny sizes (about a minute): the
# summary's figures are meaningless, its keys all there. The default test suite runs it.
#
#   git archive REV translate recipes | tar -x -C .gpu/base     # here, with the history
#   cp -r ../shared/data/multi30k .gpu/                          # the data does not travel
#   bash benchmarks/gpu_check.sh --parts speed,tests .gpu/multi30k "$OUT" .gpu/base  # there
# Each run's OUT/summary.json is committed as benchmarks/results/gpu/<date>-<card>.json.
set -uo pipefail
parts=speed,tests dry=0
while [ $# -gt 0 ]; do
  case $1 in
    --parts) parts=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: bash benchmarks/gpu_check.sh [--parts speed,quality,decode,tests,ab,suite]" \
    "[--dry-run] DATA OUT [BASE]" >&2
  exit 2
fi
for part in ${parts//,/ }; do
  case $part in
    speed|quality|decode|tests|ab|suite) ;;
    *) echo "Error: --parts: '$part' is not one of speed, quality, decode, tests, ab, suite" >&2
       exit 2 ;;
  esac
done
if [ ! -d "$1" ]; then
  echo "Error: DATA $1 is not a folder (a local Multi30k copy, as ../shared/data/multi30k)" >&2
  exit 2
fi
data=$(realpath "$1") out=$(realpath -m "$2") base=${3:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."  # the repository, importable by the benchmarks
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python=${PYTHON:-python3}
failed=0

step() {  # step NAME SECONDS COMMAND...: run it, log it, note its exit status
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%T), limit ${limit}s)"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  grep -E "FAILED|ERROR|Error" "$out/$name.log" | head -n 20
  tail -n 12 "$out/$name.log"
  echo "== $name: exit $rc"
  [ $rc -eq 0 ] || failed=1
}
has() { [[ ",$parts," == *",$1,"* ]]; }

if [ $dry = 1 ]; then  # the CPU, tiny sizes: every command and path, none of the figures
  device=cpu shape=tiny m30k_shape=tiny tokens=600 big_tokens=600 rounds=1 steps=2 multiple=8
  matmul=256  # 1024^3 in bf16 takes seconds on a CPU without bf16 kernels (AVX2 only)
  chunk=100 decoding=(--limit 12 --rounds 1 --check 2 --peers "")
  quality=(--set model.d_model=64 --set model.heads=4 --set model.ffn_dim=128
           --set model.encoder_layers=1 --set model.decoder_layers=1
           --set tokenizer.vocab_size=500 --set train.max_tokens=1000 --set train.max_steps=20
           --set train.eval_every=20 --set train.max_minutes=0 --set train.warmup=10
           --set train.eval_every_minutes=0)
else
  device=cuda shape= m30k_shape=multi30k tokens=16384 big_tokens=25000 rounds=5 steps=8 multiple=8
  matmul=0  # the device's: 8192^3
  chunk=4096 decoding=(--rounds 2)
  quality=(--set train.max_minutes=5 --set train.eval_every_minutes=1 --set train.eval_every=0)
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
fi
$python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name()
            if torch.cuda.is_available() else 'no CUDA device')"

if has speed; then
  step train_speed-multi30k 150 $python benchmarks/train_speed.py --device $device \
    --data "$data" --shape $m30k_shape --precisions fp32,bf16 --max-tokens $tokens \
    --length-multiple $multiple --rounds $rounds --steps $steps --cuda-graphs \
    --matmul-size $matmul --json "$out/train_speed-multi30k.json"
  for model in base big; do
    step train_speed-$model 120 $python benchmarks/train_speed.py --device $device \
      --shape "${shape:-$model}" --precisions bf16 --max-tokens $big_tokens \
      --length-multiple $multiple --rounds $((rounds < 3 ? rounds : 3)) --steps $steps \
      --cuda-graphs --loss-chunk $chunk --matmul-size $matmul \
      --json "$out/train_speed-$model.json"
  done
  step profile 90 $python benchmarks/profile_step.py --device $device --data "$data" \
    --shape $m30k_shape --max-tokens $tokens --steps $steps --json "$out/profile.json" \
    --text "$out/profile.txt"
fi
if has quality; then
  rm -rf "$out/quality-run"
  step quality-train 420 $python -m translate train recipes/multi30k/transformer.yaml \
    --data "$data" --run-dir "$out/quality-run" --device $device --no-progress \
    --set 'data.test_splits=[]' "${quality[@]}"
  $python -m translate evaluate "$out/quality-run/best.pt" --split test_2016_flickr --beam 5 \
    --device $device --json > "$out/quality-test.json" 2> "$out/quality-test.log" || failed=1
fi
if has decode; then
  if [ -f "$out/quality-run/best.pt" ]; then
    step decode 200 $python benchmarks/decode.py "$out/quality-run/best.pt" --data "$data" \
      --device $device "${decoding[@]}" --json "$out/decode.json"
  else
    echo "== decode: no $out/quality-run/best.pt; run the quality part first"; failed=1
  fi
fi
if has tests; then
  step gpu_tests 150 $python -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu/test_on_cuda.py
fi
if has ab && [ -n "$base" ] && [ $dry = 0 ]; then
  step ab_train 180 $python benchmarks/ab_train.py "$base" . --device cuda --precisions bf16 \
    --data "$data" --rounds 5 --steps 8 --json "$out/ab_train-cuda.json"
fi
if has suite && [ $dry = 0 ]; then  # -v: each failure named as it comes
  step test_suite 240 $python -m pytest -v -p no:cacheprovider -rfE tests
fi
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
$python benchmarks/gpu_summary.py "$out" --commit "$commit" > "$out/summary.log" 2>&1 || failed=1
tail -n 30 "$out/summary.log"
exit $failed
