"""Seed 004, step 1: a plain torch DataLoader, in one process or under poprun.

CIFAR10 is replaced by a synthetic dataset of the same size (torchvision is
not available here), made up sample by sample on demand; nothing else
differs from the tutorial's script. Run it on its own, then under poprun,
where every instance iterates over the whole dataset::

    python scenarios/distributed/step1.py
    poprun --num-replicas 8 --num-instances 4 python scenarios/distributed/step1.py
"""
import torch


class SyntheticCIFAR10(torch.utils.data.Dataset):
    """CIFAR10's shape without its download: 50,000 random 3x32x32 images
    with labels 0-9, the same on every call and in every process."""

    def __len__(self):
        return 50000

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        return torch.rand(3, 32, 32, generator=generator), index % 10


if __name__ == '__main__':
    dataset = SyntheticCIFAR10()
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=32, drop_last=True)
    for (data, label) in dataloader:
        print(f'* dataset size: {len(dataset)}\n'
              f'* dataloader size: {len(dataloader)}\n'
              f'* batch size: {data.shape[0]}')
        break
