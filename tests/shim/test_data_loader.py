"""Tests of poptorch_shim's DataLoader: the combined batch size and the number
of steps for every mode and option combination, exact coverage of a counting
dataset over two epochs, the shards of a distributed run (the numbers of the
distributed data-loading chapter), and the errors PopTorch users get.

Asynchronous loaders start their worker with SharingStrategy.Fork (fast)
except in the one test of the tutorial's own settings, which spawns it.
"""
import multiprocessing
import multiprocessing.resource_tracker
import os
import pickle
from dataclasses import dataclass

import pytest
import torch
from support.datasets import Indices

from poptorch_shim._data.data_loader import DataLoader
from poptorch_shim.enums import CommGroupType, DataLoaderMode, SharingStrategy
from poptorch_shim.errors import FrozenOptionsError
from poptorch_shim.options import Options

pytestmark = [pytest.mark.slow]  # starts DataLoader worker processes


FORK = {"sharing_strategy": SharingStrategy.Fork}


class FailsAt(Indices):
    def __getitem__(self, index):
        if index == 7:
            raise ValueError("corrupt record 7")
        return index


class SplitIterable(torch.utils.data.IterableDataset):
    """Yields 0..length-1, each worker taking its own contiguous half."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.length))
        per_worker = -(-self.length // info.num_workers)
        start = info.id * per_worker
        return iter(range(start, min(start + per_worker, self.length)))


def make_options(device_iterations=1, replicas=1, accumulation=1, group=1,
                 process=None, seed=None):
    options = Options().deviceIterations(device_iterations).replicationFactor(replicas)
    options.Training.gradientAccumulation(accumulation)
    if group > 1:
        options.inputReplicaGrouping(group, CommGroupType.Consecutive)
    if process is not None:
        options.Distributed.configureProcessId(*process)
    else:
        options.Distributed.disable()
    if seed is not None:
        options.randomSeed(seed)
    return options


def epoch(loader):
    """One pass as a list of batches of Python ints (async batches are
    views that the next batch overwrites, so convert them at once)."""
    return [batch.tolist() for batch in loader]


@pytest.fixture
def no_leaks():
    multiprocessing.resource_tracker.ensure_running()
    yield
    assert multiprocessing.active_children() == []
    assert not [name for name in os.listdir("/dev/shm")
                if name.startswith(f"ipusim-ring-{os.getpid()}-")]


@dataclass
class Case:
    length: int
    batch_size: int
    device_iterations: int = 1
    replicas: int = 1
    accumulation: int = 1
    group: int = 1
    drop_last: bool = True
    num_workers: int = 0
    combined: int = 0   # expected combinedBatchSize
    steps: int = 0      # expected len(loader)


CASES = [
    Case(100, 2, device_iterations=3, combined=6, steps=16),
    Case(100, 2, device_iterations=3, drop_last=False, combined=6, steps=17),
    Case(100, 1, device_iterations=2, replicas=2, accumulation=3, combined=12, steps=8),
    Case(100, 2, replicas=4, group=2, combined=4, steps=25),
    Case(64, 4, device_iterations=4, combined=16, steps=4, num_workers=2),
    Case(64, 4, device_iterations=4, drop_last=False, combined=16, steps=4),
    Case(30, 3, device_iterations=2, accumulation=2, drop_last=False, combined=12,
         steps=3, num_workers=2),
]
MODES = [(DataLoaderMode.Sync, None), (DataLoaderMode.Async, None),
         (DataLoaderMode.AsyncRebatched, None), (DataLoaderMode.AsyncRebatched, "half")]


@pytest.mark.parametrize("mode, worker_size", MODES,
                         ids=["sync", "async", "rebatched", "rebatched-half"])
@pytest.mark.parametrize("case", CASES, ids=lambda case: (
    f"N{case.length}-bs{case.batch_size}-di{case.device_iterations}"
    f"-r{case.replicas}/{case.group}-ga{case.accumulation}"
    f"-{'drop' if case.drop_last else 'keep'}-w{case.num_workers}"))
@pytest.mark.filterwarnings("ignore:The number of elements")
def test_steps_and_exact_coverage_over_two_epochs(case, mode, worker_size, no_leaks):
    options = make_options(case.device_iterations, case.replicas, case.accumulation,
                           case.group)
    loader = DataLoader(
        options, Indices(case.length), batch_size=case.batch_size,
        drop_last=case.drop_last, num_workers=case.num_workers, mode=mode,
        async_options=FORK,
        rebatched_worker_size=case.combined // 2 + 1 if worker_size else None)
    assert loader.combinedBatchSize == case.combined
    assert len(loader) == case.steps
    covered = case.length if not case.drop_last else case.steps * case.combined
    for _ in range(2):
        batches = epoch(loader)
        assert len(batches) == case.steps
        assert all(len(batch) == case.combined for batch in batches[:-1])
        assert sum(batches, []) == list(range(covered))
    loader.terminate()


@pytest.mark.parametrize("mode", list(DataLoaderMode))
def test_shuffled_epochs_are_different_permutation_subsets(mode, no_leaks):
    torch.manual_seed(0)
    loader = DataLoader(make_options(device_iterations=4), Indices(50), batch_size=3,
                        shuffle=True, mode=mode, async_options=FORK)
    assert len(loader) == 4
    epochs = []
    for _ in range(2):
        batches = epoch(loader)
        assert [len(batch) for batch in batches] == [12] * 4
        values = sum(batches, [])
        assert len(set(values)) == 48 and set(values) <= set(range(50))
        epochs.append(values)
    assert epochs[0] != epochs[1]
    loader.terminate()


@pytest.mark.parametrize("replicas, steps, combined", [(1, 390, 32), (2, 195, 64)])
def test_distributed_shards_of_the_cifar10_example(replicas, steps, combined):
    """50,000 samples, batch 32, 4 instances: 390 steps each; with 2 local
    replicas 195 steps of 64. Each instance reads a contiguous block and the
    blocks do not overlap (the last 80 samples are dropped)."""
    blocks = []
    for process in range(4):
        options = make_options(replicas=replicas, process=(process, 4))
        loader = DataLoader(options, Indices(50000), batch_size=32)
        assert (len(loader), loader.combinedBatchSize) == (steps, combined)
        batches = epoch(loader)
        assert len(batches) == steps and {len(batch) for batch in batches} == {combined}
        blocks.append(sum(batches, []))
    for process, block in enumerate(blocks):
        assert block == list(range(process * 12480, (process + 1) * 12480))


@pytest.mark.parametrize("mode", list(DataLoaderMode))
def test_each_process_reads_its_own_block_in_every_mode(mode, no_leaks):
    for process in range(3):
        options = make_options(device_iterations=2, process=(process, 3))
        loader = DataLoader(options, Indices(100), batch_size=2, mode=mode,
                            async_options=FORK)
        assert len(loader) == 8
        for _ in range(2):
            assert sum(epoch(loader), []) == list(range(process * 32, (process + 1) * 32))
        loader.terminate()


@pytest.mark.filterwarnings("ignore:The number of elements")
def test_without_drop_last_processes_split_every_sample():
    blocks = []
    for process in range(3):
        options = make_options(process=(process, 3))
        loader = DataLoader(options, Indices(10), batch_size=2, drop_last=False)
        blocks.append(sum(epoch(loader), []))
        assert len(loader) == 2
    assert blocks == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_shuffled_shards_are_disjoint_each_epoch_and_agree_across_processes():
    def shards():
        loaders = [DataLoader(make_options(device_iterations=2, process=(process, 4),
                                           seed=42),
                              Indices(100), batch_size=2, shuffle=True)
                   for process in range(4)]
        return [[sum(epoch(loader), []) for loader in loaders] for _ in range(2)]

    first_run = shards()
    for per_process in first_run:
        assert [len(values) for values in per_process] == [24] * 4
        union = set().union(*map(set, per_process))
        assert len(union) == 96 and union <= set(range(100))
    assert first_run[0][0] != first_run[1][0], "each epoch draws a new permutation"
    assert shards() == first_run, "the same seed gives every host the same split"


def test_shuffle_across_processes_needs_a_random_seed():
    with pytest.raises(ValueError, match=r"must set poptorch.Options.randomSeed\(\)"):
        DataLoader(make_options(process=(0, 2)), Indices(100), batch_size=2, shuffle=True)


def test_a_sampler_cannot_be_combined_with_automatic_partitioning():
    with pytest.raises(ValueError, match="auto_distributed_partitioning=False"):
        DataLoader(make_options(process=(0, 2)), Indices(100),
                   sampler=torch.utils.data.SequentialSampler(range(100)))
    loader = DataLoader(make_options(process=(1, 2)), Indices(10), batch_size=5,
                        auto_distributed_partitioning=False)
    assert epoch(loader) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_an_iterable_dataset_is_not_partitioned_automatically():
    with pytest.raises(ValueError, match="not supported for an IterableDataset"):
        DataLoader(make_options(process=(0, 2)), SplitIterable(10))


@pytest.mark.filterwarnings("ignore:The number of elements")
def test_a_dataset_shorter_than_one_combined_batch_is_an_error():
    options = make_options(device_iterations=4, replicas=2, accumulation=4)
    with pytest.raises(ValueError) as caught:
        DataLoader(options, Indices(50), batch_size=2)
    message = str(caught.value)
    for text in ("the dataset has 50 elements", "combined batch of 64 elements",
                 "batch_size 2", "deviceIterations 4", "replicationFactor 2",
                 "input_group_size 1", "gradientAccumulation 4", "loop zero times",
                 "drop_last=False"):
        assert text in message
    assert epoch(DataLoader(options, Indices(50), batch_size=2, drop_last=False)) == [
        list(range(50))]


def test_too_short_for_every_process_names_the_process_count():
    with pytest.raises(ValueError, match="split between 4 processes .* each process gets 0"):
        DataLoader(make_options(process=(3, 4)), Indices(60), batch_size=16)
    with pytest.raises(ValueError, match="the dataset has 5 elements"):
        DataLoader(make_options(device_iterations=3), SplitIterable(5), batch_size=2)


@pytest.mark.filterwarnings("ignore:IterableDataset used with num_workers")
def test_rebatching_recovers_what_workers_of_an_iterable_would_drop(no_leaks):
    """22 items over 2 workers of 11: in Sync mode each worker drops its last
    5; rebatched, the accessor joins the workers' short batches."""
    options = make_options(device_iterations=2)
    sync = DataLoader(options, SplitIterable(22), batch_size=3, num_workers=2)
    assert len(sum(epoch(sync), [])) == 12
    rebatched = DataLoader(options, SplitIterable(22), batch_size=3, num_workers=2,
                           mode=DataLoaderMode.AsyncRebatched, async_options=FORK)
    assert len(rebatched) == 3
    batches = epoch(rebatched)
    assert [len(batch) for batch in batches] == [6, 6, 6]
    assert len(set(sum(batches, []))) == 18
    rebatched.terminate()


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_dataset_error_in_async_mode_reaches_the_loop(num_workers, no_leaks):
    loader = DataLoader(make_options(), FailsAt(20), batch_size=2, num_workers=num_workers,
                        mode=DataLoaderMode.Async, async_options=FORK)
    iterator = iter(loader)
    assert [next(iterator).tolist() for _ in range(3)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="(?s)Original traceback.*corrupt record 7"):
        next(iterator)


def test_tutorial_async_loader_with_a_spawned_worker(no_leaks):
    """The data-loading tutorial's settings, scaled down: shuffled
    TensorDataset, workers, Async mode with early_preload."""
    features = torch.arange(400, dtype=torch.float32).reshape(400, 1, 1, 1).expand(
        400, 1, 4, 4).contiguous()
    labels = torch.arange(400)
    dataset = torch.utils.data.TensorDataset(features, labels)
    options = make_options(device_iterations=5)
    loader = DataLoader(options, dataset, batch_size=4, shuffle=True, num_workers=1,
                        mode=DataLoaderMode.Async, async_options={"early_preload": True})
    assert (len(loader), loader.combinedBatchSize) == (20, 20)
    for _ in range(2):
        seen = []
        for data, label in loader:
            assert data.shape == (20, 1, 4, 4) and label.shape == (20,)
            assert torch.equal(data[:, 0, 0, 0], label.float())
            seen += label.tolist()
        assert sorted(seen) == list(range(400))
    loader.terminate()


def test_properties_defaults_and_frozen_options(no_leaks):
    options = make_options(device_iterations=2)
    loader = DataLoader(options, Indices(10), batch_size=2, num_workers=1)
    assert loader.options is options and loader.combinedBatchSize == 4
    assert loader.persistent_workers and loader.drop_last
    assert not DataLoader(options, Indices(10)).persistent_workers
    with pytest.raises(FrozenOptionsError):
        options.deviceIterations(4)
    loader.terminate()  # no effect in Sync mode
    assert epoch(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_terminate_stops_the_async_worker(no_leaks):
    loader = DataLoader(make_options(), Indices(10), batch_size=2,
                        mode=DataLoaderMode.Async, async_options=FORK)
    assert epoch(loader)[:2] == [[0, 1], [2, 3]]
    loader.terminate()
    with pytest.raises(RuntimeError, match="terminated"):
        epoch(loader)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"options": None}, TypeError, "options must be a poptorch.Options, got NoneType"),
    ({"mode": "async"}, TypeError, "mode must be a poptorch.DataLoaderMode"),
    ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
    ({"mode": DataLoaderMode.Async, "async_options": {"rebatched_size": 4}}, ValueError,
     "rebatched_size cannot be given in async_options"),
    ({"mode": DataLoaderMode.Async, "async_options": {"bufer_size": 4}}, ValueError,
     r"unknown async_options \['bufer_size'\]"),
    ({"mode": DataLoaderMode.AsyncRebatched, "rebatched_worker_size": 9}, ValueError,
     r"rebatched_worker_size must be an int from 1 to the combined batch size \(4\)"),
])
def test_wrong_arguments_are_refused(kwargs, error, message):
    arguments = {"options": make_options(device_iterations=2), "dataset": Indices(10),
                 "batch_size": 2, **kwargs}
    with pytest.raises(error, match=message):
        DataLoader(**arguments)


def test_short_last_batch_warns_like_poptorch():
    with pytest.warns(UserWarning, match=r"\(10\) is not divisible .* \(4\).* 2 elements"):
        DataLoader(make_options(device_iterations=2), Indices(10), batch_size=2,
                   drop_last=False)


def test_iterable_with_workers_but_no_worker_init_fn_warns():
    class Plain(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(8))

    with pytest.warns(UserWarning, match="each element of the dataset 2 times"):
        DataLoader(make_options(), Plain(), num_workers=2)


def test_iterable_dataset_in_async_mode(no_leaks):
    loader = DataLoader(make_options(device_iterations=2), SplitIterable(9), batch_size=2,
                        mode=DataLoaderMode.Async, async_options=FORK)
    assert len(loader) == 2
    assert epoch(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    loader.terminate()


def test_options_pickle_with_the_loader_for_the_worker():
    loader = DataLoader(make_options(device_iterations=2, seed=3), Indices(10), batch_size=2)
    copy = pickle.loads(pickle.dumps(loader))
    assert copy.options.device_iterations == 2 and copy._accessor is None
    assert epoch(copy) == epoch(loader)
