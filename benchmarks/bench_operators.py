"""Published IPU operator timings against the simulator's compute model.

Runs every row of the operator table (``operator_benchmarks.csv`` beside this
script, its sources in its header: 19 timings on a Bow IPU) through the public API and prints the
published and simulated TFLOP/s with the error of each row, then the median
and worst absolute error (goal: median <= 10%, worst <= 25%).

- ``matmul`` rows (the dense baseline of Li et al., "PopSparse",
  arXiv:2303.16999): a PopTorch inference model computing ``W @ X`` with W
  (m x k) and X (k x n) in the row's dtype, timing-only, on a simulated Bow
  system of one IPU with the row's partials type; the simulated time is the
  forward compute event of the timeline.
- ``tile_amp`` rows (graphcore-research/tessellate-ipu, "IPU Peak Flops"): one
  AMP vertex on every tile with its operands in place, priced by
  ``ipusim.amp_vertex_cycles`` with the 128-bit weight loads that vertex uses.

Held out from the model's making, ``operator_benchmarks_extra.csv`` beside this
script adds three dense matmuls from the PopSparse tutorial notebook
(graphcore-research/notebooks at 64da03b, ``sparsity_benchmarks/SpMM.ipynb``,
its stored outputs): the dense baseline's printed TFLOP/s divided by the
density it is scaled by, wall clock per step of a 2,000-step
``poptorch.for_loop`` on the Bow IPU the notebook names; they are printed
and counted apart.

Held out too, ``operator_benchmarks_vertex.csv`` beside this script holds six
single popops vector vertices timed by the tile's cycle counter
(graphcore-research/tessellate-ipu: a float ``BinaryOp1D`` add and a float
``ScaledAddSupervisor``, 10 to 1,024 elements a tile; the CSV's header says
where each row comes from). Each is priced by ``ipusim.operator_cycles`` as
an element-wise operator whose elements all sit on one tile, its vertex
cycles (the ``vector`` part) against the published count less the 45 cycles
the counter costs; printed in cycles and counted apart.

Usage: ``python benchmarks/bench_operators.py [--csv PATH] [--extra PATH]
[--vertex PATH]``.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

from poptorch_shim.commands import install_aliases

install_aliases()
import ipusim  # noqa: E402
import poptorch  # noqa: E402
from ipusim.engine.event_kinds import FORWARD  # noqa: E402

DEFAULT_CSV = Path(__file__).resolve().parent / "operator_benchmarks.csv"
EXTRA_CSV = Path(__file__).resolve().parent / "operator_benchmarks_extra.csv"
VERTEX_CSV = Path(__file__).resolve().parent / "operator_benchmarks_vertex.csv"
DTYPES = {"fp16": torch.float16, "fp32": torch.float32}
IPUS = {"bow": ipusim.BOW, "mk2": ipusim.MK2_GC200, "mk1": ipusim.MK1_GC2}
#: What one read of the tile's cycle counter adds to a measured interval
#: (graphcore-research/tessellate-ipu,
#: tessellate_ipu/core/tile_interpreter_hw_primitives.py:110-115).
CYCLE_COUNTER_OVERHEAD = 45


class MatMul(torch.nn.Module):
    """``W @ X``: the (m x k) weights times the (k x n) input."""

    def __init__(self, m: int, k: int, dtype: torch.dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(m, k, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight @ x


def simulated_matmul_s(m: int, k: int, n: int, dtype: torch.dtype,
                       partials: torch.dtype) -> float:
    """Seconds of the matmul's forward compute on a simulated Bow IPU."""
    opts = poptorch.Options()
    opts.Simulation.system("bow", 1).timingOnly(True)
    opts.Precision.setPartialsType(partials)
    model = poptorch.inferenceModel(MatMul(m, k, dtype), opts)
    model(torch.zeros(k, n, dtype=dtype))
    events = model.timeline.events
    forward = events[events["kind"] == FORWARD]
    return float((forward["end_ps"] - forward["start_ps"]).iloc[0]) / 1e12


def simulated_tile_amp_s(rows: int, partials: str) -> float:
    """Seconds of one [rows, 16] @ [16, 16] AMP vertex per tile on a Bow IPU."""
    ipu = ipusim.BOW
    model = replace(ipusim.CALIBRATED_MK2, half_partials=partials == "fp16")
    cycles = ipusim.amp_vertex_cycles(rows, 1, 1, 1, 2, ipu, model, partials == "fp16",
                                      weight_load_bytes_per_cycle=16)
    return cycles / ipu.clock_hz


def simulated_vertex_cycles(elements: int, dtype: str, hardware: str) -> float:
    """Cycles of one popops vector vertex over ``elements`` on one tile: an
    element-wise operator on an IPU of one tile, its vertex without the compute
    set's sync."""
    one_tile = replace(IPUS[hardware], tiles=1)
    width = DTYPES[dtype].itemsize
    kernel = ipusim.Kernel(ipusim.KernelKind.ELEMENTWISE, width, elements=elements,
                           bytes=3 * elements * width)
    return ipusim.operator_cycles(kernel, one_tile, ipusim.CALIBRATED_MK2).vector


def run_vertex(csv: Path) -> pd.DataFrame:
    table = pd.read_csv(csv, comment="#")
    table["measured_cycles"] = table["published_cycles"] - CYCLE_COUNTER_OVERHEAD
    table["simulated_cycles"] = [simulated_vertex_cycles(row.elements, row.dtype, row.hardware)
                                 for row in table.itertuples()]
    table["error"] = table["simulated_cycles"] / table["measured_cycles"] - 1
    return table


def report_vertex(table: pd.DataFrame, title: str) -> None:
    print(title)
    print(f"{'source':18} {'hardware':8} {'dtype':5} {'vertex':15} {'elements':>8} "
          f"{'published':>9} {'less 45':>7} {'simulated':>9} {'error':>7}")
    for row in table.itertuples():
        print(f"{row.source:18} {row.hardware:8} {row.dtype:5} {row.vertex:15} {row.elements:8} "
              f"{row.published_cycles:9} {row.measured_cycles:7} {row.simulated_cycles:9.0f} "
              f"{row.error:+7.1%}")
    errors = table["error"].abs()
    print(f"median |error| {statistics.median(errors):.1%}, worst {errors.max():.1%}, "
          f"{len(table)} rows (cycles)\n")


def run(csv: Path) -> pd.DataFrame:
    table = pd.read_csv(csv, comment="#")
    simulated = []
    for row in table.itertuples():
        if row.kind == "tile_amp":
            seconds = simulated_tile_amp_s(row.m, row.partials)
            flops = 2 * row.m * row.k * row.n * row.tiles
        else:
            seconds = simulated_matmul_s(row.m, row.k, row.n, DTYPES[row.dtype],
                                         DTYPES[row.partials])
            flops = 2 * row.m * row.k * row.n
        simulated.append(flops / seconds / 1e12)
    table["simulated_tflops"] = simulated
    table["error"] = table["simulated_tflops"] / table["published_tflops"] - 1
    return table


def report(table: pd.DataFrame, title: str) -> None:
    print(title)
    print(f"{'source':18} {'kind':8} {'dtype':5} {'partials':8} {'m':>5} {'k':>5} {'n':>6} "
          f"{'published':>9} {'simulated':>9} {'error':>7}")
    for row in table.itertuples():
        print(f"{row.source:18} {row.kind:8} {row.dtype:5} {row.partials:8} {row.m:5} "
              f"{row.k:5} {row.n:6} {row.published_tflops:9.2f} {row.simulated_tflops:9.2f} "
              f"{row.error:+7.1%}")
    errors = table["error"].abs()
    print(f"median |error| {statistics.median(errors):.1%} (goal <= 10%), "
          f"worst {errors.max():.1%} (goal <= 25%), {len(table)} rows (TFLOP/s)\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--extra", type=Path, default=EXTRA_CSV)
    parser.add_argument("--vertex", type=Path, default=VERTEX_CSV)
    args = parser.parse_args()
    report(run(args.csv), f"The operator table ({args.csv.name})")
    if args.extra.exists():
        report(run(args.extra), f"Held out ({args.extra.name})")
    if args.vertex.exists():
        report_vertex(run_vertex(args.vertex), f"Held out, single vertices ({args.vertex.name})")


if __name__ == "__main__":
    main()
