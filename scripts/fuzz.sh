#!/usr/bin/env bash
# Fuzzes the GGUF parser with libFuzzer for a bounded time (default 120 s), growing the
# corpus in tests/fuzz/corpus. Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DPI_FUZZ=ON -DPI_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz fuzz_gguf
mkdir -p build-fuzz/corpus
cp -n tests/fuzz/corpus/* build-fuzz/corpus/ 2>/dev/null || true
build-fuzz/bin/fuzz_gguf build-fuzz/corpus -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1
# Keep a minimised set of inputs as the regression corpus.
build-fuzz/bin/fuzz_gguf -merge=1 tests/fuzz/corpus build-fuzz/corpus >/dev/null 2>&1 || true
