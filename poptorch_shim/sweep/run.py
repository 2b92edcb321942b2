"""Run a sweep: measure, simulate every point on a backend, keep every result.

:func:`sweep` is the Python API behind ``ipusim sweep``. Points already in
the results file are skipped; the rest are grouped by stage signature, so
each signature is measured once, then simulated on the backend as its
points come up. A point that PopTorch's checks refuse, or that fails to
simulate, is a row with its error. Rows are recorded as they finish.

A point's key covers the model's code and the work measured for it, so a
recorded row is reused only while both are unchanged (each signature is
measured again on a resumed sweep to know): a row of the same settings
made with another model is dropped and the point computed again, and the
error row of a point whose model failed to measure is never reused. A
model that cannot be built ends the sweep
(:class:`~poptorch_shim.sweep.spec.ModelError`).
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

    def reuse(self, row: dict) -> None:
        """A point already recorded, with this model: counted, not computed."""
        self._count(row)
        self.bar.update()

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


def _row(index: int, key: str, point_settings: dict, figures: dict,
         identity: dict[str, str | None]) -> dict:
    row = {"point": index, "point_id": key}
    row.update({name: cell(value) for name, value in point_settings.items()})
    row.update({name: figures.get(name) for name in FIGURES})
    row["error"] = figures.get("error")
    row["config"] = _config(point_settings)
    row.update(identity)  # spec, model (its code's hash), work (the measured work's hash)
    return row


def _config(point_settings: dict) -> str:
    """A point's settings as its row's ``config`` holds them."""
    return json.dumps(point_settings, sort_keys=True)


# Why a recorded row of a point's settings was not reused.
MODEL_CODE_CHANGED = "the model's code changed"
MODEL_WORK_CHANGED = "the measured model changed"
ERROR_AGAIN = "its model had failed to measure"
STEPS_CHANGED = "the steps changed"


def _reusable(row: dict) -> bool:
    """Whether a row of this key holds the point's result: one whose model
    was measured (an error of a failed measurement is tried again)."""
    return not row.get("error") or row.get("work") is not None


def _stale_reason(old: dict, code: str, work: str | None) -> str:
    if old.get("model") is not None and old.get("model") != code:
        return MODEL_CODE_CHANGED
    if old.get("error") and old.get("work") is None:
        return ERROR_AGAIN
    if old.get("work") is not None and old.get("work") != work:
        return MODEL_WORK_CHANGED
    if old.get("model") is None:  # a row of an earlier version of ipusim
        return MODEL_WORK_CHANGED
    return STEPS_CHANGED


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
    measurements = measurements if measurements is not None else Measurements(spec.model)
    measurements.code  # a model with no code to read fails before anything starts
    store = ResultsStore(output, spec.label) if output is not None else None
    dropped: dict[str, int] = {}
    try:
        rows = run_points(spec, spec.points(), store, backend, progress, on_result,
                          measurements, dropped=dropped)
    finally:
        if store is not None:
            store.close()
    if store is not None and store.path.exists():
        table = read_results(store.path)
    else:
        table = store_module.normalised(pd.DataFrame(rows))
    table.attrs["dropped"] = dropped  # rows not reused, by reason
    return table


def run_points(spec: SweepSpec, points: list[dict[str, Any]], store: ResultsStore | None = None,
               backend: Any = None, progress: bool = False,
               on_result: Callable[[dict], None] | None = None,
               measurements: Measurements | None = None, first_index: int = 0,
               dropped: dict[str, int] | None = None) -> list[dict]:
    """Simulate the points (settings) of ``spec``'s model not yet in ``store``;
    the rows of this run, numbered from ``first_index`` in the order given.
    ``dropped`` counts, by reason, the recorded rows of these points that
    were not reused (made with another model, or errors)."""
    backend = backend if backend is not None else LocalProcesses()
    measurements = measurements if measurements is not None else Measurements(spec.model)
    code = measurements.code
    dropped = dropped if dropped is not None else {}
    recorded: dict[str, dict] = {}  # config -> the recorded row of those settings
    if store is not None:
        for row in store.rows():
            if row.get("config") is not None:
                recorded[row["config"]] = row
    todo = [(first_index + index, settings) for index, settings in enumerate(points)]
    # Points that share a measurement run together: each signature measured once.
    todo.sort(key=lambda entry: repr(signature(entry[1])))
    rows = _Rows(store, len(points), [], progress, on_result)
    by_key: dict[str, tuple[int, dict, dict]] = {}

    def tasks() -> Iterator[Task]:
        for index, settings in todo:
            work = error = None
            try:
                measured = measurements.get(settings)
                work = measured.fingerprint
            except sweep_spec.ModelError:
                raise
            except Exception as failure:  # PopTorch refuses the point's measurement
                error = failure
            key = spec.point_id(settings, code, work)
            identity = {"spec": spec.label, "model": code, "work": work}
            old = recorded.get(_config(settings))
            if old is not None and store is not None:
                if old["point_id"] == key and _reusable(old):
                    rows.reuse(old)
                    continue
                reason = _stale_reason(old, code, work)
                dropped[reason] = dropped.get(reason, 0) + 1
                store.drop(old["point_id"])
            if error is None:
                try:
                    options = point_options(measurements.case(settings).options, settings)
                    point = design_point(measured, options, spec.steps)
                except Exception as failure:  # PopTorch refuses the point
                    error = failure
            if error is not None:  # its row says why
                rows.add(_row(index, key, settings,
                              {"error": f"{type(error).__name__}: {error}"}, identity))
                continue
            by_key[key] = (index, settings, identity)
            yield key, point

    try:
        with closing(backend.map_unordered(tasks())) as results:
            for key, figures, _ in results:
                index, settings, identity = by_key[key]
                rows.add(_row(index, key, settings, figures, identity))
    finally:
        rows.bar.close()
    return list(rows.rows.values())


def read_results(path: str | Path) -> pd.DataFrame:
    """A results file as a table, a row per point in the sweep's order."""
    return store_module.read(path)
