"""``import pva``: libpva's Python API over the profiles ipusim writes.

Graphcore's tutorials and PopTorch's tests script their profiles with libpva;
under the shim the same code reads ipusim's ``profile.pop`` (a format of its own,
:mod:`ipusim.report.pop_profile`) and ``host.pvti``:

- :func:`openReport`: ``report.poplarVersion``, ``report.compilation`` (target,
  graph, tiles and their memory, always-live variables, liveness per program step,
  programs), ``report.execution.steps``;
- :class:`ProgramVisitor` and ``program.accept(visitor)``;
- :class:`OperationAnalysis`: each operation with its cycles and debug context;
- :func:`openTrace`: the host-side trace.

A field the simulation has no figure for raises :class:`NotSimulatedError` (an
``AttributeError``) saying why.
"""
from poptorch_shim.pva.not_simulated import NotSimulatedError
from poptorch_shim.pva.operations import OperationAnalysis
from poptorch_shim.pva.programs import Program, ProgramVisitor
from poptorch_shim.pva.report import openReport
from poptorch_shim.pva.trace import openTrace

__all__ = ["NotSimulatedError", "OperationAnalysis", "Program", "ProgramVisitor", "openReport",
           "openTrace"]
