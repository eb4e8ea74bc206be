#!/usr/bin/env python3
"""Write golden logits for engine tests.

For the first --n prompts of prompts.txt: tokens = [BOS] + sentencepiece(prompt)
(at most 16), one float32 forward pass of the dense HF checkpoint, and
  golden_K.f32   raw little-endian float32 logits [n_tokens, n_vocab], row-major
  golden.json    {"prompts": [{"text", "tokens", "logits_file", "n_vocab", "n_tokens",
                               "greedy_tokens", "greedy_text"}], ...}
greedy_tokens: 32 tokens of argmax decoding (full recomputation each step, float32,
dense FFN, no KV cache), excluding the prompt.
"""
import argparse
import hashlib
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads crawl on a busy machine

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_hf  # noqa: E402


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", default="tools/train/work/hf")
    ap.add_argument("--model-dir", default="models/kjv-relu", help="reads prompts.txt, writes golden*")
    ap.add_argument("--n", type=int, default=3, help="number of prompts")
    ap.add_argument("--greedy", type=int, default=32, help="greedy continuation length")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = load_hf(args.hf)
    V = model.cfg.vocab_size
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.hf, "tokenizer.model"))
    with open(os.path.join(args.model_dir, "prompts.txt"), encoding="utf-8") as f:
        prompts = [p for p in f.read().splitlines() if p.strip()][:args.n]

    out = {"model": {"config": "config.json", "safetensors_sha256": sha256(os.path.join(args.hf, "model.safetensors")),
                     "tokenizer_sha256": sha256(os.path.join(args.hf, "tokenizer.model"))},
           "dtype": "float32", "layout": "row-major [n_tokens, n_vocab], little-endian",
           "add_bos": True, "bos_id": model.cfg.bos_token_id, "prompts": []}
    for k, text in enumerate(prompts):
        toks = [model.cfg.bos_token_id] + sp.encode(text)
        if len(toks) > 16:
            sys.exit(f"prompt {k} has {len(toks)} tokens (> 16): {text!r}")
        with torch.no_grad():
            logits = model(torch.tensor([toks]))[0].float()
            seq = list(toks)
            for s in range(args.greedy):
                nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
                seq.append(nxt)
                print(f"\rprompt {k}: greedy {s + 1}/{args.greedy}", end="", flush=True)
        print()
        fname = f"golden_{k}.f32"
        logits.numpy().astype("<f4").tofile(os.path.join(args.model_dir, fname))
        gen = seq[len(toks):]
        out["prompts"].append({
            "text": text, "tokens": toks, "logits_file": fname, "n_vocab": V, "n_tokens": len(toks),
            "argmax_last": int(logits[-1].argmax()),
            "greedy_tokens": gen, "greedy_text": sp.decode(gen),
        })
        print(f"  {text!r} -> {sp.decode(gen)!r}")
    with open(os.path.join(args.model_dir, "golden.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {os.path.join(args.model_dir, 'golden.json')} and {len(prompts)} logits files")


if __name__ == "__main__":
    main()
