#!/usr/bin/env bash
# The installed tree as an application sees it: `cmake --install` into a scratch prefix, then
# examples/simple.c built with pkg-config against the shared library and against the static
# archive, and examples/chat.cpp built by a CMake project with find_package(powerinfer); each
# runs on the bundled model (simple's text equals `powerinfer run`'s).
# Usage: test_install.sh BUILD_DIR SOURCE_DIR POWERINFER
set -euo pipefail
build=$1 src=$2 powerinfer=$3
model=$src/models/kjv-relu/kjv-relu.pwri.gguf
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pi_install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name powerinfer.pc)
[ -n "$pc" ] || fail "no powerinfer.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir powerinfer)
[ -f "$libdir/libpowerinfer.so" ] && [ -f "$libdir/libpowerinfer.a" ] || fail "libraries missing in $libdir"
[ -f "$(pkg-config --variable=includedir powerinfer)/powerinfer/powerinfer.h" ] || fail "header missing"

want=$("$powerinfer" run -m "$model" -p "In the beginning" -n 32 --temp 0 --no-display-prompt 2>/dev/null)
cc -std=c99 -Wall -Werror "$src/examples/simple.c" $(pkg-config --cflags --libs powerinfer) \
  -Wl,-rpath,"$libdir" -o "$tmp/simple_shared"
[ "$("$tmp/simple_shared" "$model" "In the beginning" 32)" = "$want" ] || fail "simple (shared) differs from run"
cc -std=c99 -Wall -Werror "$src/examples/simple.c" $(pkg-config --cflags powerinfer) \
  "$libdir/libpowerinfer.a" $(pkg-config --static --libs-only-l powerinfer | sed 's/-lpowerinfer//') \
  -o "$tmp/simple_static"
[ "$("$tmp/simple_static" "$model" "In the beginning" 32)" = "$want" ] || fail "simple (static) differs from run"

mkdir -p "$tmp/app"
cat >"$tmp/app/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(app LANGUAGES C CXX)
find_package(powerinfer CONFIG REQUIRED)
add_executable(chat $src/examples/chat.cpp)
target_compile_features(chat PRIVATE cxx_std_17)
target_link_libraries(chat PRIVATE powerinfer::powerinfer)
CMAKE
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/app/build" >/dev/null
out=$(printf 'Who begat Enos?\n' | "$tmp/app/build/chat" "$model" chatml 8)
[[ $out == "assistant: "* ]] || fail "chat printed: $out"
echo "install: pkg-config (shared, static) and find_package builds run; simple equals run"
