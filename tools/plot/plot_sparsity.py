#!/usr/bin/env python3
"""Plot generation speed against the fraction of FFN neurons active, with the bandwidth roofline.

Reads one or more `powerinfer bench -o json` reports and draws one panel per thread count with
the generation (tg) rows. On a shared machine the read probe (and so tokens/s) varies by a
factor of two or more between rows, so every row is drawn twice:
  - as measured: median tokens/s with min..max over the repetitions (faint bars);
  - at the panel's bandwidth P (solid markers): the fraction of its own probe the row reached
    (`probe_ratio`, the label) x P / its bytes per token, where P is the median of the probes
    measured around the panel's rows. These compare across rows.
Sparse rows sit at their measured predicted-active fraction; the dense GGUF row is a horizontal
line (it reads every FFN neuron). The rooflines at P: sparse, tokens/s = P / bytes(a) with
    bytes(a) = non-FFN weights + predictors + KV read + a * (all FFN matrices),
the model of reading a fraction a of the FFN rows; dense, P / the dense bytes per token.
It expects the sparse rows of one thread count to come from models of one shape (e.g. the
same synthetic 7B at several --activity values).

Usage: tools/plot/plot_sparsity.py REPORT.json [MORE.json ...] -o docs/bench/sparsity_roofline.png
A development tool (needs matplotlib); not used by the tests.
"""
import argparse
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_rows(paths):
    """Generation rows of all reports, each with its model summary attached. Rows of the same
    (file, mode, threads, test) in several reports are merged: tokens/s and the probe ratio are
    the medians of the reports' medians, min and max span all repetitions."""
    groups = {}
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        for r in report["results"]:
            if r["n_gen"] > 0 and r["bytes_per_token"] is not None:
                key = (r["file"], r["mode"], r["threads"], r["test"])
                groups.setdefault(key, []).append(dict(r, model_info=report["models"][r["model"]]))
    rows = []
    for same in groups.values():
        r = dict(same[0])
        r["ts_median"] = statistics.median(x["ts_median"] for x in same)
        r["ts_min"] = min(x["ts_min"] for x in same)
        r["ts_max"] = max(x["ts_max"] for x in same)
        r["probe_ratio"] = statistics.median(x["probe_ratio"] for x in same)
        r["probe"] = dict(r["probe"], gbps_median=statistics.median(x["probe"]["gbps_median"] for x in same))
        r["ts_median_per_run"] = [x["ts_median"] for x in same]
        r["runs"] = len(same)
        rows.append(r)
    return rows


def model_label(m):
    fmt = m["format"]
    act = m.get("synth_activity")
    suffix = f", synth activity {act:.2f}" if act is not None and fmt == "PWRI" else ""
    return f"{m['type'].upper()} {fmt}{suffix}"


def normalised(r, probe):
    """Tokens/s the row would reach at `probe` GB/s with its measured fraction of its own probe."""
    return r["probe_ratio"] * probe * 1e9 / r["bytes_per_token"]["total"]


def plot(rows, out, title):
    threads = sorted({r["threads"] for r in rows})
    fig, axes = plt.subplots(1, len(threads), figsize=(6.4 * len(threads), 5.2), sharey=True, squeeze=False)
    axes = axes[0]
    ymax = 0.0
    for ax, t in zip(axes, threads):
        mine = [r for r in rows if r["threads"] == t]
        sparse = sorted((r for r in mine if r["mode"] == "sparse"), key=lambda r: r["active_fraction"])
        dense = [r for r in mine if r["mode"] == "dense" and r["model_info"]["format"] == "GGUF"]
        dense_pwri = [r for r in mine if r["mode"] == "dense" and r["model_info"]["format"] == "PWRI"]
        # One bandwidth for the panel: the median of the probes measured around its rows.
        probe = statistics.median(r["probe"]["gbps_median"] for r in mine)
        if sparse:
            b = sparse[0]["bytes_per_token"]
            fixed = b["other_weights"] + b["predictors"] + b["kv"]
            ffn = sparse[0]["model_info"]["ffn_bytes"]
            xs = [i / 200 for i in range(1, 201)]  # active fraction 0.005 .. 1
            roof = [probe * 1e9 / (fixed + a * ffn) for a in xs]
            ax.plot([100 * a for a in xs], roof, color="tab:blue", lw=1.2, ls="--",
                    label=f"sparse roofline: {probe:.1f} GB/s / bytes per token")
            px = [100 * r["active_fraction"] for r in sparse]
            py = [normalised(r, probe) for r in sparse]
            ax.plot(px, py, "o-", color="tab:blue", ms=7, label="sparse (PWRI), at the panel's probe")
            for x, y, r in zip(px, py, sparse):
                ax.annotate(f"{100 * r['probe_ratio']:.0f}%", (x, y), textcoords="offset points",
                            xytext=(7, 4), fontsize=8.5, color="tab:blue")
            ax.errorbar(px, [r["ts_median"] for r in sparse],
                        yerr=[[r["ts_median"] - r["ts_min"] for r in sparse],
                              [r["ts_max"] - r["ts_median"] for r in sparse]],
                        fmt=".", color="tab:blue", alpha=0.35, capsize=2, label="sparse, as measured (min..max)")
            ymax = max([ymax, roof[0]] + py + [r["ts_max"] for r in sparse])
        for i, r in enumerate(dense):
            y = normalised(r, probe)
            ax.axhline(y, color="tab:red", lw=1.5,
                       label=f"dense {model_label(r['model_info'])}, at the panel's probe "
                             f"({100 * r['probe_ratio']:.0f}%)" if i == 0 else None)
            roof = probe * 1e9 / r["bytes_per_token"]["total"]
            ax.axhline(roof, color="tab:red", lw=1.0, ls=":",
                       label=f"dense roofline: {probe:.1f} GB/s / "
                             f"{r['bytes_per_token']['total'] / 2**30:.2f} GiB" if i == 0 else None)
            spread = [[r["ts_median"] - r["ts_min"]], [r["ts_max"] - r["ts_median"]]]
            ax.errorbar([100], [r["ts_median"]], yerr=spread, fmt=".", color="tab:red", alpha=0.35, capsize=2,
                        label="dense, as measured (min..max)" if i == 0 else None)
            ymax = max(ymax, roof, y, r["ts_max"])
        if dense_pwri:
            ax.scatter([100] * len(dense_pwri), [normalised(r, probe) for r in dense_pwri], marker="s",
                       facecolors="none", edgecolors="tab:red", s=40,
                       label="PWRI files run --dense, at the panel's probe")
        ax.set_title(f"{t} thread{'s' if t > 1 else ''}")
        ax.set_xlabel("FFN neurons predicted active per token (%)")
        ax.set_xlim(0, 104)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7.5, loc="upper right")
    axes[0].set_ylabel("generation speed (tokens/s)")
    axes[0].set_ylim(0, ymax * 1.08)
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.005,
             "Solid markers: measured fraction of the read probe (labels) x the panel's probe / bytes per token, "
             "so that rows measured under different machine load compare; faint bars: raw tokens/s.",
             ha="center", fontsize=8, color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


def print_table(rows):
    """A markdown table of the merged generation rows (medians over the reports)."""
    print("| file | mode | threads | active | MiB/token | t/s per run | t/s (median) | "
          "normalised t/s | % of probe (median) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t in sorted({r["threads"] for r in rows}):
        mine = [r for r in rows if r["threads"] == t]
        probe = statistics.median(r["probe"]["gbps_median"] for r in mine)
        for r in sorted(mine, key=lambda r: (r["mode"], r.get("active_fraction") or 1.0, r["file"])):
            active = f"{100 * r['active_fraction']:.1f}%" if r["active_fraction"] is not None else "all"
            runs = ", ".join(f"{v:.2f}" for v in r["ts_median_per_run"])
            print(f"| {r['file']} | {r['mode']} | {t} | {active} | {r['bytes_per_token']['total'] / 2**20:.0f} | "
                  f"{runs} | {r['ts_median']:.2f} | {normalised(r, probe):.2f} | {100 * r['probe_ratio']:.0f} |")
        print(f"| (panel probe {probe:.1f} GB/s) | | | | | | | | |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+", help="powerinfer bench -o json reports")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--table", action="store_true", help="also print a markdown table of the rows")
    ap.add_argument("--title", default="Generation speed vs activation sparsity (Llama-2-7B shape, Q4_0, CPU)")
    args = ap.parse_args()
    rows = load_rows(args.reports)
    if not rows:
        sys.exit("no generation rows with byte counts in the reports")
    plot(rows, args.output, args.title)
    if args.table:
        print_table(rows)


if __name__ == "__main__":
    main()
