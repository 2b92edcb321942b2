"""The event record: typed columns while simulating, the same DataFrame as ever at the end."""
import numpy as np
import pandas as pd
import pytest

from ipusim.engine.recorder import COLUMNS, KINDS, Recorder, Row

ROWS = [
    Row(5, 9, 1, "forward", stage=0, micro_batch=3, step=0,
        pipeline_cycle=2, bytes=10.0, flops=7.5),
    Row(0, 4, 0, "backward", stage=1, micro_batch=2, step=0,
        pipeline_cycle=1, bytes=20.0, flops=9.0),
    Row(5, 6, 0, "sync_wait", stage=-1, micro_batch=-1, step=0,
        pipeline_cycle=2, bytes=0.0, flops=0.0),
    Row(5, 8, 0, "ipu_copy", stage=1, micro_batch=2, step=0,
        pipeline_cycle=2, bytes=300.0, flops=0.0),
]


def recorded(rows=ROWS) -> Recorder:
    recorder = Recorder()
    for row in rows:
        recorder.record_row(row)
    return recorder


def test_a_row_costs_32_bytes_once_packed():
    recorder = recorded(ROWS * 1000)
    assert len(recorder) == 4000
    assert recorder.nbytes == 32 * 4000


def test_the_frame_holds_every_row_sorted_by_start_then_ipu_with_stable_ties():
    frame = recorded().to_frame(ipus_per_replica=1, instance=3)
    assert list(frame.columns) == ["start_ps", "end_ps", "ipu", "replica", "instance",
                                   *COLUMNS[3:]]
    expected = sorted(ROWS, key=lambda row: (row[0], row[2]))  # stable: sync_wait first
    assert [tuple(row) for row in frame[list(COLUMNS)].itertuples(index=False)] == expected
    assert frame["kind"].dtype == pd.CategoricalDtype(KINDS)
    assert (frame["instance"] == 3).all() and frame["replica"].tolist() == frame["ipu"].tolist()
    for name in ("start_ps", "end_ps", "ipu", "stage", "micro_batch", "step", "pipeline_cycle"):
        assert frame[name].dtype == np.int64
    assert frame["bytes"].dtype == frame["flops"].dtype == np.float64


def test_rows_reads_back_what_was_recorded_ipu_by_ipu():
    assert recorded().rows == sorted(ROWS, key=lambda row: row[2])


def test_a_folded_record_is_expanded_to_every_replica():
    one = Recorder()
    for row in ROWS:
        one.record_row(row)
    frame = one.to_frame(ipus_per_replica=2, copies=3)
    every = Recorder()
    for replica in range(3):
        for row in ROWS:
            every.record_row(row._replace(ipu=row.ipu + 2 * replica))
    pd.testing.assert_frame_equal(frame, every.to_frame(ipus_per_replica=2))
    assert frame["replica"].value_counts().to_dict() == {0: 4, 1: 4, 2: 4}


def test_the_replicas_number_their_ipus_and_one_without_ipus_per_replica():
    eight_ipus = recorded([row._replace(ipu=ipu) for ipu, row in enumerate(ROWS * 2)])
    frame = eight_ipus.to_frame(ipus_per_replica=2)
    assert (frame["replica"] == frame["ipu"] // 2).all() and frame["replica"].max() == 3
    assert (recorded().to_frame()["replica"] == 0).all()
    with pytest.raises(ValueError, match="needs its IPUs per replica to expand to 3 replicas"):
        recorded().to_frame(copies=3)
    with pytest.raises(ValueError, match="holds one replica's 1 IPU"):
        recorded().to_frame(ipus_per_replica=1, copies=3)


def test_an_empty_record_keeps_the_dtypes():
    frame = Recorder().to_frame()
    assert len(frame) == 0 and frame["start_ps"].dtype == np.int64
    assert frame["kind"].dtype == pd.CategoricalDtype(KINDS)


def test_the_rows_read_back_are_named_in_the_frame_column_order():
    row = recorded().rows[0]
    assert row._fields == COLUMNS and row.kind == "backward" and row.bytes == 20.0


def test_an_unknown_kind_is_refused_when_recorded():
    with pytest.raises(ValueError, match="event kind 'teleport' is not among"):
        Recorder().record(0, 1, 0, "teleport", stage=0, micro_batch=0, step=0)


def test_rows_beyond_a_chunk_are_packed_and_kept_in_order():
    from ipusim.engine.recorder import CHUNK
    rows = [Row(t, t + 1, 0, "forward", 0, t, 0, -1, 1.0, 2.0) for t in range(2 * CHUNK + 5)]
    recorder = recorded(rows)
    assert len(recorder) == len(rows) and recorder.rows == rows
    assert recorder.to_frame()["micro_batch"].tolist() == list(range(len(rows)))


def test_an_index_beyond_int32_is_refused_not_wrapped():
    recorder = recorded([Row(0, 1, 0, "forward", 0, 2**31, 0, -1, 0.0, 0.0)])
    with pytest.raises(OverflowError, match="beyond int32"):
        recorder.to_frame()


def test_rows_appended_shifted_read_back_in_order_between_recorded_rows():
    # A replayed call's rows wait as a reference until read: they must come back
    # shifted and renumbered, in their place among the rows recorded around them.
    template = recorded(ROWS[:2])
    times, fields = template.columns(0).packed()
    recorder = Recorder()
    recorder.record_row(ROWS[1])
    recorder.columns(0).append_shifted(times, fields, 100, 1)
    recorder.columns(0).append_shifted(times, fields, 200, 2)
    assert len(recorder) == 3
    recorder.record_row(ROWS[3])
    recorder.columns(0).append_shifted(times, fields, 300, 3)
    shifted = [Row(ROWS[1].start_ps + shift, ROWS[1].end_ps + shift, 0, "backward", 1, 2, step,
                   1, 20.0, 9.0) for shift, step in ((100, 1), (200, 2))]
    last = Row(ROWS[1].start_ps + 300, ROWS[1].end_ps + 300, 0, "backward", 1, 2, 3, 1, 20.0, 9.0)
    assert recorder.rows == [ROWS[1], *shifted, ROWS[3], last]
    assert len(recorder) == 5
    assert fields[:, 2].tolist() == [0]  # the template is left as it was
