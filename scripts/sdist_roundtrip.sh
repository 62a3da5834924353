#!/usr/bin/env bash
# The sdist round trip: build the sdist, then the wheel from it alone in a fresh
# venv (no source tree beside it), install that wheel and run the demo with it.
# CI runs it after the tests (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

.venv/bin/python -m build --sdist --outdir "$work/sdist" . >"$work/sdist.log" 2>&1 ||
  { cat "$work/sdist.log"; echo "building the sdist failed" >&2; exit 1; }
sdist=$(ls "$work"/sdist/torch_simhpu-*.tar.gz)
echo "sdist: $(basename "$sdist") ($(tar tzf "$sdist" | wc -l) files)"

# The build requirements come from pyproject.toml's [build-system] (pip's build isolation).
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --upgrade pip
start=$SECONDS
(cd "$work" && "$work/venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheel" "$sdist") ||
  { echo "building the wheel from the sdist failed" >&2; exit 1; }
echo "built $(ls "$work"/wheel) from the sdist in $((SECONDS - start)) s"
"$work/venv/bin/python" -m pip install --quiet "$work"/wheel/torch_simhpu-*.whl
cd examples && "$work/venv/bin/python" demo.py
