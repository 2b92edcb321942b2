"""What writing ``profile.pop`` adds to a BERT-Large Pod16 timing-only run with reports.

BERT-Large phase 1 with Graphcore's options (``scenarios/bert_large.py``: a 4-IPU
pipeline, 4 replicas, gradient accumulation 2,048) is compiled on fake tensors and
run for one step, timing-only, outside the timing. The benchmark then writes its
autoReport directory (profile.json, events, trace, HTML, summary) as a run without
``profile.pop`` does, and as a run with it does (the graph profile worked out, the
HTML's tile and liveness views and its program tree and execution trace,
``profile.pop`` with its program tree), and those additions alone,
interleaved, and prints each one's wall seconds, median (min-max) over the
repeats, and what the additions add.

Goal: ``profile.pop`` adds at most 20% to the run with its reports (the compile on
fake tensors and the step, timed once, and the autoReport directory); its share of
the report's writing alone is printed too. Prints only; asserts nothing.

    .venv/bin/python benchmarks/bench_pop_profile.py            # a few minutes (measuring)
    .venv/bin/python benchmarks/bench_pop_profile.py --size reduced --repeats 1
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

from poptorch_shim.commands import install_aliases

install_aliases()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import poptorch  # noqa: E402
from ipusim.report import write_autoreport  # noqa: E402
from ipusim.report.page import PLOT_CONFIG  # noqa: E402
from ipusim.report.pop_profile import write_pop  # noqa: E402
from ipusim.report.program_views import program_views_section  # noqa: E402
from ipusim.report.tile_views import tile_views_section  # noqa: E402
from scenarios import bert_large  # noqa: E402
from scenarios.models import synthetic_bert_batch  # noqa: E402


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})"


def timed(write) -> float:
    """Wall seconds of ``write(directory)`` into a fresh temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        gc.collect()
        start = time.perf_counter()
        write(Path(tmp))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(bert_large.SIZES), default="large")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = bert_large.build(args.size)
    options = bert_large.options()
    options.Simulation.timingOnly(True)
    training = poptorch.trainingModel(model, options,
                                      poptorch.optim.LAMB(model.parameters(), lr=0.006))
    samples = 8 * options.replication_factor * options.Training.gradient_accumulation
    batch = synthetic_bert_batch(samples, 128, bert_large.SIZES[args.size][4])
    start = time.perf_counter()
    training(*batch)  # compiled (measured on fake tensors) and run for one step
    run_s = time.perf_counter() - start
    timeline, named = training.timeline, training.device.named
    print(f"BERT-{args.size}, Pod16 ({options.replication_factor} replicas of 4 IPUs), "
          f"timing-only, one step of {len(timeline.events):,} events; median (min-max) of "
          f"{args.repeats}")
    def with_pop(directory: Path) -> None:
        graph = timeline.graph_profile(named)
        write_autoreport(directory, timeline, graph=graph)
        write_pop(directory, timeline, graph)

    def additions(directory: Path) -> None:
        graph = timeline.graph_profile(named)
        tile_views_section(graph, PLOT_CONFIG)
        program_views_section(graph, PLOT_CONFIG)
        write_pop(directory, timeline, graph)

    plain, both, added = [], [], []
    for _ in range(args.repeats):  # interleaved, so that the machine's load falls on all
        plain.append(timed(lambda d: write_autoreport(d, timeline)))
        both.append(timed(with_pop))
        added.append(timed(additions))
    print(f"  autoReport directory                          {spread(plain)}")
    print(f"  with profile.pop and the graph profile views  {spread(both)} "
          f"(+{statistics.median(both) / statistics.median(plain) - 1:.0%})")
    print(f"  those additions alone                         {spread(added)} "
          f"({statistics.median(added) / statistics.median(plain):.0%} of the report)")
    whole = run_s + statistics.median(plain)
    print(f"  the run with its reports (compile and step {run_s:.2f} s, once): {whole:.2f} s; "
          f"the additions {statistics.median(added) / whole:.0%} of it")


if __name__ == "__main__":
    main()
