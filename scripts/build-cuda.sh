#!/usr/bin/env bash
# The CUDA stage of .ci/run (and a quick local check of a CUDA build): configures build-cuda
# with -DPI_CUDA=ON for sm_90 only, builds only the CUDA kernels and backend and the gpu test
# binaries, fails when a hot kernel spills registers (nvcc -Xptxas -v), then runs the gpu
# tests, which skip with a message when no GPU is present. Needs the CUDA toolkit (nvcc,
# cuBLAS). The build type is Unoptimized (no -O flags for the host compilers: the CPU code of
# the gpu tests compiles twice as fast, and nvcc optimises device code, whose register report
# this stage checks, all the same). Environment: PI_CUDA_ARCH (default 90-real: sm_90 machine
# code, no PTX), PI_CUDA_BUILD_TYPE (default Unoptimized), PI_BUILD_JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${PI_CUDA_ARCH:-90-real}
jobs=${PI_BUILD_JOBS:-$(nproc)}
log=build-cuda/ptxas.log
# Kernels whose register spills fail the stage: the per-token hot path.
hot='matvec_rows_kernel|matvec_csr_kernel|quantize_q8_kernel|partial_kernel|combine_kernel|gateup_kernel|chunk_kernel|mask_kernel|compact_kernel|rms_kernel|layer_kernel|store_kv_kernel|dequant_kernel'

start=$(date +%s)
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE="${PI_CUDA_BUILD_TYPE:-Unoptimized}" -DPI_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${arch}" -DPI_CUDA_PTXAS_VERBOSE=ON >/dev/null
# ptxas reports only when a kernel file compiles: recompile them every time.
find build-cuda/src/kernels/cuda -name '*.cu.o' -delete 2>/dev/null || true
ninja -C build-cuda -j"${jobs}" pi_kernels_cuda | tee "${log}" | grep -E 'error|FAILED' || true
test "${PIPESTATUS[0]}" -eq 0
ninja -C build-cuda -j"${jobs}" pi_backend_cuda test_backend_cuda test_cuda_model | grep -E 'error|warning|FAILED' || true
test "${PIPESTATUS[0]}" -eq 0
built=$(date +%s)

# ptxas prints "Function properties for <mangled>", then its stack frame and spill bytes, for
# every kernel (and every function it did not inline). A hot kernel with spill stores or
# loads fails the stage.
report=$(awk '
  /Function properties for/ { match($0, /_Z[A-Za-z0-9_]+/); name = substr($0, RSTART, RLENGTH) }
  /bytes stack frame/ {
    split($0, w, " "); frame = w[1]; stores = w[5]; loads = w[9]
    print name, frame, stores, loads
  }' "${log}" | c++filt)
n=$(printf '%s\n' "${report}" | grep -c . || true)
spills=$(printf '%s\n' "${report}" | grep -E "${hot}" | awk '$(NF-1) != 0 || $NF != 0' || true)
echo "cuda: ${n} kernels compiled for ${arch}; ptxas report in ${log}"
if [[ -n "${spills}" ]]; then
  echo "cuda: register spills in hot kernels (kernel, stack frame, spill store bytes, spill load bytes):"
  printf '%s\n' "${spills}"
  exit 1
fi
echo "cuda: no register spills in the hot kernels"

build-cuda/bin/test_backend_cuda --gtest_brief=1
build-cuda/bin/test_cuda_model --gtest_brief=1
echo "cuda stage: build $((built - start)) s, total $(($(date +%s) - start)) s"
