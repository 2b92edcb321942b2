"""The event record at scale: bytes per row, wall time and peak memory up to 10 million rows.

Runs the workload of ``bench_simulator.py`` (16 pipeline stages x 4 replicas =
64 IPUs, real data over Full sync groups) at 1x, 8x and 64x its micro-batches
(64x gives about 10 million rows), each in a fresh Python process so that its
peak memory is its own, and prints per scale:

- rows: rows of the event DataFrame (``timeline.events``);
- wall s: the whole call (building the programs, the SimPy run, the DataFrame)
  and us per row (wall, then CPU), which stays flat when the cost is linear
  in the rows; cpu s:
  the process's CPU time over the same call (on a shared machine, what the
  call cost when other processes took turns on the cores);
- record B/row: bytes the recorder's typed columns hold per recorded row
  (folded, the recorder holds one replica's rows: the DataFrame has 4x more);
- RSS B/row while simulating: growth of the resident set from before building the
  programs to the end of the SimPy run, per DataFrame row (programs included);
- peak RSS: the process's peak resident set (``ru_maxrss``), Python, numpy and
  pandas included, and the DataFrame's own bytes;
- peak B/row: that peak over the resident set before simulating (what the
  interpreter, torch-free, already held), per DataFrame row: what the whole call,
  its DataFrame included, costs a row at its worst.

Replicas fold by default (they run the same program on their own host links);
``--no-fold`` simulates every replica. Goal: 10 million rows in <= 15 s and
<= 1.5 GB peak, cost per row flat from 1x to 64x; peak B/row <= 150 at about
1.5 M rows (``--micro-batches 4000 --scales 1``). Prints only; asserts nothing.

    .venv/bin/python benchmarks/bench_recorder.py                # about a minute
    .venv/bin/python benchmarks/bench_recorder.py --no-fold --scales 1 8
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_simulator import pipeline_work  # noqa: E402
from ipusim import Execution, RunConfig, Simulation, system_spec  # noqa: E402


def rss_bytes() -> int:
    """The resident set size of this process now (Linux /proc)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def one_run(micro_batches: int, fold: bool) -> dict:
    """Simulate one call at ``micro_batches``; the figures of :func:`main`'s table."""
    work = pipeline_work(16)
    run = RunConfig(replicas=4, gradient_accumulation=micro_batches,
                    execution=Execution.PIPELINED)
    spec = system_spec("mk2", 64)
    gc.collect()
    before = rss_bytes()
    start, cpu = time.perf_counter(), time.process_time()
    simulation = Simulation(work, run, spec, fold_replicas=fold)
    simulation.step()
    simulated = time.perf_counter()
    during = rss_bytes() - before
    events = simulation.timeline.events
    end = time.perf_counter()
    return {"rows": len(events), "recorded": len(simulation.recorder),
            "record_bytes": simulation.recorder.nbytes, "rss_during": during,
            "wall": end - start, "cpu": time.process_time() - cpu,
            "simulate": simulated - start, "frame": end - simulated,
            "frame_bytes": int(events.memory_usage(deep=True).sum()),
            "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "before": before,
            "folded": simulation.folded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro-batches", type=int, default=400,
                        help="micro-batches per step at scale 1 (64x: about 10M rows)")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--no-fold", action="store_true", help="simulate every replica")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one_run(args.child, not args.no_fold)))
        return

    print(f"16 pipeline stages x 4 replicas = 64 IPUs, real data, one call; replicas "
          f"{'simulated each' if args.no_fold else 'folded'}; each scale in a fresh process")
    print(f"{'scale':>5} {'rows':>11} {'wall s':>7} {'cpu s':>6} {'us/row':>7} {'cpu':>5} "
          f"{'(sim+frame s)':>14} "
          f"{'record B/row':>13} {'RSS B/row sim':>14} {'peak RSS MB':>12} {'frame MB':>9} "
          f"{'peak B/row':>10}")
    for scale in args.scales:
        command = [sys.executable, __file__, "--child", str(args.micro_batches * scale)]
        output = subprocess.run(command + (["--no-fold"] if args.no_fold else []),
                                check=True, capture_output=True, text=True).stdout
        r = json.loads(output)
        print(f"{scale:>4}x {r['rows']:>11,} {r['wall']:>7.2f} {r['cpu']:>6.2f} "
              f"{1e6 * r['wall'] / r['rows']:>7.2f} {1e6 * r['cpu'] / r['rows']:>5.2f} "
              f"{r['simulate']:>6.2f}+{r['frame']:<6.2f} "
              f"{r['record_bytes'] / r['recorded']:>13.1f} {r['rss_during'] / r['rows']:>14.1f} "
              f"{r['peak'] / 1e6:>12,.0f} {r['frame_bytes'] / 1e6:>9,.0f} "
              f"{(r['peak'] - r['before']) / r['rows']:>10.1f}")


if __name__ == "__main__":
    main()
