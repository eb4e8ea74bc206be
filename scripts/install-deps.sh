#!/usr/bin/env bash
# Installs what the build and the tests need on Debian 12, idempotently: Debian packages
# (apt runs only if something is missing) and a Python virtual environment in .venv for the
# test oracles (NumPy reference forward pass, sentencepiece / tokenizers). Safe to run
# repeatedly; fast when nothing is missing.
#   scripts/install-deps.sh           everything (scripts/test.sh)
#   scripts/install-deps.sh --build   only what building the `powerinfer` binary needs
#                                     (scripts/run.sh: compiler, CMake, the header libraries)
#   scripts/install-deps.sh --arm64   what --build needs, plus the aarch64 cross build's
#                                     (scripts/build-arm64.sh): Debian's cross compiler,
#                                     qemu-aarch64, and the arm64 library it links (GoogleTest)
#                                     through Debian multiarch
#   scripts/install-deps.sh --windows what --build needs, plus the Windows cross build's
#                                     (scripts/build-windows.sh): MinGW-w64 (posix threads),
#                                     Wine, and GoogleTest's sources to build for Windows
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
arm64=0
windows=0
case "${1:-}" in
  --build) build_only=1 ;;
  --arm64) build_only=1; arm64=1 ;;
  --windows) build_only=1; windows=1 ;;
  "") ;;
  *) echo "usage: scripts/install-deps.sh [--build|--arm64|--windows]" >&2; exit 2 ;;
esac

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
)
if ((!build_only)); then
  APT_PACKAGES+=(
    libgtest-dev libgmock-dev libbenchmark-dev
    python3 python3-venv python3-pip
    chromium haproxy
    ccache
  )
fi
if ((arm64)); then
  # The header-only libraries serve both architectures; GoogleTest is linked, so its arm64
  # build is installed beside the host's (multiarch, /usr/lib/aarch64-linux-gnu, where the
  # cross compiler looks). The stage builds without the server (no arm64 cpp-httplib).
  APT_PACKAGES+=(g++-aarch64-linux-gnu qemu-user libgtest-dev:arm64)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO dpkg --add-architecture arm64
  fi
fi

if ((windows)); then
  # Debian ships no Windows GoogleTest: the stage builds it from the googletest sources.
  APT_PACKAGES+=(g++-mingw-w64-x86-64-posix wine64 googletest)
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ((build_only)); then
  exit 0
fi

# Python test oracles live in a project-local venv so the system Python stays untouched.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import sys" 2>/dev/null; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import numpy, sentencepiece, tokenizers, safetensors, pytest, openai, gguf, nanobind, scikit_build_core, jsonschema" 2>/dev/null; then
  echo "installing Python test dependencies into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-test.txt
fi
