#!/usr/bin/env bash
# The concurrency checks of .ci/run: the device seam's tests (the simulated GPU's queue
# threads, events and race checker; whole models on it) and the hybrid executor's (the CPU
# and the simulated GPU computing one layer at the same time) built with ThreadSanitizer, run
# with no report allowed. A separate build of those tests only, to bound CI time.
# Tests named *Hazard* race on purpose (the sim's checker must see the race) and are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPI_TSAN=ON >/dev/null
ninja -C build-tsan test_backend test_sim_model test_hybrid test_hybrid_ffn powerinfer
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
build-tsan/bin/test_backend --gtest_filter='-*Hazard*:*HostCannotDereference*'
build-tsan/bin/test_sim_model
build-tsan/bin/test_hybrid_ffn
build-tsan/bin/test_hybrid
echo "tsan: no reports"
