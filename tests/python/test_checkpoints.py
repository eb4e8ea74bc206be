"""Checkpoint readers: a real torch.save archive read without PyTorch, safetensors (our
parser against files written by the safetensors package), npz."""
import os
import pickle
import zipfile

import numpy as np
import pytest

import checkpoints
import quants
from conftest import write_safetensors_manual

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "torch_state_dict.pt")


def test_torch_fixture_without_torch():
    sd = checkpoints.load_torch(FIXTURE)
    expect = {
        "fc1.weight": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5 - 1,
        "fc2.weight": (np.arange(12, dtype=np.float32) / 8).reshape(4, 3).T,
        "emb": np.arange(2, 7, dtype=np.float32),
        "scalar": np.float32(2.5),
        "ids": np.array([1, -2, 3], np.float32),
        "param": np.array([[1, 2], [3, 4]], np.float32),
    }
    assert set(sd) == set(expect)
    for k, v in expect.items():
        got = sd[k].load()
        assert got.dtype == np.float32 and got.shape == np.shape(v), k
        assert np.array_equal(got, v), k


def test_torch_random_state_dicts_match_torch():
    torch = pytest.importorskip("torch", reason="PyTorch not installed: the committed fixture covers the format")
    import tempfile
    g = torch.Generator().manual_seed(0)
    sd = {"a": torch.randn(5, 7, generator=g), "b": torch.randn(6, 4, generator=g).half()[1:5, ::2],
          "c": torch.randn(33, generator=g).bfloat16()}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.pt")
        torch.save(sd, path)
        got = checkpoints.load_torch(path)
        for k, v in sd.items():
            assert np.array_equal(got[k].load(), v.float().numpy()), k


def test_torch_loader_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"x": Evil()}, protocol=2))
    with pytest.raises(checkpoints.CheckpointError, match="unsupported object"):
        checkpoints.load_torch(path)


def test_safetensors_written_by_the_package(tmp_path):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    arrays = {"w32": rng.standard_normal((3, 5)).astype(np.float32),
              "w16": rng.standard_normal((4,)).astype(np.float16),
              "i": np.arange(6, dtype=np.int32).reshape(2, 3)}
    save_file(arrays, tmp_path / "m.safetensors")
    got = checkpoints.load_safetensors(tmp_path / "m.safetensors")
    for k, v in arrays.items():
        assert got[k].shape == v.shape
        assert np.array_equal(got[k].load(), v.astype(np.float32))


def test_safetensors_bf16(tmp_path):
    x = np.array([[1.5, -2.25], [1e-3, 300.0]], np.float32)
    bits = quants.f32_to_bf16_bits(x)
    write_safetensors_manual(tmp_path / "b.safetensors", {"x": ("BF16", (2, 2), bits.tobytes())})
    got = checkpoints.load_safetensors(tmp_path / "b.safetensors")["x"].load()
    assert np.array_equal(got, quants.bf16_bits_to_f32(bits))


def test_npz(tmp_path):
    np.savez(tmp_path / "p.npz", **{"fc1.weight": np.ones((2, 3)), "fc2.weight": np.zeros((4, 2))})
    got = checkpoints.load_any(tmp_path / "p.npz")
    assert got["fc1.weight"].load().shape == (2, 3) and got["fc2.weight"].shape == (4, 2)
