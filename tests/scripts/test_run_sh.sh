#!/usr/bin/env bash
# scripts/run.sh as a newcomer runs it (README's first command), in a scratch build directory:
# it must configure and build the `powerinfer` binary alone (no test binaries, no GoogleTest),
# generate the same text as the suite's own binary, and on a second call build nothing and
# generate at once. Usage: test_run_sh.sh REPO POWERINFER (the suite's binary, the oracle).
set -euo pipefail
repo=$1 oracle=$2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/pi_run_sh.XXXXXX")
# The build tree beside build/ in the checkout (build-*/ is ignored), as a user's second tree
# would be: with ccache installed it reuses the suite's objects (their paths hash alike).
tree=$(mktemp -d "$repo/build-run-sh.XXXXXX")
trap 'rm -rf "$scratch" "$tree"' EXIT
args=(-p "In the beginning" -n 24 --seed 3 --temp 0.7)
fail() { echo "FAIL: $*" >&2; exit 1; }

PI_BUILD_DIR="$tree" "$repo/scripts/run.sh" "${args[@]}" >"$scratch/out1" 2>"$scratch/err1" ||
  { cat "$scratch/err1" >&2; fail "scripts/run.sh exited non-zero"; }
[ -x "$tree/bin/powerinfer" ] || fail "no powerinfer binary in the scratch build"
built=$(find "$tree/bin" -maxdepth 1 -type f -executable -printf '%f\n' | sort | tr '\n' ' ')
[ "$built" = "powerinfer " ] || fail "run.sh built more than the binary: $built"
grep -q "PI_BUILD_TESTS:BOOL=OFF" "$tree/CMakeCache.txt" || fail "the scratch build has the tests on"
if grep -q "GTest_DIR\|GTEST_INCLUDE_DIR" "$tree/CMakeCache.txt"; then
  fail "the scratch build looked for GoogleTest"
fi

"$oracle" run -m "$repo/models/kjv-relu/kjv-relu.pwri.gguf" "${args[@]}" >"$scratch/want" 2>/dev/null
[ -s "$scratch/out1" ] || fail "run.sh printed no text"
cmp -s "$scratch/out1" "$scratch/want" || {
  diff "$scratch/out1" "$scratch/want" >&2 || true
  fail "run.sh's text differs from powerinfer run's"
}

# A second run: nothing to configure, compile or link (ninja only refreshes the build-info
# header, which is rewritten only when its text changes).
PI_BUILD_DIR="$tree" "$repo/scripts/run.sh" "${args[@]}" >"$scratch/out2" 2>"$scratch/err2" ||
  { cat "$scratch/err2" >&2; fail "the second scripts/run.sh exited non-zero"; }
if grep -E "Building|Linking|Re-running CMake" "$scratch/err2" >&2; then
  fail "the second run.sh rebuilt something"
fi
cmp -s "$scratch/out2" "$scratch/want" || fail "the second run's text differs"
echo "run.sh: built only powerinfer; text identical to powerinfer run; second run built nothing"
