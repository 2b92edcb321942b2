"""The main job: run the seed scenarios on the simulator and say where their reports are.

Each scenario is a PopTorch script run through the shim runner, with its
autoReport directories written under ``reports/<scenario>/``; ``reports/index.html``
lists every report there with its headline figures and a link to it.
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

from ipusim.report.index_page import write_index
from poptorch_shim._core.run_settings import PROGRESS_ENV
from poptorch_shim.commands import RunSettings, run_script

HERE = Path(__file__).resolve().parent
REPORTS = HERE.parent / "reports"

# (script, arguments): the tutorial at full size for one step a case (its
# simulated figures do not depend on how many steps run; its DataLoader has
# one worker per core of a small host, where the tutorial used 8), the guide's
# four-block Network pipelined over four IPUs, the guide's batching examples
# (device iterations, replication, gradient accumulation, the asynchronous
# accessor) on smaller datasets and a few steps, and the three sync patterns,
# under pipelining and under parallel phased execution (the ping-pong), and
# ResNet-50 and BERT-Large at full size on a Bow Pod16, timing-only.
SCENARIOS = {
    "tutorial_data_loading": ("tutorial_data_loading.py", [
        "--max-steps", "1", "--workers", str(min(8, os.cpu_count() or 1))]),
    "pipelined_network": ("parallel_execution.py", ["--strategy", "pipelined"]),
    "device_iterations": ("device_iterations.py", ["--samples", "2000", "--max-steps", "20"]),
    "replication": ("replication.py", ["--samples", "4000", "--max-steps", "2"]),
    "gradient_accumulation": ("gradient_accumulation.py", [
        "--device-iterations", "100", "--samples", "4000", "--max-steps", "2"]),
    "async_data_accessor": ("async_data_accessor.py", [
        "--batch-size", "16", "--device-iterations", "1", "100", "--samples", "8000",
        "--max-steps", "10"]),
    "sync_patterns": ("sync_patterns.py", ["--max-steps", "2"]),
    "sync_patterns_phased": ("sync_patterns.py", ["--strategy", "parallel-phased",
                                                  "--max-steps", "2"]),
    "resnet50": ("resnet50.py", []),
    "bert_large": ("bert_large.py", []),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="SCENARIO",
                        help=f"scenarios to run (default: all of {', '.join(SCENARIOS)})")
    parser.add_argument("--reports", metavar="DIR", type=Path, default=REPORTS,
                        help="where the reports and their index.html go (default: reports/)")
    args = parser.parse_args(argv)
    args.reports = args.reports.resolve()
    unknown = sorted(set(args.names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {sorted(SCENARIOS)}")
    written = []
    for name in args.names or SCENARIOS:
        script, script_args = SCENARIOS[name]
        report_dir = args.reports / name
        print(f"\n=== {name}: python -m poptorch_shim scenarios/{script} {' '.join(script_args)}")
        # A model's progress bar shows on a terminal only, and is gone before the script
        # prints again: on unless IPUSIM_PROGRESS turns it off.
        settings = RunSettings.from_environment()
        settings = replace(settings, report_dir=str(report_dir),
                           progress=settings.progress or PROGRESS_ENV not in os.environ)
        start = time.time()
        run_script(str(HERE / script), script_args, settings)
        print(f"=== {name} took {time.time() - start:.0f} s of wall time")
        written.extend(sorted(report_dir.glob("*/report.html")))
    print("\nReports:")
    for path in written:
        print(f"  {_shown(path)}")
    index = write_index(args.reports)
    print(f"\nEvery report with its figures and verdict: open {_shown(index)}")
    return 0


def _shown(path: Path) -> Path:
    """``path`` as the user would type it from the repository's root, where it is under it."""
    path = path.resolve()
    return path.relative_to(REPORTS.parent) if path.is_relative_to(REPORTS.parent) else path


if __name__ == "__main__":
    raise SystemExit(main())
