#!/usr/bin/env bash
# Configures and builds the whole project, tests included, into build/ (Release, native ISA by
# default), with the Python extension built by the project's .venv (scripts/install-deps.sh)
# for the Python package's tests. Extra arguments go to cmake, e.g. scripts/build.sh -DPI_PORTABLE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_BUILD_TESTS=ON \
  -DPI_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" "$@" >/dev/null
ninja -C build
