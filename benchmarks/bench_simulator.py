"""How fast is the simulator? Simulated events per wall second against plain SimPy.

Runs a large timing-only pipeline (by default 16 stages x 4 replicas = 64
IPUs, gradient accumulation 1,000, one device iteration, real data so the
host links and GS1 syncs are exercised) and counts the rows of the event
record per wall second, for the whole call and for each of its phases:
building the per-IPU programs, running them in SimPy, and turning the rows
into a DataFrame. The yardstick is a plain SimPy loop of ``env.timeout``
events (64 processes, the same total count), measured in the same run,
interleaved, best of a few. CPU seconds are printed beside wall seconds:
on a shared machine they are the steadier figure. It then scales the
micro-batches (1x, 4x, 16x by default) to show that the time grows linearly
with the events. Prints only; asserts nothing.

    .venv/bin/python benchmarks/bench_simulator.py                 # a few minutes
    .venv/bin/python benchmarks/bench_simulator.py --micro-batches 100 --scales 1 2
    .venv/bin/python benchmarks/bench_simulator.py --profile 25     # where the time goes
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time

import simpy

from ipusim import DEFAULT, Cost, Execution, RunConfig, Stage, Work, system_spec
from ipusim.schedule import build_step
from ipusim.system import System


def pipeline_work(stages: int) -> Work:
    """``stages`` equal stages, one per IPU, moving activations and tutorial-sized inputs."""
    return Work(tuple(Stage(f"s{k}", k, Cost(flops=1e9, bytes=1e7, ops=10),
                            Cost(flops=2e9, bytes=2e7, ops=20), activation_bytes=10**5,
                            weight_bytes=10**7)
                      for k in range(stages)),
                micro_batch_size=16, input_bytes_per_sample=3072, output_bytes_per_sample=40)


class Clock:
    """Wall and CPU seconds since the last lap; CPU time shows the cost on a busy machine."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return elapsed


def timed_run(work: Work, run: RunConfig) -> dict[str, object]:
    """One call of ``work``: (wall, CPU) seconds of each phase and the rows it recorded."""
    spec = system_spec("mk2", run.replicas * work.ipus_per_replica)
    gc.collect()
    clock = Clock()
    programs = build_step(work, run, spec, DEFAULT, 0)
    build = clock.lap()
    system = System(spec)
    system.run(programs)
    simpy_run = clock.lap()
    frame = system.recorder.to_frame(work.ipus_per_replica)
    frame_build = clock.lap()
    total = tuple(a + b + c for a, b, c in zip(build, simpy_run, frame_build))
    return {"rows": len(frame), "build": build, "simpy": simpy_run, "frame": frame_build,
            "total": total}


def plain_simpy(events: int, processes: int = 64) -> tuple[float, float]:
    """(wall, CPU) seconds for ``processes`` SimPy processes to yield ``events`` timeouts in all."""
    def worker(env: simpy.Environment, count: int):
        for _ in range(count):
            yield env.timeout(1)

    env = simpy.Environment()
    for p in range(processes):
        env.process(worker(env, events // processes + (p < events % processes)))
    gc.collect()
    clock = Clock()
    env.run()
    return clock.lap()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", type=int, default=16, help="pipeline stages, one IPU each")
    parser.add_argument("--replicas", type=int, default=4, help="data-parallel replicas")
    parser.add_argument("--micro-batches", type=int, default=1000,
                        help="micro-batches per step (gradient accumulation) at scale 1")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16],
                        help="multiples of the micro-batches for the linearity table")
    parser.add_argument("--synthetic", action="store_true",
                        help="synthetic data: no host I/O (default: real data)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of the scale-1 comparison; the best is kept")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile one scale-1 call and print the top N functions")
    args = parser.parse_args(argv)

    work = pipeline_work(args.stages)

    def run_for(micro_batches: int) -> RunConfig:
        return RunConfig(replicas=args.replicas, gradient_accumulation=micro_batches,
                         execution=Execution.PIPELINED, synthetic_data=args.synthetic)

    data = "synthetic data" if args.synthetic else "real data (host I/O on Full sync groups)"
    print(f"Workload: {args.stages} pipeline stages x {args.replicas} replicas = "
          f"{args.stages * args.replicas} IPUs, gradient_accumulation={args.micro_batches}, "
          f"1 device iteration, {data}")

    results, baselines = [], []
    for _ in range(args.repeat):  # interleaved, so both see the same machine load
        results.append(timed_run(work, run_for(args.micro_batches)))
        baselines.append(plain_simpy(results[-1]["rows"]))
    rows = results[0]["rows"]
    best = {phase: (min(r[phase][0] for r in results), min(r[phase][1] for r in results))
            for phase in ("build", "simpy", "frame", "total")}
    plain_wall, plain_cpu = min(b[0] for b in baselines), min(b[1] for b in baselines)
    print(f"\nplain SimPy: {rows:,} env.timeout events in {plain_wall:.3f} s wall "
          f"({plain_cpu:.3f} s CPU) = {rows / plain_wall:,.0f} events per wall second")
    print(f"best of {args.repeat} runs of {rows:,} rows:")
    print(f"{'phase':<26}{'wall s':>8}{'rows/s':>12}{'vs SimPy':>10}{'CPU s':>8}{'vs SimPy':>10}")
    for phase, label in (("simpy", "SimPy run (System.run)"), ("build", "building programs"),
                         ("frame", "event DataFrame"), ("total", "whole call")):
        wall, cpu = best[phase]
        print(f"{label:<26}{wall:>8.3f}{rows / wall:>12,.0f}{plain_wall / wall:>10.2f}"
              f"{cpu:>8.3f}{plain_cpu / cpu:>10.2f}")

    print("\nwhole call, scaling the micro-batches:")
    print(f"{'scale':>5}{'micro-batches':>15}{'events':>12}{'wall s':>10}{'us/event':>10}"
          f"{'CPU s':>8}{'us/event':>10}")
    for scale in args.scales:
        result = timed_run(work, run_for(args.micro_batches * scale))
        wall, cpu = result["total"]
        print(f"{scale:>4}x{args.micro_batches * scale:>15,}{result['rows']:>12,}"
              f"{wall:>10.2f}{1e6 * wall / result['rows']:>10.2f}{cpu:>8.2f}"
              f"{1e6 * cpu / result['rows']:>10.2f}")

    if args.profile:
        gc.collect()  # the earlier runs' systems, so their collection is not profiled
        profiler = cProfile.Profile()
        profiler.runcall(timed_run, work, run_for(args.micro_batches))
        print()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
