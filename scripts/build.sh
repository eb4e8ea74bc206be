#!/usr/bin/env bash
# Configures and builds the whole project, tests included, into build/ (Release, native ISA by
# default). Extra arguments go to cmake, e.g. scripts/build.sh -DPI_PORTABLE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_BUILD_TESTS=ON "$@" >/dev/null
ninja -C build
