"""Seed 004, step 3: ``popdist.poptorch.Options`` takes the replication factor
from poprun, so each instance's 2 local replicas read 195 steps of 64::

    poprun --num-replicas 8 --num-instances 4 python scenarios/distributed/step3.py

(The tutorial's diff drops ``import poptorch`` but still calls
``poptorch.DataLoader``; both imports are kept here so the script runs.)
"""
import popdist.poptorch
import poptorch

from step1 import SyntheticCIFAR10

if __name__ == '__main__':
    dataset = SyntheticCIFAR10()
    options = popdist.poptorch.Options()
    dataloader = poptorch.DataLoader(options, dataset, batch_size=32, drop_last=True)
    for (data, label) in dataloader:
        print(f'* number of local replicas: {options.replication_factor}\n'
              f'* dataset size: {len(dataset)}\n'
              f'* dataloader size: {len(dataloader)}\n'
              f'* batch size: {data.shape[0]}')
        break
