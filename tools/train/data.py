"""Token streams and evaluation windows shared by the training tools.

A split file (one chapter per line) is tokenized as ONE string, exactly as an engine's
perplexity tool tokenizes a text file: `sp.encode(whole_text)` (newlines become the
byte-fallback piece <0x0A>). Model inputs are windows of `ctx` tokens that start with BOS:

    input  = [BOS] + stream[o : o + ctx - 1]
    target =         stream[o : o + ctx]

Training draws random offsets o; evaluation tiles the stream with o = 0, ctx, 2*ctx, ...
so every token is scored exactly once ("per-token" loss / perplexity).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F


def load_stream(sp, path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return np.asarray(sp.encode(text), dtype=np.int64)


def make_window(stream, o, ctx, bos):
    chunk = stream[o:o + ctx]
    x = np.concatenate(([bos], chunk[:-1]))
    return x, chunk


def random_batch(stream, batch, ctx, bos, rng):
    offs = rng.integers(0, len(stream) - ctx, size=batch)
    xs, ys = zip(*(make_window(stream, o, ctx, bos) for o in offs))
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


def tiled_windows(stream, ctx, bos, max_windows=None):
    """Non-overlapping windows covering the stream (the last one may be shorter)."""
    out = []
    for o in range(0, len(stream), ctx):
        x, y = make_window(stream, o, ctx, bos)
        out.append((torch.from_numpy(x)[None], torch.from_numpy(y)[None]))
        if max_windows and len(out) >= max_windows:
            break
    return out


@torch.no_grad()
def mean_nll(model, windows, ffn_masks=None, batch=16):
    """Mean next-token negative log-likelihood (nats) over all target tokens of the windows."""
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        group = windows[i:i + batch]
        T = group[0][0].shape[1]
        if any(x.shape[1] != T for x, _ in group):  # ragged tail: run one by one
            for x, y in group:
                logits = model(x, ffn_masks=ffn_masks)
                total += F.cross_entropy(logits[0], y[0], reduction="sum").item()
                count += y.numel()
            continue
        x = torch.cat([w[0] for w in group])
        y = torch.cat([w[1] for w in group])
        logits = model(x, ffn_masks=ffn_masks)
        total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    return total / count, count


@torch.no_grad()
def llamacpp_style_ppl(model, stream, ctx, bos):
    """Perplexity as llama.cpp's `perplexity` tool computes it: tokens = [BOS] + stream,
    cut into chunks of ctx, first token of each chunk replaced by BOS, and only the
    second half of each chunk is scored."""
    toks = np.concatenate(([bos], stream))
    n_chunk = len(toks) // ctx
    first = ctx // 2
    total, count = 0.0, 0
    for c in range(n_chunk):
        x = torch.from_numpy(toks[c * ctx:(c + 1) * ctx].copy())
        x[0] = bos
        logits = model(x[None])[0]
        tgt = torch.from_numpy(toks[c * ctx + first + 1:(c + 1) * ctx])
        total += F.cross_entropy(logits[first:ctx - 1], tgt, reduction="sum").item()
        count += tgt.numel()
    return math.exp(total / count), count
