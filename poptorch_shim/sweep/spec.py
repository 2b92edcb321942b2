"""A sweep's specification: the model, the space of settings, how to sample it.

Read from TOML (``ipusim sweep SPEC.toml``)::

    [model]
    factory = "scenarios.bert_large:sweep_case"   # or script = "train.py"
    kwargs = { size = "reduced" }                 # arguments of the factory
    # args = ["--size", "reduced"]                # a script's command line

    [sweep]
    steps = 1            # calls simulated per point
    sample = 50          # a seeded random sample of the grid; leave out for all of it
    seed = 0
    output = "bert.parquet"

    [fixed]              # settings every point shares
    "Simulation.system" = ["bow", 16]

    [space]              # each setting's values; a point takes one of each
    replicationFactor = [1, 2, 4]
    "Training.gradientAccumulation" = [64, 256]

Settings are named as in :mod:`poptorch_shim.sweep.settings`. A point's
identity is a hash of the model (its source, the hash of its code and of the
work measured from it), the steps and its settings, so a results file knows
which points it already holds and a changed model is measured again. Every
key's type is checked, naming the key.
"""
from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import random
import tomllib
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

from poptorch_shim.sweep import settings as sweep_settings

_SECTIONS = {"model", "sweep", "fixed", "space"}


class ModelError(ValueError):
    """The sweep's model cannot be built (its factory or script is missing,
    raises or makes no model): the whole sweep fails, naming the cause."""


def _positive(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be a positive integer, got {value!r}")


def file_hash(path: str | Path) -> str:
    """A short hash of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class ModelSource:
    """Where the model comes from: ``factory`` ("module:function" returning
    ``(model, inputs, options[, optimizer])``, inputs being one micro-batch's
    positional arguments) or ``script`` (a PopTorch script: its first model)."""

    factory: str | None = None
    script: str | None = None
    args: tuple[str, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("factory", "script"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"[model] {name} must be a non-empty string, got {value!r}")
        args = self.args
        if isinstance(args, str):  # one argument or several? A spec does not guess.
            raise ValueError(f"[model] args must be a list of strings, one per argument "
                             f"(e.g. args = {json.dumps(args.split())}), got the string "
                             f"{args!r}")
        if not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
            raise ValueError("[model] args must be a list of strings, got "
                             f"{self.args!r}")
        object.__setattr__(self, "args", tuple(args))
        if not isinstance(self.kwargs, dict):
            raise ValueError(f"[model] kwargs must be a table (e.g. {{ size = \"reduced\" }}), "
                             f"got {self.kwargs!r}")
        if (self.factory is None) == (self.script is None):
            raise ValueError("[model]: give exactly one of factory = \"module:function\" or "
                             f"script = \"path.py\", got factory={self.factory!r}, "
                             f"script={self.script!r}")
        if self.factory is not None and ":" not in self.factory:
            raise ValueError(f"[model] factory must be \"module:function\", got {self.factory!r}")

    def identity(self) -> dict:
        """What names the model in a point's identity."""
        return {"factory": self.factory, "script": self.script, "args": list(self.args),
                "kwargs": self.kwargs}

    def describe(self) -> str:
        """The model in words: ``factory module:function`` or ``script path``."""
        return f"factory {self.factory}" if self.factory is not None else f"script {self.script}"

    def code_hash(self) -> str:
        """A hash of the model's code: the script's file, or the source file of
        the factory's module (found without running it). :class:`ModelError`
        if there is none."""
        if self.script is not None:
            try:
                return file_hash(self.script)
            except OSError as error:
                raise ModelError(f"[model] script {self.script}: cannot read it "
                                 f"({error.strerror or error})") from None
        module_name = self.factory.partition(":")[0]
        try:
            found = importlib.util.find_spec(module_name)
        except (ImportError, ValueError) as error:
            raise ModelError(f"[model] factory {self.factory!r}: {error}") from None
        if found is None:
            raise ModelError(f"[model] factory {self.factory!r}: no module named "
                             f"{module_name!r}")
        if found.origin is None or not Path(found.origin).is_file():
            return hashlib.sha256(repr(found.origin).encode()).hexdigest()[:16]
        return file_hash(found.origin)


@dataclass(frozen=True)
class SweepSpec:
    """The model, the settings every point shares, the space and how it is sampled."""

    model: ModelSource
    space: dict[str, list] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    sample: int | None = None
    seed: int = 0
    steps: int = 1
    output: str | None = None
    name: str | None = field(default=None, compare=False)  # the spec's file, if it has one

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelSource):
            raise ValueError(f"the spec's model must be a ModelSource, got {self.model!r}")
        for section in ("space", "fixed"):
            if not isinstance(getattr(self, section), dict):
                raise ValueError(f"[{section}] must be a table, got {getattr(self, section)!r}")
        for name, values in self.space.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"[space] {name}: expected a non-empty list of values, got "
                                 f"{values!r}")
        overlap = set(self.space) & set(self.fixed)
        if overlap:
            raise ValueError(f"settings {sorted(overlap)} are both [fixed] and in [space]")
        sweep_settings.check_names([*self.space, *self.fixed])
        if self.sample is not None:
            _positive("[sweep] sample", self.sample)
        _positive("[sweep] steps", self.steps)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"[sweep] seed must be an integer, got {self.seed!r}")
        if self.output is not None and (not isinstance(self.output, str) or not self.output):
            raise ValueError(f"[sweep] output must be a file name (.parquet or .csv), got "
                             f"{self.output!r}")

    @property
    def grid_size(self) -> int:
        """Points of the whole grid: the product of the axes' lengths (the grid is not built)."""
        return prod(len(values) for values in self.space.values())

    @property
    def size(self) -> int:
        """Points of the sweep: the grid's, or the sample's if smaller."""
        return self.grid_size if self.sample is None else min(self.sample, self.grid_size)

    @property
    def label(self) -> str:
        """What names the sweep in its results file: the spec's file, else its model."""
        return self.name if self.name is not None else self.model.describe()

    def points(self) -> list[dict[str, Any]]:
        """Each point's settings (fixed ones first): the whole grid in order,
        or ``sample`` distinct points of it drawn with ``seed``."""
        names = list(self.space)
        if self.sample is None or self.sample >= self.grid_size:
            combos = list(itertools.product(*self.space.values()))
        else:
            sizes = [len(self.space[name]) for name in names]
            chosen = random.Random(self.seed).sample(range(self.grid_size), self.sample)
            combos = [_decode(index, sizes, [self.space[n] for n in names]) for index in chosen]
        return [{**self.fixed, **dict(zip(names, combo))} for combo in combos]

    def point_id(self, point_settings: dict[str, Any], code: str | None = None,
                 work: str | None = None) -> str:
        """A point's identity: a hash of the model (with the hash of its code and
        of the work measured for the point), the steps and its settings."""
        return point_id(self.model, point_settings, self.steps, code, work)


def point_id(model: ModelSource, point_settings: dict[str, Any], steps: int,
             code: str | None = None, work: str | None = None) -> str:
    """A stable hash of a point's configuration (key order does not count)."""
    text = json.dumps({"model": model.identity(), "settings": point_settings, "steps": steps,
                       "code": code, "work": work}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _decode(index: int, sizes: list[int], values: list[list]) -> tuple:
    """The grid point at ``index`` of the product, last axis fastest."""
    combo = []
    for size, axis in zip(reversed(sizes), reversed(values)):
        index, position = divmod(index, size)
        combo.append(axis[position])
    return tuple(reversed(combo))


def _table(data: dict[str, Any], section: str) -> dict[str, Any]:
    value = data.get(section, {})
    if not isinstance(value, dict):
        raise ValueError(f"[{section}] must be a table, got {value!r}")
    return dict(value)


def from_dict(data: dict[str, Any], base: Path = Path("."), name: str | None = None) -> SweepSpec:
    """A spec from its TOML tables; relative paths are taken from ``base``."""
    unknown = set(data) - _SECTIONS
    if unknown:
        raise ValueError(f"unknown section(s) {sorted(unknown)} in the sweep spec; expected "
                         f"{sorted(_SECTIONS)}")
    model = _table(data, "model")
    extra = set(model) - {"factory", "script", "args", "kwargs"}
    if extra:
        raise ValueError(f"[model]: unknown key(s) {sorted(extra)}; expected factory, script, "
                         "args, kwargs")
    if isinstance(model.get("script"), str) and model["script"]:
        model["script"] = os.path.normpath(base / model["script"])
    sweep = _table(data, "sweep")
    extra = set(sweep) - {"steps", "sample", "seed", "output"}
    if extra:
        raise ValueError(f"[sweep]: unknown key(s) {sorted(extra)}; expected steps, sample, "
                         "seed, output")
    output = sweep.get("output")
    if isinstance(output, str) and output and not Path(output).is_absolute():
        sweep["output"] = os.path.normpath(base / output)
    return SweepSpec(model=ModelSource(factory=model.get("factory"), script=model.get("script"),
                                       args=model.get("args", ()),
                                       kwargs=model.get("kwargs", {})),
                     space=_table(data, "space"), fixed=_table(data, "fixed"), name=name,
                     **sweep)


def load(path: str | Path) -> SweepSpec:
    """Read a sweep spec from a TOML file; any fault is a ValueError naming the file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such sweep spec") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not a sweep spec (.toml)") from None
    except OSError as error:
        raise ValueError(f"{path}: cannot read the sweep spec ({error.strerror or error})") \
            from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a sweep spec (not UTF-8 text: a binary file?)") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML ({error})") from None
    try:
        return from_dict(data, path.parent, name=str(path.resolve()))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
