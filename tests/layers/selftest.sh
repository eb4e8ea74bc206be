#!/usr/bin/env bash
# The layer checker must fail on a forbidden include (in a layer, the bindings, the CLI) and on
# a CUDA header outside the CUDA folders, and pass on the clean tree: a check that cannot fail
# proves nothing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/kernels/cpu" "$tmp/src/model" "$tmp/include/powerinfer"
printf '#include "model/forward.h"\n' > "$tmp/src/kernels/cpu/bad.cpp"
python3 "$here/check_layers.py" --root "$tmp" >/dev/null && { echo "kernels -> model not caught"; exit 1; }
rm "$tmp/src/kernels/cpu/bad.cpp"
printf '#include <cuda_runtime.h>\n' > "$tmp/src/model/bad.cpp"
python3 "$here/check_layers.py" --root "$tmp" >/dev/null && { echo "CUDA header in model not caught"; exit 1; }
rm "$tmp/src/model/bad.cpp"
mkdir -p "$tmp/python/src" "$tmp/tools/powerinfer"
printf '#include "runtime/context.h"\n' > "$tmp/python/src/bad.cpp"
python3 "$here/check_layers.py" --root "$tmp" >/dev/null && { echo "bindings -> runtime not caught"; exit 1; }
rm "$tmp/python/src/bad.cpp"
printf '#include "model/model.h"\n' > "$tmp/tools/powerinfer/bad.cpp"
python3 "$here/check_layers.py" --root "$tmp" >/dev/null && { echo "CLI -> model not caught"; exit 1; }
rm "$tmp/tools/powerinfer/bad.cpp"
printf '#include "powerinfer/engine.h"\n#include "core/log.h"\n' > "$tmp/tools/powerinfer/ok.cpp"
printf '#include "tensor/view.h"\n' > "$tmp/src/model/ok.cpp"
python3 "$here/check_layers.py" --root "$tmp" || { echo "clean tree rejected"; exit 1; }
echo "selftest ok"
