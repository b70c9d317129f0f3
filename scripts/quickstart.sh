#!/usr/bin/env bash
# Set up, train the Multi30k Transformer for a short budget (the size of the default recipe's
# ladder that this machine trains furthest in it: train.size auto), translate the test set, print BLEU,
# then a few test translations beside their references and the commands to try next.
#   bash scripts/quickstart.sh                 # 10 minutes of training (MINUTES=60 for the full recipe)
# Data: $TRANSLATE_DATA if set, else the local copy at ../shared/data/multi30k if it exists,
# else the Hugging Face hub (bentrevett/multi30k). SKIP_SETUP=1 uses the .venv as it is (the
# Docker image, which was set up when it was built).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
fi
if [ -z "${TRANSLATE_DATA:-}" ] && [ -d ../shared/data/multi30k ]; then
  export TRANSLATE_DATA=../shared/data/multi30k
fi
MINUTES=${MINUTES:-10}
run="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
.venv/bin/python scripts/quickstart.py expect "$MINUTES"
.venv/bin/translate train recipes/multi30k/transformer.yaml \
  --set train.size=auto --set "train.max_minutes=$MINUTES" \
  --set "train.eval_every_minutes=$(python3 -c "print(max(1, $MINUTES / 5))")" \
  --run-dir "$run" "$@"
.venv/bin/python scripts/quickstart.py show "$run"
