"""What several of the shim's subsystems need, and that imports none of them.

The batching arithmetic, the run's settings, the simulated clock, the compile
hooks and the lookup from ipusim's names to PopTorch's option calls live here,
so that data loading, execution, the run and the sweep each depend on this
package and never on one another in a loop.
"""
