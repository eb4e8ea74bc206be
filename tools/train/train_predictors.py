#!/usr/bin/env python3
"""Train one activation predictor per layer from the (h, active) pairs of profile_activations.py.

Per layer: logits = fc2 . ReLU(fc1 . h) (no biases), trained with BCE-with-logits and a
pos_weight > 1 (missing an active neuron costs more than computing an idle one).

Data split (contiguous, at window boundaries, in profiling order):
  first 75% train | next 10% calibration | last 15% test (all reported numbers).

Threshold: on the calibration part each layer gets its own logit threshold tau_l, the
largest value with recall >= --target-recall + --calib-margin. The file format has ONE
threshold, so the per-layer thresholds are folded into the weights: with a common threshold
t of the same sign as the tau_l (t = median of tau_l), fc2 of layer l is scaled by
s_l = t / tau_l > 0,
because s_l*z >= t  <=>  z >= tau_l. (If a tau_l has the other sign it is replaced by a
tiny value of t's sign when t < 0, which can only raise that layer's recall.)
Threshold 0 could not be reached by scaling: a bias-free predictor has no offset.
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads crawl on a busy machine

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predictor import Predictor, load_predictors, mask_fns  # noqa: E402


def auto_rank(density):
    """Rank from the layer's measured activation density (1 - sparsity): n_embd/2 = 128 by
    default, 192 for dense layers (> 30% of neurons active). Measured on this model, rank 64
    lost ~0.16 precision against 128 at equal recall, and 192 still gained ~0.05 on layer 0."""
    return 192 if density > 0.30 else 128


def load_layer(prof_dir, i, n_ff, prefix=""):
    h = np.load(os.path.join(prof_dir, f"{prefix}layer_{i}_h.npy"))
    m = np.unpackbits(np.load(os.path.join(prof_dir, f"{prefix}layer_{i}_mask.npy")), axis=1)[:, :n_ff]
    return torch.from_numpy(h), torch.from_numpy(m.astype(np.float32))


def train_one(h, y, rank, args, seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    p = Predictor(h.shape[1], y.shape[1], rank)
    opt = torch.optim.AdamW(p.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    n = h.shape[0]
    steps_per_epoch = math.ceil(n / args.batch)
    total = args.epochs * steps_per_epoch
    pos_weight = torch.full((y.shape[1],), args.pos_weight)
    step = 0
    for ep in range(args.epochs):
        perm = torch.randperm(n, generator=g)
        run = 0.0
        for b in range(steps_per_epoch):
            idx = perm[b * args.batch:(b + 1) * args.batch]
            for gr in opt.param_groups:
                gr["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            loss = F.binary_cross_entropy_with_logits(p(h[idx]), y[idx], pos_weight=pos_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run += loss.item()
            step += 1
        print(f"\r    epoch {ep + 1:3d}/{args.epochs} bce {run / steps_per_epoch:.4f}", end="", flush=True)
    print()
    return p.eval()


def threshold_for_recall(logits, y, target):
    pos = logits[y > 0.5]
    k = int(math.floor((1 - target) * pos.numel()))  # at most k positives may fall below tau
    return float(torch.sort(pos).values[k])


def confusion(logits, y, thr):
    pred = logits >= thr
    act = y > 0.5
    tp = (pred & act).sum().item()
    return {
        "recall": tp / max(1, act.sum().item()),
        "precision": tp / max(1, pred.sum().item()),
        "predicted_sparsity": 1 - pred.float().mean().item(),
        "true_sparsity": 1 - act.float().mean().item(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="tools/train/work")
    ap.add_argument("--hf", default="tools/train/work/hf")
    ap.add_argument("--out", default="tools/train/work/predictors")
    ap.add_argument("--model-dir", default="models/kjv-relu")
    ap.add_argument("--ranks", default="auto", help="'auto' (from sparsity), one int, or a comma list per layer")
    ap.add_argument("--target-recall", type=float, default=0.99)
    ap.add_argument("--calib-margin", type=float, default=0.003,
                    help="calibrate to target+margin so the held-out recall still meets the target")
    ap.add_argument("--pos-weight", type=float, default=3.0)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--no-extra", action="store_true",
                    help="train on the validation-split pairs only (ignore profile/extra_layer_*)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.time()

    prof_dir = os.path.join(args.work, "profile")
    with open(os.path.join(prof_dir, "meta.json")) as f:
        meta = json.load(f)
    L, n_ff, ctx, n = len(meta["layers"]), meta["n_ff"], meta["ctx"], meta["tokens"]
    n_win = math.ceil(n / ctx)
    cut1 = int(round(n_win * 0.75)) * ctx
    cut2 = int(round(n_win * 0.85)) * ctx
    n_extra = 0 if args.no_extra else meta.get("extra_train_tokens", 0)
    print(f"{n} profiled tokens: train [0,{cut1}) calib [{cut1},{cut2}) test [{cut2},{n}); "
          f"+{n_extra} extra training tokens from train.txt")

    if args.ranks == "auto":
        ranks = [auto_rank(1 - r["sparsity"]) for r in meta["layers"]]
    elif "," in args.ranks:
        ranks = [int(r) for r in args.ranks.split(",")]
    else:
        ranks = [int(args.ranks)] * L
    assert len(ranks) == L

    preds, taus, rows = [], [], []
    for i in range(L):
        h, y = load_layer(prof_dir, i, n_ff)
        h_tr, y_tr = h[:cut1], y[:cut1]
        if n_extra:
            eh, ey = load_layer(prof_dir, i, n_ff, prefix="extra_")
            h_tr, y_tr = torch.cat([h_tr, eh]), torch.cat([y_tr, ey])
        print(f"layer {i}: rank {ranks[i]}, true sparsity {meta['layers'][i]['sparsity']:.3f}, "
              f"{h_tr.shape[0]} training tokens")
        p = train_one(h_tr, y_tr, ranks[i], args, args.seed + i)
        with torch.no_grad():
            tau = threshold_for_recall(p(h[cut1:cut2]), y[cut1:cut2],
                                       min(1.0, args.target_recall + args.calib_margin))
        preds.append(p)
        taus.append(tau)
        print(f"    calibrated threshold tau = {tau:+.4f}")

    # fold the per-layer thresholds into one common threshold
    t = float(np.median(taus))
    if t == 0.0:
        t = -1.0
    eps = 1e-3 * abs(t)
    if any(x <= 0 for x in taus):
        t = t if t < 0 else -eps
    os.makedirs(args.out, exist_ok=True)
    for i, (p, tau) in enumerate(zip(preds, taus)):
        eff = tau if (tau < 0) == (t < 0) and abs(tau) >= eps else math.copysign(eps, t)
        scale = t / eff
        sd = {"fc1.weight": p.fc1.weight.detach().clone().contiguous(),
              "fc2.weight": (p.fc2.weight.detach() * scale).contiguous()}
        torch.save(sd, os.path.join(args.out, f"model_{i}.pt"))
        rows.append({"layer": i, "rank": ranks[i], "tau_calibrated": tau, "fc2_scale": scale})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"sparse_threshold": t}, f, indent=2)
    print(f"common sparse_threshold = {t:+.4f}; wrote {args.out}")

    # evaluate the SAVED predictors on the test part
    saved, thr = load_predictors(args.out, L)
    for i in range(L):
        h, y = load_layer(prof_dir, i, n_ff)
        with torch.no_grad():
            rows[i].update(confusion(saved[i](h[cut2:]), y[cut2:], thr))
        rows[i]["test_tokens"] = n - cut2

    # end-to-end: held-out perplexity with the predicted masks vs dense
    import sentencepiece as spm
    from data import load_stream, mean_nll, tiled_windows
    from model import load_hf
    model = load_hf(args.hf)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.hf, "tokenizer.model"))
    test = load_stream(sp, os.path.join(args.work, "heldout.txt"))
    wins = tiled_windows(test, ctx, model.cfg.bos_token_id)
    print("held-out perplexity: dense ...", flush=True)
    dense, _ = mean_nll(model, wins)
    print("held-out perplexity: predicted masks ...", flush=True)
    sparse, _ = mean_nll(model, wins, ffn_masks=mask_fns(saved, thr))

    report = {
        "sparse_threshold": t, "target_recall": args.target_recall, "calib_margin": args.calib_margin,
        "pos_weight": args.pos_weight,
        "epochs": args.epochs, "split": "profiling tokens: 75% train / 10% calibration / 15% test (contiguous)",
        "profiled_split": meta["split"], "profiled_tokens": n, "extra_train_tokens": n_extra,
        "heldout_ppl_dense": math.exp(dense), "heldout_ppl_with_predictor": math.exp(sparse),
        "seconds": round(time.time() - t_start, 1),
        "layers": rows,
    }
    with open(os.path.join(args.model_dir, "predictor_report.json"), "w") as f:
        json.dump(report, f, indent=2)
    table = ["| layer | rank | recall | precision | predicted sparsity | true sparsity |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        table.append(f"| {r['layer']} | {r['rank']} | {r['recall']:.4f} | {r['precision']:.4f} | "
                     f"{r['predicted_sparsity']:.3f} | {r['true_sparsity']:.3f} |")
    table = "\n".join(table)
    with open(os.path.join(args.work, "predictor_table.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    print(f"held-out ppl: dense {math.exp(dense):.3f}, with predictor {math.exp(sparse):.3f} "
          f"(threshold {t:+.4f}); {report['seconds']} s")


if __name__ == "__main__":
    main()
