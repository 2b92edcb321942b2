"""libpva's operation analysis: ``pva.OperationAnalysis(report).operations``.

An operation is one operator of the model as the profile's program steps run it:
its ``name``, ``type`` (the framework operator,
``aten::addmm``), its ``cycles`` in the profiled step (all its runs), its
``programs``, and its ``debugContext``. With the ``debug.cbor`` of the run given to
``openReport``, the debug context is the chain PopTorch records: the operation's
own context, whose parent is the ``poptorch`` layer's, naming the module path and
the file, line and function of the user's code that called it
(``json.loads(context.json)`` gives ``op_name``, ``op_type``, ``layer`` and ``module``).
An operation with such a context is named as PopTorch names it, by its ``op_name``
(``block0/lstm/LSTM``: the module path and the operation's PopTorch type; a gradient
operator, its forward operator's); one without is named by its place in the profile,
``stage/pass/op/n``, which its own context's ``name`` always is.
"""
from __future__ import annotations

import json

from poptorch_shim.pva.not_simulated import NotSimulatedError


class Location:
    """Where in the user's code an operation was made."""

    def __init__(self, record: dict):
        self.fileName = record.get("fileName", "")
        self.lineNumber = record.get("lineNumber", 0)
        self.functionName = record.get("functionName", "")


class DebugContext:
    """One debug context: ``name``, ``layer``, ``json`` (its data as a JSON string),
    ``location`` and ``parents``."""

    def __init__(self, name: str, layer: str, data: dict, location: dict,
                 parents: list[DebugContext]):
        self.name = name
        self.layer = json.dumps({"layer": layer})
        self.json = json.dumps(data)
        self.location = Location(location)
        self.parents = parents


class Operation:
    """One operator of the profile: ``name``, ``type``, ``cycles``, ``programs`` and
    ``debugContext``; ``replacedDebugContext`` is empty (no operation replaces another)."""

    def __init__(self, record: dict, programs: list, contexts: list[dict]):
        self.name = contexts[0]["name"] if contexts else record["name"]
        self.type = record["type"]
        self.cycles = record["cycles"]
        self.programs = [programs[index] for index in record["programs"]]
        self.replacedDebugContext: list[DebugContext] = []
        own = {"op_name": record["name"], "op_type": self.type, "layer": "ipusim",
               "stage": record["stage"], "pass": record["pass"]}
        parents = [DebugContext(c["name"], c["layer"],
                                {"op_name": c["name"], "op_type": c["op_type"],
                                 "layer": c["layer"], "module": c["module"]}, c, [])
                   for c in contexts]
        self.debugContext = DebugContext(record["name"], "ipusim", own,
                                         contexts[0] if contexts else {}, parents)

    @property
    def memory(self):
        raise NotSimulatedError("Operation.memory", "ipusim knows each variable's bytes and "
                                "liveness, not which operation allocated it")


class OperationAnalysis:
    """The operations of a report (``operations``), with their debug contexts when the
    report was opened with its ``debug.cbor``."""

    def __init__(self, report):
        debug = (report._debug or {}).get("operations", {})
        self.operations = [Operation(record, report._programs, debug.get(record["name"], []))
                           for record in report._document["operations"]]
