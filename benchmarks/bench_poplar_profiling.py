"""Poplar's profiling tutorial, re-read: two fp32 matmuls, step by step, against PopVision.

The tutorial (graphcore/tutorials fcd2a67, ``tutorials/poplar/tut4_profiling``:
``tut4_ipu_model.cpp`` and the screenshots committed with it) multiplies three
variables mapped linearly over the tiles, m1 (900x600) by m2 (600x300), then the
product by m3 (300x200), in fp32, on an IPU Model whose summary screenshot
(``PopVision_GA_summary.png``) says Mk2, 1,472 tiles, Poplar 2.0. The execution
trace (``PopVision_GA_execution.png``) gives Engine::run 34,655 cycles; its steps,
read from the picture (+-3%): syncs of 57 to 114 cycles, exchanges of 114, 305 and
495, on-tile copies of 1,123 and 590, transposes of 571 and 856, pre-arrange and
convolve 15,225 and 7,879, reductions 3,464 and 2,379. These are PopLibs' own
estimates in the IPU Model, not hardware; a check of ipusim's program steps, not
a target (nothing is fitted to it).

ipusim prices each product as the program steps PopLibs builds (the weights,
mapped linearly rather than in the AMP's groups, are transposed as a backward
pass's operand is), on a Mk2 IPU. ``--check`` exits 1 unless the total is within
+-15% of 34,655.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from ipusim import Kernel, KernelKind, operator_cycles
from ipusim.cost.cost_model import DEFAULT
from ipusim.cost.program import ProgramKind
from ipusim.hardware import MK2_GC200

PUBLISHED_TOTAL, TOLERANCE = 34_655, 0.15
#: The picture's steps by kind, (first matmul, second matmul); exchanges are its three
#: visible DoExchange spans, not per matmul.
PUBLISHED = {"on-tile copies": (1_123, 590), "transposes": (571, 856),
             "convolve": (15_225, 7_879), "reductions": (3_464, 2_379)}
PRODUCTS = (("m4 = m1 @ m2", 900, 600, 300), ("m5 = m4 @ m3", 900, 300, 200))


def kind_of(step) -> str:
    """The picture's kind of a program step."""
    if step.program is ProgramKind.SYNC:
        return "syncs"
    if step.program is ProgramKind.DO_EXCHANGE:
        return "exchanges"
    if step.name == "Transpose":
        return "transposes"
    if step.name.startswith("Reduce"):
        return "reductions"
    if step.name == "Convolve":
        return "convolve"
    return "on-tile copies"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless the total is within +-15%% of 34,655 cycles")
    args = parser.parse_args()
    kinds: list[dict[str, float]] = []
    for name, m, k, n in PRODUCTS:
        kernel = Kernel(KernelKind.MATMUL, 4, m=m, k=k, n=n, regroup=k * n * 4)
        cycles = operator_cycles(kernel, MK2_GC200, DEFAULT)
        print(f"{name} ({m}x{k} @ {k}x{n}, fp32): {cycles.total:,.0f} cycles")
        for step in cycles.steps:
            print(f"    {step.program.value:<14} {step.name:<30} {step.total:>8,.0f}")
        by_kind: dict[str, float] = defaultdict(float)
        for step in cycles.steps:
            by_kind[kind_of(step)] += step.total
        kinds.append(by_kind)
    print(f"\n{'kind of step':<16}{'simulated':>22}{'PopVision (IPU Model)':>26}")
    for kind in ("syncs", "exchanges", "on-tile copies", "transposes", "convolve",
                 "reductions"):
        simulated = " / ".join(f"{by_kind[kind]:,.0f}" for by_kind in kinds)
        published = {"syncs": "57-114 each", "exchanges": "114 / 305 / 495"}.get(
            kind) or " / ".join(f"{value:,}" for value in PUBLISHED[kind])
        print(f"{kind:<16}{simulated:>22}{published:>26}")
    total = sum(sum(by_kind.values()) for by_kind in kinds)
    error = total / PUBLISHED_TOTAL - 1
    print(f"\nTotal: {total:,.0f} cycles simulated, {PUBLISHED_TOTAL:,} in PopVision "
          f"({error:+.1%})")
    if args.check and abs(error) > TOLERANCE:
        print(f"Outside +-{TOLERANCE:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
