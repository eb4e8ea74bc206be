#!/usr/bin/env bash
# `pip install .` as a user runs it: builds the engine and the extension with scikit-build-core
# (the venv's, no build isolation: no download) into a scratch target directory, then runs the
# package's tests against what was installed.
# Usage: test_pip_install.sh PYTHON SOURCE_DIR POWERINFER
set -euo pipefail
py=$1 src=$2 powerinfer=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pi_pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# A copy of the tracked sources, so that the install's build directory never lands in the
# checkout (a user's `pip install .` builds in build-python/, which .gitignore names).
mkdir -p "$tmp/src-copy"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tmp/src-copy/")
# Built as the suite's tree is (the compiler CMake picks by default, c++, where scikit-build
# picks g++; a tree one level below the sources, not build-python/{wheel_tag}), so that with
# ccache installed the suite's objects serve it: paths under the sources hash alike.
CC=cc CXX=c++ "$py" -m pip install --no-build-isolation --no-deps -q --target "$tmp/site" \
  --config-settings=build-dir=build-python "$tmp/src-copy"
[ -f "$tmp/site/powerinfer/__init__.py" ] || { echo "FAIL: no package installed" >&2; exit 1; }
ls "$tmp/site/powerinfer/"_powerinfer*.so >/dev/null || { echo "FAIL: no extension installed" >&2; exit 1; }
PYTHONPATH="$tmp/site" PI_POWERINFER="$powerinfer" "$py" -m pytest -q -p no:cacheprovider \
  "$src/tests/python_pkg/test_package.py"
echo "pip install .: the package built, installed and passed its tests"
