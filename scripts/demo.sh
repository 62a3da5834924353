#!/usr/bin/env bash
# Set up (scripts/setup_env.sh), then run the short demo from outside the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_env.sh
cd examples && ../.venv/bin/python demo.py
