#!/usr/bin/env bash
# Rebuild the bundled kjv-relu model from scratch (see docs/TRAINING.md). Run from the repo root.
# Needs: apt-get install bible-kjv bible-kjv-text; pip install -r tools/train/requirements.txt
# --moe: build the mixture of experts models/kjv-moe instead (steps 1-2, then its training,
# conversion, routing profile and golden logits).
set -euo pipefail
T=tools/train
python3 $T/prepare_corpus.py
python3 $T/train_tokenizer.py
if [ "${1:-}" = "--moe" ]; then
  python3 $T/train_model.py --arch smallthinker --steps 800    # add --resume to continue
  python3 tools/convert/convert_hf.py $T/work/hf-moe --outfile models/kjv-moe/kjv-moe.gguf \
    --outtype q8_0 --transpose-down --name kjv-moe
  python3 $T/profile_moe.py
  python3 $T/golden.py --moe
  exit 0
fi
python3 $T/train_model.py --steps 1200        # add --resume to continue an interrupted run
python3 $T/profile_activations.py
python3 $T/train_predictors.py
python3 $T/golden.py
