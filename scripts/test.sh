#!/usr/bin/env bash
# Set up (scripts/setup_env.sh test), then run the whole test suite against the
# installed wheel. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh test
.venv/bin/pytest "$@"
