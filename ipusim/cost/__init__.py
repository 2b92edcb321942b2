"""The cost layer: what a model costs, and what that costs in time on an IPU.

``work`` describes the stages and their operators, independent of how they
run; ``operator_model`` prices an operator in tile cycles as PopLibs plans
it; ``cost_model`` turns work, links and syncs into picoseconds. It reads
only the hardware layer.
"""
