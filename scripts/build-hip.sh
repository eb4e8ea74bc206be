#!/usr/bin/env bash
# The HIP stage of .ci/run: compiles the GPU kernels library (src/kernels/cuda, every kernel
# but the cuBLAS one) with hipcc for AMD's gfx90a (CDNA2, wave64) and gfx1030 (RDNA2, wave32),
# proving that the one source builds for both vendors. Installs Debian's hipcc 5.2 when it is
# missing (about 4 minutes). The stage proves that the code compiles, so it optimises at -O1
# (half of -O3's time; PI_HIP_OPT overrides). Build dir: build-hip. PI_BUILD_JOBS: parallel
# jobs (default all).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${PI_BUILD_JOBS:-$(nproc)}
start=$(date +%s)
if ! command -v hipcc >/dev/null || ! dpkg-query -W -f='${Status}' libamdhip64-dev rocm-device-libs 2>/dev/null | grep -q "install ok installed"; then
  echo "installing hipcc (Debian: hipcc libamdhip64-dev rocm-device-libs)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    hipcc libamdhip64-dev rocm-device-libs >/dev/null
fi
installed=$(date +%s)
cmake -S . -B build-hip -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_HIP=ON -DPI_BUILD_TESTS=OFF \
  -DPI_HIP_ARCHITECTURES="gfx90a;gfx1030" -DPI_HIP_OPT="${PI_HIP_OPT:--O1}" >/dev/null
ninja -C build-hip -j"${jobs}" pi_kernels_hip
echo "hip stage: install $((installed - start)) s, build $(($(date +%s) - installed)) s"
