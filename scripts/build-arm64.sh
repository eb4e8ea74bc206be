#!/usr/bin/env bash
# The aarch64 stage of .ci/run: cross-builds for aarch64 Linux (Debian's g++-aarch64-linux-gnu,
# cmake/toolchains/aarch64-linux-gnu.cmake) what the check needs, not the whole tree: the
# core, tensor and kernel tests and the `powerinfer` binary. There the CPU kernels are the NEON
# ones (src/kernels/cpu/neon_*.cpp): `neon` (ARMv8.0 Advanced SIMD) and `neon-dot` (ARMv8.2
# with the dot product), chosen at run time from the CPU's HWCAP bits. Then, under qemu-aarch64:
#   - the unit tests of core, tensor, the reference kernels and the CPU kernels (scalar, neon
#     and neon-dot against the reference) on `-cpu max`;
#   - the CPU kernel tests again on `-cpu cortex-a53` (ARMv8.0, no dot product) for neon alone
#     (PI_TEST_ISAS=neon,neon-dot: neon-dot is skipped there with one log line), and the
#     ISA `powerinfer devices` picks on each CPU;
#   - `powerinfer run` greedy on the bundled models (kjv-relu sparse and dense, kjv-moe) on
#     `-cpu max` (neon-dot), whose text must equal the x86 build's for the same command
#     (build/bin/powerinfer, which scripts/test.sh built earlier in .ci/run; built as
#     scripts/run.sh does when missing).
# Installs what it needs first (scripts/install-deps.sh --arm64: the cross compiler, qemu-user,
# arm64 GoogleTest through Debian multiarch). Built without the server (-DPI_SERVER=OFF, as
# Android builds are): the option is tested here, and no arm64 cpp-httplib is needed. Build dir: build-arm64.
# PI_BUILD_JOBS: parallel jobs (default all cores). About 6 minutes on 2 cores from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${PI_BUILD_JOBS:-$(nproc)}
start=${SECONDS}

scripts/install-deps.sh --arm64
installed=${SECONDS}

cmake -S . -B build-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake -DPI_BUILD_TESTS=ON -DPI_SERVER=OFF >/dev/null
ninja -C build-arm64 -j"${jobs}" test_core test_tensor test_kernels_ref test_kernels_cpu powerinfer
built=${SECONDS}

# Tests run from the repository root, as under ctest.
for t in test_core test_tensor test_kernels_ref; do
  echo "== arm64: ${t} under qemu-aarch64 -cpu max"
  qemu-aarch64 -cpu max "build-arm64/bin/${t}" --gtest_brief=1
done
# The CPU kernel tests (the slow part under emulation) as three runs side by side: every ISA
# on an ARMv8.2 core (-cpu max: scalar and neon; then neon-dot, whose table differs from
# neon's in the dot leaves alone, for the dot-product tests), and neon again on an ARMv8.0
# core (cortex-a53: no dot product, so neon-dot is skipped with one log line; less the thread
# pool's tests and the R16 layouts, which neon leaves to the scalar leaves).
kernel_runs=(
  "max scalar,neon *"
  "max neon-dot CpuMatvec*:CpuMatmul*:CpuMxfp4*"
  "cortex-a53 neon,neon-dot -ThreadPool*:*R16*"
)
logs=$(mktemp -d)
pids=()
for i in "${!kernel_runs[@]}"; do
  read -r cpu isas filter <<<"${kernel_runs[$i]}"
  PI_TEST_ISAS=${isas} qemu-aarch64 -cpu "${cpu}" build-arm64/bin/test_kernels_cpu --gtest_brief=1 \
    --gtest_filter="${filter}" >"${logs}/${i}" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!kernel_runs[@]}"; do
  read -r cpu isas filter <<<"${kernel_runs[$i]}"
  status=0
  wait "${pids[$i]}" || status=$?
  echo "== arm64: test_kernels_cpu under qemu-aarch64 -cpu ${cpu}, PI_TEST_ISAS=${isas}"
  grep -v -e '^$' -e 'Death tests use fork' "${logs}/${i}"
  [ "${status}" -eq 0 ] || failed=1
done
rm -rf "${logs}"
[ "${failed}" -eq 0 ] || { echo "arm64: test_kernels_cpu failed" >&2; exit 1; }
for cpu in cortex-a53 max; do
  printf -- '-cpu %s: ' "${cpu}"
  qemu-aarch64 -cpu "${cpu}" build-arm64/bin/powerinfer devices 2>&1 | grep -m1 -o 'SIMD kernels ([^)]*)' ||
    { echo "powerinfer devices names no ISA" >&2; exit 1; }
done

# Greedy decoding (--temp 0): the NEON kernels and x86's SIMD ones round differently, but
# not enough to change the chosen tokens of these short runs.
if [ ! -x build/bin/powerinfer ]; then
  scripts/run.sh -n 1 >/dev/null  # builds build/bin/powerinfer as README's first command does
fi
run_args=(-n 16 --seed 1 -t 2 --temp 0)
for m in models/kjv-relu/kjv-relu.pwri.gguf models/kjv-relu/kjv-relu.gguf models/kjv-moe/kjv-moe.gguf; do
  args=(run -m "${m}" -p "And God said" "${run_args[@]}")
  want=$(build/bin/powerinfer "${args[@]}" 2>/dev/null)
  got=$(qemu-aarch64 -cpu max build-arm64/bin/powerinfer "${args[@]}" 2>/dev/null)
  if [ "${got}" != "${want}" ]; then
    printf 'arm64 %s: the text differs from x86\n  x86:   %s\n  arm64: %s\n' "${m}" "${want}" "${got}" >&2
    exit 1
  fi
  printf 'arm64 %s: the same text as x86: %s\n' "${m}" "${got}"
done
echo "arm64 stage: install $((installed - start)) s, build $((built - installed)) s," \
  "tests and runs under qemu $((SECONDS - built)) s"
