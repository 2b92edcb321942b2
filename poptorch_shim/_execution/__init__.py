"""Running a model: splitting a call into micro-batches and assembling outputs,
staged and eager execution, measuring each stage and the simulated device."""
