#!/usr/bin/env python3
"""Writes a tiny model that speaks the harmony format (gpt-oss) by construction, for the tests
of the harmony template, reply split, server and chat page:

    harmony_model.py OUT.gguf

It is a one-layer llama whose attention and FFN add nothing (attn_output and ffn_down are
zero), whose token embeddings are one-hot and whose output head gives each token one successor
a logit of 8 * sqrt(n_embd) (about 157) above every other token: whatever the sampling
settings, the next token is a fixed function of the last one. The vocabulary is byte-level
BPE (tokenizer.ggml.model gpt2, pre-tokenizer gpt-4o, no merges: text encodes byte by byte)
with gpt-oss's special tokens as control tokens and, for the reply, multi-byte tokens that
appear nowhere else. A prompt rendered with the harmony template ends with
"<|start|>assistant", i.e. with the byte token "t", whose successor begins the reply REPLY:

    <|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant
    <|channel|>final<|message|>{ANSWER}<|return|>

The first header is written with the control tokens <|channel|> and <|message|>; the second,
whose <|channel|> and <|message|> cannot follow other tokens than the first's, is spelt in
ordinary tokens split inside the tags ("<|chan", "nel|>fin", ...), which the reply split must
read the same. Any other token is followed by <|return|>, which ends a harmony reply. The file
also carries a chat template with harmony's markers, so the template is detected.
"""
from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "convert"))
import gguf_io  # noqa: E402
from gguf_io import VT  # noqa: E402
from quants import GGMLType  # noqa: E402

REASONING = "The user wants code. Show a block and escape <b>html</b>."
ANSWER = ("# Hello\n\nHere is **code** and `x<y`:\n\n```python\nprint(\"hi\")\n```\n\n"
          "- one\n- two\n\nSee [docs](https://example.com). <script>alert(1)</script> done")
SPECIAL = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
           "<|start|>", "<|end|>", "<|message|>", "<|call|>"]
CHAT_TEMPLATE = ("{{- '<|start|>system<|message|>' }}{{- build_system_message() }}{{- '<|end|>' }}"
                 "{%- for message in messages %}{{- '<|start|>' + message.role + '<|channel|>final"
                 "<|message|>' + message.content + '<|end|>' }}{%- endfor %}"
                 "{%- if add_generation_prompt %}<|start|>assistant{%- endif %}")


def byte_chars():
    """GPT-2's byte-level alphabet: the character each byte is written as in the vocabulary."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def chunks(text, used):
    """`text` cut into pieces of 2..8 bytes, none of them already in `used`."""
    out, i = [], 0
    while i < len(text):
        rest = len(text) - i
        for n in ([rest] if rest <= 8 else []) + [5, 4, 6, 3, 7, 2, 8]:
            piece = text[i:i + n]
            if len(piece) >= 2 and piece not in used and rest - n != 1:
                break
        else:
            raise SystemExit(f"no unused piece at {i} of {text!r}")
        used.add(piece)
        out.append(piece)
        i += len(piece)
    return out


def build(path):
    """Writes the model to `path`; returns the number of tokens of REPLY (<|return|> not
    counted)."""
    chars = byte_chars()
    encode = lambda s: "".join(chars[b] for b in s.encode("utf-8"))  # noqa: E731
    tokens = [chars[b] for b in range(256)]
    types = [1] * 256
    for s in SPECIAL:
        tokens.append(s)
        types.append(3)
    special = {s: 256 + i for i, s in enumerate(SPECIAL)}
    header = ["assistant", "<|chan", "nel|>fin", "al<|mess", "age|>"]
    used = {chr(b) for b in range(256)} | {"analysis"} | set(header)
    reasoning = chunks(REASONING, used)
    answer = chunks(ANSWER, used)
    word_ids = {}
    for t in ["analysis"] + reasoning + header + answer:
        word_ids[t] = len(tokens)
        tokens.append(encode(t))
        types.append(1)
    assert len(set(tokens)) == len(tokens), "duplicate token texts"

    chain = ([special["<|channel|>"], word_ids["analysis"], special["<|message|>"]]
             + [word_ids[t] for t in reasoning]
             + [special["<|end|>"], special["<|start|>"]]
             + [word_ids[t] for t in header]
             + [word_ids[t] for t in answer] + [special["<|return|>"]])
    assert len(set(chain)) == len(chain), "a token appears twice in the reply"
    n_vocab = len(tokens)
    successor = np.full(n_vocab, special["<|return|>"])
    successor[ord("t")] = chain[0]
    for a, b in zip(chain, chain[1:]):
        successor[a] = b

    n_embd, n_ff, n_head = -(-n_vocab // 64) * 64, 64, -(-n_vocab // 64)
    f32 = np.float32
    w = {"token_embd.weight": np.eye(n_vocab, n_embd, dtype=f32),
         "output_norm.weight": np.ones(n_embd, f32)}
    out = np.zeros((n_vocab, n_embd), f32)
    for a in range(n_vocab):
        out[successor[a], a] = 8.0
    w["output.weight"] = out
    p = "blk.0."
    w[p + "attn_norm.weight"] = np.ones(n_embd, f32)
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w[p + name + ".weight"] = np.zeros((n_embd, n_embd), f32)
    w[p + "ffn_norm.weight"] = np.ones(n_embd, f32)
    w[p + "ffn_gate.weight"] = np.zeros((n_ff, n_embd), f32)
    w[p + "ffn_up.weight"] = np.zeros((n_ff, n_embd), f32)
    w[p + "ffn_down.weight"] = np.zeros((n_embd, n_ff), f32)

    md = [
        ("general.architecture", "llama", VT.STRING),
        ("general.name", "tiny-harmony", VT.STRING),
        ("general.file_type", 0, VT.UINT32),
        ("llama.context_length", 4096, VT.UINT32),
        ("llama.embedding_length", n_embd, VT.UINT32),
        ("llama.block_count", 1, VT.UINT32),
        ("llama.feed_forward_length", n_ff, VT.UINT32),
        ("llama.attention.head_count", n_head, VT.UINT32),
        ("llama.attention.head_count_kv", n_head, VT.UINT32),
        ("llama.rope.dimension_count", 64, VT.UINT32),
        ("llama.rope.freq_base", 10000.0, VT.FLOAT32),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5, VT.FLOAT32),
        ("tokenizer.ggml.model", "gpt2", VT.STRING),
        ("tokenizer.ggml.pre", "gpt-4o", VT.STRING),
        ("tokenizer.ggml.tokens", tokens, (VT.ARRAY, VT.STRING)),
        ("tokenizer.ggml.token_type", np.asarray(types, np.int32), (VT.ARRAY, VT.INT32)),
        ("tokenizer.ggml.merges", [], (VT.ARRAY, VT.STRING)),
        ("tokenizer.ggml.bos_token_id", special["<|startoftext|>"], VT.UINT32),
        ("tokenizer.ggml.eos_token_id", special["<|return|>"], VT.UINT32),
        ("tokenizer.ggml.padding_token_id", special["<|endoftext|>"], VT.UINT32),
        ("tokenizer.ggml.add_bos_token", False, VT.BOOL),
        ("tokenizer.chat_template", CHAT_TEMPLATE, VT.STRING),
    ]
    with gguf_io.GGUFWriter(path) as f:
        for key, value, vtype in md:
            f.add(key, value, vtype)
        for name, arr in w.items():
            f.add_tensor_info(name, arr.shape, GGMLType.F32)
        f.write_header()
        for name, arr in w.items():
            f.write_tensor(name, arr)
    return len(chain) - 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    build(sys.argv[1])
