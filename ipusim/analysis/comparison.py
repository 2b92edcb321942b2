"""Two runs side by side: what got faster, and why, in numbers.

:func:`compare` reads the figures each run's :class:`~ipusim.Timeline` computes
and puts them against each other in a :class:`Comparison`: throughput and
step time with their ratios (B vs A), the step-time difference split into the
parts of :mod:`ipusim.analysis.step_time` (which add up to it exactly: the
waterfall), the same per IPU, the settings that differ (by PopTorch's words
where the profile records them) and the operators whose cycles differ.
Figures only: :mod:`ipusim.report.compare` reads the runs' reports and puts that
one object into words, as text and as a page.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ipusim.analysis.codec import encode
from ipusim.analysis.step_time import STEP_PARTS
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import PS_PER_US
from ipusim.plan.setting_names import SettingNames

# The columns that make two operators the same one: where, in which pass, which and how big.
_OPERATOR_KEY = ["stage", "pass", "kind", "width", "m", "k", "n", "groups", "elements"]


@dataclass(frozen=True)
class ComparedRun:
    """One side of a comparison: a run's timeline, the options its script set (under
    PopTorch's names, as its profile records them) and how its reports name settings."""

    name: str
    timeline: Timeline
    options: dict
    names: SettingNames = SettingNames()
    path: Path | None = None


@dataclass(frozen=True)
class RunFigures:
    """The headline figures of one side."""

    name: str
    items_per_s: float
    step_time_ps: float   # mean time of a call: the span over the steps
    steps: int
    items_per_step: int
    num_ipus: int
    replicas: int
    ipus_per_replica: int
    ipu: str


@dataclass(frozen=True)
class Comparison:
    """Run B against run A: every number the summary and the page show.

    ``parts``: per part of the step time (index: its name; columns short, label, colour,
    a_us, b_us, delta_us), the mean over each run's IPUs of its time per step: each
    column adds up to the step time, so ``delta_us`` adds up to the step-time
    difference. ``per_ipu``: the same per IPU (columns ipu, part, a_us, b_us,
    delta_us), matched as ``per_ipu_match`` says: ``"ipu"``, IPU by IPU, where the
    runs have as many IPUs, as many per replica (``ipu``: the IPU); ``"place"``, by an
    IPU's place in its replica, each the mean over its run's replicas, where only
    their replicas span as many IPUs (``ipu``: the place); ``"mean"``, the mean IPU of
    each run, where the IPUs do not correspond (``ipu``: 0). ``options``: the
    settings that differ (columns setting, a, b). ``operators``: the operators of
    either run (columns stage, pass, kind, and their size: width, m, k, n, groups,
    elements; then a_count, b_count, a_us, b_us, delta_us, status; per micro-batch),
    None when neither records operators.
    """

    a: RunFigures
    b: RunFigures
    parts: pd.DataFrame
    per_ipu: pd.DataFrame
    per_ipu_match: str
    options: pd.DataFrame
    operators: pd.DataFrame | None

    @property
    def throughput_ratio(self) -> float:
        """B's throughput over A's."""
        return _ratio(self.b.items_per_s, self.a.items_per_s)

    @property
    def step_time_ratio(self) -> float:
        """B's step time over A's."""
        return _ratio(self.b.step_time_ps, self.a.step_time_ps)

    @property
    def items_per_step_ratio(self) -> float:
        """B's items per step over A's."""
        return _ratio(self.b.items_per_step, self.a.items_per_step)

    @property
    def step_time_delta_us(self) -> float:
        return (self.b.step_time_ps - self.a.step_time_ps) / PS_PER_US

    def largest_parts(self, count: int = 3, share: float = 0.25) -> pd.DataFrame:
        """The parts whose time per step changed most, largest first: at most ``count``,
        each changed by at least ``share`` of the largest change (none if none changed)."""
        size = self.parts["delta_us"].abs()
        changed = size[(size > 1e-9) & (size >= share * size.max())]
        return self.parts.loc[changed.sort_values(ascending=False).index[:count]]


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.inf


def run_names(a: ComparedRun, b: ComparedRun) -> tuple[str, str]:
    """The two runs' names, told apart by their parent folder where they are the same."""
    if a.name != b.name or a.path is None or b.path is None:
        return a.name, b.name
    return (f"{a.path.resolve().parent.name}/{a.name}", f"{b.path.resolve().parent.name}/"
            f"{b.name}")


def compare(a: ComparedRun, b: ComparedRun) -> Comparison:
    """Run ``b`` against run ``a``: the figures both the summary and the page show."""
    name_a, name_b = run_names(a, b)
    figures_a, figures_b = _figures(name_a, a.timeline), _figures(name_b, b.timeline)
    table_a, table_b = a.timeline.step_time_by_ipu(), b.timeline.step_time_by_ipu()
    means_a, means_b = _per_step(table_a, a.timeline.steps), _per_step(table_b, b.timeline.steps)
    shown = [part for part in STEP_PARTS
             if not part.optional or means_a[part.name] or means_b[part.name]]
    parts = pd.DataFrame({
        "short": [part.short for part in shown],
        "label": [part.label for part in shown],
        "colour": [part.colour for part in shown],
        "a_us": [means_a[part.name] / PS_PER_US for part in shown],
        "b_us": [means_b[part.name] / PS_PER_US for part in shown],
    }, index=pd.Index([part.name for part in shown], name="part"))
    parts["delta_us"] = parts["b_us"] - parts["a_us"]
    per_ipu, match = _per_ipu(a.timeline, b.timeline, parts, (table_a, table_b))
    return Comparison(figures_a, figures_b, parts, per_ipu, match, _options(a, b),
                      _operators(a.timeline, b.timeline))


def _figures(name: str, timeline: Timeline) -> RunFigures:
    plan = timeline.plan
    return RunFigures(name, timeline.throughput(), timeline.duration_ps / max(timeline.steps, 1),
                      timeline.steps, plan.items_per_call, timeline.num_ipus,
                      timeline.run.replicas, plan.ipus_per_replica, timeline.system.ipu.name)


def _per_step(table: pd.DataFrame, steps: int) -> pd.Series:
    """Each part's picoseconds per step, a mean over a run's IPUs (``table``: its
    :meth:`~ipusim.Timeline.step_time_by_ipu`): adds up to the step time, span / steps."""
    return table.sum() / (max(len(table), 1) * max(steps, 1))


def _per_ipu(a: Timeline, b: Timeline, parts: pd.DataFrame,
             tables: tuple[pd.DataFrame, pd.DataFrame]) -> tuple[pd.DataFrame, str]:
    """Each IPU's parts per step in both runs, matched IPU by IPU where the runs have as
    many, placed alike, else by an IPU's place in its replica where their replicas span
    as many IPUs, else as the mean IPU; and which of the three (``"ipu"``, ``"place"``,
    ``"mean"``). ``tables``: each run's :meth:`~ipusim.Timeline.step_time_by_ipu`."""
    per_a, per_b = a.plan.ipus_per_replica, b.plan.ipus_per_replica
    if a.num_ipus == b.num_ipus and per_a == per_b:
        matched = "ipu"
    elif per_a == per_b:
        matched = "place"
    else:
        matched = "mean"

    def table(timeline: Timeline, by_ipu: pd.DataFrame, per: int) -> pd.DataFrame:
        times = by_ipu[list(parts.index)] / (max(timeline.steps, 1) * PS_PER_US)
        ipu = times.index.to_numpy()
        key = {"ipu": ipu, "place": ipu % per, "mean": ipu * 0}[matched]
        return times.groupby(key).mean()

    side_a, side_b = table(a, tables[0], per_a), table(b, tables[1], per_b)
    rows = []
    for index in sorted(set(side_a.index) | set(side_b.index)):
        for part in parts.index:
            value_a = side_a.at[index, part] if index in side_a.index else math.nan
            value_b = side_b.at[index, part] if index in side_b.index else math.nan
            rows.append((int(index), part, value_a, value_b, value_b - value_a))
    return pd.DataFrame(rows, columns=["ipu", "part", "a_us", "b_us", "delta_us"]), matched


def _flat(prefix: str, value: object) -> dict[str, object]:
    """A config's encoded fields as ``prefix.field`` → value, nested ones flattened."""
    if isinstance(value, dict):
        flat: dict[str, object] = {}
        for name, item in value.items():
            flat.update(_flat(f"{prefix}.{name}" if prefix else name, item))
        return flat
    return {prefix: value}


def _options(a: ComparedRun, b: ComparedRun) -> pd.DataFrame:
    """The settings that differ: the options each script set (PopTorch's names), then
    the run's settings they make (by PopTorch's call where the profile names one, if
    no option above says it already), the simulated system, the model and the cost
    model."""
    rows: list[tuple[str, object, object]] = []
    missing = "(default)"
    for key in dict.fromkeys([*a.options, *b.options]):
        value_a, value_b = a.options.get(key, missing), b.options.get(key, missing)
        if value_a != value_b:
            rows.append((key, value_a, value_b))
    said = {row[0] for row in rows}
    timeline_a, timeline_b = a.timeline, b.timeline
    run_a, run_b = _flat("", encode(timeline_a.run)), _flat("", encode(timeline_b.run))
    for field in dict.fromkeys([*run_a, *run_b]):
        if run_a.get(field) == run_b.get(field):
            continue
        call = b.names.column(field) if "." not in field else field
        if call in said:
            continue
        rows.append((field if call == field else f"{call} ({field})", run_a.get(field, missing),
                     run_b.get(field, missing)))
    work_a, work_b = timeline_a.work, timeline_b.work
    for name, value_a, value_b in (
            ("model: micro-batch size", work_a.micro_batch_size, work_b.micro_batch_size),
            ("model: stages", len(work_a.stages), len(work_b.stages)),
            ("model: IPUs per replica", timeline_a.plan.ipus_per_replica,
             timeline_b.plan.ipus_per_replica)):
        if value_a != value_b:
            rows.append((name, value_a, value_b))
    for prefix, config_a, config_b in (
            ("system", timeline_a.system, timeline_b.system),
            ("cost model", timeline_a.plan.cost, timeline_b.plan.cost)):
        flat_a, flat_b = _flat("", encode(config_a)), _flat("", encode(config_b))
        for field in dict.fromkeys([*flat_a, *flat_b]):
            if flat_a.get(field) != flat_b.get(field):
                rows.append((f"{prefix}: {field}", flat_a.get(field, missing),
                             flat_b.get(field, missing)))
    return pd.DataFrame(rows, columns=["setting", "a", "b"])


def _operators(a: Timeline, b: Timeline) -> pd.DataFrame | None:
    """Each operator of either run, matched by stage, pass, kind and shape, with its
    time per micro-batch in each, of the passes each run runs (None when neither run
    records operators)."""
    tables = []
    for timeline in (a, b):
        table = timeline.operator_shares()  # the passes the timeline runs
        tables.append(table.groupby(_OPERATOR_KEY, sort=False, as_index=False)[
            ["count", "time_us"]].sum())
    if all(table.empty for table in tables):
        return None
    merged = tables[0].merge(tables[1], on=_OPERATOR_KEY, how="outer", sort=False,
                             suffixes=("_a", "_b"))
    merged = merged.rename(columns={"count_a": "a_count", "count_b": "b_count",
                                    "time_us_a": "a_us", "time_us_b": "b_us"})
    merged["delta_us"] = merged["b_us"].fillna(0.0) - merged["a_us"].fillna(0.0)
    merged["status"] = "same"
    merged.loc[merged["delta_us"].abs() > 1e-9, "status"] = "changed"
    merged.loc[merged["a_us"].isna(), "status"] = "only in B"
    merged.loc[merged["b_us"].isna(), "status"] = "only in A"
    return merged[[*_OPERATOR_KEY, "a_count", "b_count", "a_us", "b_us", "delta_us", "status"]]
