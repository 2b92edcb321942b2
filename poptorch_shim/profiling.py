"""PopTorch's profiling switches, written out as ipusim autoReport directories.

``Options.enableProfiling(dir)`` or the engine options ``autoReport.all`` /
``autoReport.directory`` ask for a report; so does ``IPUSIM_REPORT_DIR``
(set by ``ipusim run --report DIR``). Each model writes
``dir/<modelName | training | inference>/`` when it is destroyed and, for
every other model that asked, when the runner finishes the script (the
models are kept until then, so a report outlives the script's variables).
"""
from __future__ import annotations

import os
from pathlib import Path

REPORT_DIR_ENV = "IPUSIM_REPORT_DIR"

# Compiled executors whose report is still to be written.
_pending: list = []


def report_directory(executor) -> Path | None:
    """Where ``executor``'s autoReport goes, or None if nobody asked for one."""
    options = executor.options
    root = options.profile_dir or os.environ.get(REPORT_DIR_ENV)
    if not root:
        return None
    name = options.model_name or ("training" if executor.training else "inference")
    return Path(root) / name


def register(executor) -> None:
    """Remember a compiled executor whose report the runner must write at the end."""
    if report_directory(executor) is not None and executor not in _pending:
        _pending.append(executor)


def write_report(executor) -> Path | None:
    """Write the autoReport directory of a compiled executor that asked for one."""
    if executor in _pending:
        _pending.remove(executor)
    directory = report_directory(executor)
    if directory is None or not executor.isCompiled() or executor.device.simulation.steps == 0:
        return None
    from ipusim.report import outputs_from_engine_options, write_autoreport
    options = executor.options
    # Engine options that name no autoReport output (only a directory, or an
    # IPUSIM_REPORT_DIR run) still get the whole report.
    outputs = outputs_from_engine_options(options.engine_options) or None
    from poptorch_shim.data_loader import measured_loader_rate
    loader_rate = options.sim_loader_rate or measured_loader_rate(options)
    return write_autoreport(directory, executor.timeline, options=_plain(options.toDict()),
                            outputs=outputs, loader_items_per_s=loader_rate)


def write_pending_reports() -> list[Path]:
    """Write the reports still pending; the runner calls this at the end of a script."""
    written = [write_report(executor) for executor in list(_pending)]
    return [path for path in written if path is not None]


def _plain(values: dict) -> dict:
    """Options as JSON-friendly values (enums by name, objects by repr)."""
    out = {}
    for key, value in values.items():
        if hasattr(value, "name") and hasattr(value, "value"):
            out[key] = value.name
        elif isinstance(value, (str, int, float, bool, type(None), list, dict)):
            out[key] = value
        else:
            out[key] = repr(value)
    return out
