#!/usr/bin/env bash
# One-time set-up on a fresh machine: PyTorch (the CPU build where no CUDA GPU is present), then
# this package in editable mode with its test tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    "$PY" -m pip install -q torch
  else
    # A plain `torch` requirement may pull a multi-GB CUDA build: take the CPU one.
    "$PY" -m pip install -q torch==2.13.0
  fi
fi
# ray: the Ray executor is tested when Ray is installed, so the test set-up installs it
"$PY" -m pip install -q -e ".[dev,ray]"
