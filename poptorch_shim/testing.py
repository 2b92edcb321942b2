"""A pytest plugin that runs a project's own PopTorch tests on the simulator.

``pytest -p poptorch_shim.testing`` (or ``pytest_plugins =
["poptorch_shim.testing"]`` in a conftest) makes ``import poptorch``,
``import popdist`` and ``import popart`` the shim's for the whole test session: in the test
modules, in the modules they import, and in every process started from it
(the asynchronous loader's worker, torch's DataLoader workers, subprocesses),
through ``sys.path`` and ``PYTHONPATH``. It is opt-in: the shim registers no
automatic pytest plugin.

A session that has already imported a real PopTorch is refused: the two
cannot share one interpreter.
"""
from __future__ import annotations

import sys

import pytest

from poptorch_shim._core import aliases as _aliases


def _install() -> None:
    loaded = sys.modules.get("poptorch")
    if loaded is not None and loaded is not sys.modules.get("poptorch_shim"):
        raise pytest.UsageError(
            "-p poptorch_shim.testing: a real PopTorch is already imported in this "
            f"session ({getattr(loaded, '__file__', loaded)}); the shim cannot stand "
            "for it. Drop the plugin to test on IPUs, or run in an environment without "
            "PopTorch.")
    _aliases.install()


_install()  # at import, before pytest collects (and imports) any test module


def pytest_report_header(config: pytest.Config) -> str:
    import poptorch_shim

    return (f"poptorch: ipusim's PopTorch shim {poptorch_shim.__version__} "
            "(-p poptorch_shim.testing)")
