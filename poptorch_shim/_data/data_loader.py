"""``poptorch.DataLoader``: a ``torch.utils.data.DataLoader`` whose every item
is the data of one model call (one step), sharded across the processes of a
distributed run and optionally loaded ahead by an
``AsynchronousDataAccessor``."""
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch

import ipusim
from poptorch_shim._core import loader_feed
from poptorch_shim._core.batching import MicroBatchCounts
from poptorch_shim._data.async_data_accessor import AsynchronousDataAccessor
from poptorch_shim._data.cpu_clock import Stopwatch
from poptorch_shim._data.loader_rate import CostLog, LoaderRate, StepCost, measured_rate
from poptorch_shim._data.shard_sampler import ShardSampler
from poptorch_shim._data.worker_cpu import TimedCollate, TimedWorkerInit, unwrapped
from poptorch_shim.custom_args import parser_for
from poptorch_shim.enums import DataLoaderMode
from poptorch_shim.errors import Error
from poptorch_shim.options import Options

# Loaders of this process, so a model's report can find the one feeding it.
_loaders: "weakref.WeakSet[DataLoader]" = weakref.WeakSet()

_ASYNC_OPTIONS = ("buffer_size", "miss_sleep_time_in_ms", "load_indefinitely",
                  "early_preload", "sharing_strategy")


class DataLoader(torch.utils.data.DataLoader):
    """Thin wrapper around ``torch.utils.data.DataLoader`` that works out the
    batch size of one step from the options.

    The torch DataLoader underneath gets the *combined* batch size
    ``batch_size x deviceIterations x (replicationFactor / input_group_size)
    x gradientAccumulation`` as its batch size, so each item it yields is the
    data of one call of the model.

    In a distributed run (``options.Distributed`` with several processes) each
    process reads its own contiguous part of a map-style dataset; to shuffle,
    set ``options.randomSeed()`` to the same value in every process. An
    ``IterableDataset`` is not partitioned: as with torch, each worker process
    iterates over the whole dataset unless the dataset splits itself with
    ``torch.utils.data.get_worker_info()``.

    In the ``Async`` and ``AsyncRebatched`` modes the batches are views of the
    ``AsynchronousDataAccessor``'s shared ring buffer: they stay valid until
    the next batch is requested (clone what must outlive the step). In
    ``Async`` mode with ``num_workers > 0``, the large tensors of a batch are
    the shared memory the workers collated them into, passed on uncopied.

    The loader's rate, which the model's verdict reads, is what its steps cost
    in CPU time on the simulated host (:mod:`poptorch_shim._data.loader_rate`):
    with ``num_workers > 0`` each worker process times its batches.
    """

    def __init__(self,
                 options: Options,
                 dataset: Any,
                 batch_size: int | None = 1,
                 shuffle: bool | None = None,
                 num_workers: int = 0,
                 drop_last: bool = True,
                 persistent_workers: bool | None = None,
                 auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync,
                 async_options: dict[str, Any] | None = None,
                 rebatched_worker_size: int | None = None,
                 batch_sampler: Any = None,
                 **kwargs):
        """
        :param options: Options that will be used to compile and run the
            model; they are frozen from now on.
        :param dataset: The dataset to get the data from.
        :param batch_size: The batch size in the conventional sense: the
            number of samples each operation of the model processes at once.
        :param shuffle: Whether to shuffle the dataset (None: no).
        :param num_workers: Number of worker processes of the torch
            DataLoader.
        :param drop_last: If True, a last incomplete combined batch is dropped.
        :param persistent_workers: Re-use the workers between epochs; None
            means ``num_workers > 0``.
        :param auto_distributed_partitioning: Partition a map-style dataset
            between the processes of a distributed run. If False the dataset
            is assumed to be partitioned already.
        :param mode: ``DataLoaderMode.Sync`` loads in this process when an
            item is requested; ``Async`` loads through an
            ``AsynchronousDataAccessor``; ``AsyncRebatched`` too, the workers
            loading batches of ``rebatched_worker_size`` that the accessor
            joins into combined batches.
        :param async_options: Keyword arguments for the
            ``AsynchronousDataAccessor`` (``buffer_size``,
            ``miss_sleep_time_in_ms``, ``load_indefinitely``,
            ``early_preload``, ``sharing_strategy``).
        :param rebatched_worker_size: With ``AsyncRebatched``, the batch size
            the workers load; by default the combined batch size. It must not
            exceed the combined batch size.
        :param batch_sampler: Draws the indices of each batch, as in
            ``torch.utils.data.DataLoader``; mutually exclusive with
            ``batch_size`` and ``shuffle``. As in PopTorch, the sampler's
            batches (``deviceIterations x (replicationFactor /
            input_group_size) x gradientAccumulation`` of them) are
            concatenated into each step's batch, in the sampler's order;
            ``drop_last`` then drops (or keeps) a last step of fewer batches.
            The combined batch size is the sampler's ``batch_size`` (1 if it
            has none) times that number.
        :param kwargs: Other arguments for ``torch.utils.data.DataLoader``.
        """
        _check_types(options, mode)
        self._batch_sampler_given = batch_sampler is not None
        if self._batch_sampler_given:
            batch_size = _check_batch_sampler(options, batch_sampler, batch_size, shuffle,
                                              auto_distributed_partitioning,
                                              rebatched_worker_size)
            # PopTorch's name: whether a last step of fewer sampler batches is dropped.
            self.batch_sampler_drop_last = drop_last
        options._freeze()
        self._options = options
        self._counts = MicroBatchCounts.of(options)
        self._combined_batch_size = _combined_batch_size(self._counts, batch_size)
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        shuffle = self._partition(dataset, bool(shuffle), drop_last, num_workers, batch_size,
                                  batch_sampler, auto_distributed_partitioning, kwargs)
        worker_batch_size, self._rebatched_size = self._batch_sizes(
            mode, rebatched_worker_size)
        # When rebatching, the accessor drops (or keeps) the last short batch.
        self.rebatched_drop_last = drop_last
        # The sampler's batches joined into steps; not when the accessor
        # rebatches them to the combined batch size itself.
        self._batches_to_combine = (
            self._counts.micro_batches if self._batch_sampler_given
            and self._rebatched_size is None else 1)
        if self._batch_sampler_given:  # torch's own batching steps aside, as PopTorch does
            worker_batch_size, kwargs["batch_sampler"], drop_last = 1, batch_sampler, False
        super().__init__(
            dataset, batch_size=worker_batch_size, shuffle=shuffle,
            num_workers=num_workers,
            drop_last=drop_last and self._rebatched_size is None,
            persistent_workers=persistent_workers, **kwargs)
        self._costs = CostLog()  # what each step after the first cost the host
        self._workers_cpu_s = 0.0  # the workers' CPU seconds for the batches received
        self._host_cores = host_cores(options)
        _loaders.add(self)
        self._accessor: AsynchronousDataAccessor | None = None
        if mode != DataLoaderMode.Sync:
            self._accessor = AsynchronousDataAccessor(
                self, **_check_async_options(async_options),
                rebatched_size=self._rebatched_size)

    def _partition(self, dataset: Any, shuffle: bool, drop_last: bool, num_workers: int,
                   batch_size: int | None, batch_sampler: Any, auto_partition: bool,
                   kwargs: dict) -> bool:
        """Give this process its part of a map-style dataset in a distributed run (a
        shard sampler in ``kwargs``), warn of a short last step, refuse a dataset too
        short for one; whether torch still shuffles (not where the sampler does)."""
        processes = self._options.Distributed.num_processes
        partition = processes > 1 and auto_partition
        if isinstance(dataset, torch.utils.data.IterableDataset):
            _check_iterable(partition, processes, num_workers, kwargs)
            samples = dataset_len = _length_or_none(dataset)
        else:
            dataset_len = len(dataset)
            if self._batch_sampler_given:
                if not drop_last:
                    _warn_last_step_short(batch_sampler, self._counts.micro_batches)
            elif not drop_last and self._combined_batch_size is not None:
                _warn_last_batch_short(dataset_len,
                                       self._combined_batch_size * processes)
            if partition:
                kwargs["sampler"] = self._shard_sampler(
                    dataset, shuffle, drop_last, kwargs)
                shuffle = False  # the sampler shuffles across processes
                samples = len(kwargs["sampler"])
            else:
                samples = dataset_len
        if drop_last and samples is not None and not self._batch_sampler_given:
            self._check_not_too_short(batch_size, dataset_len, samples,
                                      processes if partition else 1)
        return shuffle

    @property
    def combinedBatchSize(self) -> int | None:
        """Total number of elements consumed from the dataset for a single
        execution of the model."""
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        """The options this DataLoader was created with."""
        return self._options

    def terminate(self) -> None:
        """Stop the worker of the AsynchronousDataAccessor behind an
        ``Async`` or ``AsyncRebatched`` DataLoader; no effect in ``Sync``."""
        if self._accessor is not None:
            self._accessor.terminate()

    def __len__(self) -> int:
        if self._batches_to_combine > 1:
            steps, short = divmod(super().__len__(), self._batches_to_combine)
            return steps + (1 if short and not self.batch_sampler_drop_last else 0)
        if self._rebatched_size is None:
            return super().__len__()
        if isinstance(self.dataset, torch.utils.data.IterableDataset):
            samples = len(self.dataset)
        else:
            samples = len(self.sampler)
        steps = samples // self._rebatched_size
        if not self.rebatched_drop_last and samples % self._rebatched_size:
            steps += 1
        return steps

    def __iter__(self):
        if self._accessor is not None:
            return self._costed(iter(self._accessor))
        source = super().__iter__()
        if self.num_workers > 0:
            source = unwrapped(source, self._add_workers_cpu)
        if self._batches_to_combine > 1:
            source = _combined_batches(source, self._batches_to_combine,
                                       self.batch_sampler_drop_last)
        return self._costed(source)

    def _get_iterator(self):
        """torch's iterator over the batches. With workers it starts them with this
        loader's ``collate_fn`` and ``worker_init_fn`` wrapped, so that each worker
        times its batches (``worker_cpu.py``); the loader's own attributes stay the
        ones given, for whoever reads them (a framework rebuilding the loader)."""
        if self.num_workers == 0:
            return super()._get_iterator()
        given = self.collate_fn, self.worker_init_fn
        self.collate_fn, self.worker_init_fn = TimedCollate(given[0]), TimedWorkerInit(given[1])
        try:
            return super()._get_iterator()
        finally:
            self.collate_fn, self.worker_init_fn = given

    def _add_workers_cpu(self, cpu_s: float) -> None:
        self._workers_cpu_s += cpu_s

    def _costed(self, source: Iterator) -> Iterator:
        """Yield from ``source``, noting what each step after the first (which pays
        for starting workers) cost the host: this thread's CPU time while it waited
        for the step, its own time off the CPU where it loads the data itself (no
        worker processes), the workers' CPU time for the step's batches; in the
        asynchronous modes, what the accessor's worker noted for the step."""
        first, accessor = True, self._accessor
        while True:
            watch = None if accessor is not None else Stopwatch()
            workers_before = self._workers_cpu_s
            try:
                batch = next(source)
            except StopIteration:
                return
            if accessor is not None:
                cost = accessor.last_cost
            else:
                cpu_s, off_cpu_s = watch.take()
                cost = StepCost(cpu_s, off_cpu_s if self.num_workers == 0 else 0.0,
                                self._workers_cpu_s - workers_before)
            if not first:
                self._costs.append(cost)
            first = False
            loader_feed.yielded(self, batch)
            yield batch

    @property
    def workers_cpu_s(self) -> float:
        """CPU seconds the worker processes spent on the batches this loader has
        received so far (0 without workers)."""
        return self._workers_cpu_s

    @property
    def measured_items_per_s(self) -> float | None:
        """Items per second this loader delivers on the simulated host: the CPU time
        its steps cost, run by its worker processes on the host's cores (over windows
        of steps but the slowest: see :mod:`poptorch_shim._data.loader_rate`); None
        before two steps were read. It does not move with this machine's other load."""
        rate = self.measured_rate
        return None if rate is None else rate.items_per_s

    @property
    def measured_rate(self) -> LoaderRate | None:
        """The measured rate with its spread over the windows of steps."""
        return measured_rate(self._costs, self._combined_batch_size or 1, self.num_workers,
                             self._host_cores)

    def __getstate__(self) -> dict:
        # What the accessor's worker process receives: a plain synchronous
        # loader (no accessor, no live iterator of the parent's workers).
        state = self.__dict__.copy()
        state["_accessor"] = None
        state["_iterator"] = None
        return state

    def _shard_sampler(self, dataset, shuffle: bool, drop_last: bool,
                       kwargs: dict) -> ShardSampler:
        options = self._options
        if self._combined_batch_size is None:
            raise ValueError(
                "poptorch.DataLoader: batch_size=None is not allowed with "
                "auto_distributed_partitioning in a run of "
                f"{options.Distributed.num_processes} processes: the dataset "
                "is split in whole combined batches. Pass a batch_size, or "
                "auto_distributed_partitioning=False and split it yourself.")
        for own in ("sampler", "batch_sampler"):
            if kwargs.get(own) is not None:
                raise ValueError(
                    f"poptorch.DataLoader: {own} cannot be given with "
                    "auto_distributed_partitioning=True in a run of "
                    f"{options.Distributed.num_processes} processes: the "
                    "DataLoader builds its own sampler to give each process "
                    "its part of the dataset. Pass "
                    "auto_distributed_partitioning=False to use your own "
                    "(and make it partition the dataset).")
        if shuffle and options.random_seed is None:
            raise ValueError(
                "poptorch.DataLoader: shuffle=True with "
                "auto_distributed_partitioning needs a random seed: when "
                "using auto_distributed_partitioning you must set "
                "poptorch.Options.randomSeed() to ensure that tensors are in "
                "the same order in all processes. Call "
                "options.randomSeed(N) with the same N in every process.")
        return ShardSampler(len(dataset), options.Distributed.num_processes,
                            options.Distributed.process_id,
                            self._combined_batch_size, drop_last, shuffle,
                            options.random_seed or 0)

    def _check_not_too_short(self, batch_size: int, dataset_len: int,
                             samples: int, processes: int) -> None:
        """Refuse a dataset that gives this process no whole combined batch
        (with drop_last the DataLoader would loop zero times)."""
        combined = self._combined_batch_size
        if combined is None or samples >= combined:
            return
        counts = self._counts
        factors = (f"batch_size {batch_size} x deviceIterations "
                   f"{counts.device_iterations} x (replicationFactor "
                   f"{counts.replicas} / input_group_size "
                   f"{counts.input_group_size}) x gradientAccumulation "
                   f"{counts.gradient_accumulation}")
        where = f"the dataset has {dataset_len} elements"
        if processes > 1:
            where += (f", and split between {processes} processes in whole "
                      f"combined batches each process gets {samples}")
        raise ValueError(
            f"poptorch.DataLoader: {where}, fewer than one combined batch of "
            f"{combined} elements ({factors}), so with drop_last=True the "
            "DataLoader would loop zero times. Use a bigger dataset, a smaller "
            "batch_size or fewer device iterations / replicas / accumulated "
            "gradients, or pass drop_last=False to get one short batch.")

    def _batch_sizes(self, mode: DataLoaderMode,
                     rebatched_worker_size: int | None):
        """The batch size of the torch DataLoader and the accessor's
        rebatched size (None unless ``AsyncRebatched``)."""
        combined = self._combined_batch_size
        if mode != DataLoaderMode.AsyncRebatched:
            return combined, None
        if combined is None:
            raise ValueError(
                "poptorch.DataLoader: mode=DataLoaderMode.AsyncRebatched needs "
                "a batch_size: the accessor rebatches to the combined batch "
                "size. Pass a batch_size or use DataLoaderMode.Async.")
        if rebatched_worker_size is None:
            return combined, combined
        if isinstance(rebatched_worker_size, bool) or not isinstance(
                rebatched_worker_size, int) or not \
                1 <= rebatched_worker_size <= combined:
            raise ValueError(
                "poptorch.DataLoader: rebatched_worker_size must be an int "
                f"from 1 to the combined batch size ({combined}), got "
                f"{rebatched_worker_size!r}. It is the batch size the workers "
                "load before the accessor joins their batches.")
        return rebatched_worker_size, combined


def host_cores(options: Options) -> int:
    """The simulated host's CPU cores one process's loader runs on: the system's
    ``host_cpu_cores`` (``Options.Simulation.system(..., host_cpu_cores=N)``), shared
    equally by the processes of a distributed run (poprun's instances on one host
    server), at least one."""
    spec = ipusim.system_spec(options.Simulation.preset, 1, **options.Simulation.overrides)
    return max(1, spec.host_cpu_cores // options.Distributed.num_processes)


def measured_loader_rate(options: Options) -> LoaderRate | None:
    """The measured rate of the latest DataLoader built with ``options`` whose steps
    reached no model (a model a loader fed takes that loader's rate), if any."""
    rates = [loader.measured_rate for loader in list(_loaders)
             if loader.options is options and loader.measured_rate is not None
             and not loader_feed.feeds_a_model(loader)]
    return rates[-1] if rates else None


def _check_types(options: Any, mode: Any) -> None:
    """The options must be PopTorch's and the mode a DataLoaderMode."""
    if not isinstance(options, Options):
        raise TypeError(
            f"poptorch.DataLoader: options must be a poptorch.Options, got "
            f"{type(options).__name__}. Pass the Options the model is "
            "compiled with, e.g. DataLoader(poptorch.Options(), dataset).")
    if not isinstance(mode, DataLoaderMode):
        raise TypeError(
            "poptorch.DataLoader: mode must be a poptorch.DataLoaderMode "
            f"(Sync, Async or AsyncRebatched), got {mode!r}.")


def _combined_batch_size(counts: MicroBatchCounts,
                         batch_size: int | None) -> int | None:
    """Samples in one step: ``batch_size`` for each of the step's micro-batches
    of data (replicas in one input group read the same data, so they count once)."""
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) \
            or batch_size < 1:
        raise ValueError(
            f"poptorch.DataLoader: batch_size must be an int >= 1 (or None to "
            f"disable batching), got {batch_size!r}.")
    return batch_size * counts.micro_batches


def _check_batch_sampler(options: Options, batch_sampler: Any, batch_size: Any,
                         shuffle: bool | None, auto_distributed_partitioning: bool,
                         rebatched_worker_size: int | None) -> int:
    """PopTorch's refusals of a ``batch_sampler``; the batch size it stands for."""
    if batch_size != 1 or shuffle:
        raise Error(
            "`batch_sampler` option is mutually exclusive with batch_size, shuffle. "
            "The sampler draws each batch: leave batch_size and shuffle out (make the "
            "sampler shuffle, e.g. BatchSampler(RandomSampler(dataset), ...)).")
    if options.Distributed.num_processes > 1 and auto_distributed_partitioning:
        raise Error(
            "`batch_sampler` option is mutually exclusive with "
            "auto_distributed_partitioning=True. This run has "
            f"{options.Distributed.num_processes} processes: make the sampler draw only "
            "this process's part and pass auto_distributed_partitioning=False.")
    if rebatched_worker_size is not None:
        raise Error(
            "`batch_sampler` option is mutually exclusive with rebatched_worker_size: "
            "the sampler's batches are what the workers load.")
    size = getattr(batch_sampler, "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 1 \
        else batch_size


def _combined_batches(batches: Iterator, count: int, drop_last: bool) -> Iterator:
    """Each ``count`` consecutive batches of ``batches`` as one, their tensors
    concatenated along the first dimension in order (PopTorch's combination
    of a batch sampler's batches); a last group of fewer unless ``drop_last``."""
    group: list = []
    for batch in batches:
        group.append(batch)
        if len(group) == count:
            yield _concatenated(group)
            group = []
    if group and not drop_last:
        yield _concatenated(group)


def _concatenated(batches: list) -> Any:
    """The batches' tensors joined leaf by leaf; a value that is no tensor
    (nor holds one) is the last batch's, as in PopTorch."""
    last = batches[-1]
    parser = parser_for(type(last))
    if parser is not None:
        columns = zip(*(list(parser.yieldTensors(batch)) for batch in batches))
        return parser.reconstruct(last, iter([torch.cat(list(c)) for c in columns]))
    if isinstance(last, torch.Tensor):
        return torch.cat(batches)
    if isinstance(last, dict):
        return type(last)({key: _concatenated([b[key] for b in batches]) for key in last})
    if isinstance(last, (tuple, list)):
        joined = [_concatenated(list(column)) for column in zip(*batches)]
        if hasattr(last, "_fields"):  # a named tuple
            return type(last)(*joined)
        return type(last)(joined)
    return last


def _warn_last_step_short(batch_sampler: Any, per_step: int) -> None:
    try:
        batches = len(batch_sampler)
    except (TypeError, NotImplementedError):
        batches = None
    if batches is None or batches is NotImplemented:
        warnings.warn(
            "The `batch_sampler` has no __len__ and drop_last=False: the last batch may "
            f"join fewer than {per_step} of its batches. Switch to drop_last=True to "
            "avoid handling this special case.", stacklevel=3)
    elif batches % per_step:
        warnings.warn(
            f"The number of batches generated by the batch sampler ({batches}) is not "
            f"divisible by the number of batches processed per step ({per_step}) and "
            f"drop_last=False: the last batch will join {batches % per_step} of them. "
            "Switch to drop_last=True to avoid handling this special case.", stacklevel=3)


def _check_iterable(partition: bool, processes: int, num_workers: int,
                    kwargs: dict) -> None:
    if partition:
        raise ValueError(
            "poptorch.DataLoader: auto_distributed_partitioning is not "
            f"supported for an IterableDataset (this run has {processes} "
            "processes): an iterable has no indices to split. Make the "
            "dataset yield only this process's part (see "
            "options.Distributed.process_id) and pass "
            "auto_distributed_partitioning=False.")
    if num_workers > 1 and "worker_init_fn" not in kwargs:
        warnings.warn(
            f"IterableDataset used with num_workers={num_workers} but no "
            f"worker_init_fn: unless the dataset splits itself with "
            "torch.utils.data.get_worker_info(), the DataLoader will return "
            f"each element of the dataset {num_workers} times.", stacklevel=3)


def _warn_last_batch_short(num_elements: int, per_step: int) -> None:
    left = num_elements % per_step
    if left:
        warnings.warn(
            f"The number of elements in the dataset ({num_elements}) is not "
            f"divisible by the number of elements processed per step "
            f"({per_step}) and drop_last=False: the last batch will have "
            f"{left} elements. Switch to drop_last=True to avoid handling "
            "this special case.", stacklevel=3)


def _length_or_none(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:
        return None


def _check_async_options(async_options: dict[str, Any] | None) -> dict:
    async_options = dict(async_options or {})
    if "rebatched_size" in async_options:
        raise ValueError(
            "poptorch.DataLoader: rebatched_size cannot be given in "
            "async_options: use mode=DataLoaderMode.AsyncRebatched (with "
            "rebatched_worker_size) and the DataLoader sets it.")
    unknown = sorted(set(async_options) - set(_ASYNC_OPTIONS))
    if unknown:
        raise ValueError(
            f"poptorch.DataLoader: unknown async_options {unknown}; the "
            f"AsynchronousDataAccessor accepts {list(_ASYNC_OPTIONS)}.")
    return async_options
