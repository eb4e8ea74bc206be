#!/usr/bin/env python3
"""Optional check: load the HF checkpoint with Hugging Face `transformers`
(LlamaForCausalLM, hidden_act relu) and compare its logits with tools/train/model.py.

Needs `pip install transformers` (not in requirements.txt: only this check uses it).
"""
import argparse
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads crawl on a busy machine

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_hf  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", default="tools/train/work/hf")
    ap.add_argument("--prompts", default="models/kjv-relu/prompts.txt")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import sentencepiece as spm
    from transformers import LlamaForCausalLM

    ours = load_hf(args.hf)
    theirs = LlamaForCausalLM.from_pretrained(args.hf, torch_dtype=torch.float32).eval()
    assert theirs.config.hidden_act == "relu"
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.hf, "tokenizer.model"))
    worst = 0.0
    with open(args.prompts, encoding="utf-8") as f:
        prompts = [p for p in f.read().splitlines() if p]
    for p in prompts:
        ids = [sp.bos_id()] + sp.encode(p)
        x = torch.tensor([ids])
        with torch.no_grad():
            a = ours(x)
            b = theirs(x).logits
        d = (a - b).abs().max().item()
        worst = max(worst, d)
        print(f"{p!r}: {len(ids)} tokens, max |logit diff| = {d:.3e}")
    # one long random sequence exercises every RoPE position
    g = torch.Generator().manual_seed(0)
    x = torch.randint(3, ours.cfg.vocab_size, (2, ours.cfg.max_position_embeddings), generator=g)
    with torch.no_grad():
        d = (ours(x) - theirs(x).logits).abs().max().item()
    print(f"random [2, {x.shape[1]}]: max |logit diff| = {d:.3e}")
    worst = max(worst, d)
    print("OK" if worst < 1e-3 else "MISMATCH", f"(worst {worst:.3e})")
    sys.exit(0 if worst < 1e-3 else 1)


if __name__ == "__main__":
    main()
