"""A simulated step as Poplar's program steps: what a profile's execution trace lists.

Poplar runs a compiled program as a sequence of program steps: ``OnTileExecute``
(one compute set on the tiles), ``DoExchange`` (an exchange), ``Sync``, and the
stream copies to and from the host (``StreamCopyBegin`` / ``Mid`` / ``End``).
PopVision's execution trace and libpva's ``report.execution.steps`` list them
with their cycles on each IPU.

This module reads one step (call) of replica 0 off the event table and lists it
that way: each compute event as its operators' own program steps, as the operator
model prices them (:func:`operator_program_steps`), each host transfer as
a stream copy, each inter-IPU copy or all-reduce as an exchange and each sync
wait as a sync. The host's per-call overhead (``host_call``) runs on no IPU and
the I/O tiles' copies overlap the compute tiles' steps, so neither is a step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd

from ipusim.engine.event_kinds import (
    ALL_REDUCE,
    COMPUTE_KINDS,
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    IPU_COPY,
    STREAM_IN,
    STREAM_OUT,
    SYNC_WAIT,
)

if TYPE_CHECKING:
    from ipusim.analysis.timeline_view import TimelineView

# Program kinds, by libpva's names for them.
ON_TILE_EXECUTE, DO_EXCHANGE, SYNC = "OnTileExecute", "DoExchange", "Sync"
SEQUENCE, REPEAT, CALL = "Sequence", "Repeat", "Call"
STREAM_COPY_BEGIN, STREAM_COPY_MID, STREAM_COPY_END = (
    "StreamCopyBegin", "StreamCopyMid", "StreamCopyEnd")
STREAM_COPY_KINDS = {HOST_TO_DEVICE, DEVICE_TO_HOST, STREAM_IN, STREAM_OUT}
EXCHANGE_KINDS = {IPU_COPY, ALL_REDUCE}


class ProgramStep(NamedTuple):
    """One program step on one IPU.

    ``kind``: one of the program kinds above; ``name``: the program's name, its
    debug path (``stage/pass/operator/compute set``); ``cycles``: clock cycles on
    ``ipu``; ``vertex``: for an ``OnTileExecute``, the kind of work its compute set's
    vertex does (the operator model's kernel kind, ``matmul``, ``elementwise``...);
    ``operation``: the operator run the step belongs to, its debug path (empty for
    transfers and syncs); ``op``: that operator's framework name (``aten::addmm``);
    ``stage`` and ``phase``: the model stage (-1: none) and pass (``forward``...) or
    event kind the step comes from; ``micro_batch``: -1 where the event has none.
    """

    kind: str
    name: str
    cycles: int
    ipu: int = 0
    vertex: str = ""
    operation: str = ""
    op: str = ""
    stage: int = -1
    phase: str = ""
    micro_batch: int = -1


def operator_program_steps(name: str, vertex: str,
                           steps: tuple[tuple[str, str, str, float], ...]) -> list[ProgramStep]:
    """The program steps of one run of an operator: the steps the operator model
    prices it as (:class:`~ipusim.cost.program.OperatorCycles`, listed by the operator
    breakdown as (program, step name, role, cycles) for this one run), each named by
    the run's debug path ``name`` and its own (``stage/pass/op/n/Convolve``), with
    whole cycles that add up to the run's total rounded (each step's rounding carried
    into the next); an ``OnTileExecute`` keeps ``vertex``, the kind of work its
    operator does."""
    out, carried, done = [], 0.0, 0
    for program, step, _, cycles in steps:
        carried += cycles
        whole = round(carried) - done
        done += whole
        out.append(ProgramStep(program, f"{name}/{step}", whole,
                               vertex=vertex if program == ON_TILE_EXECUTE else "",
                               operation=name))
    return out


def operator_runs(timeline: TimelineView) -> list[tuple[int, str, str, dict]]:
    """Every run of each stage's operators for one micro-batch, in the order of the
    operator breakdown (:meth:`~ipusim.analysis.timeline.Timeline.operator_breakdown`):
    (stage index, pass, the run's name, its breakdown row). A run's name is its debug
    path, ``stage/pass/op/n``: the ``n``-th run of that operator in that pass."""
    return [(stage, phase, name, row) for _, stage, phase, name, row in _runs(timeline)]


def _runs(timeline: TimelineView) -> list[tuple[object, int, str, str, dict]]:
    """:func:`operator_runs`, each with its breakdown row's index first."""
    runs, seen = [], {}
    breakdown = timeline.operator_breakdown()
    for index, row in zip(breakdown.index, breakdown.to_dict("records")):
        op = row["op"] or row["kind"]
        for _ in range(int(row["count"])):
            key = (row["stage_index"], row["pass"], op)
            seen[key] = seen.get(key, -1) + 1
            runs.append((index, int(row["stage_index"]), row["pass"],
                         f"{row['stage']}/{row['pass']}/{op}/{seen[key]}", row))
    return runs


class Source(NamedTuple):
    """Where the model made an operator: its module path (``encoder.layer.3.attention``;
    empty for the model's own code) and the file and line of the user's code."""

    module: str
    file: str
    line: int


def operator_sources(timeline: TimelineView,
                     contexts: dict[str, list[dict]]) -> dict[object, list[Source]]:
    """For each row of the operator breakdown (by its index, which the operator shares
    keep), the distinct sources of its runs in the order they run, from the debug
    contexts a front end recorded for each run by its name (:func:`operator_runs`;
    a context ``{"module", "fileName", "lineNumber", ...}``, PopTorch's ``poptorch``
    layer). A row none of whose runs has a context is left out."""
    out: dict[object, list[Source]] = {}
    if not contexts:
        return out
    for index, _, _, name, _ in _runs(timeline):
        for context in contexts.get(name, ())[:1]:
            source = Source(context.get("module", ""), context.get("fileName", ""),
                            int(context.get("lineNumber", 0)))
            found = out.setdefault(index, [])
            if source not in found:
                found.append(source)
    return out


def _operators(timeline: TimelineView) -> dict[tuple[int, str], list[tuple[str, dict, tuple]]]:
    """Each (stage index, pass)'s operator runs for one micro-batch: their name, breakdown
    row and the program steps of one run (the row's steps cover all its runs)."""
    found: dict[tuple[int, str], list[tuple[str, dict, tuple]]] = {}
    for stage, phase, name, row in operator_runs(timeline):
        count = int(row["count"])
        once = tuple((program, step, role, cycles / count)
                     for program, step, role, cycles in row["steps"])
        found.setdefault((stage, phase), []).append((name, row, once))
    return found


def step_events(timeline: TimelineView, step: int | None = None) -> pd.DataFrame:
    """The events of one step (default: the last) of replica 0 that are program steps,
    in the order they start."""
    events = timeline.events
    chosen = int(events["step"].max()) if step is None else step
    kinds = set(COMPUTE_KINDS) | STREAM_COPY_KINDS | EXCHANGE_KINDS | {SYNC_WAIT}
    rows = events[(events["replica"] == 0) & (events["step"] == chosen)
                  & events["kind"].isin(kinds)]
    return rows.sort_values(["start_ps", "ipu"], kind="stable")


#: The most program steps a profile lists: Poplar's execution profile is bounded too
#: (``autoReport.executionProfileProgramRunCount``); a step of thousands of micro-batches
#: would otherwise list tens of millions. The events are listed whole, in order, until
#: the next would pass it.
MAX_PROGRAM_STEPS = 200_000


class Program(NamedTuple):
    """A program the steps run: its kind, name, the vertex of its compute set, the operator
    run it belongs to (``operation``, with its framework name ``op``), and the model stage
    and pass (or event kind, ``phase``) of the event it comes from."""

    kind: str
    name: str
    vertex: str
    operation: str
    op: str
    stage: int
    phase: str


class StepTable(NamedTuple):
    """The program steps of a step as columns: ``programs`` (each distinct program once) and,
    one entry a step, its ``program`` (an index into ``programs``), ``ipu``, ``cycles``,
    ``stage``, ``phase`` (an index into ``phases``) and ``micro_batch`` (-1: none);
    ``events_listed`` of the step's ``events_total`` events (all unless
    :data:`MAX_PROGRAM_STEPS` cut the list)."""

    programs: list[Program]
    phases: tuple[str, ...]
    program: np.ndarray
    ipu: np.ndarray
    cycles: np.ndarray
    stage: np.ndarray
    phase: np.ndarray
    micro_batch: np.ndarray
    events_listed: int
    events_total: int

    def __len__(self) -> int:
        return len(self.program)

    def step(self, index: int) -> ProgramStep:
        """Step ``index`` as one :class:`ProgramStep`."""
        p = self.programs[int(self.program[index])]
        return ProgramStep(p.kind, p.name, int(self.cycles[index]), int(self.ipu[index]),
                           p.vertex, p.operation, p.op, int(self.stage[index]),
                           self.phases[int(self.phase[index])], int(self.micro_batch[index]))


def _event_steps(kind: str, label: str, ipu: int, cycles: int) -> list[ProgramStep]:
    """The steps of an event that lists no operators: a stream copy, an exchange, a sync, or
    a pass priced by the roofline."""
    if kind in COMPUTE_KINDS:
        return [ProgramStep(ON_TILE_EXECUTE, f"{label}/{kind}", cycles, ipu, vertex=kind)]
    if kind in STREAM_COPY_KINDS:
        name = f"{label}/{kind}"
        return [ProgramStep(STREAM_COPY_BEGIN, f"{name}/begin", 0, ipu),
                ProgramStep(STREAM_COPY_MID, f"{name}/mid", cycles, ipu),
                ProgramStep(STREAM_COPY_END, f"{name}/end", 0, ipu)]
    if kind in EXCHANGE_KINDS:
        return [ProgramStep(DO_EXCHANGE, f"{label}/{kind}", cycles, ipu)]
    return [ProgramStep(SYNC, f"ipu{ipu}/{kind}", cycles, ipu)]


def program_steps(timeline: TimelineView, step: int | None = None,
                  limit: int = MAX_PROGRAM_STEPS) -> StepTable:
    """One step (default: the last) of replica 0 as Poplar's program steps, in order, at
    most ``limit`` of them (whole events).

    A compute event whose pass lists its operators is their steps
    (:func:`operator_program_steps`, the same for every micro-batch); one priced by the
    roofline (no operators) is one ``OnTileExecute`` with the event's cycles. A stream
    copy's cycles are on its ``StreamCopyMid``: ipusim does not split a copy, so its
    ``Begin`` and ``End`` have 0.
    """
    programs: list[Program] = []
    ids: dict[tuple[str, str], int] = {}

    def registered(part: ProgramStep, stage: int, phase: str) -> int:
        key = (part.kind, part.name)
        if key not in ids:
            ids[key] = len(programs)
            programs.append(Program(part.kind, part.name, part.vertex, part.operation, part.op,
                                    stage, phase))
        return ids[key]

    templates = {}
    for (stage, phase), listed in _operators(timeline).items():
        parts = [part._replace(op=row["op"] or row["kind"]) for name, row, price in listed
                 for part in operator_program_steps(name, row["kind"], price)]
        templates[(stage, phase)] = (
            np.array([registered(part, stage, phase) for part in parts], dtype=np.int64),
            np.array([part.cycles for part in parts], dtype=np.int64))
    stages = timeline.plan.stages
    events = step_events(timeline, step)
    phases = tuple(dict.fromkeys(str(kind) for kind in events["kind"]))
    chunks, scalars, count = [], [], 0
    for event in events.itertuples(index=False):
        kind, ipu, stage = str(event.kind), int(event.ipu), int(event.stage)
        template = templates.get((stage, kind)) if kind in COMPUTE_KINDS else None
        if template is None:
            label = stages[stage].name if 0 <= stage < len(stages) else f"ipu{ipu}"
            parts = _event_steps(kind, label, ipu,
                                 timeline.to_cycles(event.end_ps - event.start_ps))
            template = (np.array([registered(p, stage, kind) for p in parts], dtype=np.int64),
                        np.array([p.cycles for p in parts], dtype=np.int64))
        if count and count + len(template[0]) > limit:
            break
        chunks.append(template)
        scalars.append((len(template[0]), ipu, stage, phases.index(kind),
                        int(event.micro_batch)))
        count += len(template[0])
    lengths, ipus, stage_of, phase_of, batches = (np.array(column, dtype=np.int64) for column in
                                                  zip(*scalars)) if scalars else \
        (np.zeros(0, dtype=np.int64),) * 5
    joined = (np.concatenate([c[0] for c in chunks]) if chunks else np.zeros(0, np.int64),
              np.concatenate([c[1] for c in chunks]) if chunks else np.zeros(0, np.int64))
    return StepTable(programs, phases, joined[0], np.repeat(ipus, lengths), joined[1],
                     np.repeat(stage_of, lengths), np.repeat(phase_of, lengths),
                     np.repeat(batches, lengths), len(scalars), len(events))


class ControlProgram(NamedTuple):
    """A program that runs others: a ``Sequence`` of its ``children`` in order, a ``Repeat``
    of its one child ``count`` times, or a ``Call`` of its one child (a pass's body). Its
    children are program ids: the step table's programs first, then the control programs
    in the order :func:`program_tree` lists them."""

    kind: str
    name: str
    children: tuple[int, ...]
    count: int = 1


#: The longest run of programs :func:`program_tree` looks for repeats of, and the most
#: program runs it looks through (a longer step is listed as one sequence of them).
MAX_REPEAT_BODY, MAX_TREE_UNITS = 64, 20_000


def _repeats(units: list) -> list:
    """``units`` with each run of a sequence repeated back to back as one
    ``("repeat", count, body)``, the run covering most units first, from the start on.
    A body starts again where its first unit does, so only those periods are tried."""
    out, i, n = [], 0, len(units)
    seen: dict = {}
    following = [0] * n  # the next position of the same unit (n: none)
    for position in range(n - 1, -1, -1):
        following[position] = seen.get(units[position], n)
        seen[units[position]] = position
    while i < n:
        best = (1, 1, 1)  # (units covered, period, count)
        j = following[i]
        while j < n and j - i <= MAX_REPEAT_BODY and 2 * (j - i) <= n - i:
            period = j - i
            body, count = units[i:j], 1
            while units[i + count * period:i + (count + 1) * period] == body:
                count += 1
            if count > 1 and count * period > best[0]:
                best = (count * period, period, count)
            j = following[j]
        covered, period, count = best
        if covered > 1:
            out.append(("repeat", count, tuple(_repeats(units[i:i + period]))))
            i += covered
        else:
            out.append(units[i])
            i += 1
    return out


def program_tree(steps: StepTable) -> list[ControlProgram]:
    """The control programs over ``steps``' programs, as the step ran them: each model
    stage's pass (and each transfer kind of a stage) a ``Sequence`` of its programs in
    the order they first run (``stage{i}/{pass}``); each run of a compute pass a ``Call``
    of that body, the same body for every micro-batch, as Poplar calls a function;
    every run of programs repeated back to back in the step (a micro-batch's passes under
    gradient accumulation or device iterations, then the accumulation's weight update
    under device iterations) a ``Repeat`` of a ``Sequence`` of it; and last the step
    itself, the ``Sequence`` ``step`` of all of these, the root. Read off the order the
    simulated step ran its program steps, so a pipeline's interleaved micro-batches
    repeat only where their steps do."""
    base = len(steps.programs)
    tree: list[ControlProgram] = []

    def add(program: ControlProgram) -> int:
        tree.append(program)
        return base + len(tree) - 1

    bodies: dict[tuple[int, str], list[int]] = {}
    for index, p in enumerate(steps.programs):
        bodies.setdefault((p.stage, p.phase), []).append(index)
    body_ids = {key: add(ControlProgram(SEQUENCE, f"stage{key[0]}/{key[1]}" if key[0] >= 0
                                        else key[1], tuple(members)))
                for key, members in bodies.items()}
    calls: dict[tuple[int, str], int] = {}
    in_pass = np.array([bool(p.operation) or (p.kind == ON_TILE_EXECUTE and p.stage >= 0)
                        for p in steps.programs], dtype=bool)
    units: list[int] = []
    if len(steps):
        program = steps.program
        passing = in_pass[program]
        changed = np.ones(len(steps), dtype=bool)  # a new run of a pass starts here
        same = np.ones(len(steps) - 1, dtype=bool)
        for column in (steps.stage, steps.phase, steps.micro_batch, steps.ipu):
            same &= column[1:] == column[:-1]
        changed[1:] = ~(same & passing[:-1])
        keep = ~passing | changed
        for index in np.flatnonzero(keep).tolist():
            p = steps.programs[int(program[index])]
            if not passing[index]:
                units.append(int(program[index]))
                continue
            key = (p.stage, p.phase)
            if key not in calls:
                calls[key] = add(ControlProgram(CALL, f"call {tree[body_ids[key] - base].name}",
                                                (body_ids[key],)))
            units.append(calls[key])
    items: list = units
    if len(units) <= MAX_TREE_UNITS:
        while True:  # repeats of repeats: device iterations of accumulated micro-batches
            again = _repeats(items)
            if again == items:
                break
            items = again

    def materialise(item) -> int:
        if not isinstance(item, tuple):
            return item
        _, count, body = item
        children = tuple(materialise(child) for child in body)
        inner = children[0] if len(children) == 1 else add(
            ControlProgram(SEQUENCE, f"repeat body ({len(children)} programs)", children))
        return add(ControlProgram(REPEAT, f"repeat {count}", (inner,), count))

    top = tuple(materialise(item) for item in items)
    add(ControlProgram(SEQUENCE, "step", top))
    return tree


#: The most boxes :func:`execution_trace` gives: a longer step's runs are cut there.
MAX_TRACE_BOXES = 4_000


def execution_trace(steps: StepTable, limit: int = MAX_TRACE_BOXES) -> pd.DataFrame:
    """The program steps laid out on each IPU, as PopVision's execution trace draws them:
    each IPU's steps end to end in their order, from cycle 0 (a step runs on one IPU; the
    IPUs' clocks are not lined up across their syncs). One row a box, ``ipu``, ``start``
    and ``cycles`` (clock cycles), ``kind`` (the program kind that takes most of the box's
    cycles), ``name`` (the operator run, or the program) and ``steps`` (how many it
    holds): a box is one program step, or, where the step has more than ``limit`` of
    them, each IPU's run of consecutive steps of one operator run or program. At most
    ``limit`` boxes, the first ones."""
    columns = ["ipu", "start", "cycles", "kind", "name", "steps"]
    if not len(steps):
        return pd.DataFrame(columns=columns)
    ipu = steps.ipu
    cycles = steps.cycles.astype(np.int64)
    start = np.zeros(len(steps), dtype=np.int64)
    for one in np.unique(ipu):
        on = ipu == one
        start[on] = np.cumsum(cycles[on]) - cycles[on]
    programs = steps.programs
    kind_codes, kind_names = pd.factorize(pd.Series([p.kind for p in programs], dtype=object))
    name_codes, name_names = pd.factorize(pd.Series([p.operation or p.name for p in programs],
                                                    dtype=object))
    kind, name = kind_codes[steps.program], name_codes[steps.program]
    if len(steps) <= limit:
        return pd.DataFrame({"ipu": ipu, "start": start, "cycles": cycles,
                             "kind": np.asarray(kind_names, dtype=object)[kind],
                             "name": np.asarray(name_names, dtype=object)[name],
                             "steps": 1})[columns]
    # A run: consecutive steps of one IPU with one name (an operator run's steps share it).
    order = np.lexsort((start, ipu))
    ipu, start, cycles, kind, name = (a[order] for a in (ipu, start, cycles, kind, name))
    new = np.ones(len(order), dtype=bool)
    new[1:] = (ipu[1:] != ipu[:-1]) | (name[1:] != name[:-1])
    first = np.flatnonzero(new)
    run = np.cumsum(new) - 1
    kinds = len(kind_names)
    by_kind = np.bincount(run * kinds + kind, weights=cycles,
                          minlength=len(first) * kinds).reshape(len(first), kinds)
    runs = pd.DataFrame({"ipu": ipu[first], "start": start[first],
                         "cycles": np.add.reduceat(cycles, first),
                         "kind": np.asarray(kind_names, dtype=object)[by_kind.argmax(axis=1)],
                         "name": np.asarray(name_names, dtype=object)[name[first]],
                         "steps": np.diff(np.append(first, len(order)))})
    runs = runs.sort_values(["start", "ipu"], kind="stable").head(limit)
    return runs[columns].reset_index(drop=True)
