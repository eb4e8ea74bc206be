#!/usr/bin/env bash
# Interleaved decode rounds: dense GGUF, sparse PowerInfer file, the PowerInfer file --dense,
# one after the other, so that all three see the same machine; prints tokens/s and the ratios
# per round (docs/BENCHMARKS.md). Defaults: the 7B-shaped synthetic files of the benchmarks
# (make them with `powerinfer synth --preset llama2-7b --type q4_0 [--pwri --activity 0.10]`).
# On a machine whose memory bandwidth comes and goes (a shared host), --min-probe GBPS runs
# a round only once the read probe on THREADS threads reads at least GBPS (waiting up to
# 10 minutes), and prints the probe just before and after it: count the rounds where both
# hold.
# Usage: scripts/decode_ratio.sh [-t THREADS] [-r ROUNDS] [-n TOKENS] [--mmap]
#        [--dense FILE] [--pwri FILE] [--bin POWERINFER] [--min-probe GBPS]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 rounds=3 tokens=32 mmap=--no-mmap min_probe=0
dense=/tmp/l7b.q4_0.gguf pwri=/tmp/l7b.q4_0.pwri.gguf bin=build/bin/powerinfer
while [ $# -gt 0 ]; do
  case "$1" in
    -t) threads=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -n) tokens=$2; shift 2 ;;
    --mmap) mmap=; shift ;;
    --dense) dense=$2; shift 2 ;;
    --pwri) pwri=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --min-probe) min_probe=$2; shift 2 ;;
    *) echo "decode_ratio.sh: unknown argument '$1'" >&2; exit 1 ;;
  esac
done
for f in "$dense" "$pwri" "$bin"; do
  [ -e "$f" ] || { echo "decode_ratio.sh: $f does not exist" >&2; exit 1; }
done
tps() {  # file [flags...] -> decode tokens/s
  local f=$1; shift
  "$bin" run -m "$f" $mmap -p "In" -n "$tokens" --ignore-eos -t "$threads" -c 256 "$@" 2>&1 >/dev/null |
    sed -n 's/^eval time.*, *\([0-9.]*\) tokens per second.*/\1/p'
}
probe() {  # median read-probe GB/s on $threads threads
  "$bin" bench --probe -t "$threads" --probe-passes 3 2>/dev/null |
    awk -F'|' -v t="$threads" '$2 + 0 == t && $3 + 0 > 0 { print $3 + 0 }'
}
for r in $(seq "$rounds"); do
  before="" after=""
  if [ "$min_probe" != 0 ]; then
    deadline=$(( $(date +%s) + 600 ))
    while :; do
      before=$(probe)
      awk -v p="$before" -v m="$min_probe" 'BEGIN { exit !(p >= m) }' && break
      [ "$(date +%s)" -lt "$deadline" ] || { echo "round $r: the probe stayed below $min_probe GB/s" >&2; exit 1; }
      sleep 3
    done
  fi
  d=$(tps "$dense"); s=$(tps "$pwri"); pd=$(tps "$pwri" --dense)
  if [ "$min_probe" != 0 ]; then after=$(probe); echo "probe before ${before} GB/s, after ${after} GB/s"; fi
  awk -v r="$r" -v t="$threads" -v d="$d" -v s="$s" -v pd="$pd" 'BEGIN {
    printf "round %d, %d threads: dense GGUF %.2f, sparse %.2f, PowerInfer --dense %.2f tokens/s; sparse/dense %.3f, sparse/--dense %.3f\n",
           r, t, d, s, pd, s / d, s / pd }'
done
