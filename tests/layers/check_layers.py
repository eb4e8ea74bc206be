#!/usr/bin/env python3
"""Checks the layer graph of docs/ARCHITECTURE.md on every #include of src/ and include/.

A file in layer L may include headers of L itself and of the layers ALLOWED[L] lists; only
src/backend/cuda and src/kernels/cuda may include CUDA headers; the public headers in
include/powerinfer include only each other (EXCEPTIONS names what still leaks, and why).
Prints one line per violation and exits 1 if there is any.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Layer of a path under src/ (longest prefix wins) and the layers it may include.
ALLOWED = {
    "core": set(),
    "powerinfer": set(),
    "tensor": {"core"},
    "gguf": {"tensor", "core"},
    "kernels/ref": {"tensor", "core"},
    "kernels/cpu": {"tensor", "core"},
    "kernels/cuda": {"tensor", "core"},
    "backend": {"kernels/cpu", "kernels/ref", "tensor", "core"},
    "backend/cuda": {"backend", "kernels/cuda", "kernels/cpu", "kernels/ref", "tensor", "core"},
    "tokenizer": {"gguf", "tensor", "core"},
    "model": {"backend", "gguf", "tensor", "core"},
    "sparse": {"model", "backend", "gguf", "tensor", "core"},
    "grammar": {"core", "powerinfer"},
    "runtime": {"sparse", "model", "backend", "tokenizer", "grammar", "gguf", "tensor", "core",
                "powerinfer"},
    "chat": {"powerinfer"},
    "workflows": {"runtime", "sparse", "model", "backend", "tokenizer", "grammar", "gguf", "tensor",
                  "core", "powerinfer"},
    "server": {"powerinfer", "chat"},
    "capi": {"powerinfer", "chat"},
}
# Named exceptions: (file, included layer) -> why it is allowed for now.
EXCEPTIONS = {
    ("src/core/error.h", "powerinfer"): "core re-exports the public error type "
    "(include/powerinfer/error.h) so that library and public API share one Result/Status",
    ("src/core/log.h", "powerinfer"): "core's logging uses the public level and sink "
    "(include/powerinfer/log.h) that embedders set (pi_log_set, Python's logging)",
    ("src/backend/registry.cpp", "backend/cuda"): "the registry makes every device of the build "
    "by name, the cuda one included (cuda_device.h has no CUDA types)",
}
CUDA = re.compile(r"^(cuda|cublas|cuda_runtime|cuda_fp16|curand|nvrtc|hip/)")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of(rel: str) -> str:
    parts = rel.split("/")
    if parts[0] == "include":
        return "powerinfer"
    two = "/".join(parts[1:3])
    if two in ALLOWED:
        return two
    return parts[1]


def target_layer(inc: str) -> str | None:
    parts = inc.split("/")
    if len(parts) < 2:
        return None
    if parts[0] == "powerinfer":
        return "powerinfer"
    two = "/".join(parts[:2])
    if two in ALLOWED:
        return two
    return parts[0] if parts[0] in ALLOWED else None


def main() -> int:
    global ROOT
    if len(sys.argv) > 2 and sys.argv[1] == "--root":
        ROOT = pathlib.Path(sys.argv[2])
    bad = []
    files = [p for d in ("src", "include") for p in (ROOT / d).rglob("*")
             if p.suffix in (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")]
    for path in sorted(files):
        rel = path.relative_to(ROOT).as_posix()
        me = layer_of(rel)
        for kind, inc in INCLUDE.findall(path.read_text(errors="replace")):
            if CUDA.match(inc) and me not in ("backend/cuda", "kernels/cuda"):
                bad.append(f"{rel}: includes CUDA header <{inc}> outside src/backend/cuda, src/kernels/cuda")
                continue
            if kind != '"':
                continue
            t = target_layer(inc)
            if t is None or t == me:
                continue
            allowed = ALLOWED.get(me)
            if allowed is None:
                bad.append(f"{rel}: file of unknown layer '{me}' (add it to tests/layers/check_layers.py)")
                break
            if t not in allowed and (rel, t) not in EXCEPTIONS:
                bad.append(f"{rel}: layer {me} includes \"{inc}\" of layer {t} (allowed: {', '.join(sorted(allowed)) or 'none'})")
    for line in bad:
        print(line)
    print(f"{len(files)} files checked, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
