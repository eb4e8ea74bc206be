#!/usr/bin/env python3
"""Perplexity and decode speed of a calibrated file against its activation sparsity.

Runs `powerinfer perplexity` once per sparsity (deterministic), with the file's allocation
(the default: the sparsity is model-wide) and with every site at that level (--sparsity-alloc
uniform), and `powerinfer bench` (decode, one thread, the allocation) for every sparsity in
interleaved rounds, so that each round measures all levels within the same minutes; reports
medians over rounds. Writes a JSON record and a PNG plot.

    tools/plot/act_sparsity_sweep.py --model models/kjv-silu/kjv-silu.act.gguf \
        --dense-model models/kjv-silu/kjv-silu.gguf --text models/kjv-relu/heldout.txt \
        --sparsity 0,0.25,0.4,0.5,0.6 --rounds 5 \
        --out docs/bench/act_sparsity_kjv_silu.json --plot docs/bench/act_sparsity_kjv_silu.png

Without --plot-only it needs the built binary (--bin). --plot-only replots a JSON record.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout, r.stderr


def perplexity(a, model, extra):
    out, _ = run([a.bin, "perplexity", "-m", model, "-f", a.text, "-c", str(a.ctx), "-t", str(a.threads)] + extra)
    ppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", out).group(1))
    zeroed = {m.group(1): float(m.group(2)) / 100 for m in re.finditer(r"([a-z_]+) ([0-9.]+)%", out.split("share zeroed:")[-1])} if "share zeroed:" in out else {}
    mw = re.search(r"Model-wide sparsity ([0-9.]+)%", out)
    return ppl, zeroed, float(mw.group(1)) / 100 if mw else 0.0


def decode_tps(a, model, extra):
    out, _ = run([a.bin, "bench", "-m", model, "-p", "0", "-n", str(a.n_gen), "-t", "1", "-r", str(a.reps),
                  "--probe-mib", "1024", "--probe-passes", "1", "-o", "json"] + extra)
    rows = json.loads(out)["results"]
    return rows[0]["ts_median"]


def plot(rec, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = rec["points"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.plot([100 * p["model_wide"] for p in pts], [p["ppl"] for p in pts], "o-",
            label="per-site allocation (greedy, KL)")
    if all("ppl_uniform" in p for p in pts):
        a1.plot([100 * p["model_wide_uniform"] for p in pts], [p["ppl_uniform"] for p in pts], "s--",
                label="same level at every site")
    a1.axhline(rec["dense_ppl"], color="gray", ls="--", label=f"dense ({rec['dense_ppl']:.2f})")
    a1.axhline(rec["dense_ppl"] * 1.03, color="tab:red", ls=":", label="dense + 3%")
    a1.set_xlabel("model-wide sparsity (% of projection bytes unread)")
    a1.set_ylabel("held-out perplexity")
    a1.grid(alpha=0.3)
    a1.legend()
    a2.plot([100 * p["model_wide"] for p in pts], [p["tps"] for p in pts], "o-", label="calibrated file")
    a2.axhline(rec["dense_tps"], color="gray", ls="--", label=f"dense GGUF ({rec['dense_tps']:.0f})")
    a2.set_xlabel("model-wide sparsity (% of projection bytes unread)")
    a2.set_ylabel("decode tokens/s (1 thread, median)")
    a2.grid(alpha=0.3)
    a2.legend()
    fig.suptitle(rec["title"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/powerinfer")
    ap.add_argument("--model")
    ap.add_argument("--dense-model", help="the uncalibrated source (dense reference)")
    ap.add_argument("--text")
    ap.add_argument("--sparsity", default="0,0.25,0.4,0.5,0.6")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2, help="perplexity threads")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="bench repetitions per round")
    ap.add_argument("--n-gen", type=int, default=64)
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot")
    ap.add_argument("--title", default="kjv-silu: activation sparsity (Q8_0)")
    ap.add_argument("--plot-only", action="store_true")
    a = ap.parse_args()
    if a.plot_only:
        with open(a.out) as f:
            plot(json.load(f), a.plot)
        return
    levels = [float(x) for x in a.sparsity.split(",")]
    rec = {"title": a.title, "model": a.model, "dense_model": a.dense_model, "text": a.text,
           "ctx": a.ctx, "rounds": a.rounds, "n_gen": a.n_gen, "points": []}
    rec["dense_ppl"], _, _ = perplexity(a, a.dense_model, [])
    for s in levels:
        ppl, zeroed, mw = perplexity(a, a.model, ["--sparsity", str(s)])
        ppl_u, zeroed_u, mw_u = perplexity(a, a.model, ["--sparsity", str(s), "--sparsity-alloc", "uniform"])
        rec["points"].append({"sparsity": s, "ppl": ppl, "zeroed": zeroed, "model_wide": mw,
                              "ppl_uniform": ppl_u, "zeroed_uniform": zeroed_u,
                              "model_wide_uniform": mw_u, "tps_rounds": []})
    dense_rounds = []
    for r in range(a.rounds):
        dense_rounds.append(decode_tps(a, a.dense_model, []))
        for p in rec["points"]:
            p["tps_rounds"].append(decode_tps(a, a.model, ["--sparsity", str(p["sparsity"])]))
    rec["dense_tps_rounds"] = dense_rounds
    rec["dense_tps"] = statistics.median(dense_rounds)
    for p in rec["points"]:
        p["tps"] = statistics.median(p["tps_rounds"])
        p["speedup"] = p["tps"] / rec["dense_tps"]
        p["ppl_ratio"] = p["ppl"] / rec["dense_ppl"]
        p["ppl_ratio_uniform"] = p["ppl_uniform"] / rec["dense_ppl"]
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps({k: v for k, v in rec.items() if k != "points"}, indent=1))
    for p in rec["points"]:
        print(f"sparsity {p['sparsity']:.2f} (model-wide {100 * p['model_wide']:.1f}%): ppl {p['ppl']:.3f} "
              f"({100 * (p['ppl_ratio'] - 1):+.2f}%; uniform {p['ppl_uniform']:.3f}, "
              f"{100 * (p['ppl_ratio_uniform'] - 1):+.2f}% at {100 * p['model_wide_uniform']:.1f}%), "
              f"{p['tps']:.1f} t/s ({p['speedup']:.2f}x), zeroed {p['zeroed']}")
    if a.plot:
        plot(rec, a.plot)


if __name__ == "__main__":
    main()
