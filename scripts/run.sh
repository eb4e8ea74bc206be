#!/usr/bin/env bash
# README's first command: installs what building needs, builds the `powerinfer` binary alone
# (not the tests: scripts/test.sh builds those), and runs the main job: text generation with
# the bundled PowerInfer model (sparse FFN driven by its predictors). A second run configures
# nothing and builds nothing that is up to date, so it starts generating at once.
# Extra arguments are passed to `powerinfer run`, e.g. scripts/run.sh -p "And God said" -n 128
# PI_BUILD_DIR chooses the build directory (default build/, shared with scripts/test.sh).
# Only the generated text goes to stdout; installing and building report on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PI_BUILD_DIR:-build}
scripts/install-deps.sh --build >&2
if [ ! -f "$build/build.ninja" ]; then
  # A fresh build directory: without the tests there is no GoogleTest to find or compile.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_BUILD_TESTS=OFF >/dev/null
fi
ninja -C "$build" powerinfer >&2
model=models/kjv-relu/kjv-relu.pwri.gguf
if [ "$#" -eq 0 ]; then
  set -- -p "In the beginning" -n 96 --seed 1 --repeat-penalty 1.1
fi
exec "$build/bin/powerinfer" run -m "$model" "$@"
