"""Sweep throughput: a 200-point BERT-Large sweep, in this process, local workers and Ray.

The spec is ``scenarios/sweeps/bert_large.toml`` (timing-only BERT-Large
phase 1 on a Bow Pod16: replicas, gradient accumulation, micro-batch size,
sync pattern, recomputation and optimizer placement, a seeded sample of 200
points). The model is measured first, once per stage signature, and the
measurement time printed apart; then the same design points are simulated by
each backend and it prints, for each, wall seconds and points per second:

- in this process, one point after another (the baseline);
- local worker processes, one per core, the pool's start included;
- Ray on this machine, one worker per core, the cluster started beforehand
  (its start printed apart): each measured work put in the object store once.

With each backend it prints the seconds its workers spent simulating,
added up: where they exceed the in-process figure, the workers were sharing
cores (with each other or with other work on the machine). Then the Ray
backend's overhead per point: on a one-CPU Ray, points cheap to
simulate (the reduced BERT, gradient accumulation 8), wall time less the
time the worker spent simulating, per point (goal: at most 20 ms).

Prints only; it asserts nothing. ``--points`` changes the sample size.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# Every backend simulates on one thread per process, as Ray's and the local
# workers do: numeric libraries' idle thread pools spin and take the cores.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from poptorch_shim.sweep import (  # noqa: E402
    InProcess,
    LocalProcesses,
    Measurements,
    RayCluster,
    SweepSpec,
    load,
)
from poptorch_shim.sweep.points import design_point, point_options  # noqa: E402
from poptorch_shim.sweep.spec import ModelSource  # noqa: E402


def design_points(spec: SweepSpec, measurements: Measurements) -> list:
    """(point id, design point) of every point PopTorch accepts."""
    tasks = []
    for settings in spec.points():
        try:
            point = design_point(measurements.get(settings),
                                 point_options(measurements.case(settings).options, settings),
                                 spec.steps)
        except ValueError:
            continue
        tasks.append((spec.point_id(settings), point))
    return tasks


def timed(backend, tasks: list) -> tuple[float, list[float]]:
    """Wall seconds to simulate ``tasks`` on ``backend``, and each point's own seconds."""
    start = time.perf_counter()
    seconds = [s for _, _, s in backend.map_unordered(tasks)]
    return time.perf_counter() - start, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200)
    args = parser.parse_args()
    import ray

    cores = os.cpu_count() or 1
    spec = load(ROOT / "scenarios/sweeps/bert_large.toml")
    spec = SweepSpec(spec.model, spec.space, spec.fixed, args.points, spec.seed, spec.steps)
    start = time.perf_counter()
    measurements = Measurements(spec.model)
    tasks = design_points(spec, measurements)
    print(f"BERT-Large sweep: {len(spec.points())} points sampled, {len(tasks)} accepted by "
          f"PopTorch's checks; {len(measurements)} measurements (stage signatures) in "
          f"{time.perf_counter() - start:.1f} s; {cores} cores, load average "
          f"{os.getloadavg()[0]:.1f} (other work on the machine slows the parallel backends)")

    serial, seconds = timed(InProcess(), tasks)
    print(f"  in this process:          {serial:6.1f} s, {len(tasks) / serial:5.2f} points/s "
          f"(a point: median {statistics.median(seconds) * 1e3:.0f} ms)")
    local, worker_seconds = timed(LocalProcesses(cores), tasks)
    print(f"  local processes ({cores}):     {local:6.1f} s, {len(tasks) / local:5.2f} points/s, "
          f"{serial / local:.2f}x in-process (pool start included); the workers' own seconds "
          f"add up to {sum(worker_seconds):.1f} s against {sum(seconds):.1f} s in-process")
    start = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    started = time.perf_counter() - start
    on_ray, worker_seconds = timed(RayCluster(), tasks)
    print(f"  Ray, local cluster ({cores}):  {on_ray:6.1f} s, {len(tasks) / on_ray:5.2f} points/s, "
          f"{serial / on_ray:.2f}x in-process (cluster start, {started:.1f} s, not included); "
          f"the workers' own seconds add up to {sum(worker_seconds):.1f} s")
    ray.shutdown()

    cheap = SweepSpec(ModelSource(factory="scenarios.bert_large:sweep_case",
                                  kwargs={"size": "reduced"}),
                      space={"replicationFactor": [1, 2, 4]},
                      fixed={"Training.gradientAccumulation": 9,
                             "Simulation.system": ["bow", 16]})
    cheap_tasks = design_points(cheap, Measurements(cheap.model)) * 67
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    timed(RayCluster(), cheap_tasks[:4])  # the worker process started, the function exported
    wall, seconds = timed(RayCluster(), cheap_tasks)
    ray.shutdown()
    overhead = (wall - sum(seconds)) / len(cheap_tasks)
    print(f"  Ray overhead per point (1 CPU, {len(cheap_tasks)} points of "
          f"{statistics.median(seconds) * 1e3:.0f} ms): {overhead * 1e3:.1f} ms (goal <= 20 ms)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
