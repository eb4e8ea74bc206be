#!/usr/bin/env python3
"""Plot a mixture of experts' routing from `powerinfer profile` statistics: expert locality.

    powerinfer profile -m MOE.gguf -f TEXT -o moe.stats.gguf
    tools/plot/plot_experts.py moe.stats.gguf -o experts.png [--title NAME]

Three panels:
  - each layer's experts by share of tokens routed to them (a heat map, experts sorted from the
    most to the least chosen in each layer; uniform routing is k / n everywhere);
  - the share of routed (token, expert) slots that a static set of each layer's most chosen
    experts serves, against the share of experts in the set: what a fixed placement of hot
    experts on a fast device can hit (the diagonal is uniform routing);
  - per layer, how often a token reuses an expert of the token before it (beside chance,
    k / n: what a recency cache can exploit) and, for ReLU-family experts, the share of the
    routed experts' neurons that fired.
A development tool (needs matplotlib); the tests use `load_stats` and `static_coverage` only.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "convert"))
from gguf_io import GGUFReader  # noqa: E402


def load_stats(path: str) -> dict:
    """The expert statistics of a profile file: {'n_tokens', 'n_expert', 'n_used', 'pairs',
    'shares' [layers, experts], 'reuse' [layers], 'fired' [layers] or None}."""
    r = GGUFReader(path)
    if r.get("general.architecture") != "activation_stats":
        raise ValueError(f"{path}: not an activation statistics file")
    n_expert = r.get("activation_stats.expert_count")
    if not n_expert:
        raise ValueError(f"{path}: no expert statistics (profile a mixture-of-experts model)")
    n_layer = int(r.get("activation_stats.block_count"))
    n_tokens = int(r.get("activation_stats.n_tokens"))
    n_used = int(r.get("activation_stats.expert_used_count"))
    pairs = int(r.get("activation_stats.expert_pairs"))
    counts = np.stack([np.asarray(r.tensor(f"blk.{l}.expert_counts"), dtype=np.float64) for l in range(n_layer)])
    reuse = np.array([float(r.tensor(f"blk.{l}.expert_reuse")[0]) for l in range(n_layer)])
    fired = None
    if "blk.0.activation_counts" in r.tensors:
        fired = []
        for l in range(n_layer):
            c = np.asarray(r.tensor(f"blk.{l}.activation_counts"), dtype=np.float64)
            n_ff = c.size // int(n_expert)
            routed = counts[l].sum() * n_ff
            fired.append(c.sum() / routed if routed else 0.0)
        fired = np.array(fired)
    return {
        "n_tokens": n_tokens,
        "n_expert": int(n_expert),
        "n_used": n_used,
        "pairs": pairs,
        "shares": counts / max(n_tokens, 1),
        "reuse": reuse / pairs if pairs else np.zeros(n_layer),
        "fired": fired,
    }


def static_coverage(shares: np.ndarray) -> np.ndarray:
    """[layers, experts + 1]: the share of a layer's routed slots served by its j most chosen
    experts, j = 0 .. n_expert."""
    s = -np.sort(-shares, axis=1)
    total = s.sum(axis=1, keepdims=True)
    total[total == 0] = 1.0
    return np.concatenate([np.zeros((s.shape[0], 1)), np.cumsum(s, axis=1) / total], axis=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stats", help="statistics file written by `powerinfer profile` on an MoE model")
    ap.add_argument("-o", "--output", required=True, help="image to write (.png, .svg)")
    ap.add_argument("--title", default="", help="model name for the title")
    a = ap.parse_args(argv)
    try:
        st = load_stats(a.stats)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares, n, k = st["shares"], st["n_expert"], st["n_used"]
    layers = shares.shape[0]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    sorted_shares = -np.sort(-shares, axis=1)
    im = ax[0].imshow(sorted_shares * 100, aspect="auto", cmap="viridis", origin="lower")
    ax[0].set_xlabel("experts of the layer, most chosen first")
    ax[0].set_ylabel("layer")
    ax[0].set_title(f"share of tokens routed (uniform {100 * k / n:.1f}%)")
    fig.colorbar(im, ax=ax[0], label="% of tokens")

    cov = static_coverage(shares)
    frac = np.arange(n + 1) / n
    for l in range(layers):
        ax[1].plot(frac * 100, cov[l] * 100, color="tab:blue", alpha=0.25, lw=1)
    ax[1].plot(frac * 100, cov.mean(axis=0) * 100, color="tab:blue", lw=2.5, label="mean over layers")
    ax[1].plot([0, 100], [0, 100], "k--", lw=1, label="uniform routing")
    ax[1].set_xlabel("% of each layer's experts in a static hot set")
    ax[1].set_ylabel("% of routed slots served")
    ax[1].set_title("static hot experts: what a fixed placement hits")
    ax[1].legend(loc="lower right")

    x = np.arange(layers)
    ax[2].bar(x - 0.2, st["reuse"] * 100, width=0.4, label="expert reused from the previous token")
    ax[2].axhline(100 * k / n, color="k", ls="--", lw=1, label=f"chance ({100 * k / n:.1f}%)")
    if st["fired"] is not None:
        ax[2].bar(x + 0.2, st["fired"] * 100, width=0.4, label="neurons fired in routed experts")
    ax[2].set_xlabel("layer")
    ax[2].set_ylabel("%")
    ax[2].set_title("temporal reuse and in-expert activity")
    ax[2].legend(loc="upper right", fontsize=8)
    title = f"{a.title + ': ' if a.title else ''}{n} experts, top {k}, {st['n_tokens']} tokens profiled"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
