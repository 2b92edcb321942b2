#!/usr/bin/env bash
# Run the test suite: set up .venv, make sure a headless Chromium is there for
# the report test (Debian's package), lint with ruff (a lint error fails the
# run), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's chromium for the browser test ..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null
fi
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
