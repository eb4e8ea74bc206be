#!/usr/bin/env python3
"""Train the small LLaMA on the KJV training split and save it in Hugging Face layout.

--act relu (default) trains the bundled kjv-relu (ReGLU FFN); --act silu trains its SiLU twin
kjv-silu (SwiGLU, the ordinary Llama FFN) with everything else identical (data, size, seed,
schedule). The activation picks the default output places: work/hf, models/kjv-relu and
work/train_state.pt for relu; work/hf-silu, models/kjv-silu and work/train_state-silu.pt for silu.

--arch smallthinker trains the bundled mixture of experts kjv-moe (SmallThinkerForCausalLM:
--experts ReGLU experts of width --expert-ffn, top --top-k sigmoid routing from the raw layer
input, GQA with --kv-heads 4) with the same data, tokenizer, seed and schedule; the loss adds
--aux-coef times the mean over layers of the Switch-Transformer load-balancing loss (1.0 when
balanced). Output places: work/hf-moe, models/kjv-moe, work/train_state-moe.pt.

AdamW + linear warm-up + cosine decay, fixed number of steps (deterministic: seeded
initialisation and batch sampling, fixed thread count). The validation loss is measured
on the whole validation split every --eval-every steps; the checkpoint with the best
validation loss is the one written to --out (config.json, model.safetensors, tokenizer.model).

Every evaluation also writes a full training state (weights, AdamW moments, sampler RNG,
log) to <work>/train_state.pt; --resume continues from it and yields the same result as an
uninterrupted run.

Use --measure to time a few steps on this machine and size --steps for a wall-clock budget.
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
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import llamacpp_style_ppl, load_stream, mean_nll, random_batch, tiled_windows  # noqa: E402
from model import Config, LlamaReLU, save_hf  # noqa: E402


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * min(1.0, t)))


def plot_losses(log, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    tr = [(r["step"], r["train_loss"]) for r in log if "train_loss" in r]
    va = [(r["step"], r["val_loss"]) for r in log if "val_loss" in r]
    ax.plot(*zip(*tr), label="train (mean over interval)", lw=1)
    ax.plot(*zip(*va), "o-", label="validation (whole split)", ms=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="tools/train/work")
    ap.add_argument("--arch", choices=("llama", "smallthinker"), default="llama",
                    help="llama (dense, kjv-relu / kjv-silu) or smallthinker (mixture of experts, kjv-moe)")
    ap.add_argument("--act", choices=("relu", "silu"), default="relu", help="FFN activation (hidden_act; llama only)")
    ap.add_argument("--out", help="HF checkpoint folder (default: <work>/hf, <work>/hf-silu for silu, "
                    "<work>/hf-moe for smallthinker)")
    ap.add_argument("--model-dir", help="where loss.png / train_metrics.json go (default: models/kjv-<act>, "
                    "models/kjv-moe for smallthinker)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, help="KV heads (default 8 for llama, 4 for smallthinker)")
    ap.add_argument("--experts", type=int, default=8, help="smallthinker: number of experts")
    ap.add_argument("--top-k", type=int, default=2, help="smallthinker: experts per token")
    ap.add_argument("--expert-ffn", type=int, default=384, help="smallthinker: expert width (moe_ffn_hidden_size)")
    ap.add_argument("--aux-coef", type=float, default=0.01, help="smallthinker: load-balancing loss coefficient")
    ap.add_argument("--moe-impl", choices=("grouped", "dense"), default="grouped",
                    help="smallthinker: run only the chosen experts on their tokens (grouped) or every expert on "
                    "every token (dense; same result, for timing)")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--measure", action="store_true", help="time 10 training steps and exit")
    ap.add_argument("--resume", action="store_true", help="continue from <work>/train_state.pt")
    args = ap.parse_args()
    moe = args.arch == "smallthinker"
    if moe and args.act != "relu":
        ap.error("--arch smallthinker has ReGLU experts: --act must be relu")
    name = "moe" if moe else args.act
    suffix = "-moe" if moe else ("" if args.act == "relu" else "-" + args.act)
    args.out = args.out or os.path.join(args.work, "hf" + suffix)
    args.model_dir = args.model_dir or "models/kjv-" + name
    if args.kv_heads is None:
        args.kv_heads = 4 if moe else 8
    os.makedirs(args.model_dir, exist_ok=True)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    tok_path = os.path.join(args.work, "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    cfg = Config(vocab_size=sp.vocab_size(), num_hidden_layers=args.layers, max_position_embeddings=args.ctx,
                 bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id(), hidden_act=args.act,
                 num_key_value_heads=args.kv_heads)
    if moe:
        cfg.model_type = "smallthinker"
        cfg.moe_num_primary_experts, cfg.moe_num_active_primary_experts = args.experts, args.top_k
        cfg.moe_ffn_hidden_size = args.expert_ffn
    train = load_stream(sp, os.path.join(args.work, "train.txt"))
    val = load_stream(sp, os.path.join(args.work, "val.txt"))
    test = load_stream(sp, os.path.join(args.work, "heldout.txt"))
    print(f"tokens: train {len(train)}, val {len(val)}, held-out {len(test)}")
    val_windows = tiled_windows(val, args.ctx, cfg.bos_token_id)

    model = LlamaReLU(cfg)
    model.init_weights(args.seed)
    if moe:
        model.set_moe_impl(args.moe_impl)
    n_params, n_active = model.param_counts()
    print(f"model: {cfg.num_hidden_layers} layers, {n_params / 1e6:.2f} M parameters"
          + (f", {n_active / 1e6:.2f} M active per token" if moe else ""))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    steps = 10 if args.measure else args.steps
    log, best, acc, acc_n, start, t_prev = [], float("inf"), 0.0, 0, 0, 0.0
    acc_aux = 0.0
    state_path = os.path.join(args.work, f"train_state{suffix}.pt")
    if args.resume:
        st = torch.load(state_path, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        rng.bit_generator.state = st["rng"]
        log, best, start, t_prev = st["log"], st["best"], st["step"], st["elapsed_s"]
        print(f"resumed at step {start}, best val loss {best:.4f}")
    t0 = time.time() - t_prev
    t_session = time.time()
    for step in range(start, steps):
        model.train()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        x, y = random_batch(train, args.batch, args.ctx, cfg.bos_token_id, rng)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        total = loss
        if moe:
            aux = torch.stack(model.aux_losses).mean()
            total = loss + args.aux_coef * aux
            acc_aux += aux.item()
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        acc, acc_n = acc + loss.item(), acc_n + 1

        done = step + 1
        if args.measure:
            if done == 2:
                t1 = time.time()
            continue
        if done % args.log_every == 0:
            el = time.time() - t0
            eta = (time.time() - t_session) / (done - start) * (steps - done)
            rec = {"step": done, "train_loss": acc / acc_n, "lr": lr_at(step, args), "elapsed_s": el}
            if moe:
                rec["aux_loss"] = acc_aux / acc_n
            log.append(rec)
            print(f"step {done:5d}/{steps} loss {acc / acc_n:.4f}"
                  + (f" aux {acc_aux / acc_n:.4f}" if moe else "")
                  + f" lr {lr_at(step, args):.2e} {el:6.0f}s elapsed, eta {eta:5.0f}s", flush=True)
            acc, acc_n, acc_aux = 0.0, 0, 0.0
        if done % args.eval_every == 0 or done == steps:
            model.eval()
            vl, _ = mean_nll(model, val_windows)
            log.append({"step": done, "val_loss": vl, "elapsed_s": time.time() - t0})
            mark = ""
            if vl < best:
                best, mark = vl, " (best, saved)"
                save_hf(model, args.out, tok_path)
            print(f"  val loss {vl:.4f} ppl {math.exp(vl):.2f}{mark}", flush=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": rng.bit_generator.state,
                        "log": log, "best": best, "step": done, "elapsed_s": time.time() - t0}, state_path)
            with open(os.path.join(args.work, f"train_log{suffix}.json"), "w") as f:
                json.dump({"args": vars(args), "log": log}, f, indent=1)
            plot_losses(log, os.path.join(args.model_dir, "loss.png"), f"kjv-{name} training")

    if args.measure:
        dt = (time.time() - t1) / (steps - 2)
        print(f"{dt:.3f} s/step, {args.batch * args.ctx / dt:.0f} tokens/s; 40 min budget ~ {int(2400 / dt)} "
              f"steps, 50 min ~ {int(3000 / dt)} steps (minus ~5% for evaluation)")
        return

    train_s = time.time() - t0
    from model import load_hf
    model = load_hf(args.out)  # best checkpoint
    vl, n_val = mean_nll(model, val_windows)
    tl, n_test = mean_nll(model, tiled_windows(test, args.ctx, cfg.bos_token_id))
    lppl, n_lc = llamacpp_style_ppl(model, test, args.ctx, cfg.bos_token_id)
    best_step = min((r for r in log if "val_loss" in r), key=lambda r: r["val_loss"])["step"]
    metrics = {
        "hidden_act": args.act, "parameters": n_params, "layers": cfg.num_hidden_layers, "steps": steps, "best_step": best_step,
        "batch_tokens": args.batch * args.ctx, "train_seconds": round(train_s, 1),
        "final_train_loss": next(r["train_loss"] for r in reversed(log) if "train_loss" in r),
        "val_loss": vl, "val_tokens": n_val,
        "heldout_loss": tl, "heldout_ppl_per_token": math.exp(tl), "heldout_tokens": n_test,
        "heldout_ppl_llamacpp_style_ctx%d" % args.ctx: lppl, "heldout_llamacpp_scored_tokens": n_lc,
    }
    if moe:
        metrics = {"arch": "smallthinker", "experts": args.experts, "top_k": args.top_k,
                   "expert_ffn": args.expert_ffn, "kv_heads": args.kv_heads, "active_parameters": n_active,
                   "aux_coef": args.aux_coef,
                   "final_aux_loss": next(r["aux_loss"] for r in reversed(log) if "aux_loss" in r), **metrics}
    with open(os.path.join(args.model_dir, "train_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
