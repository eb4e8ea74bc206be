#!/usr/bin/env python3
"""What grammar-constrained sampling costs (docs/BENCHMARKS.md): `powerinfer run` without a
grammar and with each of grammars/list.gbnf, grammars/json.gbnf and a JSON Schema, rounds
interleaved, at the default sampling (temperature 0.8, top-k 40) and greedy. Per token: the
sampler's time (`sample time`, which holds the grammar's work) and the forward pass's
(`eval time`). The cost of a grammar is its extra sampling time per token over the time a
token takes without it (eval + sample), medians over rounds.
Usage: scripts/bench_grammar.py [-m MODEL] [-t 1] [-n 200] [--rounds 5]
"""
import argparse
import json
import os
import re
import statistics
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "build", "bin", "powerinfer")
SCHEMA = {
    "type": "object",
    "properties": {
        "book": {"enum": ["Genesis", "Exodus", "Psalms", "John"]},
        "chapter": {"type": "integer"},
        "verse": {"type": "string"},
        "names": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["book", "chapter", "verse", "names"],
}
GRAMMARS = {
    "none": [],
    "list.gbnf": ["--grammar-file", os.path.join(ROOT, "grammars", "list.gbnf")],
    "json.gbnf": ["--grammar-file", os.path.join(ROOT, "grammars", "json.gbnf")],
    "JSON Schema": ["-j", json.dumps(SCHEMA)],
}


def timings(model, threads, n, seed, temp, extra):
    args = [BIN, "run", "-m", model, "-p", "And God said", "-n", str(n), "-t", str(threads),
            "-s", str(seed), "--temp", str(temp), "--ignore-eos", "--no-display-prompt", *extra]
    err = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True,
                         text=True).stderr
    out = {}
    for key, name in (("sample", r"^sample time"), ("eval", r"^eval time")):
        m = re.search(name + r"\s*=\s*([\d.]+) ms /\s*(\d+)", err, re.M)
        out[key] = float(m.group(1)) / max(1, int(m.group(2)))
        out["n_" + key] = int(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", default=os.path.join(ROOT, "models", "kjv-relu", "kjv-relu.pwri.gguf"))
    ap.add_argument("-t", type=int, default=1)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    rows = []
    for temp in (0.8, 0.0):
        res = {g: [] for g in GRAMMARS}
        for r in range(a.rounds):
            order = list(GRAMMARS) if r % 2 == 0 else list(reversed(GRAMMARS))
            for g in order:
                res[g].append(timings(a.m, a.t, a.n, r + 1, temp, GRAMMARS[g]))
        base = res["none"]
        for g in GRAMMARS:
            sample = statistics.median(x["sample"] for x in res[g])
            evals = statistics.median(x["eval"] for x in res[g])
            # Cost per round against the same round's run without a grammar.
            cost = statistics.median(
                (x["sample"] - b["sample"]) / (b["eval"] + b["sample"]) for x, b in zip(res[g], base))
            toks = statistics.median(x["n_sample"] for x in res[g])
            rows.append((temp, g, toks, sample, evals, cost))
    print(f"model {os.path.basename(a.m)}, -t {a.t}, -n {a.n}, {a.rounds} rounds interleaved, medians")
    print("| temp | grammar | tokens | sample ms/token | eval ms/token | grammar cost |")
    print("|---|---|---:|---:|---:|---:|")
    for temp, g, toks, sample, evals, cost in rows:
        c = "" if g == "none" else f"{100 * cost:+.1f}%"
        print(f"| {temp} | {g} | {toks:.0f} | {sample:.4f} | {evals:.4f} | {c} |")


if __name__ == "__main__":
    main()
