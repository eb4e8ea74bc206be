#!/usr/bin/env python3
"""Converts activation statistics into the engine's own file (docs/PLACEMENT.md), read by
`powerinfer plan --stats`:

    python tools/convert/convert_activations.py DIR -o stats.gguf [--n-tokens N]

DIR holds the original PowerInfer's `activation_N.pt` (one 1-D torch tensor of n_ff firing
counts per layer, from its Hugging Face repositories; read without PyTorch) or
`activation_N.npy` files. Layers are ordered by N as a number (the original sorts the names as
strings, so layer 10 comes before layer 2). --n-tokens gives the number of tokens the counts
were taken over (default: "tokens" of DIR/meta.json when present, as
tools/train/profile_activations.py writes it); without either the counts are stored as relative (n_tokens = 0) and the engine
takes the largest count as "fires on every token". .npy values all <= 1 are frequencies per
token (n_tokens = 1), as `powerinfer synth --activation-dir` writes them.

Output: a GGUF v3 file, general.architecture = "activation_stats", keys
activation_stats.block_count (u32), .n_tokens (u64), .source (str) and per layer
blk.N.activation_counts, f32 [n_ff].
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoints  # noqa: E402
from gguf_io import VT, GGUFWriter  # noqa: E402
from quants import GGMLType  # noqa: E402

_NAME = re.compile(r"^activation_(0|[1-9][0-9]{0,8})\.(pt|npy)$")


class ConvertError(Exception):
    pass


def layer_files(src: str) -> list[tuple[int, str]]:
    """(layer, path) of every activation_N.pt / .npy in src, in numeric layer order; layers
    must be 0..n-1 and each given once."""
    found: dict[int, str] = {}
    for name in os.listdir(src):
        m = _NAME.match(name)
        if not m:
            continue
        n = int(m.group(1))
        if n in found:
            raise ConvertError(f"{src}: layer {n} given twice ({os.path.basename(found[n])}, {name})")
        found[n] = os.path.join(src, name)
    if not found:
        raise ConvertError(f"{src}: no activation_N.pt or activation_N.npy files")
    layers = sorted(found)  # integers: numeric order
    for expect, n in enumerate(layers):
        if n != expect:
            raise ConvertError(f"{src}: layer {expect} is missing (found up to {layers[-1]})")
    return [(n, found[n]) for n in layers]


def read_counts(path: str) -> np.ndarray:
    if path.endswith(".npy"):
        arr = np.load(path, allow_pickle=False)
    else:
        obj = checkpoints.load_torch_object(path)
        if isinstance(obj, dict):
            tensors = [v for v in obj.values() if isinstance(v, checkpoints.LazyTensor)]
            if len(tensors) != 1:
                raise ConvertError(f"{path}: a dict of {len(tensors)} tensors, expected one tensor")
            obj = tensors[0]
        if not isinstance(obj, checkpoints.LazyTensor):
            raise ConvertError(f"{path}: holds a {type(obj).__name__}, not a tensor")
        arr = obj.load()
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ConvertError(f"{path}: shape {arr.shape}, expected a 1-D tensor of n_ff counts")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        bad = int(np.flatnonzero(~np.isfinite(arr) | (arr < 0))[0])
        raise ConvertError(f"{path}: neuron {bad}: count {arr[bad]} is not a finite number >= 0")
    return arr.astype(np.float32)


def meta_tokens(src: str) -> int:
    """The token count in src/meta.json ({"tokens": N}, as tools/train/profile_activations.py
    writes it beside its activation_N.pt files), or 0."""
    path = os.path.join(src, "meta.json")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        n = json.load(f).get("tokens", 0)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ConvertError(f"{path}: 'tokens' is {n!r}, not a count")
    return n


def convert(src: str, out: str, n_tokens: int = 0) -> int:
    if n_tokens < 0:
        raise ConvertError(f"--n-tokens {n_tokens} is negative")
    if n_tokens == 0:
        n_tokens = meta_tokens(src)
    files = layer_files(src)
    counts = [read_counts(p) for _, p in files]
    if n_tokens > 0:
        for (n, p), c in zip(files, counts):
            if float(c.max()) > n_tokens:
                raise ConvertError(f"{p}: count {float(c.max())} exceeds --n-tokens {n_tokens}")
    source = "pt" if files[0][1].endswith(".pt") else "npy"
    if n_tokens == 0 and source == "npy" and all(float(c.max()) <= 1.0 for c in counts):
        n_tokens = 1  # frequencies per token (synth's expected counts), as the engine reads them
    with GGUFWriter(out) as w:
        w.add("general.architecture", "activation_stats")
        w.add("activation_stats.block_count", len(files), VT.UINT32)
        w.add("activation_stats.n_tokens", int(n_tokens), VT.UINT64)
        w.add("activation_stats.source", source)
        for n, c in enumerate(counts):
            w.add_tensor_info(f"blk.{n}.activation_counts", c.shape, GGMLType.F32)
        w.write_header()
        for n, c in enumerate(counts):
            w.write_tensor(f"blk.{n}.activation_counts", c)
    return len(files)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="directory of activation_N.pt or activation_N.npy files")
    ap.add_argument("-o", "--output", required=True, help="statistics file to write (.gguf)")
    ap.add_argument("--n-tokens", type=int, default=0,
                    help="tokens the counts were measured over (default: unknown, relative counts)")
    args = ap.parse_args(argv)
    try:
        n = convert(args.src, args.output, args.n_tokens)
    except (ConvertError, checkpoints.CheckpointError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {n} layers to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
