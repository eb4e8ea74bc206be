#!/usr/bin/env python3
"""Plot the activation mass the device covers, and the bytes the CPU still reads per token,
against the VRAM budget, from `powerinfer plan --json --sweep N` output.

    powerinfer plan -m MODEL --vram-budget 8 --stats STATS --json --sweep 40 > plan.json
    tools/plot/plot_placement.py plan.json -o placement.png

Left axis: activation mass covered (share of all neuron firings served by device neurons).
Right axis: expected CPU bytes per token as a share of an all-CPU run. The mass covered can dip
as the budget grows: a layer's attention block saves a byte per byte on the CPU, more than any
neuron (which saves its firing frequency per byte), so the planner trades hot neurons for
layers. The requested budget is marked. A development tool (needs matplotlib); the tests only
use `load_curve`.
"""
import argparse
import json
import os
import sys

GIB = 1024.0 ** 3


def load_curve(report: dict) -> dict:
    """{'budget_gib', 'mass', 'cpu_share', 'dense_layers'} lists from a plan report with a sweep,
    plus 'requested_gib'."""
    sweep = report.get("sweep")
    if not sweep:
        raise ValueError("the report has no 'sweep': run `powerinfer plan ... --json --sweep N`")
    all_cpu = report["cpu_bytes_all_cpu"] or 1.0
    return {
        "budget_gib": [p["budget_bytes"] / GIB for p in sweep],
        "mass": [p["mass_covered"] for p in sweep],
        "cpu_share": [p["cpu_bytes_per_token"] / all_cpu for p in sweep],
        "dense_layers": [p["n_dense_layers"] for p in sweep],
        "requested_gib": report["budget_bytes"] / GIB,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="output of powerinfer plan --json --sweep N")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    args = ap.parse_args(argv)
    with open(args.report) as f:
        report = json.load(f)
    try:
        c = load_curve(report)
    except (KeyError, ValueError) as e:
        print(f"error: {args.report}: {e}", file=sys.stderr)
        return 1
    try:
        import matplotlib
    except ImportError:
        print("error: plot_placement.py needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(c["budget_gib"], [100 * m for m in c["mass"]], "o-", ms=3, label="activation mass on device")
    ax.set_xlabel("VRAM budget (GiB)")
    ax.set_ylabel("activation mass covered (%)")
    ax.set_ylim(0, 102)
    ax2 = ax.twinx()
    ax2.plot(c["budget_gib"], [100 * s for s in c["cpu_share"]], "s--", ms=3, color="tab:red",
             label="CPU bytes/token (% of all-CPU)")
    ax2.set_ylabel("CPU bytes per token (% of all-CPU)")
    ax2.set_ylim(0, 102)
    ax.axvline(c["requested_gib"], color="gray", lw=0.8, ls=":")
    lines = ax.get_lines()[:1] + ax2.get_lines()[:1]
    ax.legend(lines, [ln.get_label() for ln in lines], loc="center right")
    name = os.path.basename(report.get("model", ""))
    ax.set_title(f"{name}: placement against the budget (n_ctx {report.get('n_ctx')}, "
                 f"n_batch {report.get('n_batch')})", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=130)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
