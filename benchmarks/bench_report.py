"""Benchmark: render the reports of a timing-only run of about 100,000 events.

Simulates a 4-stage pipelined training run (no torch model, plain numbers),
then times the HTML report, the Chrome trace and the autoReport directory and
prints wall seconds and file sizes. Nothing is asserted: the figures are for
people. Run with ``.venv/bin/python benchmarks/bench_report.py [--events N]``.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import ipusim
from ipusim.report import write_autoreport, write_chrome_trace, write_html


def pipelined_work(stages: int = 4) -> ipusim.Work:
    """A small model split over ``stages`` IPUs, costs as plain numbers."""
    return ipusim.Work(tuple(
        ipusim.Stage(f"block{k}", ipu=k, forward=ipusim.Cost(flops=2e9, bytes=4e7, ops=40),
                     backward=ipusim.Cost(flops=4e9, bytes=8e7, ops=80),
                     activation_bytes=256 * 1024, stash_bytes=512 * 1024,
                     weight_bytes=20 * 10**6, optimizer_bytes=40 * 10**6)
        for k in range(stages)),
        micro_batch_size=16, input_bytes_per_sample=3 * 224 * 224, output_bytes_per_sample=4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="events to simulate, about")
    args = parser.parse_args()
    work = pipelined_work()
    run = ipusim.RunConfig(gradient_accumulation=16, device_iterations=10,
                           execution=ipusim.Execution.PIPELINED)
    simulation = ipusim.Simulation(work, run, ipusim.system_spec("mk2", 4))
    simulation.step()
    per_step = len(simulation.recorder)
    steps = max(1, -(-args.events // per_step) - 1)

    began = time.perf_counter()
    timeline = simulation.run_steps(steps, progress=True)
    simulated = time.perf_counter() - began
    print(f"simulated {timeline.steps} steps, {len(timeline.events):,} events "
          f"in {simulated:.2f} s")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, write in (
                ("HTML report", lambda: write_html(timeline, tmp / "report.html")),
                ("Chrome trace", lambda: write_chrome_trace(timeline, tmp / "trace.json")),
                ("autoReport directory", lambda: write_autoreport(tmp / "training", timeline))):
            began = time.perf_counter()
            path = write()
            seconds = time.perf_counter() - began
            size = sum(p.stat().st_size for p in ([path] if path.is_file() else path.iterdir()))
            print(f"{name:<22}{seconds:8.2f} s {size / 1e6:10.2f} MB")


if __name__ == "__main__":
    main()
