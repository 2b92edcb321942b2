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
identity is a hash of the model and its settings, so a results file knows
which points it already holds.
"""
from __future__ import annotations

import hashlib
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

    def __post_init__(self) -> None:
        for name, values in self.space.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"[space] {name}: expected a non-empty list of values, got "
                                 f"{values!r}")
        overlap = set(self.space) & set(self.fixed)
        if overlap:
            raise ValueError(f"settings {sorted(overlap)} are both [fixed] and in [space]")
        sweep_settings.check_names([*self.space, *self.fixed])
        if self.sample is not None and (not isinstance(self.sample, int) or self.sample < 1):
            raise ValueError(f"[sweep] sample must be a positive integer, got {self.sample!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"[sweep] steps must be a positive integer, got {self.steps!r}")

    @property
    def grid_size(self) -> int:
        return prod(len(values) for values in self.space.values())

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

    def point_id(self, point_settings: dict[str, Any]) -> str:
        """A point's identity: a hash of the model, the steps and its settings."""
        return point_id(self.model, point_settings, self.steps)


def point_id(model: ModelSource, point_settings: dict[str, Any], steps: int) -> str:
    """A stable hash of a point's configuration (key order does not count)."""
    text = json.dumps({"model": model.identity(), "settings": point_settings, "steps": steps},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _decode(index: int, sizes: list[int], values: list[list]) -> tuple:
    """The grid point at ``index`` of the product, last axis fastest."""
    combo = []
    for size, axis in zip(reversed(sizes), reversed(values)):
        index, position = divmod(index, size)
        combo.append(axis[position])
    return tuple(reversed(combo))


def from_dict(data: dict[str, Any], base: Path = Path(".")) -> SweepSpec:
    """A spec from its TOML tables; relative paths are taken from ``base``."""
    unknown = set(data) - _SECTIONS
    if unknown:
        raise ValueError(f"unknown section(s) {sorted(unknown)} in the sweep spec; expected "
                         f"{sorted(_SECTIONS)}")
    model = dict(data.get("model", {}))
    extra = set(model) - {"factory", "script", "args", "kwargs"}
    if extra:
        raise ValueError(f"[model]: unknown key(s) {sorted(extra)}; expected factory, script, "
                         "args, kwargs")
    if model.get("script") is not None:
        model["script"] = os.path.normpath(base / model["script"])
    sweep = dict(data.get("sweep", {}))
    extra = set(sweep) - {"steps", "sample", "seed", "output"}
    if extra:
        raise ValueError(f"[sweep]: unknown key(s) {sorted(extra)}; expected steps, sample, "
                         "seed, output")
    if sweep.get("output") is not None and not Path(sweep["output"]).is_absolute():
        sweep["output"] = os.path.normpath(base / sweep["output"])
    return SweepSpec(model=ModelSource(factory=model.get("factory"), script=model.get("script"),
                                       args=tuple(model.get("args", ())),
                                       kwargs=dict(model.get("kwargs", {}))),
                     space=dict(data.get("space", {})), fixed=dict(data.get("fixed", {})),
                     **sweep)


def load(path: str | Path) -> SweepSpec:
    """Read a sweep spec from a TOML file."""
    path = Path(path)
    with path.open("rb") as file:
        try:
            data = tomllib.load(file)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path}: not valid TOML ({error})") from None
    return from_dict(data, path.parent)
