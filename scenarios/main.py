"""The main job: run the seed scenarios on the simulator and say where their reports are.

Each scenario is a PopTorch script run through the shim runner, with its
autoReport directories written under ``reports/<scenario>/``.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from poptorch_shim.profiling import REPORT_DIR_ENV
from poptorch_shim.runner import run_script

HERE = Path(__file__).resolve().parent
REPORTS = HERE.parent / "reports"

# (script, arguments): the tutorial at full size for one step a case (its
# simulated figures do not depend on how many steps run), then the guide's
# four-block Network pipelined over four IPUs.
SCENARIOS = {
    "tutorial_data_loading": ("tutorial_data_loading.py", ["--max-steps", "1"]),
    "pipelined_network": ("parallel_execution.py", ["--strategy", "pipelined"]),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="SCENARIO",
                        help=f"scenarios to run (default: all of {', '.join(SCENARIOS)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {sorted(SCENARIOS)}")
    written = []
    for name in args.names or SCENARIOS:
        script, script_args = SCENARIOS[name]
        report_dir = REPORTS / name
        print(f"\n=== {name}: python -m poptorch_shim scenarios/{script} {' '.join(script_args)}")
        os.environ[REPORT_DIR_ENV] = str(report_dir)
        start = time.time()
        run_script(str(HERE / script), script_args)
        print(f"=== {name} took {time.time() - start:.0f} s of wall time")
        written.extend(sorted(report_dir.glob("*/report.html")))
    print("\nReports:")
    for path in written:
        print(f"  {path.relative_to(REPORTS.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
