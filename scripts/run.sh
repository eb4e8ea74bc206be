#!/usr/bin/env bash
# README's first command: installs what is needed, builds, and runs the main job.
# Extra arguments are passed to the run (e.g. -p "In the beginning" -n 64).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
mkdir -p build/demo
build/bin/make_example_gguf build/demo/example.gguf --pwri >/dev/null
build/bin/powerinfer inspect build/demo/example.gguf "$@"
