#!/usr/bin/env bash
# Create or refresh the project's virtual environment in .venv.
# torch is installed first and pinned, so nothing can resolve an unpinned
# (CUDA) build of it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[test]"
