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

# Versions carry their sources' hash (torch_simhpu_packaging.py): the plain
# install below installs a rebuilt wheel and skips an unchanged one.
"$VENV/bin/python" setup.py --quiet bdist_wheel
"$VENV/bin/python" -m pip install --quiet --no-deps dist/torch_simhpu-*.whl
echo "installed $(ls dist/torch_simhpu-*.whl) into $VENV"

# The test suite also runs the operator packages under examples/, each built
# the way its README says: its own `python setup.py bdist_wheel`, against the
# torch_simhpu just installed, then installed.
if [[ "${1:-}" == "test" ]]; then
  for package in examples/*/setup.py; do
    folder=$(dirname "$package")
    start=$SECONDS
    (cd "$folder" && "../../$VENV/bin/python" setup.py --quiet bdist_wheel >build.log 2>&1) ||
      { cat "$folder/build.log"; echo "building $folder failed" >&2; exit 1; }
    "$VENV/bin/python" -m pip install --quiet --no-deps "$folder"/dist/*.whl
    echo "built and installed $folder in $((SECONDS - start)) s"
  done
fi
