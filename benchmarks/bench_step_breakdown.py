"""Where a real model's training step goes on a simulated Bow Pod16, timing-only.

ResNet-50 and BERT-Large phase 1 with Graphcore's options (the cases of
``benchmarks/bench_real_models.py``), one step each. Prints the throughput, then
the mean IPU's step cut into the parts of ``Timeline.step_time_by_ipu`` (they add
up to the step), the compute among them split by where its cycles go
(``Timeline.operator_shares``: the AMP, the exchange inside operators, the
compute sets' syncs and vector work, each operator weighted by the times its
pass runs in a step). Prints only; asserts nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_models import CASES  # noqa: E402

TERMS = {"amp_cycles": "AMP", "exchange_cycles": "exchange inside operators",
         "vector_cycles": "vector work", "sync_cycles": "compute sets' syncs"}


def breakdown(training) -> list[tuple[str, float]]:
    """(part, share of the step) for the mean IPU, the compute split by term."""
    timeline = training.timeline
    parts = timeline.step_time_by_ipu().mean()
    shares = parts / parts.sum()
    operators = timeline.operator_shares()
    weighted = {term: (operators[term] * operators["runs_per_step"]).sum() for term in TERMS}
    cycles = sum(weighted.values())
    rows = [(f"compute: {name}", shares["compute"] * weighted[term] / cycles)
            for term, name in TERMS.items()]
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
            print(f"  {part:<36}{share:>7.1%}")


if __name__ == "__main__":
    main()
