"""The sampler that gives each process of a distributed run its own part of a
map-style dataset, as ``poptorch.DataLoader`` does with
``auto_distributed_partitioning``.

The DataLoader is rebuilt around this sampler instead of wrapping or
changing the user's dataset. With ``drop_last`` every process gets the same
number of whole combined batches (processes that disagree on the number of
steps would hang the collective operations of a real run): a contiguous
block of ``step x (N // (step x P))`` indices starting at ``process_id`` times
that. Without ``drop_last`` the N indices are split as evenly as possible,
the first ``N % P`` processes getting one more.

With ``shuffle`` every process draws the same permutation of the whole
dataset from ``seed + epoch`` and takes its block of it, so that within an
epoch the processes never share an index, and each epoch brings every
process a new random part (the left-over indices change too).
"""
from collections.abc import Iterator

import torch


class ShardSampler(torch.utils.data.Sampler):
    """Indices of one process's shard of a dataset of ``dataset_len`` items."""

    def __init__(self, dataset_len: int, num_processes: int, process_id: int,
                 step: int, drop_last: bool, shuffle: bool, seed: int = 0):
        super().__init__()
        self.dataset_len = dataset_len
        if drop_last:
            per_process = step * (dataset_len // (step * num_processes))
            self.offset = process_id * per_process
            self.length = per_process
        else:
            sizes = [dataset_len // num_processes
                     + (dataset_len % num_processes > process)
                     for process in range(num_processes)]
            self.offset = sum(sizes[:process_id])
            self.length = sizes[process_id]
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0  # advanced by each __iter__, i.e. each pass

    def indices(self, epoch: int) -> list[int]:
        """The indices this process reads in ``epoch`` (counted from 0)."""
        if not self.shuffle:
            return list(range(self.offset, self.offset + self.length))
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        permutation = torch.randperm(self.dataset_len, generator=generator)
        return permutation[self.offset:self.offset + self.length].tolist()

    def __iter__(self) -> Iterator[int]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        return iter(self.indices(epoch))

    def __len__(self) -> int:
        return self.length
