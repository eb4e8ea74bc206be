#!/usr/bin/env bash
# README's second command: installs what is needed, builds, and runs the whole test
# suite (labels fast and slow; gpu tests skip themselves without a device).
# `scripts/test.sh -L fast` runs only the fast tests; other arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
