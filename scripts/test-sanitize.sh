#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer run of the fast unit tests of the layers
# (core, tensor, gguf, kernels (with the GPU kernels' arithmetic on the host), tokenizer, grammar,
# model and its mixture-of-experts FFN, sparse, runtime, and the
# server's request parsing and scheduler and the chat templates, which read what clients and
# model files send, and the C API), once per kernel ISA
# (PI_KERNELS_ISA=scalar and avx2; the best one too where the CPU has AVX-512). Any report
# fails the run. The CLI tests are left out: they run the powerinfer binary many times and
# exercise no code the unit tests do not. Build dir: build-asan. Arguments go to each test
# binary (e.g. --gtest_filter=...).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(test_core test_tensor test_gguf test_kernels_ref test_kernels_cpu test_cuda_host_math
         test_tokenizer test_grammar test_model test_moe test_sparse test_runtime
         test_chat test_server test_capi fuzz_gguf_replay fuzz_grammar_replay)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_SANITIZE=ON >/dev/null
ninja -C build-asan "${targets[@]}"
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
isas=(scalar avx2)
grep -q avx512vbmi /proc/cpuinfo && isas+=(best)
for isa in "${isas[@]}"; do
  echo "== sanitizers, PI_KERNELS_ISA=${isa}"
  if [[ ${isa} == best ]]; then unset PI_KERNELS_ISA; else export PI_KERNELS_ISA=${isa}; fi
  for t in "${targets[@]}"; do
    if [[ ${t} == fuzz_gguf_replay ]]; then
      build-asan/bin/${t} tests/fuzz/corpus >/dev/null
    elif [[ ${t} == fuzz_grammar_replay ]]; then
      build-asan/bin/${t} tests/fuzz/corpus_grammar >/dev/null
    else
      build-asan/bin/${t} --gtest_brief=1 "$@"
    fi
  done
done
echo "sanitizers: no reports"
