"""A minimal GGUF v3 writer for metadata-only files (no tensors), enough to hold a
tokenizer vocabulary. Independent of the engine's C++ writer, so the tokenizer tests also
check that the reader accepts files it did not write itself."""
import struct

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)

_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def _string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value, elem_type=None):
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        out = struct.pack("<IQ", elem_type, len(value))
        return out + b"".join(_value(elem_type, v) for v in value)
    return struct.pack(_SCALAR[vtype], value)


class Writer:
    def __init__(self):
        self.kvs = []

    def add(self, key, vtype, value, elem_type=None):
        self.kvs.append((key, vtype, value, elem_type))

    def write(self, path):
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", 3, 0, len(self.kvs))
        for key, vtype, value, elem_type in self.kvs:
            out += _string(key) + struct.pack("<I", vtype) + _value(vtype, value, elem_type)
        out += b"\0" * (-len(out) % 32)
        with open(path, "wb") as f:
            f.write(out)
