#!/usr/bin/env bash
# The main job: set up .venv, then run the seed scenarios and print where
# their reports are.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m scenarios.main "$@"
