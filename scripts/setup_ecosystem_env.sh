#!/usr/bin/env bash
# Create or refresh the ecosystem lane's environment in .venv-ecosystem:
# optimum-graphcore and lightning-graphcore with everything they import, every
# package pinned in tests/ecosystem/requirements.txt and installed without
# resolving (their pins conflict with the main environment's), then ipusim
# itself (editable, its dependencies among those pins), so that
# .venv-ecosystem/bin/ipusim runs their scripts. It is rebuilt only when the
# requirements file changed since it was built (its hash is kept in the venv).
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=tests/ecosystem/requirements.txt
stamp=.venv-ecosystem/requirements.sha256
wanted=$(sha256sum "$requirements" | cut -d' ' -f1)

# pip, quietly: this machine's configured package indexes warn about every
# package they do not hold, which says nothing about the install.
pip_install() {
    .venv-ecosystem/bin/python -m pip install --quiet --no-deps --disable-pip-version-check \
        "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}

if [[ ! -x .venv-ecosystem/bin/python || ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
    python3 -m venv --clear .venv-ecosystem
    pip_install -r "$requirements"
    echo "$wanted" > "$stamp"
fi
# The project, in the environment's own setuptools (no isolated build to download).
pip_install --no-build-isolation -e .
