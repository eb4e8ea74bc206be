"""The activation statistics converter: the original's activation_N.pt files (torch zip
archives, built here by hand as `torch.save(tensor)` lays them out, so no torch is needed),
layers in numeric order from 12 layers on, and bad input."""
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import convert_activations
from conftest import CONVERT_DIR
from gguf_io import GGUFReader


def _unicode(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(n: int) -> bytes:
    return b"J" + struct.pack("<i", n)


def tensor_pickle(storage: str, numel: int, size: tuple, stride: tuple, offset: int = 0) -> bytes:
    """Protocol-2 pickle of torch._utils._rebuild_tensor_v2(<persistent storage '0'>, offset,
    size, stride, False, OrderedDict()), opcode by opcode."""
    tup = lambda items: b"(" + b"".join(_int(v) for v in items) + b"t"  # noqa: E731
    return (b"\x80\x02" + b"ctorch._utils\n_rebuild_tensor_v2\n" + b"(" +
            b"(" + _unicode("storage") + b"ctorch\n" + storage.encode() + b"\n" + _unicode("0") +
            _unicode("cpu") + _int(numel) + b"t" + b"Q" +
            _int(offset) + tup(size) + tup(stride) + b"\x89" +
            b"ccollections\nOrderedDict\n)R" + b"tR.")


def write_pt(path, values: np.ndarray, storage: str = "FloatStorage", pickle_bytes: bytes | None = None):
    """A torch zip file holding one 1-D tensor: archive/data.pkl, archive/data/0, archive/version."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle_bytes or tensor_pickle(storage, values.size, (values.size,), (1,)))
        z.writestr("archive/data/0", values.tobytes())
        z.writestr("archive/version", "3\n")


def test_pt_files_in_numeric_layer_order(tmp_path):
    src = tmp_path / "activation"
    src.mkdir()
    n_layer, n_ff = 13, 6
    for layer in range(n_layer):  # each layer's counts name the layer
        counts = np.arange(n_ff, dtype=np.int64) + 100 * layer
        write_pt(src / f"activation_{layer}.pt", counts, "LongStorage")
    out = tmp_path / "stats.gguf"
    assert convert_activations.convert(str(src), str(out), n_tokens=5000) == n_layer
    r = GGUFReader(str(out))
    assert r.get("general.architecture") == "activation_stats"
    assert r.get("activation_stats.block_count") == n_layer
    assert r.get("activation_stats.n_tokens") == 5000
    assert r.get("activation_stats.source") == "pt"
    for layer in range(n_layer):
        got = r.tensor(f"blk.{layer}.activation_counts")
        np.testing.assert_array_equal(got, np.arange(n_ff, dtype=np.float32) + 100 * layer)


def test_float_tensor_and_command_line(tmp_path):
    src = tmp_path / "a"
    src.mkdir()
    write_pt(src / "activation_0.pt", np.array([0.5, 2.0, 0.0], dtype=np.float32))
    np.save(src / "ignored.npy", np.zeros(3))
    out = tmp_path / "s.gguf"
    p = subprocess.run([sys.executable, f"{CONVERT_DIR}/convert_activations.py", str(src), "-o", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    r = GGUFReader(str(out))
    assert r.get("activation_stats.n_tokens") == 0  # relative counts
    np.testing.assert_array_equal(r.tensor("blk.0.activation_counts"), [0.5, 2.0, 0.0])


def test_token_count_from_meta_json(tmp_path):
    write_pt(tmp_path / "activation_0.pt", np.array([3.0, 40.0], dtype=np.float32))
    (tmp_path / "meta.json").write_text('{"tokens": 50, "windows": 1}')
    out = tmp_path / "s.gguf"
    convert_activations.convert(str(tmp_path), str(out))
    assert GGUFReader(str(out)).get("activation_stats.n_tokens") == 50
    (tmp_path / "meta.json").write_text('{"tokens": 20}')  # fewer than a count
    with pytest.raises(convert_activations.ConvertError, match="exceeds"):
        convert_activations.convert(str(tmp_path), str(out))


def test_npy_directory(tmp_path):
    for layer in range(12):
        np.save(tmp_path / f"activation_{layer}.npy", np.full(4, layer / 100, dtype=np.float32))
    out = tmp_path / "s.gguf"
    convert_activations.convert(str(tmp_path), str(out))
    r = GGUFReader(str(out))
    assert r.get("activation_stats.source") == "npy"
    assert r.get("activation_stats.n_tokens") == 1  # values <= 1: frequencies
    np.testing.assert_allclose(r.tensor("blk.11.activation_counts"), 0.11)
    np.testing.assert_allclose(r.tensor("blk.2.activation_counts"), 0.02)


@pytest.mark.parametrize("case, message", [
    ("gap", "layer 1 is missing"),
    ("negative", "not a finite number >= 0"),
    ("nan", "not a finite number >= 0"),
    ("2d", "expected a 1-D tensor"),
    ("code", "unsupported object"),
    ("over", "exceeds --n-tokens"),
    ("empty", "no activation_N"),
])
def test_bad_input(tmp_path, case, message):
    src = tmp_path / "a"
    src.mkdir()
    n_tokens = 0
    if case == "gap":
        write_pt(src / "activation_0.pt", np.ones(3, dtype=np.float32))
        write_pt(src / "activation_2.pt", np.ones(3, dtype=np.float32))
    elif case in ("negative", "nan"):
        write_pt(src / "activation_0.pt", np.array([1, -1 if case == "negative" else np.nan], dtype=np.float32))
    elif case == "2d":
        v = np.ones(6, dtype=np.float32)
        write_pt(src / "activation_0.pt", v, pickle_bytes=tensor_pickle("FloatStorage", 6, (2, 3), (3, 1)))
    elif case == "code":
        write_pt(src / "activation_0.pt", np.ones(1, dtype=np.float32), pickle_bytes=b"\x80\x02cos\nsystem\n.")
    elif case == "over":
        write_pt(src / "activation_0.pt", np.array([10, 20], dtype=np.float32))
        n_tokens = 15
    with pytest.raises((convert_activations.ConvertError, Exception), match=message):
        convert_activations.convert(str(src), str(tmp_path / "o.gguf"), n_tokens=n_tokens)
