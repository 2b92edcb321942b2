#!/usr/bin/env bash
# Create or refresh the project's virtual environment in .venv.
# torch is installed first and pinned, so nothing can resolve an unpinned
# (CUDA) build of it.
set -euo pipefail
cd "$(dirname "$0")/.."

# pip, quietly: this machine's configured package indexes warn about every
# package they do not hold, which says nothing about the install.
pip_install() {
    .venv/bin/python -m pip install --quiet "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}

if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
pip_install --upgrade pip
pip_install "torch==2.13.0"
# The sweep tests run a real Ray cluster and the advisor Optuna: both extras.
pip_install -e ".[test,ray,advisor]"
# HolisticTraceAnalysis reads the per-IPU traces of `ipusim trace --hta` (a test runs it).
# Its package asks for jupyterlab, which it never imports: installed without its
# dependencies, the ones it does import are in the test extra.
pip_install --no-deps "HolisticTraceAnalysis==0.5.0"
