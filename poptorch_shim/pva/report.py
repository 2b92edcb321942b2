"""libpva's report: ``pva.openReport(profile[, debug])`` over ipusim's ``profile.pop``.

The objects and fields are libpva's (``report.compilation.target.numTiles``,
``report.execution.steps``, ``tile.memory.total.includingGaps``...), filled from the
document :mod:`ipusim.report.pop_profile` writes. A field the simulation has no
figure for raises :class:`~poptorch_shim.pva.not_simulated.NotSimulatedError` saying
why; none is made up. What the simulation gives differently from Poplar:

- memory has no gaps (ipusim allocates no addresses), so ``includingGaps`` and
  ``excludingGaps`` are equal;
- a tile's ``memory.category`` holds ipusim's categories (``weights``, ``optimizer``,
  ``accumulators``, ``notAlwaysLive``, ``code``, ``exchange``) and ``variable``, every
  variable's bytes; Poplar's finer code categories (``vertexCode``,
  ``controlCode``...) raise;
- the execution steps are the last simulated step of replica 0, each with its
  cycles on the IPU that runs it (0 on the others).
"""
from __future__ import annotations

import gzip
import json
from functools import cached_property
from pathlib import Path

import numpy as np

from ipusim.analysis.tile_memory import Variable as LaidOut
from ipusim.analysis.tile_memory import tile_bytes
from ipusim.report.pop_profile import DEBUG_FORMAT, FORMAT, VERSION
from poptorch_shim.pva.not_simulated import NotSimulatedError
from poptorch_shim.pva.programs import Program

# ipusim's tile-memory columns that are no memory category.
_NOT_CATEGORIES = ("ipu", "tile", "total", "capacity")


def _load(path: str | Path, expected: str, opener) -> dict:
    """The document at ``path``, checked to be ipusim's ``expected`` format and version."""
    try:
        with opener(path) as stream:
            document = json.loads(stream.read())
    except OSError as error:
        if isinstance(error, FileNotFoundError) or error.errno is not None:
            raise
        raise ValueError(f"{path} is not an ipusim profile ({error})") from None
    except ValueError as error:
        raise ValueError(f"{path} is not an ipusim profile: {error}") from None
    found = document.get("format") if isinstance(document, dict) else None
    if found != expected:
        raise ValueError(f"{path} is not an ipusim {expected!r} file (format {found!r}); "
                         "pva here reads the profiles ipusim writes, not Poplar's")
    if document.get("version") != VERSION:
        raise ValueError(f"{path} is version {document.get('version')!r} of {expected!r}; "
                         f"this pva reads version {VERSION}")
    return document


class PoplarVersion:
    """What wrote the profile: ``string``."""

    def __init__(self, record: dict):
        self.string = record["string"]


class Target:
    """The target of one replica: ``type``, ``arch``, ``numIPUs``, ``numReplicas``,
    ``tilesPerIpu``, ``numTiles``, ``clockFrequency`` (Hz), ``bytesPerTile``,
    ``bytesPerIPU``."""

    def __init__(self, record: dict):
        for name, value in record.items():
            setattr(self, name, value)


class Graph:
    """The compiled graph's sizes: ``numComputeSets`` and ``numVariables``."""

    def __init__(self, compute_sets: int, variables: int):
        self.numComputeSets = compute_sets
        self.numVariables = variables

    @property
    def numVertices(self):
        raise NotSimulatedError("Graph.numVertices", "the operator model prices each "
                                "operator on its busiest tile, not vertex by vertex")

    @property
    def numEdges(self):
        raise NotSimulatedError("Graph.numEdges", "ipusim builds no vertices, so no edges")


class Bytes:
    """A memory figure: ``includingGaps`` and ``excludingGaps`` (equal: no gaps are
    simulated), and ``total``."""

    def __init__(self, value: float):
        self.includingGaps = self.excludingGaps = self.total = int(round(value))


class Categories:
    """A tile's memory by category, each a :class:`Bytes`."""

    def __init__(self, values: dict[str, float]):
        self._names = sorted(values)
        for name, value in values.items():
            setattr(self, name, Bytes(value))

    def __getattr__(self, name: str):
        raise NotSimulatedError(f"memory category {name}", "a tile's memory is simulated by "
                                f"the categories {', '.join(self._names)}")


class TileMemory:
    """One tile's memory: ``total``, ``alwaysLiveBytes``, ``notAlwaysLiveBytes`` (the most
    live at once) and ``category``."""

    def __init__(self, row: dict[str, float], always_live: list[str]):
        self.total = Bytes(row["total"])
        self.alwaysLiveBytes = int(round(sum(row[name] for name in always_live)))
        self.notAlwaysLiveBytes = int(round(row["not_always_live"]))
        values = {("notAlwaysLive" if name == "not_always_live" else name): row[name]
                  for name in row if name not in _NOT_CATEGORIES}
        values["variable"] = self.alwaysLiveBytes + row["not_always_live"]
        self.category = Categories(values)


class Tile:
    """One tile: ``number`` (on its IPU), ``ipu`` and ``memory``."""

    def __init__(self, row: dict[str, float], always_live: list[str]):
        self.number = int(row["tile"])
        self.ipu = int(row["ipu"])
        self.memory = TileMemory(row, always_live)


class Ipu:
    """One IPU of the replica: ``id`` and its ``tiles``."""

    def __init__(self, index: int, tiles: list[Tile]):
        self.id = index
        self.tiles = tiles


class Variable:
    """A variable: ``name``, ``size`` (bytes), ``category``, ``ipu`` and ``module`` (the
    module path of the layer that owns it, empty when not known)."""

    def __init__(self, record: dict):
        self._id = record["id"]
        self.name = record["name"]
        self.size = record["bytes"]
        self.category = record["category"]
        self.ipu = record["ipu"]
        self.module = record["module"]
        self._record = record

    def on_tiles(self, tiles: int) -> np.ndarray:
        """Its bytes on each of ``tiles`` tiles, as ipusim laid it out."""
        r = self._record
        return tile_bytes(LaidOut(r["name"], r["ipu"], r["bytes"], r["width"], r["category"],
                                  r["alwaysLive"], r["layout"], r["column"]), tiles)


class LiveMemory:
    """The not-always-live memory of a step: ``bytes`` and its ``variables`` (found when
    asked for: a script that sums the bytes of every step does not pay for them)."""

    def __init__(self, size: int, variables):
        self.bytes = int(size)
        self._variables = variables

    @cached_property
    def variables(self) -> list[Variable]:
        return self._variables()


class LivenessStep:
    """A program step of the liveness: its ``program``, ``notAlwaysLiveMemory`` and, for
    one tile, ``notAlwaysLiveMemoryForTile(tile)``."""

    def __init__(self, report: Report, index: int):
        self._report, self._index = report, index
        self.program = report._program_of_step(index)

    def _live(self) -> list[Variable]:
        return [v for v in self._report._transient
                if v._record["first"] <= self._index <= v._record["last"]]

    @property
    def notAlwaysLiveMemory(self) -> LiveMemory:
        return LiveMemory(self._report._document["notAlwaysLive"][self._index], self._live)

    def notAlwaysLiveMemoryForTile(self, tile: Tile) -> LiveMemory:
        """What is live on ``tile`` (a :class:`Tile`, or its number on IPU 0) at this step."""
        number, ipu = (tile.number, tile.ipu) if isinstance(tile, Tile) else (int(tile), 0)
        tiles = self._report.compilation.target.tilesPerIpu
        live = [v for v in self._live() if v.ipu == ipu and v.on_tiles(tiles)[number]]
        return LiveMemory(sum(int(v.on_tiles(tiles)[number]) for v in live), lambda: live)


class Compilation:
    """What compiling gave: ``target``, ``graph``, ``tiles`` (all IPUs'), ``ipus``,
    ``alwaysLiveVariables``, ``livenessProgramSteps``, ``programs`` (every program) and
    ``controlPrograms`` (the root of the program tree: the step's ``Sequence``, whose
    ``Repeat``, ``Call`` and ``Sequence`` children lead to the program steps)."""

    def __init__(self, report: Report):
        self._report = report
        document = report._document
        self.target = Target(document["target"])
        self.graph = Graph(document["computeSets"], len(document["variables"]))
        self.programs = report._programs
        roots = [p for p in self.programs if p.type is Program.Type.Sequence and p.name == "step"]
        self.controlPrograms = roots[-1:]

    @cached_property
    def tiles(self) -> list[Tile]:
        columns = self._report._document["tiles"]
        categories = {v.category for v in self.alwaysLiveVariables}
        names = list(columns)
        return [Tile(dict(zip(names, values)), sorted(categories & set(names)))
                for values in zip(*columns.values())]

    @cached_property
    def ipus(self) -> list[Ipu]:
        return [Ipu(index, [t for t in self.tiles if t.ipu == index])
                for index in range(self.target.numIPUs)]

    @cached_property
    def alwaysLiveVariables(self) -> list[Variable]:
        return [v for v in self._report._variables if v._record["alwaysLive"]]

    @cached_property
    def livenessProgramSteps(self) -> list[LivenessStep]:
        return [LivenessStep(self._report, index)
                for index in range(len(self._report._document["steps"]["program"]))]


class IpuCycles:
    """A step's cycles on one IPU."""

    def __init__(self, index: int, cycles: int):
        self.id = index
        self.cycles = cycles


class ExecutionStep:
    """One program step as it ran: ``program``, ``name``, ``cycles`` (on the IPU that ran
    it) and ``ipus[i].cycles``."""

    def __init__(self, program: Program, ipu: int, cycles: int, ipus: int):
        self.program = program
        self.name = program.name
        self.ipus = [IpuCycles(index, cycles if index == ipu else 0) for index in range(ipus)]
        self.cycles = cycles


class Execution:
    """What running gave: the ``steps`` of one simulated step, ``totalCycles`` (their sum on
    the busiest IPU), and of that step's events how many the steps list (``eventsListed``
    of ``eventsTotal``: fewer where the step has more program steps than a profile lists,
    :data:`ipusim.analysis.program_steps.MAX_PROGRAM_STEPS`)."""

    def __init__(self, report: Report):
        self.eventsListed = report._document["events"]["listed"]
        self.eventsTotal = report._document["events"]["total"]
        ipus = report._document["target"]["numIPUs"]
        steps = report._document["steps"]
        if not report._document.get("executed", True):  # written when it compiled: no run
            steps = {"program": [], "ipu": [], "cycles": []}
        self.steps = [ExecutionStep(report._programs[program], ipu, cycles, ipus)
                      for program, ipu, cycles in zip(steps["program"], steps["ipu"],
                                                      steps["cycles"])]
        per_ipu = np.bincount(np.array(steps["ipu"], dtype=np.int64),
                              weights=np.array(steps["cycles"], dtype=np.int64), minlength=ipus)
        self.totalCycles = int(per_ipu.max())

    @property
    def runs(self):
        raise NotSimulatedError("Execution.runs", "profile.pop holds one simulated step; "
                                "each call's time is in the report's events")


class Report:
    """A profile, as ``pva.openReport`` opens it: ``poplarVersion``, ``compilation`` and
    ``execution``; the debug contexts, when a ``debug.cbor`` was given, for
    :class:`~poptorch_shim.pva.operations.OperationAnalysis`."""

    def __init__(self, document: dict, debug: dict | None):
        self._document = document
        self._debug = debug
        self._programs: list[Program] = []
        columns = document["programs"]
        self._programs.extend(Program(index, columns, self._programs)
                              for index in range(len(columns["name"])))
        self._variables = [Variable(record) for record in document["variables"]]
        self._transient = [v for v in self._variables if not v._record["alwaysLive"]]
        self.poplarVersion = PoplarVersion(document["poplar_version"])
        self.compilation = Compilation(self)

    @cached_property
    def execution(self) -> Execution:
        return Execution(self)

    def _program_of_step(self, index: int) -> Program:
        return self._programs[self._document["steps"]["program"][index]]


def openReport(profile: str | Path, debug: str | Path | None = None) -> Report:
    """Open a ``profile.pop`` written by ipusim, with its ``debug.cbor`` if given. Raises
    FileNotFoundError for a missing file, ValueError for one that is not ipusim's."""
    document = _load(profile, FORMAT, gzip.open)
    debug_document = None if debug is None else _load(debug, DEBUG_FORMAT, open)
    return Report(document, debug_document)
