"""``poptorch.DataLoader(batch_sampler=...)`` as PopTorch does it: torch
loads the sampler's batches (batch_size 1, no drop_last of its own) and the
DataLoader concatenates as many of them as a step takes (device iterations x
input groups x gradient accumulation) into each step's batch, in the
sampler's order; ``drop_last`` decides a last step of fewer batches. What
PopTorch refuses raises ``poptorch.Error`` with its words."""
import warnings
from collections import namedtuple

import pytest
import torch
from support.datasets import Indices

from poptorch_shim._data.data_loader import DataLoader
from poptorch_shim.enums import DataLoaderMode
from poptorch_shim.errors import Error
from poptorch_shim.options import Options


class Given(torch.utils.data.Sampler):
    """A batch sampler that yields the batches it is given, in that order."""

    def __init__(self, batches, batch_size=None):
        self.batches = batches
        if batch_size is not None:
            self.batch_size = batch_size

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def options(device_iterations=1, replicas=1, accumulation=1, processes=None):
    opts = Options().deviceIterations(device_iterations).replicationFactor(replicas)
    opts.Training.gradientAccumulation(accumulation)
    if processes is not None:
        opts.Distributed.configureProcessId(0, processes)
    else:
        opts.Distributed.disable()
    return opts


def poptorch_combination(sampler_batches, per_step, drop_last):
    """What PopTorch's combination gives: each ``per_step`` consecutive batches
    of the sampler concatenated, a last short group kept unless ``drop_last``."""
    steps = [sum(sampler_batches[i:i + per_step], [])
             for i in range(0, len(sampler_batches), per_step)]
    if drop_last and len(sampler_batches) % per_step:
        steps.pop()
    return steps


def test_a_batch_sampler_of_two_with_three_device_iterations_gives_steps_of_six():
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(20)),
                                            batch_size=2, drop_last=False)
    loader = DataLoader(options(device_iterations=3), Indices(20), batch_sampler=sampler)
    assert loader.combinedBatchSize == 6
    batches = [batch.tolist() for batch in loader]
    assert batches == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17]]
    assert batches == poptorch_combination(list(sampler), 3, drop_last=True)
    assert len(loader) == 3


@pytest.mark.parametrize("drop_last", [True, False])
def test_the_steps_follow_the_samplers_order(drop_last):
    sampler_batches = [[9, 2], [7, 7], [0, 11], [4, 3], [1, 5], [8, 6], [10, 12]]
    sampler = Given(sampler_batches, batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(options(replicas=2, accumulation=2), Indices(13),
                            batch_sampler=sampler, drop_last=drop_last)
    assert loader.combinedBatchSize == 8  # 2 x replicas 2 x accumulation 2
    expected = poptorch_combination(sampler_batches, 4, drop_last)
    assert [batch.tolist() for batch in loader] == expected
    assert len(loader) == len(expected)
    short = [w for w in caught if "not divisible by the number of batches" in str(w.message)]
    assert len(short) == (0 if drop_last else 1)
    if not drop_last:
        assert "(7)" in str(short[0].message) and "join 3 of them" in str(short[0].message)


Pair = namedtuple("Pair", "image label")


class Structured(Indices):
    def __getitem__(self, index):
        return {"pair": Pair(torch.full((2,), float(index)), index), "name": f"item{index}"}


def test_structured_batches_are_joined_leaf_by_leaf():
    sampler = Given([[0, 1], [2, 3], [4, 5], [6, 7]], batch_size=2)
    loader = DataLoader(options(device_iterations=2), Structured(8), batch_sampler=sampler)
    first, second = list(loader)
    assert isinstance(first["pair"], Pair)
    assert first["pair"].image[:, 0].tolist() == [0, 1, 2, 3]
    assert first["pair"].label.tolist() == [0, 1, 2, 3]
    assert second["pair"].label.tolist() == [4, 5, 6, 7]
    assert second["name"] == ["item6", "item7"]  # no tensor: the last batch's, as in PopTorch


def test_a_sampler_without_batch_size_counts_one_per_batch():
    sampler = Given([[0, 1, 2], [3], [4, 5]])
    with pytest.warns(UserWarning, match="join 1 of them"):
        loader = DataLoader(options(device_iterations=2), Indices(6), batch_sampler=sampler,
                            drop_last=False)
    assert loader.combinedBatchSize == 2  # PopTorch's batch_size of 1 x 2 batches
    assert [batch.tolist() for batch in loader] == [[0, 1, 2, 3], [4, 5]]


def test_one_batch_per_step_passes_the_samplers_batches_through():
    sampler = Given([[3, 1], [2, 0]], batch_size=2)
    loader = DataLoader(options(), Indices(4), batch_sampler=sampler)
    assert [batch.tolist() for batch in loader] == [[3, 1], [2, 0]]
    assert len(loader) == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 2}, "mutually exclusive with batch_size, shuffle"),
    ({"shuffle": True}, "mutually exclusive with batch_size, shuffle"),
    ({"processes": 2}, "mutually exclusive with auto_distributed_partitioning=True"),
    ({"mode": DataLoaderMode.AsyncRebatched, "rebatched_worker_size": 2},
     "mutually exclusive with rebatched_worker_size"),
])
def test_what_poptorch_refuses_with_a_batch_sampler(kwargs, message):
    opts = options(processes=kwargs.pop("processes", None))
    sampler = Given([[0, 1], [2, 3]], batch_size=2)
    with pytest.raises(Error, match=message) as caught:
        DataLoader(opts, Indices(4), batch_sampler=sampler, **kwargs)
    assert caught.value.type == "poptorch_py_error"


def test_a_distributed_run_may_bring_its_own_partitioned_sampler():
    opts = options(processes=2)
    sampler = Given([[0, 1], [2, 3]], batch_size=2)
    loader = DataLoader(opts, Indices(4), batch_sampler=sampler,
                        auto_distributed_partitioning=False)
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [DataLoaderMode.Async, DataLoaderMode.AsyncRebatched])
def test_the_asynchronous_loader_gives_the_same_steps(mode):
    sampler_batches = [[9, 2], [7, 7], [0, 11], [4, 3], [1, 5], [8, 6], [10, 12]]
    with pytest.warns(UserWarning, match="join 1 of them"):
        loader = DataLoader(options(device_iterations=2), Indices(13),
                            batch_sampler=Given(sampler_batches, batch_size=2),
                            drop_last=False, mode=mode)
    try:
        got = [batch.tolist() for batch in loader]
    finally:
        loader.terminate()
    assert got == poptorch_combination(sampler_batches, 2, drop_last=False)
