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

# torch_npu's face (compat/torch_npu, pure Python; docs/torch_npu.md): Ascend code runs on the
# device, named "npu" in the processes that import it. Its dependencies are the ones above.
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation ./compat/torch_npu

# The test suite also runs the operator packages under examples/, each built
# the way its README says: its own `python setup.py bdist_wheel`, against the
# torch_simhpu just installed, then installed. Each builds in a copy under
# build/examples/ (cp -a keeps the files' times, so a rebuild is incremental),
# and the examples stay as a user would copy them: no build/, dist/ or
# generated files.
if [[ "${1:-}" == "test" ]]; then
  # The simulation's HTML report is checked in a real headless browser
  # (tests/device/test_planner_report.py): Debian's Chromium, when it is missing.
  if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    (apt-get install -y -q chromium >/tmp/simhpu-apt-chromium.log 2>&1 ||
       { apt-get update -q >>/tmp/simhpu-apt-chromium.log 2>&1 &&
         apt-get install -y -q chromium >>/tmp/simhpu-apt-chromium.log 2>&1; }) ||
      echo "could not install chromium (see /tmp/simhpu-apt-chromium.log): the HTML report's browser test will skip" >&2
  fi
  python=$(cd "$(dirname "$VENV/bin/python")" && pwd)/python
  for package in examples/*/setup.py; do
    folder=$(dirname "$package")
    copy="build/examples/$(basename "$folder")"
    start=$SECONDS
    mkdir -p "$copy"
    cp -a "$folder/." "$copy/"
    (cd "$copy" && "$python" setup.py --quiet bdist_wheel >build.log 2>&1) ||
      { cat "$copy/build.log"; echo "building $folder failed" >&2; exit 1; }
    "$python" -m pip install --quiet --no-deps "$copy"/dist/*.whl
    echo "built and installed $folder in $((SECONDS - start)) s"
  done
fi
