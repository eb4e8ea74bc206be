#!/usr/bin/env bash
# Rebuild the bundled kjv-relu model from scratch (see docs/TRAINING.md). Run from the repo root.
# Needs: apt-get install bible-kjv bible-kjv-text; pip install -r tools/train/requirements.txt
set -euo pipefail
T=tools/train
python3 $T/prepare_corpus.py
python3 $T/train_tokenizer.py
python3 $T/train_model.py --steps 1200        # add --resume to continue an interrupted run
python3 $T/profile_activations.py
python3 $T/train_predictors.py
python3 $T/golden.py
