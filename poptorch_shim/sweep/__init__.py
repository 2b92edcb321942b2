"""Design-space sweeps of a PopTorch model, and an advisor that picks a configuration.

A model is measured once per distinct stage signature (timing-only), then
every point of a grid or random sample of ``poptorch.Options`` settings is
simulated, in this process, in local worker processes or on Ray, its
figures recorded as it finishes. See :func:`sweep` and
:func:`poptorch_shim.sweep.advisor.advise`.
"""
from poptorch_shim.sweep.backends import InProcess, LocalProcesses, RayCluster
from poptorch_shim.sweep.measure import Measurements, ModelCase
from poptorch_shim.sweep.run import read_results, sweep
from poptorch_shim.sweep.spec import ModelSource, SweepSpec, load

__all__ = ["InProcess", "LocalProcesses", "Measurements", "ModelCase", "ModelSource",
           "RayCluster", "SweepSpec", "load", "read_results", "sweep"]
