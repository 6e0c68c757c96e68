#!/usr/bin/env bash
# The MLP runner on CPU vs GPU at batch sizes 1..256: one short run, one table.
# Runs on a CPU-only machine too (GPU rows skipped with a note).
#   bench/gpu.sh [--seconds 0.5] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PYTHONPATH="platform${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" bench/gpu_runner.py "$@"
