#!/usr/bin/env python3
"""Routing statistics and in-expert activation sparsity of the mixture-of-experts model
(kjv-moe, SmallThinker-style) on the validation split.

The split is tokenized as one string and tiled into windows of --ctx tokens from BOS, exactly
as train_model.py evaluates it (every token once). Per layer it measures

  share      how often each expert is chosen: the share of tokens whose top-k contains it
             (sums to k over the experts; a uniform router gives k / n_expert to each)
  entropy    entropy of the expert-assignment distribution divided by log(n_expert)
             (1.0: perfectly even use)
  reuse      share of a token's k experts that the previous token (same window) also chose;
             a uniform random router gives k / n_expert, and `reuse_independent` is the same
             measure with the previous token replaced by a random token of the split (a
             router that keeps these frequencies but has no memory)
  sparsity   in-expert sparsity: share of the chosen experts' gate outputs gate_e(y) <= 0, i.e.
             of the ReGLU neurons a sparse kernel can skip (per expert too)
  margin     the gap between the k-th and (k+1)-th router logit (how far a token is from
             changing its expert set): median and the share below 0.05 and 0.2

Writes models/kjv-moe/routing_stats.json and expert_frequency.png. No per-token trace is kept.
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads crawl on a busy machine

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import load_stream, tiled_windows  # noqa: E402
from model import load_hf  # noqa: E402


def plot(stats, path, k, E):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    L = len(stats)
    cols = 3
    rows = math.ceil(L / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(10, 3.0 * rows), sharey=True, squeeze=False)
    for il, s in enumerate(stats):
        ax = axes[il // cols][il % cols]
        share = np.array(s["share"]) * 100
        ax.bar(range(E), share, color="tab:blue", alpha=0.8, label="share of tokens")
        ax.plot(range(E), np.array(s["sparsity_per_expert"]) * 100, "o-", color="tab:red", ms=3,
                label="in-expert sparsity")
        ax.axhline(100 * k / E, color="k", ls="--", lw=1, label=f"uniform ({100 * k / E:.0f}%)")
        ax.set_title(f"layer {il}: entropy {s['entropy_rel']:.3f}, reuse {100 * s['reuse']:.0f}%", fontsize=9)
        ax.set_xticks(range(E))
        ax.set_xlabel("expert")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3, axis="y")
        if il % cols == 0:
            ax.set_ylabel("%")
    for j in range(L, rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"kjv-moe: expert choice (top-{k} of {E}) and in-expert sparsity, validation split", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", default="tools/train/work/hf-moe")
    ap.add_argument("--text", default="tools/train/work/val.txt")
    ap.add_argument("--model-dir", default="models/kjv-moe", help="writes routing_stats.json, expert_frequency.png")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234, help="for the independent-router reuse baseline")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = load_hf(args.hf)
    cfg = model.cfg
    if not cfg.is_moe:
        sys.exit(f"{args.hf} is not a smallthinker (mixture-of-experts) checkpoint")
    E, k, F_ = cfg.moe_num_primary_experts, cfg.moe_num_active_primary_experts, cfg.moe_ffn_hidden_size
    L = cfg.num_hidden_layers
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.hf, "tokenizer.model"))
    stream = load_stream(sp, args.text)
    windows = tiled_windows(stream, args.ctx, cfg.bos_token_id)

    experts = [[] for _ in range(L)]   # per layer: list of [T, k] arrays, one per window
    inactive = [[] for _ in range(L)]
    margins = [[] for _ in range(L)]
    t0 = time.time()
    with torch.no_grad():
        for i in range(0, len(windows), args.batch):
            group = windows[i:i + args.batch]
            # windows of equal length run batched; a shorter tail window runs alone
            lengths = {w[0].shape[1] for w in group}
            batches = [torch.cat([w[0] for w in group])] if len(lengths) == 1 else [w[0] for w in group]
            for xb in batches:
                taps = []
                model(xb, taps=taps)
                for il, t in enumerate(taps):
                    lg = t["logits"].sort(-1, descending=True).values
                    for b in range(xb.shape[0]):
                        experts[il].append(t["experts"][b].numpy())
                        inactive[il].append(t["inactive"][b].numpy())
                        margins[il].append((lg[b, :, k - 1] - lg[b, :, k]).numpy())
            print(f"\r{min(i + args.batch, len(windows))}/{len(windows)} windows", end="", flush=True)
    print(f"  ({time.time() - t0:.0f} s)")

    rng = np.random.default_rng(args.seed)
    n_tokens = sum(len(e) for e in experts[0])
    stats = []
    for il in range(L):
        ex = np.concatenate(experts[il])                 # [N, k]
        ina = np.concatenate(inactive[il]).astype(np.int64)  # [N, k]
        mg = np.concatenate(margins[il])
        onehot = np.zeros((len(ex), E), dtype=bool)
        np.put_along_axis(onehot, ex, True, axis=1)
        share = onehot.mean(0)                           # share of tokens choosing expert e
        p = share / share.sum()
        ent = float(-(p[p > 0] * np.log(p[p > 0])).sum() / math.log(E))
        # reuse: consecutive tokens inside a window
        same = []
        for w in experts[il]:
            oh = np.zeros((len(w), E), dtype=bool)
            np.put_along_axis(oh, w, True, axis=1)
            same.append((oh[1:] & oh[:-1]).sum(1) / k)
        reuse = float(np.concatenate(same).mean())
        perm = rng.permutation(len(onehot))
        reuse_ind = float((onehot & onehot[perm]).sum(1).mean() / k)
        # in-expert sparsity: gate outputs <= 0 among the chosen experts' neurons
        sparsity = float(ina.sum() / (ina.size * F_))
        per_exp = [float(ina[ex == e].sum() / max(1, (ex == e).sum() * F_)) for e in range(E)]
        s = {
            "layer": il,
            "share": [float(v) for v in share],
            "share_min": float(share.min()), "share_max": float(share.max()),
            "entropy_rel": ent,
            "reuse": reuse, "reuse_uniform": k / E, "reuse_independent": reuse_ind,
            "sparsity": sparsity, "sparsity_per_expert": per_exp,
            "active_neurons_per_expert": (1 - sparsity) * F_,
            "margin_median": float(np.median(mg)),
            "margin_below_0.05": float((mg < 0.05).mean()), "margin_below_0.2": float((mg < 0.2).mean()),
        }
        stats.append(s)
        print(f"layer {il}: share {100 * s['share_min']:.1f}-{100 * s['share_max']:.1f}% "
              f"entropy {ent:.3f} reuse {100 * reuse:.1f}% (uniform {100 * k / E:.0f}%, independent "
              f"{100 * reuse_ind:.1f}%) in-expert sparsity {100 * sparsity:.1f}% "
              f"margin median {s['margin_median']:.3f}, <0.05 {100 * s['margin_below_0.05']:.1f}%")

    out = {
        "text": os.path.relpath(args.text), "tokens": n_tokens, "ctx": args.ctx,
        "experts": E, "top_k": k, "expert_ffn": F_,
        "definitions": {
            "share": "share of tokens whose top-k experts contain expert e (sums to top_k; uniform top_k/experts)",
            "entropy_rel": "entropy of the expert-assignment distribution / log(experts)",
            "reuse": "share of a token's top-k experts also chosen by the previous token of its window",
            "reuse_uniform": "the same for a uniform random router: top_k/experts",
            "reuse_independent": "the same with the previous token replaced by a random token of the text",
            "sparsity": "share of the chosen experts' gate outputs <= 0 (ReGLU neurons a sparse kernel skips)",
            "margin": "router logit of the k-th minus the (k+1)-th expert",
        },
        "layers": stats,
        "mean_sparsity": float(np.mean([s["sparsity"] for s in stats])),
        "mean_reuse": float(np.mean([s["reuse"] for s in stats])),
    }
    os.makedirs(args.model_dir, exist_ok=True)
    with open(os.path.join(args.model_dir, "routing_stats.json"), "w") as f:
        json.dump(out, f, indent=1)
    plot(stats, os.path.join(args.model_dir, "expert_frequency.png"), k, E)
    print(f"mean in-expert sparsity {100 * out['mean_sparsity']:.1f}%, mean reuse {100 * out['mean_reuse']:.1f}%")
    print(f"wrote {args.model_dir}/routing_stats.json and expert_frequency.png")


if __name__ == "__main__":
    main()
