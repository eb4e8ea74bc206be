"""Reads tensors from checkpoint files without PyTorch: safetensors (memmap), torch zip
checkpoints (`torch.save` since torch 1.6: .pt and pytorch_model*.bin) and NumPy .npz.

Every loader returns a dict {name: LazyTensor}; `LazyTensor.shape` is known without reading
the data and `LazyTensor.load()` returns a float32 NumPy array (outermost dimension first),
so a converter holds one tensor in memory at a time.

torch zip format: a zip archive whose single top-level folder holds `data.pkl` (a pickle of
the state dict) and `data/<key>` (one raw little-endian storage per key). Tensors appear in
the pickle as `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`, where
`storage` is a persistent id ('storage', torch.<Type>Storage, key, location, numel). The
unpickler below accepts only those names and plain containers, so loading a checkpoint
cannot run arbitrary code. Legacy (pre-1.6, non-zip) files need PyTorch itself.
"""
from __future__ import annotations

import json
import os
import pickle
import struct
import zipfile

import numpy as np

import quants


class CheckpointError(Exception):
    pass


def _to_f32(arr: np.ndarray, kind: str) -> np.ndarray:
    if kind == "bf16":
        return quants.bf16_bits_to_f32(arr)
    return arr.astype(np.float32)


class LazyTensor:
    """A tensor whose data is read on demand. `read` returns the raw array (any dtype) and
    `kind` is 'bf16' when that array holds bfloat16 bits as uint16."""

    def __init__(self, shape, read, kind="", origin=""):
        self.shape = tuple(int(d) for d in shape)
        self._read, self.kind, self.origin = read, kind, origin

    def load(self) -> np.ndarray:
        a = self._read()
        if tuple(a.shape) != self.shape:
            raise CheckpointError(f"{self.origin}: data shape {a.shape} != declared {self.shape}")
        return _to_f32(a, self.kind)


# ----------------------------------------------------------------------------- safetensors

_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
              "I32": "<i4", "I16": "<i2", "I8": "<i1", "U8": "<u1", "BOOL": "<u1"}


def load_safetensors(path) -> dict:
    """File layout: u64 header length N, N bytes of JSON {name: {dtype, shape,
    data_offsets: [begin, end]}} (offsets relative to the end of the header), the data."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: truncated safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > os.path.getsize(path) - 8:
            raise CheckpointError(f"{path}: header length {n} runs past the end of the file")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise CheckpointError(f"{path}: bad safetensors header: {e}") from None
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise CheckpointError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        dt = np.dtype(_ST_DTYPES[info["dtype"]])
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end - begin != dt.itemsize * int(np.prod(shape, dtype=np.int64)) or base + end > len(mm):
            raise CheckpointError(f"{path}: tensor {name}: bad data offsets {begin}..{end}")

        def read(b=base + begin, e=base + end, dt=dt, shape=shape):
            return mm[b:e].view(dt).reshape(shape)
        out[name] = LazyTensor(shape, read, "bf16" if info["dtype"] == "BF16" else "", f"{path}: {name}")
    return out


# ----------------------------------------------------------------------------- torch zip

_STORAGE_DTYPES = {
    "FloatStorage": ("<f4", ""), "HalfStorage": ("<f2", ""), "BFloat16Storage": ("<u2", "bf16"),
    "DoubleStorage": ("<f8", ""), "LongStorage": ("<i8", ""), "IntStorage": ("<i4", ""),
    "ShortStorage": ("<i2", ""), "CharStorage": ("<i1", ""), "ByteStorage": ("<u1", ""),
    "BoolStorage": ("<u1", ""),
}


class _StorageType:
    def __init__(self, name):
        self.name = name


class _Storage:
    def __init__(self, zf, prefix, key, stype):
        self.zf, self.member = zf, f"{prefix}data/{key}"
        self.dtype, self.kind = _STORAGE_DTYPES[stype.name]
        self._data = None

    def array(self) -> np.ndarray:
        if self._data is None:
            self._data = np.frombuffer(self.zf.read(self.member), dtype=self.dtype)
        return self._data


def _rebuild_tensor(storage, offset, size, stride, *_):
    shape = tuple(size)

    def read():
        a = storage.array()
        item = a.itemsize
        last = offset + sum((s - 1) * st for s, st in zip(shape, stride))
        if min(shape, default=1) > 0 and (offset < 0 or min(stride, default=0) < 0 or last >= a.size):
            raise CheckpointError(f"{storage.member}: tensor view runs past its storage")
        view = np.lib.stride_tricks.as_strided(a[offset:], shape=shape,
                                               strides=tuple(st * item for st in stride))
        return np.array(view)  # contiguous copy
    return LazyTensor(shape, read, storage.kind, storage.member)


def _rebuild_parameter(data, *_):
    return data


class _OrderedDict(dict):
    pass


class _Unpickler(pickle.Unpickler):
    _ALLOWED = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("collections", "OrderedDict"): _OrderedDict,
    }

    def __init__(self, fileobj, zf, prefix, origin):
        super().__init__(fileobj)
        self.zf, self.prefix, self.origin = zf, prefix, origin

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return self._ALLOWED[(module, name)]
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise CheckpointError(f"{self.origin}: unsupported object {module}.{name} in checkpoint "
                              "(only tensor state dicts can be read without PyTorch)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise CheckpointError(f"{self.origin}: unsupported persistent id {pid!r}")
        _, stype, key, _location, _numel = pid
        if not isinstance(stype, _StorageType):
            raise CheckpointError(f"{self.origin}: unsupported storage type {stype!r}")
        return _Storage(self.zf, self.prefix, key, stype)


def _torch_fallback(path):
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CheckpointError(f"{path}: not a torch zip checkpoint; legacy torch files need "
                              "PyTorch (pip install torch), or convert it to .safetensors/.npz") from None
    sd = torch.load(path, map_location="cpu", weights_only=True)
    out = {}
    for k, v in sd.items():
        if hasattr(v, "float"):
            arr = v.float().numpy()
            out[k] = LazyTensor(arr.shape, lambda a=arr: a, "", f"{path}: {k}")
    return out


def load_torch_object(path):
    """The top-level object of a torch zip file: a dict (state dict) or a LazyTensor (a file
    holding one tensor, as `torch.save(tensor)` writes it). Legacy files are refused."""
    path = os.fspath(path)
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a torch zip file (legacy torch files need PyTorch)")
    zf = zipfile.ZipFile(path)
    pkl = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
    if len(pkl) != 1:
        raise CheckpointError(f"{path}: zip archive without a single data.pkl: not a torch checkpoint")
    prefix = pkl[0][:-len("data.pkl")]
    with zf.open(pkl[0]) as f:
        return _Unpickler(f, zf, prefix, path).load()


def load_torch(path) -> dict:
    path = os.fspath(path)
    if not zipfile.is_zipfile(path):
        return _torch_fallback(path)
    obj = load_torch_object(path)
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: top-level object is {type(obj).__name__}, not a state dict")
    out = {k: v for k, v in obj.items() if isinstance(v, LazyTensor)}
    return out


# ----------------------------------------------------------------------------- npz, dispatch

def load_npz(path) -> dict:
    path = os.fspath(path)
    z = np.load(path)
    return {k: LazyTensor(z[k].shape, lambda k=k: z[k], "", f"{path}: {k}") for k in z.files}


def load_any(path) -> dict:
    p = os.fspath(path)
    if p.endswith(".safetensors"):
        return load_safetensors(p)
    if p.endswith(".npz"):
        return load_npz(p)
    if p.endswith((".pt", ".pth", ".bin")):
        return load_torch(p)
    raise CheckpointError(f"{p}: unknown checkpoint extension")


def find_model_files(model_dir) -> list:
    """The weight files of a Hugging Face model directory, safetensors preferred:
    model.safetensors | model-0000K-of-0000N.safetensors (+ index) | pytorch_model*.bin."""
    d = os.fspath(model_dir)
    for index_name, single, stem, ext in (
            ("model.safetensors.index.json", "model.safetensors", "model-", ".safetensors"),
            ("pytorch_model.bin.index.json", "pytorch_model.bin", "pytorch_model-", ".bin")):
        index = os.path.join(d, index_name)
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
            missing = [x for x in files if not os.path.exists(os.path.join(d, x))]
            if missing:
                raise CheckpointError(f"{index}: lists missing shard(s): {', '.join(missing)}")
            return [os.path.join(d, x) for x in files]
        if os.path.exists(os.path.join(d, single)):
            return [os.path.join(d, single)]
        shards = sorted(x for x in os.listdir(d) if x.startswith(stem) and x.endswith(ext) and "-of-" in x)
        if shards:
            return [os.path.join(d, x) for x in shards]
    raise CheckpointError(f"{d}: no model weights found (expected model.safetensors, "
                          "model-0000K-of-0000N.safetensors or pytorch_model*.bin)")


def load_model_dir(model_dir) -> dict:
    tensors = {}
    for path in find_model_files(model_dir):
        for k, v in load_any(path).items():
            if k in tensors:
                raise CheckpointError(f"{path}: tensor {k} also appears in {tensors[k].origin}")
            tensors[k] = v
    return tensors
