#!/usr/bin/env python3
"""Checks the layer graph of docs/ARCHITECTURE.md on every #include of src/, include/ and
the front ends above the library (tools/powerinfer, python/src, examples).

A file in layer L may include headers of L itself and of the layers ALLOWED[L] lists; only
src/backend/cuda and src/kernels/cuda may include CUDA headers; the public headers in
include/powerinfer include only each other. The bindings and the examples see the public API
(and chat's templates) alone; the CLI sees the public API, chat, the server it starts and
core's utilities (logging, progress bars, probes). EXCEPTIONS names each file that still
reaches deeper, and why. Prints one line per violation and exits 1 if there is any.
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
    # The front ends (FRONT_ENDS: directories outside src/).
    "python": {"powerinfer", "chat"},
    "examples": {"powerinfer"},
    "tools": {"powerinfer", "chat", "server", "core"},
}
FRONT_ENDS = {"tools/powerinfer": "tools", "python/src": "python", "examples": "examples"}
# Named exceptions: (file, included layer) -> why it is allowed for now.
EXCEPTIONS = {
    ("src/core/error.h", "powerinfer"): "core re-exports the public error type "
    "(include/powerinfer/error.h) so that library and public API share one Result/Status",
    ("src/core/log.h", "powerinfer"): "core's logging uses the public level and sink "
    "(include/powerinfer/log.h) that embedders set (pi_log_set, Python's logging)",
    ("src/backend/registry.cpp", "backend/cuda"): "the registry makes every device of the build "
    "by name, the cuda one included (cuda_device.h has no CUDA types)",
    # The CLI's benchmark measures the machine and the model itself (llama-bench's place).
    ("tools/powerinfer/bench_args.cpp", "backend"): "bench: --device names from the registry",
    ("tools/powerinfer/bench_hybrid.cpp", "backend"): "bench: the device's rates for the hybrid model",
    ("tools/powerinfer/bench_hybrid.cpp", "tensor"): "bench: row bytes of the weight types",
    ("tools/powerinfer/bench_hybrid.h", "tensor"): "bench: weight types in the hybrid model",
    ("tools/powerinfer/bench_machine.cpp", "kernels/cpu"): "bench: the kernels' ISA in the report",
    ("tools/powerinfer/bench_runner.cpp", "model"): "bench: the model's tensors and layouts",
    ("tools/powerinfer/bench_runner.cpp", "gguf"): "bench: the file's metadata in the report",
    ("tools/powerinfer/bench_runner.cpp", "kernels/cpu"): "bench: the int8 compute path of the ISA",
    ("tools/powerinfer/bench_runner.cpp", "sparse"): "bench: the calibrated sites' bytes",
    ("tools/powerinfer/bench_runner.cpp", "runtime"): "bench: EngineAccess, the model behind an Engine",
    # Device and file tools over the internals, and flag parsing not yet in the public API.
    ("tools/powerinfer/cmd_devices.cpp", "backend"): "devices: the registry's devices and their probes",
    ("tools/powerinfer/cmd_inspect.cpp", "gguf"): "inspect: prints a file's metadata and tensors",
    ("tools/powerinfer/make_example_gguf.cpp", "gguf"): "writes the example files for the tests",
    ("tools/powerinfer/cmd_profile.cpp", "sparse"): "profile --expert-cache: the cache simulator",
    ("tools/powerinfer/gen_options.cpp", "sparse"): "--sparsity levels parsed as the runtime parses them",
    ("tools/powerinfer/llama_flags.cpp", "backend"): "--device names from the registry",
    ("tools/powerinfer/llama_flags.cpp", "sparse"): "--vram-budget parsed as the planner parses it",
}
CUDA = re.compile(r"^(cuda|cublas|cuda_runtime|cuda_fp16|curand|nvrtc|hip/)")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of(rel: str) -> str:
    for prefix, layer in FRONT_ENDS.items():
        if rel.startswith(prefix + "/"):
            return layer
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
    files = [p for d in ("src", "include", *FRONT_ENDS) for p in (ROOT / d).rglob("*")
             if p.suffix in (".h", ".hpp", ".c", ".cpp", ".cc", ".cu", ".cuh", ".inc")]
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
