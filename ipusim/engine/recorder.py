"""The event record: typed columns per IPU while simulating, a DataFrame at the end.

Columns of :meth:`Recorder.to_frame` (times in integer picoseconds):

=============  =============================================================
start_ps       when the event began
end_ps         when it ended
ipu            physical IPU index in the system
replica        replica the IPU belongs to
instance       host process (poprun instance) that owns the engine
kind           one of :data:`KINDS`
stage          model stage (after merging), -1 when not tied to one
micro_batch    micro-batch index within the step, -1 when not tied to one
step           call to the model (0, 1, ...)
cycle          pipeline cycle within the device iteration, -1 outside pipelines
bytes          bytes moved (copies) or touched (compute)
flops          floating-point operations
=============  =============================================================

While simulating, a row costs 32 bytes: its start and end (two int64) and
four int32 (its label, micro-batch, step and cycle) in its IPU's typed
columns (:class:`Columns`). A label is the row's (kind, stage, bytes, flops)
interned as a small int in :data:`LABELS`: a model has a handful of them.
"""
from __future__ import annotations

from array import array
from typing import NamedTuple

import numpy as np
import pandas as pd

from ipusim.engine.event_kinds import COMPUTE_KINDS, KINDS, SYNC_WAIT
from ipusim.engine.replicas import ipu_of, replica_of

__all__ = ["COLUMNS", "COMPUTE_KINDS", "KINDS", "LABELS", "PENDING_LAYOUT", "Recorder", "Row",
           "label"]


class Row(NamedTuple):
    """One recorded event, as :attr:`Recorder.rows` reads it back (the frame's columns
    without replica and instance, which the recorder derives)."""

    start_ps: int
    end_ps: int
    ipu: int
    kind: str
    stage: int
    micro_batch: int
    step: int
    pipeline_cycle: int
    bytes: float
    flops: float


COLUMNS = Row._fields
# The event DataFrame's columns, in order: a row's, with its replica and instance.
FRAME_COLUMNS = COLUMNS[:3] + ("replica", "instance") + COLUMNS[3:]
_KIND_CODE = {kind: code for code, kind in enumerate(KINDS)}
# A row while pending, as the system's hot path appends it: two int64 times, then
# int32 fields, the first of them the label of (kind, stage, bytes, flops).
PENDING_LAYOUT = ("start_ps", "end_ps", "label", "micro_batch", "step", "pipeline_cycle")
TIMES = 2
FIELDS = len(PENDING_LAYOUT) - TIMES  # int32 fields of a row: label, micro_batch, step, cycle
ROW_INTS = len(PENDING_LAYOUT)
# Where each part of a row sits in its packed block: times (int64) or fields (int32).
TIME = {name: i for i, name in enumerate(PENDING_LAYOUT[:TIMES])}
FIELD = {name: i for i, name in enumerate(PENDING_LAYOUT[TIMES:])}
ROW_BYTES = TIMES * 8 + FIELDS * 4
CHUNK = 4096  # rows an IPU keeps as plain ints before packing them
PENDING = CHUNK * ROW_INTS  # ints in a full pending list
_INT32 = np.iinfo(np.int32)


class Labels:
    """The (kind, stage, bytes, flops) of rows, interned as small ints.

    One table for the process, so that the schedule can label its
    instructions once and the system records the code; the table keeps a
    typed column per part for :meth:`Recorder.to_frame` to index.
    """

    def __init__(self) -> None:
        self._codes: dict[tuple, int] = {}
        self.kind, self.stage = array("b"), array("q")
        self.bytes, self.flops = array("d"), array("d")

    def __len__(self) -> int:
        return len(self.kind)

    def code(self, kind: str, stage: int = -1, nbytes: float = 0.0, flops: float = 0.0) -> int:
        """The label of rows of ``kind`` for ``stage`` moving ``nbytes`` and computing ``flops``."""
        key = (kind, stage, nbytes, flops)
        code = self._codes.get(key)
        if code is None:
            if kind not in _KIND_CODE:
                raise ValueError(f"event kind {kind!r} is not among {KINDS}")
            code = self._codes[key] = len(self.kind)
            self.kind.append(_KIND_CODE[kind])
            self.stage.append(stage)
            self.bytes.append(nbytes)
            self.flops.append(flops)
        return code


LABELS = Labels()
label = LABELS.code
SYNC_WAIT_LABEL = label(SYNC_WAIT)


class Columns:
    """One IPU's rows: the last few as plain ints, the rest packed into typed columns.

    The hot path appends a row as six ints in :data:`PENDING_LAYOUT` order with one
    ``list.extend`` (a tenth of
    the cost of appending to ``array.array`` one field at a time) and calls
    :meth:`pack` when :attr:`pending` holds :data:`CHUNK` rows; packing turns
    them into an int64 (start, end) block and an int32 (label, micro_batch,
    step, cycle) block in one numpy call. A replayed call's rows (see
    :mod:`ipusim.engine.step_replay`) wait as a reference to its template until
    they are read: the calls of a run are replayed at the cost of a list append.
    """

    __slots__ = ("pending", "times", "fields", "replays", "replayed_rows")

    def __init__(self) -> None:
        self.pending: list[int] = []           # rows in PENDING_LAYOUT order, one after another
        self.times: list[np.ndarray] = []      # (rows, TIMES) int64 blocks
        self.fields: list[np.ndarray] = []     # (rows, FIELDS) int32 blocks
        # Replayed calls not yet written into the blocks, oldest first: (times, fields,
        # shift, step), all older than the pending rows; and how many rows they hold.
        self.replays: list[tuple[np.ndarray, np.ndarray, int, int]] = []
        self.replayed_rows = 0

    def pack(self) -> None:
        """Move the replayed calls, then the pending rows, into the typed blocks."""
        if self.replays:
            self._pack_replays()
        if not self.pending:
            return
        block = np.array(self.pending, np.int64).reshape(-1, ROW_INTS)
        fields = block[:, TIMES:]
        if len(block) and (fields.max() > _INT32.max or fields.min() < _INT32.min):
            raise OverflowError(f"a micro-batch, step or cycle index beyond int32 "
                                f"({int(fields.max())}) cannot be recorded")
        self.times.append(block[:, :TIMES].copy())
        self.fields.append(fields.astype(np.int32))
        self.pending.clear()

    def _pack_replays(self) -> None:
        """Write the replayed calls into the typed blocks: the calls that replay one
        block (a call's template) in a row become one block, shifted and renumbered
        in one numpy pass each."""
        replays, self.replays, self.replayed_rows = self.replays, [], 0
        start = 0
        while start < len(replays):
            times, fields = replays[start][:2]
            end = start + 1
            while end < len(replays) and replays[end][0] is times and replays[end][1] is fields:
                end += 1
            shifts = np.array([shift for _, _, shift, _ in replays[start:end]], np.int64)
            steps = np.array([step for _, _, _, step in replays[start:end]], np.int32)
            count = end - start
            self.times.append((times[None] + shifts[:, None, None]).reshape(-1, TIMES))
            block = np.tile(fields, (count, 1))
            block[:, FIELD["step"]] = np.repeat(steps, len(fields))
            self.fields.append(block)
            start = end

    def append_shifted(self, times: np.ndarray, fields: np.ndarray, shift: int,
                       step: int) -> None:
        """Append packed rows again (a replayed call's), ``shift`` later and numbered
        ``step``: kept as they are until the rows are read (every reader packs first),
        so that replaying a call costs no array operation while the script runs.
        ``times`` and ``fields`` must not change afterwards."""
        if self.pending:  # the pending rows are older: they go first
            self.pack()
        self.replays.append((times, fields, shift, step))
        self.replayed_rows += len(times)

    def __len__(self) -> int:
        return (sum(len(block) for block in self.times) + self.replayed_rows
                + len(self.pending) // ROW_INTS)

    def tail(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(times, fields) of the last ``count`` rows, packed, gathered from the newest blocks."""
        self.pack()
        times, fields, left = [], [], count
        for block_times, block_fields in zip(reversed(self.times), reversed(self.fields)):
            if left <= 0:
                break
            take = min(left, len(block_times))
            times.append(block_times[len(block_times) - take:])
            fields.append(block_fields[len(block_fields) - take:])
            left -= take
        return (np.concatenate(times[::-1]) if times else np.empty((0, TIMES), np.int64),
                np.concatenate(fields[::-1]) if fields else np.empty((0, FIELDS), np.int32))

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, fields) of every row, packed."""
        self.pack()
        times = np.concatenate(self.times) if self.times else np.empty((0, TIMES), np.int64)
        fields = np.concatenate(self.fields) if self.fields else np.empty((0, FIELDS), np.int32)
        return times, fields


class Recorder:
    """Collects events into per-IPU :class:`Columns` and builds the DataFrame once."""

    def __init__(self) -> None:
        self._ipus: list[Columns] = []

    def columns(self, ipu: int) -> Columns:
        """``ipu``'s columns: the system's hot path appends to their ``pending`` list."""
        while len(self._ipus) <= ipu:
            self._ipus.append(Columns())
        return self._ipus[ipu]

    def record(self, start: int, end: int, ipu: int, kind: str, *, stage: int = -1,
               micro_batch: int = -1, step: int, pipeline_cycle: int = -1, nbytes: float = 0.0,
               flops: float = 0.0) -> None:
        """Record one event of ``kind`` on ``ipu`` from ``start`` to ``end`` (the readable
        way; the system's hot path appends labelled rows to :meth:`columns`)."""
        columns = self.columns(ipu)
        columns.pending.extend(  # in PENDING_LAYOUT order
            (start, end, label(kind, stage, nbytes, flops), micro_batch, step, pipeline_cycle))
        if len(columns.pending) >= PENDING:
            columns.pack()

    def record_row(self, row: Row) -> None:
        """Record a :class:`Row` (one read back from :attr:`rows`, say)."""
        self.record(row.start_ps, row.end_ps, row.ipu, row.kind, stage=row.stage,
                    micro_batch=row.micro_batch, step=row.step, pipeline_cycle=row.pipeline_cycle,
                    nbytes=row.bytes, flops=row.flops)

    def __len__(self) -> int:
        return sum(len(columns) for columns in self._ipus)

    def mark(self) -> tuple[int, ...]:
        """How many rows each IPU holds now: what :meth:`since` counts from."""
        return tuple(len(columns) for columns in self._ipus)

    def since(self, mark: tuple[int, ...]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Each IPU's (times, fields) recorded after ``mark``, for the IPUs that recorded any."""
        out = {}
        for ipu, columns in enumerate(self._ipus):
            count = len(columns) - (mark[ipu] if ipu < len(mark) else 0)
            if count:
                out[ipu] = columns.tail(count)
        return out

    def span_ps(self) -> int:
        """Simulated time from the first recorded start to the last recorded end: the
        event table's span (:func:`ipusim.analysis.metrics.span_ps`), read off the typed
        columns without building the table. A folded record has the span of the replicas
        it stands for, which ran exactly what it holds."""
        starts, ends = [], []
        for columns in self._ipus:
            columns.pack()
            for block in columns.times:
                if len(block):
                    starts.append(block[:, TIME["start_ps"]].min())
                    ends.append(block[:, TIME["end_ps"]].max())
        return int(max(ends) - min(starts)) if starts else 0

    @property
    def nbytes(self) -> int:
        """Bytes the rows take as typed columns (32 a row; the few pending rows counted so)."""
        return ROW_BYTES * len(self)

    @property
    def rows(self) -> list[Row]:
        """The rows, IPU by IPU, each in recording order.

        For reading a small record (tests, debugging); use :meth:`to_frame` for a large one.
        """
        out = []
        for ipu, columns in enumerate(self._ipus):
            times, fields = columns.packed()
            for (start, end), (code, micro_batch, step, pipeline_cycle) in zip(times.tolist(),
                                                                     fields.tolist()):
                out.append(Row(start, end, ipu, KINDS[LABELS.kind[code]], LABELS.stage[code],
                               micro_batch, step, pipeline_cycle, LABELS.bytes[code],
                               LABELS.flops[code]))
        return out

    def to_frame(self, ipus_per_replica: int | None = None, instance: int = 0,
                 copies: int = 1) -> pd.DataFrame:
        """The events as a DataFrame sorted by start time, then IPU, with replica and instance.

        ``ipus_per_replica`` numbers the replicas (:mod:`ipusim.engine.replicas`);
        without it the record is a single replica's. ``copies`` > 1 expands a
        folded record (see :mod:`ipusim.plan.folding`): the recorded IPUs are one
        replica's, and replica ``r`` ran exactly what they did on its IPUs. The
        record is sorted once and each column gathered from its typed array in one
        numpy pass: no Python object per row, and no copy of the record per replica.
        """
        if copies > 1 and ipus_per_replica is None:
            raise ValueError(f"a folded record needs its IPUs per replica to expand to {copies} "
                             "replicas: pass ipus_per_replica")
        if copies > 1 and len(self._ipus) > ipus_per_replica:
            raise ValueError(f"a folded record holds one replica's {ipus_per_replica} "
                             f"IPU(s), not {len(self._ipus)}")
        for columns in self._ipus:
            columns.pack()
        times = np.concatenate([t for c in self._ipus for t in c.times]
                               or [np.empty((0, TIMES), np.int64)])
        fields = np.concatenate([f for c in self._ipus for f in c.fields]
                                or [np.empty((0, FIELDS), np.int32)])
        ipu = np.repeat(np.arange(len(self._ipus), dtype=np.int64), [len(c) for c in self._ipus])
        order = _by_start_then_ipu(times[:, TIME["start_ps"]], ipu)
        if copies > 1 and len(order):
            order, replica = _expanded(order, times[order, TIME["start_ps"]], copies)
            replica = replica.astype(np.int64)
            ipus = ipu_of(replica, ipu[order], ipus_per_replica)
        else:
            ipus = ipu[order]
            replica = (np.zeros_like(ipus) if ipus_per_replica is None
                       else replica_of(ipus, ipus_per_replica))
        # Each column gathered, and each source dropped once nothing more is gathered from
        # it, so that the peak holds little more than the frame itself.
        out = {"start_ps": times[order, TIME["start_ps"]], "end_ps": times[order, TIME["end_ps"]],
               "ipu": ipus, "replica": replica}
        del times, ipu, ipus, replica
        codes = fields[order, FIELD["label"]]
        for name in ("micro_batch", "step", "pipeline_cycle"):
            out[name] = fields[order, FIELD[name]].astype(np.int64)
        del fields, order
        table = {name: np.frombuffer(getattr(LABELS, name), dtype)
                 for name, dtype in (("kind", np.int8), ("stage", np.int64),
                                     ("bytes", np.float64), ("flops", np.float64))}
        out["instance"] = np.full(len(codes), instance, np.int64)
        out["kind"] = pd.Categorical.from_codes(table["kind"][codes], categories=KINDS)
        for name in ("stage", "bytes", "flops"):
            out[name] = table[name][codes]
        del codes
        # copy=False: the columns stay apart, none copied into a block.
        return pd.DataFrame({name: out.pop(name) for name in FRAME_COLUMNS}, copy=False)


def _expanded(order: np.ndarray, starts: np.ndarray, copies: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, replica) of each row of a folded record's ``copies`` replicas, in start-then-IPU order.

    ``order`` sorts one replica's rows by start, then IPU; ``starts`` are their
    starts in that order. The rows that start together come once per replica,
    replica by replica (their IPUs, :func:`~ipusim.engine.replicas.ipu_of`, grow
    with ``r``):
    row ``k`` of such a group of ``size`` rows goes, in replica ``r``, to
    ``group_start * copies + r * size + k``.
    """
    count = len(order)
    first = np.flatnonzero(np.concatenate(([True], starts[1:] != starts[:-1])))
    sizes = np.diff(np.append(first, count))
    group = np.repeat(np.arange(len(first)), sizes)
    offset = np.arange(count) - first[group]
    base = first[group] * copies + offset
    position = base[:, None] + np.arange(copies)[None, :] * sizes[group][:, None]
    rows = np.empty(count * copies, np.int64)
    rows[position] = order[:, None]
    replica = np.empty(count * copies, np.int16 if copies < 2**15 else np.int64)
    replica[position] = np.arange(copies)[None, :]
    return rows, replica


def _by_start_then_ipu(start: np.ndarray, ipu: np.ndarray) -> np.ndarray:
    """The stable order by start time, then IPU.

    One stable sort of ``start * num_ipus + ipu`` (numpy's timsort, fast on
    the record's sorted runs) where that key cannot overflow; ``lexsort`` else.
    """
    if len(start) == 0:
        return np.arange(0)
    width = int(ipu.max()) + 1
    if int(start.min()) >= 0 and int(start.max()) < np.iinfo(np.int64).max // width:
        return np.argsort(start * width + ipu, kind="stable")
    return np.lexsort((ipu, start))
