"""Run a sweep: measure, simulate every point on a backend, keep every result.

:func:`sweep` is the Python API behind ``ipusim sweep``. Points already in
the results file are skipped; the rest are grouped by stage signature, so
each signature is measured once, then simulated on the backend as its
points come up. A point that PopTorch's checks refuse, or that fails to
simulate, is a row with its error. Rows are recorded as they finish.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from ipusim.explore.design_point import FIGURES
from poptorch_shim.sweep import spec as sweep_spec
from poptorch_shim.sweep import store as store_module
from poptorch_shim.sweep.backends import LocalProcesses, Task
from poptorch_shim.sweep.measure import Measurements, signature
from poptorch_shim.sweep.points import design_point, point_options
from poptorch_shim.sweep.spec import SweepSpec
from poptorch_shim.sweep.store import ResultsStore

THROUGHPUT = "throughput(items/s)"


def cell(value: Any) -> Any:
    """A setting's value as a table cell: scalars as they are, the rest as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)


class _Rows:
    """The results of this sweep: the store (if any), the progress bar and the hook."""

    def __init__(self, store: ResultsStore | None, total: int, done: list[dict],
                 progress: bool, on_result: Callable[[dict], None] | None):
        self.store, self.on_result = store, on_result
        self.rows: dict[str, dict] = {}
        self.bar = tqdm(total=total, initial=len(done), desc="sweep", unit="point",
                        disable=not progress, dynamic_ncols=True)
        self.failed = self.best = 0
        for row in done:  # a resumed sweep's counts start from the points it has
            self._count(row)

    def _count(self, row: dict) -> None:
        if row.get("error"):
            self.failed += 1
        elif row.get("fits") and row[THROUGHPUT] > self.best:
            self.best = row[THROUGHPUT]

    def add(self, row: dict) -> None:
        self.rows[row["point_id"]] = row
        if self.store is not None:
            self.store.add(row)
        self._count(row)
        self.bar.set_postfix_str(f"failed {self.failed}, best {self.best:,.0f} items/s "
                                 "(fits)", refresh=False)
        self.bar.update()
        if self.on_result is not None:
            self.on_result(row)


def _row(index: int, key: str, point_settings: dict, figures: dict) -> dict:
    row = {"point": index, "point_id": key}
    row.update({name: cell(value) for name, value in point_settings.items()})
    row.update({name: figures.get(name) for name in FIGURES})
    row["error"] = figures.get("error")
    row["config"] = json.dumps(point_settings, sort_keys=True)
    return row


def sweep(spec: SweepSpec | str | Path, output: str | Path | None = None,
          backend: Any = None, progress: bool = False,
          on_result: Callable[[dict], None] | None = None,
          measurements: Measurements | None = None) -> pd.DataFrame:
    """Run the sweep ``spec`` (a :class:`SweepSpec` or a TOML path) and
    return its results table, a row per point in the spec's order.

    ``output`` (default: the spec's) is the Parquet or CSV results file: its
    finished points are not computed again. ``backend``: an
    :class:`~poptorch_shim.sweep.backends.InProcess`,
    :class:`~poptorch_shim.sweep.backends.LocalProcesses` (the default) or
    :class:`~poptorch_shim.sweep.backends.RayCluster`. ``on_result`` is
    called with each row as it is recorded.
    """
    spec = sweep_spec.load(spec) if isinstance(spec, (str, Path)) else spec
    output = output if output is not None else spec.output
    store = ResultsStore(output) if output is not None else None
    rows = run_points(spec, spec.points(), store, backend, progress, on_result, measurements)
    if store is not None and store.path.exists():
        return read_results(store.path)
    return store_module.normalised(pd.DataFrame(rows))


def run_points(spec: SweepSpec, points: list[dict[str, Any]], store: ResultsStore | None = None,
               backend: Any = None, progress: bool = False,
               on_result: Callable[[dict], None] | None = None,
               measurements: Measurements | None = None, first_index: int = 0) -> list[dict]:
    """Simulate the points (settings) of ``spec``'s model not yet in ``store``;
    the rows of this run, numbered from ``first_index`` in the order given."""
    backend = backend if backend is not None else LocalProcesses()
    measurements = measurements if measurements is not None else Measurements(spec.model)
    done = store.done if store is not None else set()
    todo = [(first_index + index, spec.point_id(settings), settings)
            for index, settings in enumerate(points)]
    finished = [store.row(key) for _, key, _ in todo if key in done]
    todo = [entry for entry in todo if entry[1] not in done]
    # Points that share a measurement run together: each signature measured once.
    todo.sort(key=lambda entry: repr(signature(entry[2])))
    rows = _Rows(store, len(points), finished, progress, on_result)
    by_key = {key: (index, settings) for index, key, settings in todo}

    def tasks() -> Iterator[Task]:
        for index, key, settings in todo:
            try:
                measured = measurements.get(settings)
                options = point_options(measurements.case(settings).options, settings)
                point = design_point(measured, options, spec.steps)
            except Exception as error:  # PopTorch refuses the point: its row says why
                rows.add(_row(index, key, settings, {"error": f"{type(error).__name__}: "
                                                              f"{error}"}))
                continue
            yield key, point

    try:
        with closing(backend.map_unordered(tasks())) as results:
            for key, figures, _ in results:
                index, settings = by_key[key]
                rows.add(_row(index, key, settings, figures))
    finally:
        rows.bar.close()
        if store is not None:
            store.close()
    return list(rows.rows.values())


def read_results(path: str | Path) -> pd.DataFrame:
    """A results file as a table, a row per point in the sweep's order."""
    return store_module.read(path)
