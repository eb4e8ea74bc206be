#!/usr/bin/env bash
# libpowerinfer.so exports the C API and nothing else: every defined dynamic symbol starts with
# pi_, and every function the header declares is there.
set -euo pipefail
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
others=$(echo "$exported" | grep -v '^pi_' || true)
if [ -n "$others" ]; then
  echo "FAIL: $lib exports symbols outside the C API:" >&2
  echo "$others" | head -20 >&2
  exit 1
fi
declared=$(grep -oE 'PI_API [^(]*\b(pi_[a-z0-9_]+)\(' "$header" | grep -oE 'pi_[a-z0-9_]+\($' | tr -d '(' | sort)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "FAIL: declared in $header but not exported: $missing" >&2
  exit 1
fi
echo "abi: $(echo "$exported" | wc -l) symbols, all pi_*, every declared function exported"
