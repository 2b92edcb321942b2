"""Figures over time, on event tables written by hand: each window's busy share is
arithmetic on the events' overlap with it."""
import numpy as np
import pandas as pd
import pytest

from ipusim import Cost, Execution, RunConfig, Stage, Work, simulate, system_spec
from ipusim.analysis import over_time
from ipusim.analysis.metrics import intervals_joined


def events(rows):
    """(kind, ipu, start_ps, end_ps, bytes) rows."""
    return pd.DataFrame(rows, columns=["kind", "ipu", "start_ps", "end_ps", "bytes"])


def test_windows_cut_the_span_into_equal_parts():
    table = events([("forward", 0, 10, 20, 0), ("forward", 0, 30, 110, 0)])
    assert over_time.window_edges(table, 4).tolist() == [10, 35, 60, 85, 110]
    with pytest.raises(ValueError, match="windows must be a positive integer, got 0"):
        over_time.window_edges(table, 0)


def test_an_event_counts_in_each_window_for_the_part_inside_it():
    table = events([("forward", 0, 0, 30, 0), ("backward", 0, 50, 100, 0),
                    ("sync_wait", 0, 30, 50, 0), ("forward", 1, 90, 100, 0)])
    shares = over_time.category_shares_over_time(table, 2, 4).set_index(["ipu", "start_ps"])
    assert shares.loc[0, "compute"].tolist() == [1.0, 0.2, 1.0, 1.0]
    assert shares.loc[0, "sync wait"].tolist() == [0.0, 0.8, 0.0, 0.0]
    assert shares.loc[1, "compute"].tolist() == [0.0, 0.0, 0.0, 0.4]
    assert shares.loc[1, "host I/O"].tolist() == [0.0] * 4


def test_a_host_link_moves_each_copy_s_bytes_evenly_over_its_time():
    table = events([("host_to_device", 0, 0, 40, 400), ("host_to_device", 1, 40, 60, 100),
                    ("device_to_host", 2, 60, 100, 8), ("forward", 0, 40, 100, 0)])
    links = np.array([0, 0, 1])
    busy = over_time.host_link_busy_over_time(table, links, 2, 2).set_index(
        ["link", "direction", "start_ps"]).sort_index()
    assert busy.loc[(0, "host_to_device"), "busy_share"].tolist() == [1.0, 0.2]
    assert busy.loc[(0, "host_to_device"), "bytes"].tolist() == pytest.approx([450, 50])
    assert busy.loc[(1, "device_to_host"), "busy_share"].tolist() == [0.0, 0.8]
    assert busy.loc[(1, "host_to_device"), "bytes"].tolist() == [0.0, 0.0]


def test_a_link_whose_ipus_stream_at_once_is_busy_for_the_union_of_their_copies():
    # Two IPUs of a machine stream at once, each on its own hop from the gateway: the
    # link is busy while either copy runs, never more than the whole window; the bytes
    # they move add up.
    table = events([("host_to_device", 0, 0, 40, 400), ("host_to_device", 1, 20, 60, 400),
                    ("host_to_device", 0, 80, 90, 100)])
    busy = over_time.host_link_busy_over_time(table, np.array([0, 0]), 1, 2).set_index(
        ["direction", "start_ps"]).sort_index()
    # windows [0, 45) and [45, 90]: the union [0, 60) and [80, 90)
    assert busy.loc["host_to_device", "busy_share"].tolist() == [1.0, pytest.approx(25 / 45)]
    assert busy.loc["host_to_device", "bytes"].tolist() == pytest.approx([400 + 250, 150 + 100])
    starts, ends, groups = intervals_joined([0, 20, 80, 5, 7], [40, 60, 90, 6, 9],
                                            [0, 0, 0, 1, 1])
    assert list(zip(starts, ends, groups)) == [(0, 60, 0), (80, 90, 0), (5, 6, 1), (7, 9, 1)]
    assert [len(a) for a in intervals_joined([], [], [])] == [0, 0, 0]


def test_the_windows_add_up_to_the_whole_run_s_shares():
    work = Work(tuple(Stage(f"s{k}", k, Cost(flops=1e9, ops=10), Cost(flops=2e9, ops=20),
                            activation_bytes=10**5) for k in range(3)),
                micro_batch_size=4, input_bytes_per_sample=3072)
    pipeline_timeline = simulate(work, RunConfig(gradient_accumulation=8,
                                                 execution=Execution.PIPELINED),
                                 system_spec("mk2", 3), steps=2)
    windows = 37
    shares = pipeline_timeline.category_shares_over_time(windows)
    widths = (shares["end_ps"] - shares["start_ps"]) / pipeline_timeline.duration_ps
    whole = shares.drop(columns=["start_ps", "end_ps"]).mul(widths, axis=0).assign(
        ipu=shares["ipu"]).groupby("ipu").sum()
    expected = pipeline_timeline.category_times().drop(columns="idle")
    assert whole.to_numpy() == pytest.approx(expected.to_numpy(), abs=1e-9)
