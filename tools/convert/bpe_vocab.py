"""Byte-level BPE vocabularies from a Hugging Face `tokenizer.json` (the only tokenizer file of
GPT-2-style models such as OPT, Qwen2 and Llama 3), as GGUF `gpt2` tokenizer metadata: tokens in
id order with their types, merges, the pre-tokenizer name the engine knows, the special ids.

Facts used (Hugging Face tokenizers' JSON format): `model.type == "BPE"` with `model.vocab`
{token: id} and `model.merges` ("a b" strings or [a, b] pairs); `added_tokens` [{id, content,
special}]; the byte-level mapping is a `ByteLevel` pre-tokenizer, alone (its own GPT-2 regex,
`use_regex`) or after a `Split` on the model's regex. tokenizer_config.json names the
bos/eos/unk/pad tokens, `add_bos_token` and the chat template. Rows of the embedding beyond the
tokenizer's ids are padded with unused tokens "[PADi]".
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from gguf_io import VT

# Token types of GGUF (llama.cpp's enum): normal, unknown, control, user-defined, unused, byte.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED = 1, 2, 3, 4, 5

# Split regexes the engine implements, by tokenizer.ggml.pre name.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k_base (GPT-4o, gpt-oss), as its tokenizer.json writes it; llama.cpp's name is gpt-4o.
O200K_REGEX = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
SPLIT_REGEXES = {LLAMA3_REGEX: "llama-bpe", QWEN2_REGEX: "qwen2", O200K_REGEX: "gpt-4o"}


class BpeVocabError(Exception):
    pass


@dataclass
class BpeVocab:
    tokens: list
    types: list
    merges: list
    pre: str                      # tokenizer.ggml.pre
    bos_id: int = -1
    eos_id: int = -1
    unk_id: int = -1
    pad_id: int = -1
    add_bos: bool = False
    chat_template: str | None = None
    notes: list = field(default_factory=list)   # things the engine does differently

    def metadata(self):
        md = [
            ("tokenizer.ggml.model", "gpt2", VT.STRING),
            ("tokenizer.ggml.pre", self.pre, VT.STRING),
            ("tokenizer.ggml.tokens", self.tokens, (VT.ARRAY, VT.STRING)),
            ("tokenizer.ggml.token_type", np.asarray(self.types, np.int32), (VT.ARRAY, VT.INT32)),
            ("tokenizer.ggml.merges", self.merges, (VT.ARRAY, VT.STRING)),
        ]
        for key, v in (("bos", self.bos_id), ("eos", self.eos_id), ("unknown", self.unk_id),
                       ("padding", self.pad_id)):
            if v >= 0:
                md.append((f"tokenizer.ggml.{key}_token_id", v, VT.UINT32))
        md += [("tokenizer.ggml.add_bos_token", self.add_bos, VT.BOOL),
               ("tokenizer.ggml.add_eos_token", False, VT.BOOL)]
        if self.chat_template:
            md.append(("tokenizer.chat_template", self.chat_template, VT.STRING))
        return md


def _load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        raise BpeVocabError(f"{path}: not valid JSON: {e}") from None


def _pre_tokenizer_name(pre, path) -> str:
    """The tokenizer.ggml.pre name of a byte-level pre-tokenizer, or an error naming it."""
    if pre is None:
        raise BpeVocabError(f"{path}: no pre_tokenizer: not a byte-level BPE tokenizer")
    if pre.get("type") == "ByteLevel":
        if not pre.get("use_regex", True):
            raise BpeVocabError(f"{path}: ByteLevel pre-tokenizer without a split regex is not supported")
        return "gpt2"
    if pre.get("type") == "Sequence":
        steps = pre.get("pretokenizers") or []
        kinds = [s.get("type") for s in steps]
        if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
            regex = (steps[0].get("pattern") or {}).get("Regex")
            if regex in SPLIT_REGEXES:
                return SPLIT_REGEXES[regex]
            raise BpeVocabError(f"{path}: pre-tokenizer split regex {regex!r} is not one the engine "
                                "implements (GPT-2, Llama 3, Qwen2, o200k)")
        raise BpeVocabError(f"{path}: pre-tokenizer sequence {kinds} is not supported")
    raise BpeVocabError(f"{path}: pre-tokenizer {pre.get('type')!r} is not byte-level BPE")


def _token_id(name_or_dict, ids):
    """Id of a special token given as a string or as {"content": ...}; -1 if absent."""
    if isinstance(name_or_dict, dict):
        name_or_dict = name_or_dict.get("content")
    if isinstance(name_or_dict, str):
        return ids.get(name_or_dict, -1)
    return -1


def read_bpe_vocab(model_dir: str, n_vocab: int, config: dict, default_add_bos: bool = False) -> BpeVocab:
    """The vocabulary of MODEL_DIR/tokenizer.json padded to n_vocab tokens (the embedding's rows)."""
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(path):
        raise BpeVocabError(f"{path}: not found")
    tj = _load_json(path)
    model = tj.get("model") or {}
    if model.get("type") != "BPE":
        raise BpeVocabError(f"{path}: tokenizer model {model.get('type')!r} is not BPE")
    pre = _pre_tokenizer_name(tj.get("pre_tokenizer"), path)
    ids = dict(model.get("vocab") or {})
    special, added = set(), set()
    for a in tj.get("added_tokens") or []:
        ids[a["content"]] = int(a["id"])
        (special if a.get("special") else added).add(a["content"])
    n = max(ids.values()) + 1 if ids else 0
    if n > n_vocab:
        raise BpeVocabError(f"{path}: {n} token ids but the model has {n_vocab} embedding rows")
    tokens = [None] * n_vocab
    for t, i in ids.items():
        if tokens[i] is not None:
            raise BpeVocabError(f"{path}: id {i} belongs to both {tokens[i]!r} and {t!r}")
        tokens[i] = t
    types = [NORMAL] * n_vocab
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"[PAD{i}]", UNUSED
        elif t in special:
            types[i] = CONTROL
        elif t in added:
            types[i] = USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]

    tc_path = os.path.join(model_dir, "tokenizer_config.json")
    tc = _load_json(tc_path) if os.path.isfile(tc_path) else {}
    v = BpeVocab(tokens=tokens, types=types, merges=merges, pre=pre)

    def special_id(key):
        i = _token_id(tc.get(f"{key}_token"), ids)
        if i < 0 and isinstance(config.get(f"{key}_token_id"), int):
            i = config[f"{key}_token_id"]
        return i if 0 <= i < n_vocab else -1
    v.bos_id, v.eos_id, v.unk_id, v.pad_id = (special_id(k) for k in ("bos", "eos", "unk", "pad"))
    if v.unk_id >= 0:
        types[v.unk_id] = UNKNOWN
    add_bos = tc.get("add_bos_token")
    v.add_bos = (add_bos if isinstance(add_bos, bool) else default_add_bos) and v.bos_id >= 0
    if isinstance(tc.get("chat_template"), str):
        v.chat_template = tc["chat_template"]
    normalizer = tj.get("normalizer")
    if normalizer:
        v.notes.append(f"{path}: the {normalizer.get('type')} normalizer is not applied by the engine "
                       "(as in llama.cpp); text that is not already normalized may tokenize differently")
    return v


def warn_notes(v: BpeVocab):
    for n in v.notes:
        print(f"convert_hf: note: {n}", file=sys.stderr)
