"""GGUF reader/writer: round trips of every metadata value type and tensor type under both
magics, a byte-exact check against a hand-assembled file, and error handling."""
import struct

import numpy as np
import pytest

import gguf_io
from gguf_io import VT, GGUFError, GGUFReader, GGUFWriter
from quants import GGMLType, quantize

SCALARS = [
    ("u8", 200, VT.UINT8), ("i8", -100, VT.INT8), ("u16", 60000, VT.UINT16), ("i16", -30000, VT.INT16),
    ("u32", 4_000_000_000, VT.UINT32), ("i32", -2_000_000_000, VT.INT32), ("f32", 1.5, VT.FLOAT32),
    ("u64", 2**63 + 5, VT.UINT64), ("i64", -(2**62), VT.INT64), ("f64", 0.1, VT.FLOAT64),
    ("bool_t", True, VT.BOOL), ("bool_f", False, VT.BOOL),
    ("str", "héllo ▁wörld", VT.STRING), ("empty_str", "", VT.STRING),
]
ARRAYS = [
    ("a_u8", [0, 1, 255], VT.UINT8), ("a_i8", [-128, 0, 127], VT.INT8), ("a_u16", [1, 65535], VT.UINT16),
    ("a_i16", [-5, 5], VT.INT16), ("a_u32", [7, 2**32 - 1], VT.UINT32), ("a_i32", [-1, 2, -3], VT.INT32),
    ("a_f32", [0.5, -2.25], VT.FLOAT32), ("a_u64", [2**64 - 1], VT.UINT64), ("a_i64", [-(2**63)], VT.INT64),
    ("a_f64", [1e300, -1e-300], VT.FLOAT64), ("a_bool", [True, False, True], VT.BOOL),
    ("a_str", ["a", "", "<0x0A>", "▁the"], VT.STRING), ("a_empty", [], VT.INT32),
]


def write_all_types(path, magic):
    w = GGUFWriter(path, magic)
    for key, value, vt in SCALARS:
        w.add(key, value, vt)
    for key, value, et in ARRAYS:
        w.add(key, value, (VT.ARRAY, et))
    w.add("nested_i32", [[1, 2], [], [3]], (VT.ARRAY, (VT.ARRAY, VT.INT32)))
    w.add("nested_str", [["x", "y"], ["z"]], (VT.ARRAY, (VT.ARRAY, VT.STRING)))
    w.add("nested3", [[[1.0], [2.0, 3.0]]], (VT.ARRAY, (VT.ARRAY, (VT.ARRAY, VT.FLOAT64))))
    return w


@pytest.mark.parametrize("magic", [gguf_io.MAGIC_GGUF, gguf_io.MAGIC_PWRI])
def test_metadata_round_trip(tmp_path, magic):
    path = tmp_path / "m.gguf"
    with write_all_types(path, magic) as w:
        w.write_header()
    r = GGUFReader(path)
    assert r.magic == magic and r.version == 3 and r.is_pwri == (magic == gguf_io.MAGIC_PWRI)
    for key, value, vt in SCALARS:
        assert r.types[key] == vt
        if vt == VT.FLOAT32:
            assert r.metadata[key] == np.float32(value)
        else:
            assert r.metadata[key] == value and type(r.metadata[key]) is type(value)
    for key, value, et in ARRAYS:
        assert r.types[key] == (VT.ARRAY, et)
        assert list(r.metadata[key]) == value
    assert [list(x) for x in r.metadata["nested_i32"]] == [[1, 2], [], [3]]
    assert r.types["nested_i32"] == (VT.ARRAY, (VT.ARRAY, VT.INT32))
    assert r.metadata["nested_str"] == [["x", "y"], ["z"]]
    assert r.types["nested3"] == (VT.ARRAY, (VT.ARRAY, (VT.ARRAY, VT.FLOAT64)))
    assert list(r.metadata) == [k for k, _, _ in SCALARS] + [k for k, _, _ in ARRAYS] + \
        ["nested_i32", "nested_str", "nested3"]

    # reading and writing back gives the same bytes
    again = tmp_path / "again.gguf"
    with GGUFWriter(again, magic) as w:
        for k, v in r.metadata.items():
            w.add(k, v, r.types[k])
        w.write_header()
    assert again.read_bytes() == path.read_bytes()


def test_tensor_round_trip_all_types(tmp_path):
    rng = np.random.default_rng(0)
    f = rng.standard_normal((3, 64)).astype(np.float32)
    cases = {
        "f32_1d": (GGMLType.F32, (5,), rng.standard_normal(5).astype(np.float32)),
        "f32_4d": (GGMLType.F32, (2, 3, 1, 4), rng.standard_normal((2, 3, 1, 4)).astype(np.float32)),
        "f16": (GGMLType.F16, (3, 64), f.astype(np.float16)),
        "bf16": (GGMLType.BF16, (3, 64), quantize(f, GGMLType.BF16)),
        "i32": (GGMLType.I32, (7,), np.arange(-3, 4, dtype=np.int32)),
        "q8_0": (GGMLType.Q8_0, (3, 64), quantize(f, GGMLType.Q8_0)),
        "q4_0": (GGMLType.Q4_0, (3, 64), quantize(f, GGMLType.Q4_0)),
        "odd": (GGMLType.F32, (3,), np.ones(3, np.float32)),  # 12 bytes: the next tensor needs padding
        "after_odd": (GGMLType.F16, (1, 3), np.ones((1, 3), np.float16)),
    }
    path = tmp_path / "t.gguf"
    gguf_io.write_gguf(path, {"general.architecture": "llama"}, cases, magic=gguf_io.MAGIC_PWRI)
    r = GGUFReader(path)
    assert list(r.tensors) == list(cases)
    for name, (t, shape, data) in cases.items():
        info = r.tensors[name]
        assert info.shape == shape and info.dtype == t
        assert info.offset % 32 == 0
        got = r.tensor(name)
        assert np.array_equal(got.reshape(-1).view(np.uint8), np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    assert np.array_equal(r.dequantize("f16"), f.astype(np.float16).astype(np.float32))
    assert r.tensor("f32_4d").shape == (2, 3, 1, 4)
    assert r.tensor("q8_0").shape == (3, 2 * 34)


def test_bytes_match_hand_assembled_file(tmp_path):
    """The writer's bytes equal a file assembled here from the format description."""
    path = tmp_path / "h.gguf"
    data = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)   # shape [2, 3]: ne = (3, 2)
    with GGUFWriter(path, gguf_io.MAGIC_PWRI) as w:
        w.add("k", 7, VT.UINT32)
        w.add("s", "ab")
        w.add_tensor_info("t", (2, 3), GGMLType.F32)
        w.write_header()
        w.write_tensor("t", data)
    expect = b"PWRI" + struct.pack("<IQQ", 3, 1, 2)
    expect += struct.pack("<Q", 1) + b"k" + struct.pack("<II", 4, 7)
    expect += struct.pack("<Q", 1) + b"s" + struct.pack("<IQ", 8, 2) + b"ab"
    expect += struct.pack("<Q", 1) + b"t" + struct.pack("<IQQIQ", 2, 3, 2, 0, 0)
    expect += b"\0" * (-len(expect) % 32)
    expect += data.tobytes()
    expect += b"\0" * (-len(expect) % 32)
    assert path.read_bytes() == expect


def test_custom_alignment(tmp_path):
    path = tmp_path / "a.gguf"
    with GGUFWriter(path, alignment=64) as w:
        w.add_tensor_info("a", (3,), GGMLType.F32)
        w.add_tensor_info("b", (3,), GGMLType.F32)
        w.write_header()
        w.write_tensor("a", np.zeros(3, np.float32))
        w.write_tensor("b", np.ones(3, np.float32))
    r = GGUFReader(path)
    assert r.alignment == 64 and r.metadata["general.alignment"] == 64
    assert r.tensors["b"].offset % 64 == 0 and list(r.tensor("b")) == [1, 1, 1]


def test_writer_misuse(tmp_path):
    w = GGUFWriter(tmp_path / "x.gguf")
    w.add("a", "x")
    with pytest.raises(GGUFError, match="duplicate"):
        w.add("a", "y")
    with pytest.raises(GGUFError, match="infer"):
        w.add("n", 3)
    w.add_tensor_info("t1", (32,), GGMLType.Q8_0)
    w.add_tensor_info("t2", (2,), GGMLType.F32)
    w.write_header()
    with pytest.raises(GGUFError, match="expected t1"):
        w.write_tensor("t2", np.zeros(2, np.float32))
    with pytest.raises(GGUFError, match="bytes given"):
        w.write_tensor("t1", b"\0" * 10)
    w.write_tensor("t1", quantize(np.zeros(32), GGMLType.Q8_0))
    with pytest.raises(GGUFError, match="closed before tensor t2"):
        w.close()
    with pytest.raises(ValueError, match="multiple of 32"):
        GGUFWriter(tmp_path / "y.gguf").add_tensor_info("q", (3, 40), GGMLType.Q4_0)


def test_reader_rejects_bad_files(tmp_path):
    good = tmp_path / "g.gguf"
    gguf_io.write_gguf(good, {"a": "b"}, {"t": (GGMLType.F32, (4,), np.zeros(4, np.float32))})
    raw = good.read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + raw[4:])
    with pytest.raises(GGUFError, match="bad magic"):
        GGUFReader(bad)
    bad.write_bytes(raw[:40])
    with pytest.raises(GGUFError, match="truncated"):
        GGUFReader(bad)
    bad.write_bytes(raw[:-20])  # the last 16 bytes are padding
    with pytest.raises(GGUFError, match="past the end"):
        GGUFReader(bad)
    bad.write_bytes(raw[:4] + struct.pack("<I", 4) + raw[8:])
    with pytest.raises(GGUFError, match="version 4"):
        GGUFReader(bad)
