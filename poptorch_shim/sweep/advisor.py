"""The configuration advisor: the fastest way to run a model that fits in memory.

Given a model (a PopTorch script or a factory) and a machine (``ipus`` of
``system``), it searches how to run the model's stages: replicas, micro-batch
size with gradient accumulation keeping the model's global batch (samples
per weight update, which convergence depends on), recomputation and where
the optimizer state lives. A space up to ``exhaustive_limit`` points is
simulated whole; a larger one is searched with Optuna (TPE, seeded). The
answer is the ``poptorch.Options`` code to paste, its simulated figures and
the runners-up.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ipusim.explore.design_point import accepted
from poptorch_shim._core.batching import MicroBatchCounts, gradient_accumulation_for
from poptorch_shim._core.option_names import sweep_key
from poptorch_shim._execution.engine_config import execution_of, recomputation
from poptorch_shim.sweep import settings as sweep_settings
from poptorch_shim.sweep.backends import InProcess
from poptorch_shim.sweep.measure import Measurements, micro_batch_size
from poptorch_shim.sweep.run import THROUGHPUT, _config, run_points
from poptorch_shim.sweep.spec import ModelSource, SweepSpec
from poptorch_shim.sweep.store import normalised

# The settings searched, by their sweep keys (PopTorch's calls).
SYSTEM, REPLICAS, DEVICE_ITERATIONS, ACCUMULATION, OPTIMIZER_LOCATION = (
    sweep_key(setting) for setting in ("system", "replicas", "device_iterations",
                                       "gradient_accumulation", "offload.optimizer"))
_ORDER = [SYSTEM, REPLICAS, DEVICE_ITERATIONS, ACCUMULATION, sweep_settings.MICRO_BATCH,
          sweep_settings.RECOMPUTATION, OPTIMIZER_LOCATION]
# Off chip, the optimizer state is also sharded across the replicas (replicated
# tensor sharding), as Graphcore's BERT runs it; with one replica that changes nothing.
OFF_CHIP = {"useOnChipStorage": False, "useReplicatedTensorSharding": True}
ON_CHIP = {"useOnChipStorage": True}


@dataclass(frozen=True)
class Advice:
    """The advisor's answer: every point it simulated, best first among those that fit."""

    results: pd.DataFrame  # every simulated point, fastest fitting first
    settings: dict[str, Any] | None  # the best point's settings (None: nothing fits)
    searched: str  # "exhaustive" or "optuna"
    yours: int | None = None  # the row of ``results`` that runs as the script does

    @property
    def your_rank(self) -> int | None:
        """The script's own configuration's place among those that fit (1 = the
        best), or None when it does not fit or PopTorch refuses it."""
        if self.yours is None or not accepted(self.results).iloc[self.yours]:
            return None
        return self.yours + 1

    @property
    def best(self) -> pd.Series | None:
        return None if self.settings is None else self.results.iloc[0]

    def code(self) -> str:
        """The best configuration as PopTorch code."""
        if self.settings is None:
            return ""
        return ("opts = poptorch.Options()  # or your script's options, then:\n"
                + sweep_settings.as_code(self.settings))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_space(measurements: Measurements, ipus: int, system: str) -> tuple[dict, dict]:
    """(fixed settings, space) for the model on ``ipus`` IPUs of ``system``."""
    case = measurements.case({})
    micro_batch = micro_batch_size(case)
    base = measurements.get({sweep_settings.MICRO_BATCH: micro_batch})
    options, training = case.options, case.training
    per_replica = base.work.ipus_per_replica
    if per_replica > ipus:
        raise ValueError(f"--ipus {ipus}: the model's stages need {per_replica} IPUs per "
                         "replica")
    overrides = options.Simulation.overrides
    machine = [system, ipus] + ([dict(overrides)] if overrides else [])
    fixed: dict[str, Any] = {SYSTEM: machine}
    replicas = _divisors(ipus // per_replica)
    micro_batches = sorted({m for m in (micro_batch // 2, micro_batch, micro_batch * 2) if m >= 1})
    space: dict[str, list] = {REPLICAS: replicas, sweep_settings.MICRO_BATCH: micro_batches}
    if training:
        fixed["global_batch"] = MicroBatchCounts.of(options).micro_batches_per_update * micro_batch
        pipelined = per_replica > 1
        space[sweep_settings.RECOMPUTATION] = ["NoRecompute",
                                               "Pipeline" if pipelined else "RecomputeAll"]
        space[OPTIMIZER_LOCATION] = [ON_CHIP, OFF_CHIP]
    else:
        space[DEVICE_ITERATIONS] = [1, 4, 16, 64]
    return fixed, space


def your_point(measurements: Measurements, fixed: dict) -> dict:
    """The script's own configuration as a point of the search: its replicas,
    micro-batch and gradient accumulation (training) or device iterations
    (inference); what the search does not set stays as the script sets it."""
    case = measurements.case({})
    counts = MicroBatchCounts.of(case.options)
    point = {key: value for key, value in fixed.items() if key != "global_batch"}
    point[REPLICAS] = counts.replicas
    point[sweep_settings.MICRO_BATCH] = micro_batch_size(case)
    if case.training:
        point[ACCUMULATION] = counts.gradient_accumulation
        point.update(_searched_as_the_script_sets_them(measurements, case))
    else:
        point[DEVICE_ITERATIONS] = counts.device_iterations
    return point


def _searched_as_the_script_sets_them(measurements: Measurements, case) -> dict:
    """The script's recomputation and optimizer location in the words of the search
    space, where the space has them: so that the script's configuration is the
    searched point that runs the same way, not a copy of it under other words."""
    measured = measurements.get({sweep_settings.MICRO_BATCH: micro_batch_size(case)})
    mode = recomputation(case.options, execution_of(measured.strategy),
                         measured.work.ipus_per_replica)
    out = {sweep_settings.RECOMPUTATION: mode.name}
    location = case.options.TensorLocations.location("optimizer")
    if location is None or location.on_chip is not False:
        out[OPTIMIZER_LOCATION] = ON_CHIP
    elif location.replicated_tensor_sharding is True:
        out[OPTIMIZER_LOCATION] = OFF_CHIP
    return out


def _points(fixed: dict, space: dict, combos: list[tuple]) -> list[dict]:
    """Settings of each combination; in training the gradient accumulation
    keeps the global batch (combinations where it cannot are left out)."""
    points = []
    names = list(space)
    for combo in combos:
        point = dict(zip(names, combo))
        settings = {key: value for key, value in fixed.items() if key != "global_batch"}
        if "global_batch" in fixed:
            accumulation = gradient_accumulation_for(
                fixed["global_batch"], point[REPLICAS], point[sweep_settings.MICRO_BATCH])
            if accumulation is None:
                continue
            point[ACCUMULATION] = accumulation
        points.append({**settings, **point})
    return points


def advise(source: ModelSource, ipus: int = 16, system: str = "bow", top: int = 5,
           exhaustive_limit: int = 64, trials: int = 48, seed: int = 0, backend: Any = None,
           progress: bool = False, space: dict[str, list] | None = None) -> Advice:
    """Search the ways to run ``source``'s model on ``ipus`` IPUs of
    ``system`` for the fastest that fits (``space`` replaces the default
    search space, see :func:`search_space`)."""
    import itertools

    measurements = Measurements(source)
    fixed, default_space = search_space(measurements, ipus, system)
    space = space or default_space
    combos = list(itertools.product(*space.values()))
    spec = SweepSpec(model=source, fixed={k: v for k, v in fixed.items() if k != "global_batch"})
    backend = backend if backend is not None else InProcess()
    if len(combos) <= exhaustive_limit:
        rows = run_points(spec, _points(fixed, space, combos), None, backend, progress,
                          measurements=measurements)
        searched = "exhaustive"
    else:
        rows = _optuna_search(spec, fixed, space, trials, seed, backend, progress, measurements)
        searched = "optuna"
    yours = your_point(measurements, fixed)
    if all(row["config"] != _config(yours) for row in rows):
        rows += run_points(spec, [yours], None, backend, False, measurements=measurements,
                           first_index=len(rows))
    return _advice(rows, searched, _config(yours))


def _advice(rows: list[dict], searched: str, yours: str | None = None) -> Advice:
    import json

    table = normalised(pd.DataFrame(rows))
    fitting = accepted(table)
    table = table.assign(_fits=fitting).sort_values(
        ["_fits", THROUGHPUT], ascending=[False, False], kind="stable",
        ignore_index=True, na_position="last").drop(columns="_fits")
    best = json.loads(table.iloc[0]["config"]) if fitting.any() else None
    if best is not None:  # in the order a person writes them
        best = dict(sorted(best.items(), key=lambda item: _ORDER.index(item[0])
                           if item[0] in _ORDER else len(_ORDER)))
    mine = table.index[table["config"] == yours]  # the script's own settings
    return Advice(table, best, searched, int(mine[0]) if len(mine) else None)


def _optuna_search(spec: SweepSpec, fixed: dict, space: dict, trials: int, seed: int,
                   backend: Any, progress: bool, measurements: Measurements) -> list[dict]:
    """Optuna's TPE over the space, a batch of trials per round (one per worker)."""
    try:
        import optuna
    except ImportError:
        raise RuntimeError("a search space this large needs Optuna: pip install "
                           "'ipusim[advisor]' (or give a smaller space)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    choices = {name: [repr(v) for v in values] for name, values in space.items()}
    by_text = {name: dict(zip(choices[name], values)) for name, values in space.items()}
    rows: dict[str, dict] = {}
    batch = max(1, getattr(backend, "workers", 1))
    while len(study.trials) < trials:
        asked = [study.ask() for _ in range(min(batch, trials - len(study.trials)))]
        combos = [tuple(by_text[name][trial.suggest_categorical(name, choices[name])]
                        for name in space) for trial in asked]
        points = _points(fixed, space, combos)
        new = [p for p in points if _config(p) not in rows]
        for row in run_points(spec, new, None, backend, progress, measurements=measurements,
                              first_index=len(rows)):
            rows[row["config"]] = row  # a point's key needs its measurement: its settings do
        for trial, combo in zip(asked, combos):
            matching = _points(fixed, space, [combo])
            row = rows.get(_config(matching[0])) if matching else None
            good = row is not None and not row.get("error") and row.get("fits")
            study.tell(trial, row[THROUGHPUT] if good else 0.0)
    return list(rows.values())


def describe(advice: Advice, ipus: int, system: str, top: int = 5) -> str:
    """The advice as a person reads it: the code, the figures, the runners-up."""
    table = advice.results
    lines = [f"Searched {len(table)} configurations ({advice.searched}) on {ipus} "
             f"{system} IPUs."]
    if advice.settings is None:
        refused = table["error"].notna()
        if refused.all():
            reasons = table["error"].value_counts()
            lines.append(f"PopTorch refuses every configuration tried; the most common reason "
                         f"({reasons.iloc[0]} of {len(table)}):")
            lines.append(f"  {reasons.index[0]}")
            lines.append("Change the script's options as the reason says (for a pipeline: a "
                         "gradient accumulation of at least 2F - 1 for F stages), then ask again.")
        else:
            lines.append("None fits in memory; the memory needs of the closest, and why "
                         "PopTorch refuses the others:")
            lines.append(table.head(top)[["config", "memory_max(MB)", "error"]].to_string())
        lines.append(_yours(advice))
        return "\n".join(lines)
    best = advice.best
    lines += [
        f"Fastest that fits: {best[THROUGHPUT]:,.0f} items/s on {int(best['ipus'])} IPUs "
        f"(simulated)",
        f"  step {best['step(ms)']:.2f} ms, latency {best['latency(ms)']:.3f} ms, utilisation "
        f"{best['utilisation']:.0%}, bubble {best['bubble_fraction']:.0%}, host I/O "
        f"{best['host_io_share']:.1%}, sync wait {best['sync_wait_share']:.1%}",
        f"  memory {best['memory_max(MB)']:.1f} MB of {best['capacity(MB)']:.1f} MB on the "
        "fullest IPU",
        _yours(advice), "", advice.code(), "", "Runners-up:"]
    shown = [REPLICAS, ACCUMULATION, DEVICE_ITERATIONS, sweep_settings.MICRO_BATCH,
             sweep_settings.RECOMPUTATION, OPTIMIZER_LOCATION, THROUGHPUT, "memory_max(MB)",
             "fits"]
    runners = table.iloc[1:top + 1][[c for c in shown if c in table]]
    lines.append(runners.to_string(float_format=lambda v: f"{v:,.1f}"))
    return "\n".join(lines)


def _yours(advice: Advice) -> str:
    """Where the script's own configuration stands among those tried."""
    table = advice.results
    if advice.yours is None:
        return "Yours: not among those tried."
    row = table.iloc[advice.yours]
    if isinstance(row["error"], str):
        return f"Yours: refused by PopTorch: {row['error']}"
    if advice.your_rank is None:
        return (f"Yours: does not fit ({row['memory_max(MB)']:,.1f} MB on the fullest IPU of "
                f"{row['capacity(MB)']:,.1f} MB).")
    fitting = int(accepted(table).sum())
    best = table.iloc[0][THROUGHPUT]
    slower = ("the best" if advice.your_rank == 1 else
              f"{best / row[THROUGHPUT]:.1f}x slower than the best")
    return (f"Yours: #{advice.your_rank} of {fitting} that fit, {row[THROUGHPUT]:,.0f} items/s, "
            f"{slower}.")
