"""A SentencePiece `tokenizer.model` as GGUF llama vocabulary metadata.

Pieces, scores and special ids come from the sentencepiece library; the piece types come
from the model file itself (the library does not report USER_DEFINED), read with a tiny
protobuf walker: ModelProto field 1 is the repeated SentencePiece message, whose fields
are 1 piece (string), 2 score (float), 3 type (enum; absent = NORMAL). The enum values are
the GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field


class VocabError(Exception):
    pass


TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, TYPE_BYTE = 1, 2, 3, 4, 5, 6


@dataclass
class Vocab:
    tokens: list = field(default_factory=list)
    scores: list = field(default_factory=list)
    types: list = field(default_factory=list)
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 0
    pad_id: int = -1


def _varint(buf: bytes, pos: int):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise VocabError("truncated protobuf varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """Yields (field number, wire type, value) of one protobuf message; value is an int for
    varints, bytes for length-delimited and fixed-size fields."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            val, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise VocabError(f"unsupported protobuf wire type {wt}")
        if pos > len(buf):
            raise VocabError("truncated protobuf message")
        yield num, wt, val


def piece_types(model_bytes: bytes) -> list:
    """[(piece, score, type)] in id order, straight from the model file."""
    out = []
    for num, wt, val in _fields(model_bytes):
        if num != 1 or wt != 2:
            continue
        piece, score, typ = "", 0.0, TYPE_NORMAL
        for n2, w2, v2 in _fields(val):
            if n2 == 1 and w2 == 2:
                piece = v2.decode("utf-8", errors="surrogateescape")
            elif n2 == 2 and w2 == 5:
                score = struct.unpack("<f", v2)[0]
            elif n2 == 3 and w2 == 0:
                typ = v2
        out.append((piece, score, typ))
    return out


def read_spm_vocab(path) -> Vocab:
    try:
        import sentencepiece as spm
    except ImportError:
        raise VocabError("the sentencepiece Python package is needed to read tokenizer.model "
                         "(pip install sentencepiece)") from None
    with open(path, "rb") as f:
        data = f.read()
    try:
        sp = spm.SentencePieceProcessor(model_proto=data)
    except Exception as e:  # sentencepiece raises RuntimeError/OSError variants
        raise VocabError(f"{path}: not a SentencePiece model: {e}") from None
    raw = piece_types(data)
    n = sp.get_piece_size()
    if len(raw) != n:
        raise VocabError(f"{path}: protobuf lists {len(raw)} pieces, sentencepiece {n}")
    v = Vocab(bos_id=sp.bos_id(), eos_id=sp.eos_id(), unk_id=sp.unk_id(), pad_id=sp.pad_id())
    for i, (piece, _score, typ) in enumerate(raw):
        if piece != sp.id_to_piece(i):
            raise VocabError(f"{path}: piece {i} reads {piece!r}, sentencepiece says {sp.id_to_piece(i)!r}")
        v.tokens.append(piece)
        v.scores.append(float(sp.get_score(i)))
        v.types.append(int(typ) if 1 <= typ <= 6 else TYPE_NORMAL)
    return v


def pad_vocab(v: Vocab, n_vocab: int, origin: str) -> Vocab:
    """Extends the vocabulary to the model's embedding rows with unused `<pad_N>` pieces
    (checkpoints often round the vocabulary up); more pieces than rows is an error."""
    if len(v.tokens) > n_vocab:
        raise VocabError(f"{origin}: tokenizer has {len(v.tokens)} pieces but the model only "
                         f"{n_vocab} embedding rows")
    for i in range(len(v.tokens), n_vocab):
        v.tokens.append(f"<pad_{i}>")
        v.scores.append(-1e9)
        v.types.append(TYPE_UNUSED)
    return v
