#!/usr/bin/env python3
"""Profile FFN activation sparsity of the trained model on the validation split.

For every token and layer it records
  h      the residual stream after attention, before post_attention_layernorm
         (exactly what a PowerInfer predictor receives), float32 [n_embd]
  active which FFN neurons fire: ReLU(gate(post_attention_layernorm(h)))_i > 0, bool [n_ff]

Outputs (in --work):
  activation/activation_N.pt   1-D float32 tensor [n_ff]: how many profiled tokens fired
                               neuron i in layer N (a count, like the original's files);
                               activation/meta.json holds the token count to turn it into a frequency
  profile/layer_N_h.npy        float32 [n_tokens, n_embd]
  profile/layer_N_mask.npy     uint8 [n_tokens, n_ff/8], np.packbits(active, axis=1)
  profile/meta.json            token count, windows, per-layer sparsity
  profile/extra_layer_N_*.npy  the same pairs for --extra-train-windows random windows of the
                               TRAINING split: more predictor-training data (statistics, activation
                               files and all predictor evaluation use the validation split only)
and --model-dir/activation_frequency.png: per-layer frequencies sorted descending, log-log.
Tokens are taken window by window (BOS + 255 tokens, tiling the split), in order, so a
contiguous tail of the arrays is a clean held-out part for predictor evaluation.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads crawl on a busy machine

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import load_stream, tiled_windows  # noqa: E402
from model import load_hf  # noqa: E402


def power_law_fit(freq):
    """Least-squares line through (log rank, log freq) over neurons that fired at least once."""
    f = np.sort(freq)[::-1]
    f = f[f > 0]
    r = np.arange(1, len(f) + 1)
    x, y = np.log(r), np.log(f)
    slope, icpt = np.polyfit(x, y, 1)
    resid = y - (slope * x + icpt)
    r2 = 1 - resid.var() / y.var() if y.var() > 0 else 1.0
    return float(slope), float(r2)


def plot(freqs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, f in enumerate(freqs):
        f = np.sort(f)[::-1]
        ax.loglog(np.arange(1, len(f) + 1), np.maximum(f, 1e-7), label=f"layer {i}", lw=1.2)
    ax.set_xlabel("neuron rank (sorted by activation frequency)")
    ax.set_ylabel("activation frequency (fraction of tokens)")
    ax.set_title("kjv-relu FFN neuron activation frequency (validation split)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def collect(model, windows, label):
    """Run the windows through the model; per layer lists of h [T, n_embd] and active [T, n_ff]."""
    L = model.cfg.num_hidden_layers
    hs, masks = [[] for _ in range(L)], [[] for _ in range(L)]
    with torch.no_grad():
        for w, (x, _) in enumerate(windows):
            taps = []
            model(x, taps=taps)
            for i, (h, a) in enumerate(taps):
                hs[i].append(h[0].numpy())
                masks[i].append(a[0].numpy())
            if (w + 1) % 20 == 0 or w + 1 == len(windows):
                print(f"\r{label}: profiled {w + 1}/{len(windows)} windows", end="", flush=True)
    print()
    return hs, masks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="tools/train/work")
    ap.add_argument("--hf", default="tools/train/work/hf")
    ap.add_argument("--split", default="val.txt", help="text file in --work to profile on")
    ap.add_argument("--model-dir", default="models/kjv-relu")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--extra-train-windows", type=int, default=600,
                    help="also record (h, active) pairs for this many random windows of train.txt "
                         "(profile/extra_layer_N_*.npy): extra predictor-training data only, "
                         "never used for the statistics or for predictor evaluation")
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = load_hf(args.hf)
    cfg = model.cfg
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.hf, "tokenizer.model"))
    stream = load_stream(sp, os.path.join(args.work, args.split))
    windows = tiled_windows(stream, args.ctx, cfg.bos_token_id)
    L = cfg.num_hidden_layers
    hs, masks = collect(model, windows, args.split)
    act_dir = os.path.join(args.work, "activation")
    prof_dir = os.path.join(args.work, "profile")
    os.makedirs(act_dir, exist_ok=True)
    os.makedirs(prof_dir, exist_ok=True)
    n_tok = sum(m.shape[0] for m in masks[0])
    layers, freqs = [], []
    for i in range(L):
        h = np.concatenate(hs[i]).astype(np.float32)
        m = np.concatenate(masks[i])
        counts = m.sum(0).astype(np.float32)
        torch.save(torch.from_numpy(counts), os.path.join(act_dir, f"activation_{i}.pt"))
        np.save(os.path.join(prof_dir, f"layer_{i}_h.npy"), h)
        np.save(os.path.join(prof_dir, f"layer_{i}_mask.npy"), np.packbits(m, axis=1))
        freq = counts / n_tok
        freqs.append(freq)
        slope, r2 = power_law_fit(freq)
        rec = {
            "layer": i,
            "sparsity": float(1 - m.mean()),
            "mean_active_per_token": float(m.sum(1).mean()),
            "dead_neurons": int((counts == 0).sum()),
            "neurons_over_50pct": int((freq > 0.5).sum()),
            "top10pct_share_of_activations": float(np.sort(counts)[::-1][:cfg.intermediate_size // 10].sum()
                                                   / max(1.0, counts.sum())),
            "loglog_slope": slope, "loglog_r2": r2,
        }
        layers.append(rec)
        print(f"layer {i}: sparsity {rec['sparsity']:.3f}, {rec['mean_active_per_token']:.0f} active/token, "
              f"dead {rec['dead_neurons']}, >50%: {rec['neurons_over_50pct']}, "
              f"top-10% neurons carry {rec['top10pct_share_of_activations']:.2f} of activations, "
              f"log-log slope {slope:.2f} (R^2 {r2:.2f})")
    meta = {"split": args.split, "tokens": n_tok, "windows": len(windows), "ctx": args.ctx,
            "n_ff": cfg.intermediate_size, "layers": layers,
            "mean_sparsity": float(np.mean([r["sparsity"] for r in layers]))}
    for d in (act_dir, prof_dir):
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
    with open(os.path.join(args.model_dir, "activation_stats.json"), "w") as f:
        json.dump(meta, f, indent=1)
    plot(freqs, os.path.join(args.model_dir, "activation_frequency.png"))
    if args.extra_train_windows > 0:
        tr = load_stream(sp, os.path.join(args.work, "train.txt"))
        tw = tiled_windows(tr, args.ctx, cfg.bos_token_id)
        pick = np.random.default_rng(args.seed).choice(len(tw), min(len(tw), args.extra_train_windows),
                                                        replace=False)
        ehs, ems = collect(model, [tw[j] for j in sorted(pick)], "train.txt (extra)")
        for i in range(L):
            np.save(os.path.join(prof_dir, f"extra_layer_{i}_h.npy"), np.concatenate(ehs[i]).astype(np.float32))
            np.save(os.path.join(prof_dir, f"extra_layer_{i}_mask.npy"), np.packbits(np.concatenate(ems[i]), axis=1))
        meta["extra_train_tokens"] = int(sum(m.shape[0] for m in ems[0]))
        with open(os.path.join(prof_dir, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
    print(f"{n_tok} tokens profiled, mean sparsity {meta['mean_sparsity']:.3f}; wrote {act_dir}, {prof_dir}")


if __name__ == "__main__":
    main()
