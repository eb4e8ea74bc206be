#!/usr/bin/env python3
"""Turns bench_kernels JSON output into the markdown tables of docs/BENCHMARKS.md.

Usage: bench_kernels --benchmark_format=json --benchmark_out=run.json ...
       python3 bench/bench_table.py run.json [run2.json ...]
With several runs, each cell is the median over the runs.
"""
import json
import statistics
import sys
from collections import defaultdict


def load(paths):
    cells = defaultdict(list)  # (kernel, type, shape, threads) -> [counters]
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data["benchmarks"]:
            parts = b["name"].split("/")
            if parts[0] in ("probe", "pool") or b.get("run_type") == "aggregate":
                continue
            kernel, dtype, shape = parts[0], parts[1], parts[2]
            extra = parts[3] if len(parts) > 3 and parts[3].startswith("m") else ""
            threads = next((p for p in parts[3:] if p.isdigit()), "1")
            cells[(kernel + ("/" + extra if extra else ""), dtype, shape, threads)].append(b)
    return cells


def med(bs, key):
    vals = [b[key] for b in bs if key in b]
    return statistics.median(vals) if vals else None


def main():
    cells = load(sys.argv[1:])
    bw = sorted(k for k in cells if "probe_pct" in cells[k][0])
    print("| kernel | type | shape | threads | GB/s | probe GB/s | % of probe | % of probe (CPU time) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in bw:
        bs = cells[k]
        cpu = med(bs, "cpu_pct")
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {med(bs, 'GB/s'):.1f} | {med(bs, 'probe_GB/s'):.1f} "
              f"| {med(bs, 'probe_pct'):.0f} | {'' if cpu is None else f'{cpu:.0f}'} |")
    flops = sorted(k for k in cells if "GFLOP/s" in cells[k][0])
    if flops:
        print()
        print("| kernel | type | shape | threads | GFLOP/s |")
        print("|---|---|---|---|---|")
        for k in flops:
            print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {med(cells[k], 'GFLOP/s'):.0f} |")
    l2 = sorted(k for k in cells if k[0].endswith("_l2"))
    if l2:
        print()
        print("| kernel (L2-resident, CPU time) | type | GB/s |")
        print("|---|---|---|")
        for k in l2:
            print(f"| {k[0]} | {k[1]} | {med(cells[k], 'GB/s') / 1e9:.1f} |")


if __name__ == "__main__":
    main()
