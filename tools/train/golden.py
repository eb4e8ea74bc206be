#!/usr/bin/env python3
"""Write golden logits for engine tests.

For the first --n prompts of prompts.txt: tokens = [BOS] + sentencepiece(prompt)
(at most 16), one float32 forward pass of the dense HF checkpoint, and
  golden_K.f32   raw little-endian float32 logits [n_tokens, n_vocab], row-major
  golden.json    {"prompts": [{"text", "tokens", "logits_file", "n_vocab", "n_tokens",
                               "greedy_tokens", "greedy_text"}], ...}
greedy_tokens: 32 tokens of argmax decoding (full recomputation each step, float32,
dense FFN, no KV cache), excluding the prompt.

--moe: the mixture of experts kjv-moe (work/hf-moe -> models/kjv-moe). Its top-2 routing is a
discontinuous choice: where the 2nd and 3rd router logits nearly tie, the engine running the
Q8_0 file can pick the other expert, and that moves the logits by up to 35% of their range
(median 9%, measured by forcing such swaps on this model), far beyond quantization noise. At
this size near-ties are common (a quarter to a half of the top-2 margins are below 0.05, while
Q8_0 moves router logits by up to ~0.02), so the prompts are chosen for well-separated routing:
candidates are the lines of --prompts, then the first 4 words of each sentence of --candidates
(held-out text); each is run in float32 and in a Q8_0 simulation of the engine (every matrix
rounded through Q8_0 exactly as `convert_hf.py --outtype q8_0 --transpose-down` stores it, the
router F32 as in the file, and the inputs of the Q8_0 projections rounded to 8-bit blocks of
32, as the CPU kernels do). A prompt is kept when the simulation picks the same experts at
every layer and position and, in every layer but the first, the top-2 margin at every position
is at least --min-ratio times the largest router-logit change the simulation shows in that
layer. (Layer 0's router reads the dequantized embedding row in F32, which the simulation
reproduces exactly, so there only the simulated margin must be at least 5e-4, over 1000 times
the float32 rounding of those logits.) The first --n kept prompts are written, with their
routing (expert ids per layer and position) and margin ratio. The logits are the float32
model's, as for kjv-relu.
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


def q8_model(hf_dir):
    """A Q8_0 simulation of the engine running the converted file: every matrix rounded through
    Q8_0 as convert_hf.py --outtype q8_0 --transpose-down stores it (blocks of 32 along each
    GGUF row; the experts' down projections stored transposed, [n_ff_exp, n_embd] rows; the
    router F32), and the inputs of the Q8_0 projections rounded to Q8_0 blocks as the CPU kernels
    quantize activations (not the router's, nor the experts' down rows, which are accumulated)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "convert"))
    from quants import GGMLType, dequantize, quantize_q8_0

    def rt(w):
        a = w.detach().float().contiguous().numpy()
        shape = a.shape
        a = a.reshape(-1, shape[-1])
        return torch.from_numpy(dequantize(quantize_q8_0(a), GGMLType.Q8_0, a.shape).reshape(shape).copy())

    model = load_hf(hf_dir)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() != 2 or name.endswith("primary_router.weight"):
                continue
            p.copy_(rt(p.T).T if name.endswith(".down.weight") else rt(p))
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and not name.endswith(("primary_router", ".down")):
            mod.register_forward_pre_hook(lambda _m, inp: (rt(inp[0]),))
    return model


@torch.no_grad()
def routing_check(model, q8, toks):
    """Routing of a prompt in float32 against the Q8_0 simulation: whether the experts agree,
    and the smallest margin ratio (top-2 margin over the layer's largest router-logit change)."""
    k = model.cfg.moe_num_active_primary_experts
    ta, tb = [], []
    model(torch.tensor([toks]), taps=ta)
    q8(torch.tensor([toks]), taps=tb)
    same, ratio, margin0, experts = True, float("inf"), float("inf"), []
    for il, (a, b) in enumerate(zip(ta, tb)):
        same &= bool(torch.equal(a["experts"].sort(-1).values, b["experts"].sort(-1).values))
        experts.append(a["experts"][0].tolist())
        if il == 0:
            srt = b["logits"].sort(-1, descending=True).values
            margin0 = float((srt[..., k - 1] - srt[..., k]).min())
            continue
        srt = a["logits"].sort(-1, descending=True).values
        margin = float((srt[..., k - 1] - srt[..., k]).min())
        delta = float((a["logits"] - b["logits"]).abs().max())
        ratio = min(ratio, margin / max(delta, 1e-12))
    return {"same_experts": same, "min_margin_ratio": ratio, "layer0_min_margin": margin0, "experts": experts}


def select_moe_prompts(model, sp, prompts, args):
    """The prompts (in candidate order) whose routing is well separated; see the docstring."""
    import re
    cands = list(prompts)
    if args.candidates:
        with open(args.candidates, encoding="utf-8") as f:
            for sent in re.split(r"(?<=[.;:?!])\s+", f.read()):
                words = sent.split()
                if len(words) >= 6:
                    cands.append(" ".join(words[:4]))
    cands = list(dict.fromkeys(cands))[:args.max_candidates]
    q8 = q8_model(args.hf)
    kept, info = [], {}
    for i, text in enumerate(cands):
        toks = [model.cfg.bos_token_id] + sp.encode(text)
        if len(toks) > 16:
            continue
        r = routing_check(model, q8, toks)
        if r["same_experts"] and r["layer0_min_margin"] >= 5e-4 and r["min_margin_ratio"] >= args.min_ratio:
            kept.append(text)
            info[text] = r
            print(f"\rkeep {text!r} (candidate {i}): margin ratio {r['min_margin_ratio']:.2f}, "
                  f"layer-0 margin {r['layer0_min_margin']:.4f}")
            if len(kept) == args.n:
                break
        print(f"\r{i + 1}/{len(cands)} candidates, {len(kept)} kept", end="", flush=True)
    print()
    if len(kept) < args.n:
        print(f"warning: only {len(kept)} of {len(cands)} candidates have well-separated routing", file=sys.stderr)
    return kept, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moe", action="store_true",
                    help="the mixture of experts: defaults work/hf-moe and models/kjv-moe; prompts with "
                    "well-separated routing only (see above)")
    ap.add_argument("--hf", help="HF checkpoint (default tools/train/work/hf, or hf-moe with --moe)")
    ap.add_argument("--model-dir", help="writes golden* (default models/kjv-relu, or models/kjv-moe with --moe)")
    ap.add_argument("--prompts", help="prompt file (default <model-dir>/prompts.txt; models/kjv-relu/prompts.txt "
                    "with --moe)")
    ap.add_argument("--candidates", default="models/kjv-relu/heldout.txt",
                    help="--moe: further candidate prompts, the first 4 words of each sentence of this text")
    ap.add_argument("--max-candidates", type=int, default=600, help="--moe: at most this many candidates")
    ap.add_argument("--min-ratio", type=float, default=3.0,
                    help="--moe: smallest allowed top-2 margin / the layer's largest router-logit change under Q8_0")
    ap.add_argument("--n", type=int, default=3, help="number of prompts")
    ap.add_argument("--greedy", type=int, default=32, help="greedy continuation length")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    args.hf = args.hf or ("tools/train/work/hf-moe" if args.moe else "tools/train/work/hf")
    args.model_dir = args.model_dir or ("models/kjv-moe" if args.moe else "models/kjv-relu")
    args.prompts = args.prompts or ("models/kjv-relu/prompts.txt" if args.moe
                                    else os.path.join(args.model_dir, "prompts.txt"))
    torch.set_num_threads(args.threads)

    model = load_hf(args.hf)
    V = model.cfg.vocab_size
    if model.cfg.is_moe != args.moe:
        sys.exit(f"{args.hf}: {'a' if model.cfg.is_moe else 'no'} mixture-of-experts checkpoint: "
                 f"{'add' if model.cfg.is_moe else 'drop'} --moe")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.hf, "tokenizer.model"))
    with open(args.prompts, encoding="utf-8") as f:
        prompts = [p for p in f.read().splitlines() if p.strip()]
    routing = {}
    if args.moe:
        prompts, routing = select_moe_prompts(model, sp, prompts, args)
    prompts = prompts[:args.n]

    out = {"model": {"config": "config.json", "safetensors_sha256": sha256(os.path.join(args.hf, "model.safetensors")),
                     "tokenizer_sha256": sha256(os.path.join(args.hf, "tokenizer.model"))},
           "dtype": "float32", "layout": "row-major [n_tokens, n_vocab], little-endian",
           "add_bos": True, "bos_id": model.cfg.bos_token_id, "prompts": []}
    if args.moe:
        out["routing_selection"] = {
            "prompts_file": args.prompts, "candidates": args.candidates, "max_candidates": args.max_candidates,
            "min_ratio": args.min_ratio,
            "rule": "same experts at every layer and position in a Q8_0 simulation of the engine (weights as "
                    "convert_hf.py --outtype q8_0 --transpose-down stores them, router F32, projection inputs "
                    "rounded to Q8_0 blocks); in layers >= 1 every top-2 margin >= min_ratio x the layer's largest "
                    "router-logit change under the simulation; in layer 0 the simulated margin >= 5e-4"}
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
        if args.moe:
            out["prompts"][-1]["routing"] = routing[text]
        print(f"  {text!r} -> {sp.decode(gen)!r}")
    with open(os.path.join(args.model_dir, "golden.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {os.path.join(args.model_dir, 'golden.json')} and {len(prompts)} logits files")


if __name__ == "__main__":
    main()
