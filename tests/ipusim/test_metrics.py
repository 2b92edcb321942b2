"""Figures read off an event table written by hand, so each is checked against
arithmetic rather than against the code that computes it."""
import pandas as pd
import pytest

from ipusim.analysis import metrics


def events(rows):
    return pd.DataFrame(rows, columns=["replica", "step", "micro_batch", "start_ps", "end_ps"])


def test_latency_is_the_mean_over_micro_batches_of_first_start_to_last_end():
    table = events([
        (0, 0, 0, 0, 4), (0, 0, 0, 6, 10),      # micro-batch 0: 0 .. 10
        (0, 0, 1, 10, 30),                       # micro-batch 1: 10 .. 30
        (0, 0, 2, 30, 60), (0, 0, 2, 40, 90),    # micro-batch 2: 30 .. 90
        (0, 0, -1, 0, 1000),                     # an update: no micro-batch
    ])
    assert metrics.latency_ps(table) == pytest.approx((10 + 20 + 60) / 3)


def test_latency_counts_each_replica_and_step_apart():
    table = events([(0, 0, 0, 0, 10), (1, 0, 0, 100, 140), (0, 1, 0, 500, 520)])
    assert metrics.latency_ps(table) == pytest.approx((10 + 40 + 20) / 3)


def test_a_step_spans_from_its_first_start_to_its_last_end():
    table = events([(0, 0, 0, 5, 20), (1, 0, -1, 0, 12), (0, 1, 0, 30, 35), (0, 1, 1, 32, 50)])
    spans = metrics.step_spans(table)
    assert spans.to_dict("index") == {0: {"start_ps": 0, "end_ps": 20},
                                      1: {"start_ps": 30, "end_ps": 50}}
