"""The machinery behind ``poptorch.optim``: the shared optimizer base, the
optimizer-state accounting the memory model reads, and LAMB."""
