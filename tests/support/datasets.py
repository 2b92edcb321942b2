"""Small datasets the loader tests read: each item says which it is."""
import torch


class Indices(torch.utils.data.Dataset):
    """dataset[i] = i."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return index
