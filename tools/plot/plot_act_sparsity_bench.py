#!/usr/bin/env python3
"""Summarise and plot interleaved `powerinfer bench -o json` runs of a dense file and a
calibrated file at several sparsities (docs/BENCHMARKS.md, "Activation sparsity").

Input: a folder of DIR/t<T>_<what>_r<R>.json files (one bench run each; rounds R interleaved;
<what>: dense = the source GGUF, caldense = the calibrated file with --dense, s<S> = the
calibrated file at sparsity S). Prints a markdown table per thread count of medians over
rounds (tokens/s, MiB/token, of probe, of roofline, speed against the dense file's median) and
writes a PNG.

    tools/plot/plot_act_sparsity_bench.py DIR --plot docs/bench/act_sparsity_7b.png
"""
import argparse
import glob
import json
import os
import re
import statistics


def load(path):
    with open(path) as f:
        row = json.load(f)["results"][0]
    b = row.get("bytes_per_token") or {}
    return {"tps": row["ts_median"], "mib": b.get("total", 0) / 2**20,
            "probe": row.get("probe_ratio") or 0, "roofline": row.get("roofline_ratio") or 0,
            "probe_gbps": row["probe"]["gbps_median"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--plot")
    ap.add_argument("--title", default="Llama-2-7B-shaped SiLU Q4_0 (synthetic): decode")
    a = ap.parse_args()
    groups = {}
    for p in sorted(glob.glob(os.path.join(a.dir, "t*_r*.json"))):
        m = re.match(r"t(\d+)_(dense|caldense|s([0-9.]+))_r(\d+)\.json", os.path.basename(p))
        if not m or os.path.getsize(p) == 0:
            continue
        key = (int(m.group(1)), m.group(2))
        groups.setdefault(key, []).append(load(p))
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("tps", "mib", "probe", "roofline", "probe_gbps")}
           | {"each": [round(r["tps"], 2) for r in v]} for k, v in groups.items()}
    order = lambda w: (0, 0) if w == "dense" else (1, 0) if w == "caldense" else (2, float(w[1:]))
    for t in sorted({k[0] for k in med}):
        dense = med.get((t, "dense"))
        print(f"\n{t} thread(s)\n")
        print("| file | sparsity | t/s (median) | each round | MiB/token | probe GB/s | of probe | of roofline | vs dense GGUF |")
        print("|---|---|---|---|---|---|---|---|---|")
        for w in sorted((k[1] for k in med if k[0] == t), key=order):
            v = med[(t, w)]
            name = {"dense": "dense GGUF", "caldense": "calibrated, --dense"}.get(w, "calibrated")
            sp = "-" if w in ("dense", "caldense") else w[1:]
            vs = f"{v['tps'] / dense['tps']:.2f}x" if dense else "-"
            print(f"| {name} | {sp} | {v['tps']:.2f} | {v['each']} | {v['mib']:.0f} | {v['probe_gbps']:.1f} | "
                  f"{100 * v['probe']:.0f}% | {100 * v['roofline']:.0f}% | {vs} |")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for t in sorted({k[0] for k in med}):
            dense = med[(t, "dense")]
            pts = sorted((float(w[1:]), v) for (tt, w), v in med.items() if tt == t and w.startswith("s"))
            xs = [100 * s for s, _ in pts]
            a1.plot(xs, [v["tps"] / dense["tps"] for _, v in pts], "o-", label=f"measured, {t} thread(s)")
            a2.plot(xs, [100 * v["roofline"] for _, v in pts], "o-", label=f"calibrated, {t} thread(s)")
            if t == 1:
                a1.plot(xs, [dense["mib"] / v["mib"] for _, v in pts], "s--", label="bytes alone (dense MiB / MiB)")
        a1.axhline(1.0, color="gray", lw=0.8)
        a1.set_xlabel("sparsity (% zeroed at each site)")
        a1.set_ylabel("decode speed vs the dense GGUF")
        a1.grid(alpha=0.3)
        a1.legend(fontsize=8)
        a2.axhline(85, color="tab:red", ls=":", label="target 85%")
        a2.set_xlabel("sparsity (% zeroed at each site)")
        a2.set_ylabel("% of roofline (scattered rate at 1 - sparsity)")
        a2.grid(alpha=0.3)
        a2.legend(fontsize=8)
        fig.suptitle(a.title)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
