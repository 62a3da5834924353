#!/usr/bin/env bash
# Creates .venv (if missing), installs the requirements, builds the wheel with
# `python setup.py bdist_wheel` and installs it. Usage: scripts/setup_env.sh [test]
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${SIMHPU_VENV:-.venv}
requirements=requirements.txt
[[ "${1:-}" == "test" ]] && requirements=requirements-test.txt

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -r "$requirements"

rm -rf dist
"$VENV/bin/python" setup.py --quiet bdist_wheel
"$VENV/bin/python" -m pip install --quiet --force-reinstall --no-deps dist/torch_simhpu-*.whl
echo "installed $(ls dist/torch_simhpu-*.whl) into $VENV"
