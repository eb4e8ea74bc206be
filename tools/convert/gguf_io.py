"""GGUF v3 reader and streaming writer (NumPy only), for both the `GGUF` and the
PowerInfer `PWRI` magic.

Shape convention: every shape this module takes or returns is OUTERMOST FIRST (row-major,
as torch and NumPy print it): a weight with one row per output feature is
[n_out, n_in]. GGUF stores dimensions innermost first (ggml's ne[0]); this module reverses
them at the file boundary and nothing above it sees ggml order.

File layout (all little-endian):
    magic[4] ("GGUF" or "PWRI"), version u32 (3), n_tensors u64, n_kv u64
    n_kv x (key: string, value type u32, value)
    n_tensors x (name: string, n_dims u32, ne[n_dims] u64 innermost first, type u32,
                 offset u64 relative to the data section)
    zero padding to `alignment`, then the data section; each tensor starts aligned.
A string is a u64 byte length followed by UTF-8 bytes. An array is an element type u32,
a count u64 and the elements (arrays may nest).

Metadata value types are described by a "type descriptor": a `VT` member for scalars and
strings, or the tuple (VT.ARRAY, element descriptor) for arrays, nesting as deep as needed,
e.g. (VT.ARRAY, (VT.ARRAY, VT.INT32)). Numeric arrays read back as NumPy arrays, string and
bool arrays and arrays of arrays as lists.
"""
from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass

import numpy as np

import quants  # sibling module: tools/convert must be on sys.path (it is for the scripts here)

MAGIC_GGUF = b"GGUF"
MAGIC_PWRI = b"PWRI"
DEFAULT_ALIGNMENT = 32


class VT(enum.IntEnum):
    """GGUF metadata value types (the u32 written before each value)."""
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# NumPy little-endian dtype of each fixed-size scalar value type.
_VT_NP = {
    VT.UINT8: "<u1", VT.INT8: "<i1", VT.UINT16: "<u2", VT.INT16: "<i2",
    VT.UINT32: "<u4", VT.INT32: "<i4", VT.FLOAT32: "<f4", VT.UINT64: "<u8",
    VT.INT64: "<i8", VT.FLOAT64: "<f8", VT.BOOL: "<u1",
}


class GGUFError(Exception):
    """A malformed or unsupported file, or a misuse of the writer."""


@dataclass
class TensorInfo:
    name: str
    shape: tuple          # outermost first
    dtype: quants.GGMLType
    offset: int           # absolute byte offset of the data in the file
    nbytes: int


def _describe(vtype) -> str:
    if isinstance(vtype, tuple):
        return f"array[{_describe(vtype[1])}]"
    return VT(vtype).name.lower()


# ----------------------------------------------------------------------------- reading

class _Cursor:
    def __init__(self, buf, path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: offset {self.pos}: truncated (need {n} bytes)")
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))

    def u32(self) -> int:
        return self.unpack("I")[0]

    def u64(self) -> int:
        return self.unpack("Q")[0]

    def string(self) -> str:
        return self.take(self.u64()).decode("utf-8", errors="surrogateescape")

    def array(self, dtype: str, count: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        return np.frombuffer(self.take(size), dtype=dtype).copy()


def _read_value(cur: _Cursor, vt: int, depth: int = 0):
    """Returns (value, type descriptor)."""
    try:
        vt = VT(vt)
    except ValueError:
        raise GGUFError(f"{cur.path}: offset {cur.pos}: unknown value type {vt}") from None
    if vt == VT.STRING:
        return cur.string(), vt
    if vt == VT.BOOL:
        b = cur.take(1)[0]
        if b > 1:
            raise GGUFError(f"{cur.path}: offset {cur.pos - 1}: bool byte {b}")
        return bool(b), vt
    if vt != VT.ARRAY:
        return cur.array(_VT_NP[vt], 1)[0].item(), vt
    if depth >= 8:
        raise GGUFError(f"{cur.path}: offset {cur.pos}: arrays nested deeper than 8")
    et, count = cur.unpack("IQ")
    try:
        et = VT(et)
    except ValueError:
        raise GGUFError(f"{cur.path}: offset {cur.pos}: unknown array element type {et}") from None
    if et in _VT_NP and et != VT.BOOL:
        return cur.array(_VT_NP[et], count), (VT.ARRAY, et)
    items, desc = [], et
    for _ in range(count):
        v, d = _read_value(cur, et, depth + 1)
        items.append(v)
        desc = d  # nested arrays: the descriptor of (the last) element
    return items, (VT.ARRAY, desc)


class GGUFReader:
    """Reads a GGUF or PWRI file. Tensor data is a NumPy memmap of the file (zero-copy).

    Attributes:
        magic      b"GGUF" or b"PWRI"
        version    2 or 3
        metadata   {key: value}, in file order
        types      {key: type descriptor}
        tensors    {name: TensorInfo}, in file order
        alignment  data alignment in bytes
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        cur = _Cursor(self._mm, self.path)
        self.magic = cur.take(4)
        if self.magic not in (MAGIC_GGUF, MAGIC_PWRI):
            raise GGUFError(f"{self.path}: offset 0: bad magic {self.magic!r}")
        self.version = cur.u32()
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: offset 4: unsupported version {self.version}")
        n_tensors, n_kv = cur.unpack("QQ")
        self.metadata, self.types = {}, {}
        for _ in range(n_kv):
            key = cur.string()
            if not key or key in self.metadata:
                raise GGUFError(f"{self.path}: offset {cur.pos}: empty or duplicate key {key!r}")
            self.metadata[key], self.types[key] = _read_value(cur, cur.u32())
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError(f"{self.path}: general.alignment {self.alignment} is not a power of two")
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if not 1 <= n_dims <= 4:
                raise GGUFError(f"{self.path}: tensor {name}: rank {n_dims}")
            ne = cur.unpack(f"{n_dims}Q")
            type_id, rel = cur.u32(), cur.u64()
            try:
                dtype = quants.GGMLType(type_id)
            except ValueError:
                raise GGUFError(f"{self.path}: tensor {name}: unknown type id {type_id}") from None
            infos.append((name, tuple(reversed(ne)), dtype, rel))
        data_start = -(-cur.pos // self.alignment) * self.alignment
        self.data_offset = data_start
        self.tensors = {}
        for name, shape, dtype, rel in infos:
            if name in self.tensors:
                raise GGUFError(f"{self.path}: duplicate tensor name {name}")
            nbytes = quants.nbytes(dtype, shape)
            off = data_start + rel
            if rel % self.alignment or off + nbytes > len(self._mm):
                raise GGUFError(f"{self.path}: tensor {name}: data at {off} (+{nbytes}) "
                                f"misaligned or past the end of the file ({len(self._mm)} bytes)")
            self.tensors[name] = TensorInfo(name, shape, dtype, off, nbytes)

    @property
    def is_pwri(self) -> bool:
        return self.magic == MAGIC_PWRI

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes: uint8 [rows..., row_bytes] (a view of the memmap)."""
        t = self.tensors[name]
        flat = self._mm[t.offset:t.offset + t.nbytes]
        return flat.reshape(*t.shape[:-1], quants.nbytes(t.dtype, t.shape[-1:]))

    def tensor(self, name: str) -> np.ndarray:
        """Plain types as a typed view with the tensor's shape (BF16 as uint16 bits);
        block-quantized types as their raw bytes, uint8 [rows..., row_bytes]."""
        t = self.tensors[name]
        np_dtype = quants.plain_numpy_dtype(t.dtype)
        if np_dtype is None:
            return self.raw(name)
        return self._mm[t.offset:t.offset + t.nbytes].view(np_dtype).reshape(t.shape)

    def dequantize(self, name: str, dtype=np.float32) -> np.ndarray:
        """The tensor as floats of `dtype` with its shape (a copy)."""
        t = self.tensors[name]
        return quants.dequantize(self.raw(name), t.dtype, t.shape).astype(dtype, copy=False)

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)


# ----------------------------------------------------------------------------- writing

def _encode_string(s: str) -> bytes:
    b = s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _encode_value(value, vtype) -> bytes:
    """Encodes a value of the given type descriptor (without the leading type u32)."""
    if isinstance(vtype, tuple):
        if vtype[0] != VT.ARRAY:
            raise GGUFError(f"bad type descriptor {vtype!r}")
        et = vtype[1]
        head_type = VT.ARRAY if isinstance(et, tuple) else VT(et)
        head = struct.pack("<IQ", head_type, len(value))
        if not isinstance(et, tuple) and et in _VT_NP and et != VT.BOOL:
            return head + np.asarray(value).astype(_VT_NP[et]).tobytes()
        return head + b"".join(_encode_value(v, et) for v in value)
    vtype = VT(vtype)
    if vtype == VT.STRING:
        return _encode_string(value)
    if vtype == VT.BOOL:
        return b"\x01" if value else b"\x00"
    if vtype == VT.ARRAY:
        raise GGUFError("arrays need a descriptor (VT.ARRAY, element type)")
    return np.asarray([value]).astype(_VT_NP[vtype]).tobytes()


def infer_type(value):
    """Type descriptor for values whose GGUF type is unambiguous: str, bool, lists of str.
    Numbers need an explicit type (u32 vs i32 vs f32 matters to readers)."""
    if isinstance(value, str):
        return VT.STRING
    if isinstance(value, bool):
        return VT.BOOL
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return (VT.ARRAY, VT.STRING)
    raise GGUFError(f"cannot infer a GGUF type for {value!r}: pass one")


class GGUFWriter:
    """Streaming GGUF writer: declare metadata and tensors, write the header, then write the
    tensors' data one at a time in declaration order (only one tensor is held in memory).

        w = GGUFWriter(path, magic=MAGIC_PWRI)
        w.add("general.architecture", "llama")
        w.add("llama.block_count", 2, VT.UINT32)
        w.add_tensor_info("token_embd.weight", (n_vocab, n_embd), GGMLType.F16)
        w.write_header()
        w.write_tensor("token_embd.weight", array_or_bytes)
        w.close()
    """

    def __init__(self, path, magic: bytes = MAGIC_GGUF, alignment: int = DEFAULT_ALIGNMENT):
        if magic not in (MAGIC_GGUF, MAGIC_PWRI):
            raise GGUFError(f"bad magic {magic!r}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise GGUFError(f"alignment {alignment} is not a power of two")
        self.path, self.magic, self.alignment = os.fspath(path), magic, alignment
        self._kv = {}
        self._tensors = []      # [(name, shape, dtype, nbytes)]
        self._next = 0          # index of the next tensor whose data is expected
        self._f = None
        if alignment != DEFAULT_ALIGNMENT:
            self.add("general.alignment", alignment, VT.UINT32)

    def add(self, key: str, value, vtype=None):
        if self._f is not None:
            raise GGUFError("metadata must be added before write_header()")
        if not key or key in self._kv:
            raise GGUFError(f"empty or duplicate key {key!r}")
        self._kv[key] = (value, infer_type(value) if vtype is None else vtype)

    def add_tensor_info(self, name: str, shape, dtype):
        if self._f is not None:
            raise GGUFError("tensors must be declared before write_header()")
        if any(t[0] == name for t in self._tensors):
            raise GGUFError(f"duplicate tensor name {name}")
        shape = tuple(int(d) for d in shape)
        if not 1 <= len(shape) <= 4 or min(shape) < 1:
            raise GGUFError(f"tensor {name}: bad shape {shape}")
        dtype = quants.GGMLType(dtype)
        self._tensors.append((name, shape, dtype, quants.nbytes(dtype, shape)))

    def write_header(self):
        parts = [self.magic, struct.pack("<IQQ", 3, len(self._tensors), len(self._kv))]
        for key, (value, vtype) in self._kv.items():
            head_type = VT.ARRAY if isinstance(vtype, tuple) else VT(vtype)
            parts += [_encode_string(key), struct.pack("<I", head_type), _encode_value(value, vtype)]
        offset = 0
        for name, shape, dtype, nbytes in self._tensors:
            parts += [_encode_string(name), struct.pack(f"<I{len(shape)}Q", len(shape), *reversed(shape)),
                      struct.pack("<IQ", int(dtype), offset)]
            offset = self._align(offset + nbytes)
        self._f = open(self.path, "wb")
        self._f.write(b"".join(parts))
        self._pad()

    def write_tensor(self, name: str, data):
        """Writes the data of the next declared tensor: raw bytes/uint8 blocks, or an array of
        the declared plain type (F32/F16/I32... ; BF16 as uint16 bits)."""
        if self._f is None:
            raise GGUFError("write_header() first")
        if self._next >= len(self._tensors):
            raise GGUFError(f"tensor {name}: all declared tensors are already written")
        exp_name, shape, dtype, nbytes = self._tensors[self._next]
        if name != exp_name:
            raise GGUFError(f"tensor {name}: expected {exp_name} next (declaration order)")
        if isinstance(data, np.ndarray):
            np_dtype = quants.plain_numpy_dtype(dtype)
            if np_dtype is not None and data.dtype != np.uint8:
                if data.dtype != np.dtype(np_dtype):
                    raise GGUFError(f"tensor {name}: array dtype {data.dtype} does not match {dtype.name}")
            data = np.ascontiguousarray(data).tobytes()
        if len(data) != nbytes:
            raise GGUFError(f"tensor {name}: {len(data)} bytes given, {nbytes} expected for "
                            f"{dtype.name} {list(shape)}")
        self._f.write(data)
        self._pad()
        self._next += 1

    def close(self):
        if self._f is None:
            return
        self._f.close()
        self._f = None
        if self._next != len(self._tensors):
            missing = self._tensors[self._next][0]
            raise GGUFError(f"{self.path}: closed before tensor {missing} was written")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self.close()
        elif self._f is not None:
            self._f.close()
            self._f = None

    def _align(self, n: int) -> int:
        return -(-n // self.alignment) * self.alignment

    def _pad(self):
        pos = self._f.tell()
        self._f.write(b"\x00" * (self._align(pos) - pos))


def write_gguf(path, metadata: dict, tensors: dict, magic: bytes = MAGIC_GGUF, types: dict | None = None):
    """Convenience: writes a whole file at once. `metadata` maps key -> value (typed via
    `types[key]` or inferred); `tensors` maps name -> (dtype, shape, data)."""
    types = types or {}
    with GGUFWriter(path, magic) as w:
        for k, v in metadata.items():
            w.add(k, v, types.get(k))
        for name, (dtype, shape, _) in tensors.items():
            w.add_tensor_info(name, shape, dtype)
        w.write_header()
        for name, (_, _, data) in tensors.items():
            w.write_tensor(name, data)
