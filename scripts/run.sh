#!/usr/bin/env bash
# README's first command: installs what is needed, builds, and runs the main job: text
# generation with the bundled PowerInfer model (sparse FFN driven by its predictors).
# Extra arguments are passed to `powerinfer run`, e.g. scripts/run.sh -p "And God said" -n 128
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
model=models/kjv-relu/kjv-relu.pwri.gguf
if [ "$#" -eq 0 ]; then
  set -- -p "In the beginning" -n 96 --seed 1 --repeat-penalty 1.1
fi
exec build/bin/powerinfer run -m "$model" "$@"
