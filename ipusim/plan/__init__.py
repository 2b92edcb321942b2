"""The plan layer: how work is run, and the programs that run it.

``run_config`` says how (batching, replication, execution, sync pattern);
``engine_plan`` works out the stages as run and the pipeline's numbers once;
``schedule/`` writes each IPU's program; ``memory`` and ``folding`` read the
plan. It builds on the hardware, cost and engine layers.
"""
