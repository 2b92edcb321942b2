"""Seed 004, step 2: ``poptorch.DataLoader`` gives each poprun instance its own
part of the dataset (1,562 batches of 32 split over 4 instances: 390 each)::

    poprun --num-replicas 8 --num-instances 4 python scenarios/distributed/step2.py
"""
import poptorch

from step1 import SyntheticCIFAR10

if __name__ == '__main__':
    dataset = SyntheticCIFAR10()
    options = poptorch.Options()
    dataloader = poptorch.DataLoader(options, dataset, batch_size=32, drop_last=True)
    for (data, label) in dataloader:
        print(f'* dataset size: {len(dataset)}\n'
              f'* dataloader size: {len(dataloader)}\n'
              f'* batch size: {data.shape[0]}')
        break
