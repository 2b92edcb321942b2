"""Where a real model's training step goes on a simulated Bow Pod16, timing-only.

ResNet-50 and BERT-Large phase 1 with Graphcore's options (the cases of
``benchmarks/bench_real_models.py``), one step each. Prints the throughput, then
the mean IPU's step cut into the parts of ``Timeline.step_time_by_ipu`` (they add
up to the step), the compute among them split two ways (``Timeline.operator_shares``,
each operator weighted by the times its pass runs in a step): by the unit its cycles
keep busy (the AMP, the exchange inside operators, the compute sets' syncs, vector
work), and by what its program steps do (the operators' own vertices; the glue
PopLibs builds around them: rearrangements, transposes, reductions, casts; the
exchanges; the syncs). Prints only; asserts nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_models import CASES  # noqa: E402

TERMS = {"amp_cycles": "AMP", "exchange_cycles": "exchange inside operators",
         "vector_cycles": "vector work", "sync_cycles": "compute sets' syncs"}
ROLES = {"vertex_cycles": "the operators' own vertices",
         "glue_cycles": "glue: rearrangements, transposes, reductions, casts",
         "exchange_cycles": "exchange phases", "sync_cycles": "syncs"}


def split(operators, columns: dict, compute_share: float) -> list[tuple[str, float]]:
    """The compute's share of the step split over ``columns`` of the operator table,
    each operator weighted by the runs of its pass in a step."""
    weighted = {column: (operators[column] * operators["runs_per_step"]).sum()
                for column in columns}
    cycles = sum(weighted.values())
    return [(name, compute_share * weighted[column] / cycles)
            for column, name in columns.items()]


def breakdown(training) -> list[tuple[str, float]]:
    """(part, share of the step) for the mean IPU, the compute split by unit."""
    timeline = training.timeline
    parts = timeline.step_time_by_ipu().mean()
    shares = parts / parts.sum()
    rows = [(f"compute: {name}", share) for name, share in
            split(timeline.operator_shares(), TERMS, shares["compute"])]
    names = {"exchange": "IPU-Links (copies, all-reduce)", "streaming": "streaming memory",
             "host_io": "host I/O (stream copies)", "sync_wait": "sync wait",
             "pipeline_bubble": "pipeline bubble", "host_round_trip": "host side of calls",
             "idle": "idle"}
    return rows + [(label, shares[part]) for part, label in names.items() if shares[part] > 0]


def main() -> None:
    for key in CASES:
        name, make = CASES[key]
        wrap, batch, _ = make()
        training = wrap()
        training(*batch)
        step_ms = training.timeline.duration_ps / training.timeline.steps / 1e9
        print(f"\n{name} on a Bow Pod16, one step of {step_ms:,.1f} ms: "
              f"{training.timeline.throughput():,.0f} items/s simulated")
        for part, share in breakdown(training):
            print(f"  {part:<56}{share:>7.1%}")
        compute = training.timeline.step_time_by_ipu().mean()
        print("  the compute by what its program steps do:")
        for part, share in split(training.timeline.operator_shares(), ROLES,
                                 compute["compute"] / compute.sum()):
            print(f"    {part:<54}{share:>7.1%}")


if __name__ == "__main__":
    main()
