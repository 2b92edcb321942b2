"""``profile.pop``: a run's graph and execution profile, in ipusim's own format.

PopTorch leaves ``profile.pop`` in each model's autoReport folder, and scripts read
it with libpva (``import pva``). ipusim writes the same file name with what its
simulation knows, in a format of its own (PopVision's desktop tools do not open
it; ``import pva`` under the shim does). It is gzip-compressed JSON, one object:

``format`` / ``version``
    ``"ipusim-pop"`` and :data:`VERSION` (a reader refuses another version).
``poplar_version``
    ``string``: the simulator and the Poplar SDK whose behaviour it follows.
``target``
    ``type``, ``arch``, ``numIPUs`` (of one replica), ``numReplicas``,
    ``tilesPerIpu``, ``numTiles`` (of one replica), ``clockFrequency`` (Hz),
    ``bytesPerTile``, ``bytesPerIPU``.
``programs``
    every program as columns, ``{"type", "name", "vertex", "operation",
    "children", "count"}``, its id its position: the program steps' leaves
    (``OnTileExecute``, ``DoExchange``, ``Sync``, ``StreamCopyBegin`` / ``Mid`` /
    ``End``), one per distinct name, then the control programs over them
    (:func:`~ipusim.analysis.program_steps.program_tree`): a ``Sequence`` per model
    stage and pass whose ``children`` are their ids, a ``Call`` of it for each pass
    run, a ``Repeat`` (``count`` times its one child) for each run repeated back to
    back, and last the root, the ``Sequence`` ``step``. ``count`` is 1 but for a
    ``Repeat`` (absent in files written before it).
``steps``
    the last simulated step of replica 0 in order, as three lists of one entry a
    step, ``program`` (its id), ``ipu`` (each step runs on one IPU of the replica)
    and ``cycles``: the execution trace, which is also
    the liveness's program steps; at most
    :data:`~ipusim.analysis.program_steps.MAX_PROGRAM_STEPS`, whole events.
``events``
    ``{"listed", "total"}``: of that step's events, how many the steps list.
``executed``
    whether the model ran: false in the profile a model writes when it compiles
    (Poplar writes the graph profile then), whose ``steps`` are those of its
    compiled step, simulated once for its program and liveness but not run (a reader
    lists no execution for it). Absent in files written before it: true.
``variables``
    ``{"id", "name", "ipu", "bytes", "width", "layout", "column", "category",
    "alwaysLive", "module", "first", "last"}``: each variable as
    :class:`~ipusim.analysis.tile_memory.Variable` describes it; ``first`` / ``last``:
    the steps a not-always-live variable is live over (null for always-live ones).
``notAlwaysLive``
    the bytes of the not-always-live variables live at each step.
``tiles``
    each tile's memory, one list per column (``ipu``, ``tile``, one per category
    of always-live variable, ``not_always_live``, ``code``, ``exchange``,
    ``total``, ``capacity``).
``operations``
    ``{"name", "type", "stage", "pass", "cycles", "programs"}``: each operator of the
    step, its clock cycles there (all its runs) and its programs' ids.

``debug.cbor`` (``autoReport.outputDebugInfo``) holds the operations' debug
contexts: ``{"format": "ipusim-debug", "version", "operations": {name: [context,
...]}}``, each context ``{"layer", "name", "module", "fileName", "lineNumber",
"functionName"}``. It is JSON too; the file name is the one PopTorch uses.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from ipusim.analysis.graph_profile import GraphProfile
from ipusim.analysis.program_steps import ON_TILE_EXECUTE, ControlProgram, StepTable
from ipusim.analysis.timeline import Timeline
from ipusim.report.files import write_atomically

FORMAT, DEBUG_FORMAT = "ipusim-pop", "ipusim-debug"
VERSION = 1
POP, DEBUG = "profile.pop", "debug.cbor"
#: The Poplar SDK whose programs, libraries and profile API the simulator follows.
POPLAR_SDK = "3.3.0"


def _programs(steps: StepTable, tree: list[ControlProgram]) -> dict[str, list]:
    """The programs of ``steps`` as columns: each distinct one, then the control programs
    over them (``tree``, :func:`~ipusim.analysis.program_steps.program_tree`), the root
    last."""
    kinds, names, vertices, operations = (list(column) for column in zip(*(
        (p.kind, p.name, p.vertex, p.operation) for p in steps.programs))) if steps.programs \
        else ([], [], [], [])
    children: list[list[int]] = [[] for _ in steps.programs]
    counts = [1] * len(steps.programs)
    for program in tree:
        kinds.append(program.kind)
        names.append(program.name)
        vertices.append("")
        operations.append("")
        children.append(list(program.children))
        counts.append(program.count)
    return {"type": kinds, "name": names, "vertex": vertices, "operation": operations,
            "children": children, "count": counts}


def _operations(steps: StepTable) -> list[dict]:
    """Each operator run of ``steps``: its name and type, stage and pass, its cycles in the
    step (all its steps) and its programs."""
    cycles = np.bincount(steps.program, weights=steps.cycles, minlength=len(steps.programs))
    operations: dict[str, dict] = {}
    for index, p in enumerate(steps.programs):
        if not p.operation:
            continue
        entry = operations.setdefault(p.operation, {
            "name": p.operation, "type": p.op, "stage": p.stage, "pass": p.phase,
            "cycles": 0, "programs": []})
        entry["cycles"] += int(cycles[index])
        entry["programs"].append(index)
    return list(operations.values())


def pop_document(timeline: Timeline, profile: GraphProfile, executed: bool = True) -> dict:
    """The ``profile.pop`` object of ``timeline`` (see the module's docstring); ``executed``:
    whether the model ran, or ``timeline`` is its compiled step simulated for the graph
    profile alone."""
    plan, ipu = timeline.plan, timeline.run.compute_ipu(timeline.system.ipu)
    steps = profile.steps
    programs = _programs(steps, profile.tree)
    ipus = plan.ipus_per_replica
    spans = [(v, None, None) for v in profile.always_live] + \
        [(r.variable, r.first, r.last) for r in profile.ranges]
    variables = [{"id": index, "name": v.name, "ipu": v.ipu, "bytes": v.bytes, "width": v.width,
                  "layout": v.layout, "column": v.column, "category": v.category,
                  "alwaysLive": v.always_live, "module": v.module, "first": first, "last": last}
                 for index, (v, first, last) in enumerate(spans)]
    return {
        "format": FORMAT, "version": VERSION,
        "poplar_version": {"string": f"ipusim (simulated; Poplar SDK {POPLAR_SDK} semantics)"},
        "target": {"type": "IPU", "arch": timeline.system.ipu.name, "numIPUs": ipus,
                   "numReplicas": timeline.run.total_replicas, "tilesPerIpu": ipu.tiles,
                   "numTiles": ipu.tiles * ipus, "clockFrequency": ipu.clock_hz,
                   "bytesPerTile": ipu.sram_per_tile_bytes,
                   "bytesPerIPU": ipu.sram_per_tile_bytes * ipu.tiles},
        "programs": programs,
        "steps": {"program": steps.program.tolist(), "ipu": steps.ipu.tolist(),
                  "cycles": steps.cycles.tolist()},
        "events": {"listed": steps.events_listed, "total": steps.events_total},
        "executed": executed,
        "computeSets": programs["type"].count(ON_TILE_EXECUTE),
        "variables": variables,
        "notAlwaysLive": profile.liveness["bytes"].astype(int).tolist(),
        "tiles": {name: profile.tiles[name].tolist() for name in profile.tiles.columns},
        "operations": _operations(steps),
    }


def write_pop(directory: str | Path, timeline: Timeline,
              graph: GraphProfile | None = None, executed: bool = True) -> Path:
    """Write ``profile.pop`` of ``timeline`` into ``directory``; returns its path. ``graph``:
    its graph profile when already worked out (with the model's named parameters), else
    worked out here without them; ``executed``: see :func:`pop_document`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    document = pop_document(timeline, graph or timeline.graph_profile(), executed)
    path = directory / POP
    write_atomically(path, gzip.compress(json.dumps(document, separators=(",", ":")).encode(),
                                         compresslevel=5))
    return path


def write_debug(path: str | Path, debug: dict[str, list[dict]]) -> Path:
    """Write the operations' debug contexts (see the module's docstring) to ``path``."""
    document = {"format": DEBUG_FORMAT, "version": VERSION, "operations": debug}
    write_atomically(Path(path), json.dumps(document, indent=1))
    return Path(path)
