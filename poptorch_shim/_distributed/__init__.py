"""Several instances: poprun, its flags, and the torch.distributed process group
that all-reduces gradients and aligns the simulated clocks between instances."""
