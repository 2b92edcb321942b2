"""The sweep report with a timeline report for the points worth a closer look.

The page itself comes from :mod:`ipusim.report.sweep`; here the chosen
points (the Pareto front by default) are simulated again from their
settings, one measurement per signature as in the sweep, and each gets the
run report of :mod:`ipusim.report.html` under ``points/``; every point's
details row shows its settings as PopTorch code. Both name the
settings as PopTorch does (:mod:`poptorch_shim._core.option_names`): the
table's columns are the spec's keys, PopTorch's calls.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ipusim.explore.design_point import simulate_point
from ipusim.report import write_html
from ipusim.report.sweep import pareto_front, write_sweep_html
from poptorch_shim._core.option_names import REPORT_NAMES
from poptorch_shim.sweep.measure import Measurements
from poptorch_shim.sweep.points import design_point, point_options
from poptorch_shim.sweep.settings import as_code
from poptorch_shim.sweep.spec import SweepSpec

POINTS = ("pareto", "all", "none")


def write_point_report(spec: SweepSpec, settings: dict, path: Path,
                       measurements: Measurements) -> Path:
    """Simulate one point again and write its timeline report to ``path``."""
    measured = measurements.get(settings)
    point = design_point(measured, point_options(measurements.case(settings).options, settings),
                         spec.steps)
    title = ", ".join(f"{name}={value}" for name, value in settings.items())
    return write_html(simulate_point(point), path, title=title, names=REPORT_NAMES)


def write_sweep_report(spec: SweepSpec, table: pd.DataFrame, directory: str | Path,
                       points: str = "pareto",
                       measurements: Measurements | None = None) -> Path:
    """Write ``directory/sweep.html`` and, for ``points`` ("pareto", "all" or
    "none") of the valid points, ``directory/points/<point id>.html``."""
    if points not in POINTS:
        raise ValueError(f"points must be one of {POINTS}, got {points!r}")
    directory = Path(directory)
    measurements = measurements if measurements is not None else Measurements(spec.model)
    valid = table[table["error"].isna()]
    chosen = {"pareto": table.loc[pareto_front(table)], "all": valid,
              "none": valid.iloc[:0]}[points]
    links = {}
    for _, row in chosen.iterrows():
        relative = f"points/{row['point_id']}.html"
        write_point_report(spec, json.loads(row["config"]), directory / relative, measurements)
        links[row["point_id"]] = relative
    code = {row["point_id"]: as_code(json.loads(row["config"])) for _, row in table.iterrows()
            if isinstance(row.get("config"), str)}
    return write_sweep_html(table, directory / "sweep.html", links=links,
                            title=_title(spec), names=REPORT_NAMES, code=code)


def _title(spec: SweepSpec) -> str:
    model = spec.model.factory or Path(spec.model.script).name
    arguments = ", ".join(f"{k}={v}" for k, v in spec.model.kwargs.items())
    return f"{model}({arguments})" if arguments else model
