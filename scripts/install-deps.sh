#!/usr/bin/env bash
# Installs what the build and the tests need on Debian 12, idempotently: Debian packages
# (apt runs only if something is missing) and a Python virtual environment in .venv for the
# test oracles (NumPy reference forward pass, sentencepiece / tokenizers). Safe to run
# repeatedly; fast when nothing is missing.
#   scripts/install-deps.sh           everything (scripts/test.sh)
#   scripts/install-deps.sh --build   only what building the `powerinfer` binary needs
#                                     (scripts/run.sh: compiler, CMake, the header libraries)
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
case "${1:-}" in
  --build) build_only=1 ;;
  "") ;;
  *) echo "usage: scripts/install-deps.sh [--build]" >&2; exit 2 ;;
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
  )
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
