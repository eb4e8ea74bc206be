#!/usr/bin/env bash
# The aarch64 stage of .ci/run: cross-builds for aarch64 Linux (Debian's g++-aarch64-linux-gnu,
# cmake/toolchains/aarch64-linux-gnu.cmake) what the check needs, not the whole tree: the
# core, tensor and kernel tests and the `powerinfer` binary. There the CPU kernels are the
# scalar ones (no NEON kernels yet). Then, under qemu-aarch64:
#   - the unit tests of core, tensor, the reference kernels and the CPU kernels;
#   - `powerinfer run` greedy on the bundled models (kjv-relu sparse and dense, kjv-moe), whose
#     text must equal the x86 build's for the same command (build/bin/powerinfer, which
#     scripts/test.sh built earlier in .ci/run; built as scripts/run.sh does when missing).
# Installs what it needs first (scripts/install-deps.sh --arm64: the cross compiler, qemu-user,
# arm64 GoogleTest and cpp-httplib through Debian multiarch). Build dir: build-arm64.
# PI_BUILD_JOBS: parallel jobs (default all cores). About 6 minutes on 2 cores from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${PI_BUILD_JOBS:-$(nproc)}
start=${SECONDS}

scripts/install-deps.sh --arm64
installed=${SECONDS}

cmake -S . -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake -DPI_BUILD_TESTS=ON >/dev/null
tests=(test_core test_tensor test_kernels_ref test_kernels_cpu)
ninja -C build-arm64 -j"${jobs}" "${tests[@]}" powerinfer
built=${SECONDS}

# Tests run from the repository root, as under ctest.
for t in "${tests[@]}"; do
  echo "== arm64: ${t} under qemu-aarch64"
  qemu-aarch64 "build-arm64/bin/${t}" --gtest_brief=1
done

# Greedy decoding (--temp 0): the scalar kernels and x86's SIMD ones round differently, but
# not enough to change the chosen tokens of these short runs.
if [ ! -x build/bin/powerinfer ]; then
  scripts/run.sh -n 1 >/dev/null  # builds build/bin/powerinfer as README's first command does
fi
run_args=(-n 16 --seed 1 -t 2 --temp 0)
for m in models/kjv-relu/kjv-relu.pwri.gguf models/kjv-relu/kjv-relu.gguf models/kjv-moe/kjv-moe.gguf; do
  args=(run -m "${m}" -p "And God said" "${run_args[@]}")
  want=$(build/bin/powerinfer "${args[@]}" 2>/dev/null)
  got=$(qemu-aarch64 build-arm64/bin/powerinfer "${args[@]}" 2>/dev/null)
  if [ "${got}" != "${want}" ]; then
    printf 'arm64 %s: the text differs from x86\n  x86:   %s\n  arm64: %s\n' "${m}" "${want}" "${got}" >&2
    exit 1
  fi
  printf 'arm64 %s: the same text as x86: %s\n' "${m}" "${got}"
done
qemu-aarch64 build-arm64/bin/powerinfer devices 2>&1 | sed -n 1,2p  # the ISA the kernels use
echo "arm64 stage: install $((installed - start)) s, build $((built - installed)) s," \
  "tests and runs under qemu $((SECONDS - built)) s"
