"""What the figure modules read of a timeline, as a protocol.

:class:`~ipusim.analysis.timeline.Timeline` is the facade: each of its figures is
computed once, in a module of its own (the headline figures, the step's time by
IPU, the pipeline's phases, the bottleneck, the graph profile), which reads the
timeline it is handed. Those modules name what they read here, a
:class:`typing.Protocol` that :class:`Timeline` satisfies, instead of importing the
facade that imports them: the layers stay a one-way graph, type hints included.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from ipusim.cost.work import Work
    from ipusim.hardware import SystemSpec
    from ipusim.plan.engine_plan import EnginePlan
    from ipusim.plan.run_config import RunConfig


class TimelineView(Protocol):
    """A simulation's event table, what it simulated, and the figures read off it."""

    events: pd.DataFrame
    work: Work
    run: RunConfig
    system: SystemSpec
    steps: int
    instance: int
    plan: EnginePlan

    @property
    def num_ipus(self) -> int: ...

    @property
    def items(self) -> int: ...

    @property
    def duration_ps(self) -> int: ...

    def throughput(self) -> float: ...

    def per_ipu(self) -> pd.DataFrame: ...

    def bubble_fraction(self) -> float: ...

    def latency_ps(self) -> float: ...

    def figures(self) -> dict[str, float]: ...

    def stage_times_us(self) -> dict[int, float]: ...

    def to_cycles(self, ps: float) -> int: ...

    def memory_per_ipu(self) -> pd.DataFrame: ...

    def operator_breakdown(self) -> pd.DataFrame: ...
