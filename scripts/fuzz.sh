#!/usr/bin/env bash
# Fuzzes a parser with libFuzzer for a bounded time (default 120 s), growing its corpus:
# the GGUF parser (tests/fuzz/corpus) or the grammar layer, GBNF and JSON Schema
# (tests/fuzz/corpus_grammar). Usage: scripts/fuzz.sh [SECONDS] [gguf|grammar]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
what=${2:-gguf}
case ${what} in
  gguf) corpus=tests/fuzz/corpus ;;
  grammar) corpus=tests/fuzz/corpus_grammar ;;
  *) echo "scripts/fuzz.sh: unknown target '${what}' (gguf or grammar)" >&2; exit 2 ;;
esac
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DPI_FUZZ=ON -DPI_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz "fuzz_${what}"
mkdir -p "build-fuzz/corpus_${what}"
cp -n "${corpus}"/* "build-fuzz/corpus_${what}/" 2>/dev/null || true
"build-fuzz/bin/fuzz_${what}" "build-fuzz/corpus_${what}" -max_total_time="$secs" -max_len=4096 \
  -rss_limit_mb=2048 -print_final_stats=1
# Keep a minimised set of inputs as the regression corpus.
"build-fuzz/bin/fuzz_${what}" -merge=1 "${corpus}" "build-fuzz/corpus_${what}" >/dev/null 2>&1 || true
