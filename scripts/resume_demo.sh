#!/usr/bin/env bash
# Crash and resume: train a tiny Transformer, kill -9 it at a random step, resume, check the log.
#   bash scripts/resume_demo.sh            # about 2 minutes on 2 CPU cores
# Data: $TRANSLATE_DATA if set, else ../shared/data/multi30k. PYTHON defaults to .venv/bin/python.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${TRANSLATE_DATA:-../shared/data/multi30k}
RUN=${RUN:-runs/resume-demo-$(date +%Y%m%d-%H%M%S)}
SETS=(--set model.d_model=64 --set model.ffn_dim=128 --set model.encoder_layers=2
      --set model.decoder_layers=2 --set tokenizer.vocab_size=2000 --set train.max_tokens=2000
      --set train.warmup=100 --set train.lr=3e-3 --set train.max_minutes=0
      --set train.eval_every_minutes=0 --set train.eval_every=100 --set train.log_every=10
      --set train.save_every=50 --set train.max_steps=400)

last_step() {  # the step of the log's last complete record, 0 before there is one
  "$PYTHON" -c 'import json, sys
lines = [l for l in open(sys.argv[1]) if l.endswith("\n")] if len(sys.argv) > 1 else []
print(json.loads(lines[-1])["step"] if lines else 0)' "$@" 2>/dev/null || echo 0
}

"$PYTHON" -m translate train recipes/multi30k/transformer.yaml --data "$DATA" --run-dir "$RUN" \
  --no-progress "${SETS[@]}" > /dev/null 2>&1 &
PID=$!
KILL_AT=$((RANDOM % 200 + 120))
echo "training in $RUN (pid $PID); kill -9 once the log passes step $KILL_AT"
until [ -f "$RUN/metrics.jsonl" ] && [ "$(last_step "$RUN/metrics.jsonl")" -ge "$KILL_AT" ]; do
  kill -0 "$PID" 2> /dev/null || { echo "training ended early; see $RUN/train.log"; exit 1; }
  sleep 0.2
done
kill -9 "$PID"; wait "$PID" 2> /dev/null
echo "killed at step $(last_step "$RUN/metrics.jsonl"); checkpoints: $(cd "$RUN" && echo *.pt)"
"$PYTHON" -m translate train --resume "$RUN" --no-progress 2>&1 | grep -E "resuming|^step|best checkpoint"
"$PYTHON" - "$RUN/metrics.jsonl" <<'EOF'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
for kind, every in (("train", 10), ("valid", 100)):
    steps = [r["step"] for r in records if r["kind"] == kind]
    assert steps == list(range(every, 401, every)), steps
    print(f"{kind}: steps {steps[0]}..{steps[-1]} every {every}, no gap, no duplicate")
EOF
