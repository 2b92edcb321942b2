"""Pod-scale training steps: how long one timing-only BERT-Large step takes to simulate and report.

BERT-Large phase 1 (sequence 128, micro-batch 8, Graphcore's options from
``scenarios/bert_large.py``: a 4-IPU pipeline, recomputation, LAMB off chip
and sharded) is measured once on fake tensors, outside the timing, as
``benchmarks/bench_real_models.py`` does. Its measured work is then run with
gradient accumulation 1,750 (by default) on a Bow Pod64 (16 replicas) and a
Bow Pod256 (64 replicas), and the benchmark prints, median (min-max) over
the repeats, in wall seconds:

Each wall time comes with the process's CPU time (on a shared machine, what
the work cost when other processes took turns on the cores).

- simulate: a fresh ``Simulation``, one ``step()`` and its event DataFrame
  (``timeline.events``), with the rows of that DataFrame; replicas folded
  (simulated once, see ``ipusim/plan/folding.py``) unless ``--no-fold``, and the
  Pod64 step also without folding (``--unfolded-repeats``, 0 to skip);
- report: the HTML report and the Chrome trace of that step written to a
  temporary directory, the trace at its default level of detail (first and
  last cycles of each pipeline run in full, the middle as aggregate boxes),
  with the trace's event count and size; ``--full-detail`` writes every event.

Goals: Pod64 simulate < 1 s, Pod256 < 4 s, report < 10 s. Prints only; asserts nothing.

    .venv/bin/python benchmarks/bench_pod_scale.py            # about 2 minutes (measuring)
    .venv/bin/python benchmarks/bench_pod_scale.py --size reduced --repeats 1
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from poptorch_shim.commands import install_aliases

install_aliases()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import poptorch  # noqa: E402
from ipusim import Simulation  # noqa: E402
from ipusim.report import write_chrome_trace, write_html  # noqa: E402
from ipusim.report.chrome_trace import Detail  # noqa: E402
from scenarios import bert_large  # noqa: E402
from scenarios.models import synthetic_bert_batch  # noqa: E402

PODS = {"Pod64": 16, "Pod256": 64}  # replicas of the 4-IPU pipeline


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})"


def measured(size: str):
    """(work, run, spec, cost model) of BERT ``size`` as the shim measures it on a Pod16."""
    model = bert_large.build(size)
    # 16 micro-batches: the fewest a 4-stage training pipeline takes; the work
    # measured is one micro-batch's, whatever the accumulation.
    options = bert_large.options(4, 16)
    training = poptorch.trainingModel(model, options,
                                      poptorch.optim.LAMB(model.parameters(), lr=0.006))
    training.compile(*synthetic_bert_batch(8 * 4 * 16, 128, bert_large.SIZES[size][4]))
    simulation = training.device.simulation
    return simulation.work, simulation.run, simulation.spec, simulation.cost_model


def simulate_once(work, run, spec, cost, fold: bool):
    """(wall seconds, timeline, folded, CPU seconds) of a fresh simulation of one step
    and its DataFrame."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    simulation = Simulation(work, run, spec, cost, fold_replicas=fold)
    simulation.step()
    timeline = simulation.timeline
    len(timeline.events)
    return (time.perf_counter() - start, timeline, simulation.folded,
            time.process_time() - cpu)


def report_once(timeline, detail: Detail) -> tuple[float, float, float, int, int, float]:
    """Wall seconds of the HTML report, of the trace and of both, the trace's events and
    bytes, and the CPU seconds of both."""
    with tempfile.TemporaryDirectory() as tmp:
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        write_html(timeline, Path(tmp) / "report.html")
        html = time.perf_counter()
        path = write_chrome_trace(timeline, Path(tmp) / "trace.json", detail=detail)
        trace, used = time.perf_counter(), time.process_time() - cpu
        text = path.read_text(encoding="utf-8")
        return html - start, trace - html, trace - start, text.count('"ph":'), len(text), used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(bert_large.SIZES), default="large")
    parser.add_argument("--gradient-accumulation", type=int, default=1750)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--unfolded-repeats", type=int, default=1,
                        help="Pod64 steps simulated without folding, for comparison")
    parser.add_argument("--no-fold", action="store_true", help="never fold replicas")
    parser.add_argument("--full-detail", action="store_true",
                        help="the trace with every event (slow at pod scale)")
    args = parser.parse_args()

    began = time.perf_counter()
    work, run, spec, cost = measured(args.size)
    print(f"BERT-{args.size} measured once in {time.perf_counter() - began:.1f} s (not timed "
          f"below); gradient accumulation {args.gradient_accumulation}, micro-batch 8, "
          f"timing-only, one training step; each figure median (min-max) of "
          f"{args.repeats} run(s)")
    detail = Detail(full=True) if args.full_detail else Detail()
    for pod, replicas in PODS.items():
        pod_run = replace(run, replicas=replicas,
                          gradient_accumulation=args.gradient_accumulation)
        pod_spec = replace(spec, num_ipus=4 * replicas)
        folds = [not args.no_fold] * args.repeats
        if pod == "Pod64" and not args.no_fold:
            folds += [False] * args.unfolded_repeats
        results = [simulate_once(work, pod_run, pod_spec, cost, fold) for fold in folds]
        print(f"\n{pod} ({replicas} replicas x 4 IPUs):")
        for folded in (True, False):
            chosen = [result for result in results if result[2] is folded]
            if chosen:
                print(f"  simulate {'folded  ' if folded else 'unfolded'} "
                      f"{spread([r[0] for r in chosen])} (cpu {spread([r[3] for r in chosen])}), "
                      f"{len(chosen[0][1].events):,} rows")
        timeline = results[0][1]
        reports = [report_once(timeline, detail) for _ in range(args.repeats)]
        print(f"  report: HTML {spread([r[0] for r in reports])}, Chrome trace "
              f"{spread([r[1] for r in reports])}, both {spread([r[2] for r in reports])} "
              f"(cpu {spread([r[5] for r in reports])})")
        print(f"  trace: {reports[0][3]:,} trace events, {reports[0][4] / 1e6:.1f} MB "
              f"({'every event' if args.full_detail else 'default level of detail'})")


if __name__ == "__main__":
    main()
