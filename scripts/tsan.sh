#!/usr/bin/env bash
# The concurrency checks of .ci/run, built with ThreadSanitizer and run with no report allowed:
# - the device seam's tests (the simulated GPU's queue threads, events and race checker; whole
#   models on it) and the hybrid executor's (the CPU and the simulated GPU computing one layer
#   at the same time), and experts read from the file by a reader thread while layers run;
# - the server: its scheduler unit tests, and the HTTP tests that load it from several client
#   threads at once (more requests than slots, a full queue, clients that disconnect or read
#   slowly, the same text under any load) against an instrumented `powerinfer serve`; a report
#   makes the server exit non-zero, which the tests' fixture fails on.
# A separate build of those targets only, to bound CI time.
# Tests named *Hazard* race on purpose (the sim's checker must see the race) and are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPI_TSAN=ON >/dev/null
ninja -C build-tsan test_backend test_sim_model test_hybrid test_hybrid_ffn test_server test_expert_stream powerinfer
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
build-tsan/bin/test_backend --gtest_filter='-*Hazard*:*HostCannotDereference*'
build-tsan/bin/test_sim_model
build-tsan/bin/test_hybrid_ffn
build-tsan/bin/test_hybrid
build-tsan/bin/test_expert_stream
build-tsan/bin/test_server
PI_BIN="$PWD/build-tsan/bin/powerinfer" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/server/test_server_robustness.py tests/server/test_server_api.py \
  -k 'more_requests_than_slots or queue_full or disconnect or slow_reader or any_slots_and_load'
echo "tsan: no reports"
