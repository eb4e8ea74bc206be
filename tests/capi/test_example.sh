#!/usr/bin/env bash
# examples/simple (C, on libpowerinfer.so) prints the same greedy text as `powerinfer run
# --temp 0 --no-display-prompt`, byte for byte; a missing file is a one-line error, exit 1.
set -euo pipefail
simple=$1 powerinfer=$2 model=$3
got=$("$simple" "$model" "In the beginning" 48)
want=$("$powerinfer" run -m "$model" -p "In the beginning" -n 48 --temp 0 --no-display-prompt 2>/dev/null)
if [ "$got" != "$want" ]; then
  printf 'FAIL: simple printed\n%s\npowerinfer run printed\n%s\n' "$got" "$want" >&2
  exit 1
fi
set +e
err=$("$simple" /nonexistent/model.gguf "x" 4 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: a missing model exited $rc" >&2; exit 1; }
[ "$(echo "$err" | wc -l)" -eq 1 ] && [[ $err == *"/nonexistent/model.gguf"* ]] ||
  { echo "FAIL: the error was: $err" >&2; exit 1; }
echo "example: simple's text equals powerinfer run's; a missing file is one line, exit 1"
