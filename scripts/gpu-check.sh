#!/usr/bin/env bash
# The prepared GPU check (issue 18): one run on a machine with an NVIDIA GPU (planned for one
# H200 with 16 cores, within 6 minutes). Builds with CUDA for the local GPU, runs the gpu
# tests, measures the device's memory bandwidth and the host's read rate, then benchmarks:
#   7B-shaped Q4_0 PowerInfer file fully on the GPU: dense decode, sparse decode, pp512;
#   the same file with VRAM budgets holding 25% and 50% of it, and the budget that holds every
#   dense tensor plus ~20% of the FFN rows (hybrid; found with `powerinfer plan --json`);
#   CPU only, same host (the ratio); a 40B-shaped Q4_0 file with a 10 GB budget (last, when the
#   time allows).
# Everything lands in $OUT (the device tool sets it; default gpu-check-out): logs, the gtest
# XML, every JSON report, and gpu-check.md with one table.
#
# Build: on the machine (CMAKE_CUDA_ARCHITECTURES=native, ninja -j$(nproc), only the targets
# needed) unless build-gpu/bin already holds them and PI_GPU_CHECK_PREBUILT=1 (a build made
# elsewhere with `scripts/gpu-check.sh --prepare` and carried over: the project needs GTest,
# CLI11, nlohmann-json and cpp-httplib to configure, which a bare CUDA image may lack;
# --prepare copies the shared libraries powerinfer needs into build-gpu/lib).
#
# The bench flags are the hybrid executor's: --device cuda, --vram-budget GiB[,GiB...],
# --stats FILE, and the JSON fields bytes_h2d_per_token, bytes_d2h_per_token, device_bytes,
# cpu_bytes_per_token (absent fields show as "-").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)

targets=(powerinfer test_backend_cuda test_cuda_model)
if [[ "${1:-}" == "--prepare" ]]; then
  # Here, on a machine with the toolkit and the dependencies: a build to carry to the GPU.
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_CUDA=ON -DPI_PORTABLE=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${PI_CUDA_ARCH:-90}" >/dev/null || exit 1
  ninja -C build-gpu "${targets[@]}" || exit 1
  mkdir -p build-gpu/lib
  for lib in $(ldd build-gpu/bin/powerinfer | awk '/=>/ {print $3}' | grep -E 'httplib|brotli|ssl|crypto'); do
    cp -L "${lib}" build-gpu/lib/
  done
  du -sh build-gpu/bin build-gpu/lib
  exit 0
fi

OUT=${OUT:-${root}/gpu-check-out}
mkdir -p "${OUT}"
work=${PI_GPU_CHECK_WORK:-/tmp/pi-gpu-check}  # model files (large; not returned)
mkdir -p "${work}"
jobs=$(nproc)
t0=$(date +%s)
deadline=${PI_GPU_CHECK_SECONDS:-345}  # stop starting benchmark rows after this
elapsed() { echo $(($(date +%s) - t0)); }
note() { echo "[$(elapsed) s] $*" | tee -a "${OUT}/progress.log"; }
left() { echo $((deadline - $(elapsed))); }

note "gpu-check on $(hostname), ${jobs} cores"
nvidia-smi >"${OUT}/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv \
  >"${OUT}/gpu.csv" 2>&1 || true

# ---- Build ---------------------------------------------------------------------------------
export LD_LIBRARY_PATH="${root}/build-gpu/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
if [[ "${PI_GPU_CHECK_PREBUILT:-0}" == 1 && -x build-gpu/bin/powerinfer ]]; then
  note "using the carried build in build-gpu"
else
  note "configuring build-gpu (CUDA, native architecture)"
  if ! cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=native >"${OUT}/configure.log" 2>&1; then
    note "configure failed (see configure.log; missing packages? build elsewhere with --prepare and carry build-gpu)"
    exit 1
  fi
  if ! timeout 240 ninja -C build-gpu -j"${jobs}" "${targets[@]}" >"${OUT}/build.log" 2>&1; then
    tail -30 "${OUT}/build.log"
    note "build failed (see build.log)"
    exit 1
  fi
  note "built"
fi
bin=${root}/build-gpu/bin
pi=${bin}/powerinfer

# ---- Tests ---------------------------------------------------------------------------------
tests_ok=1
for t in test_backend_cuda test_cuda_model; do
  if timeout 150 "${bin}/${t}" --gtest_brief=1 --gtest_output="xml:${OUT}/${t}.xml" \
      >"${OUT}/${t}.log" 2>&1; then
    note "${t}: passed ($(grep -c 'OK \]' "${OUT}/${t}.log" || true) tests shown)"
  else
    tests_ok=0
    note "${t}: FAILED (see ${t}.log)"
    grep -E 'Failure|FAILED|Expected|actual' "${OUT}/${t}.log" | head -20
  fi
done

# ---- Bandwidth probes -------------------------------------------------------------------------
"${pi}" devices --probe --device cuda --probe-mib 4096 --probe-passes 5 --json \
  >"${OUT}/probe_cuda.json" 2>"${OUT}/probe_cuda.log" || note "device probe failed"
"${pi}" bench --probe -t "${jobs}" -o json >"${OUT}/probe_host.json" 2>"${OUT}/probe_host.log" ||
  note "host probe failed"
note "probes done"

# ---- Models ----------------------------------------------------------------------------------
m7=${work}/llama2-7b.q4_0.pwri.gguf
a7=${work}/act7
# synth PRESET FILE ACTDIR SECONDS: writes FILE (through a temporary name, so that a run cut
# short leaves nothing a rerun would take for a model).
synth() {
  [[ -s "$2" ]] && return 0
  timeout "$4" "${pi}" synth --preset "$1" --type q4_0 --pwri --activity 0.10 \
    --activation-dir "$3" -t "${jobs}" --no-progress -o "$2.part" >"${OUT}/synth_$1.log" 2>&1 &&
    mv "$2.part" "$2"
}
synth llama2-7b "${m7}" "${a7}" 150 || note "7B synth failed (see synth_llama2-7b.log)"
note "7B file: $(du -h "${m7}" 2>/dev/null | cut -f1)"
stats7=${a7}/activation_stats.gguf

# The budget (GiB, 2 decimals) holding every dense tensor and >= 20% of the FFN rows: the
# smallest by bisection over `powerinfer plan --json`.
plan_ok() {  # budget -> exit 0 when it holds all dense tensors and 20% of the rows
  "${pi}" plan -m "${m7}" --vram-budget "$1" --stats "${stats7}" --no-write-index --json \
    2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)
layers = p["layers"]
dense = all(l["attn_on_device"] for l in layers) and p["head_on_device"]
hot = sum(l["hot_neurons"] for l in layers) / max(1, sum(l["n_ff"] for l in layers))
sys.exit(0 if dense and hot >= 0.20 else 1)'
}
file_gib=$(python3 -c "import os; print(round(os.path.getsize('${m7}') / 2**30, 2))" 2>/dev/null || echo 4)
lo=0
hi=${file_gib}
for _ in 1 2 3 4 5 6 7 8 9 10; do
  mid=$(python3 -c "print(round(($lo + $hi) / 2, 2))")
  if plan_ok "${mid}"; then hi=${mid}; else lo=${mid}; fi
done
b25=$(python3 -c "print(round(${file_gib} * 0.25, 2))")
b50=$(python3 -c "print(round(${file_gib} * 0.50, 2))")
# plan counts what the planner places; the cuda device's own working memory (scratch arena,
# cuBLAS: ~60 MiB, printed at load) comes out of the budget first, so the row adds 0.1 GiB.
bhy=$(python3 -c "print(round(${hi} + 0.1, 2))")
note "budgets (GiB): 25% ${b25}, 50% ${b50}, dense + 20% rows ${bhy} (file ${file_gib})"
echo "{\"file_gib\": ${file_gib}, \"b25\": ${b25}, \"b50\": ${b50}, \"hybrid\": ${bhy}}" >"${OUT}/budgets.json"

# ---- Benchmarks --------------------------------------------------------------------------------
# bench NAME SECONDS ARGS...: one JSON report per row group, skipped past the deadline.
bench() {
  local name=$1 secs=$2
  shift 2
  if (($(left) < 20)); then
    note "${name}: skipped (time)"
    return
  fi
  ((secs > $(left))) && secs=$(left)
  if timeout "${secs}" "${pi}" bench "$@" -o json >"${OUT}/bench_${name}.json" 2>"${OUT}/bench_${name}.log"; then
    note "${name}: done"
  else
    note "${name}: failed or timed out (see bench_${name}.log)"
  fi
}
common=(-m "${m7}" -t "${jobs}" --warmup-gen 4)
bench gpu_dense 40 "${common[@]}" --device cuda --dense -p 0 -n 128 -r 3
bench gpu_sparse 40 "${common[@]}" --device cuda --sparse -p 0 -n 128 -r 3
bench gpu_pp512 40 "${common[@]}" --device cuda --dense -p 512 -n 0 -r 3
bench hybrid 90 "${common[@]}" --device cuda --sparse --stats "${stats7}" \
  --vram-budget "${b25},${b50},${bhy}" -p 0 -n 48 -r 2
bench cpu_sparse 40 "${common[@]}" --device cpu --sparse -p 0 -n 48 -r 2
bench cpu_dense 30 "${common[@]}" --device cpu --dense -p 0 -n 24 -r 2

m40=${work}/falcon-40b.q4_0.pwri.gguf
a40=${work}/act40
if (($(left) > 150)); then
  synth falcon-40b "${m40}" "${a40}" $(($(left) - 60)) ||
    note "40B synth failed or timed out (see synth_falcon-40b.log)"
fi
if [[ -s "${m40}" ]]; then
  bench hybrid40 60 -m "${m40}" -t "${jobs}" --warmup-gen 2 --device cuda --sparse \
    --stats "${a40}/activation_stats.gguf" --vram-budget 9.31 -p 0 -n 16 -r 1
else
  note "40B: skipped (no file)"
fi

# ---- Table -----------------------------------------------------------------------------------
python3 "${root}/scripts/gpu_check_table.py" "${OUT}" >"${OUT}/gpu-check.md" 2>"${OUT}/table.log" ||
  note "table failed (see table.log)"
cat "${OUT}/gpu-check.md" 2>/dev/null
note "gpu-check finished: tests $([[ ${tests_ok} == 1 ]] && echo passed || echo FAILED)"
[[ ${tests_ok} == 1 ]]
