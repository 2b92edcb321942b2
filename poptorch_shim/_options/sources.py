"""Options set from outside the script: a file (``Options.loadFromFile``) and
the ``POPTORCH_DEFAULT_OPTIONS`` environment variable.

A file holds one setter call per line, written as in Python without the
``options.`` prefix (``deviceIterations(4)``, ``Training.gradientAccumulation(2)``);
blank lines and ``#`` comments are skipped. The environment variable holds a
JSON object mapping a setter, dotted for a group (``"Precision.setPartialsType"``),
to its argument, or to the list of its arguments (``"_Popart.set": ["key",
"value"]``); a string naming an enum member (``"ConnectionType.OnDemand"``)
stands for that member. Every ``poptorch.Options()`` applies it first, so the
script's own calls override it.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from poptorch_shim import enums
from poptorch_shim.errors import ConfigFileError

DEFAULT_OPTIONS_ENV = "POPTORCH_DEFAULT_OPTIONS"
_ENUM_MEMBER = re.compile(r"^([A-Za-z]\w*)\.(\w+)$")


def load_file(options, filepath: str) -> None:
    """Run each line of ``filepath`` as a call on ``options``."""
    import poptorch_shim  # the module the lines name as ``poptorch``

    name = os.path.basename(filepath)
    try:
        with open(filepath, encoding="utf-8") as lines:
            numbered = [(number, line.strip()) for number, line in enumerate(lines, start=1)]
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"{filepath} is not a text file of option calls such as "
                              f"deviceIterations(4): {error}") from None
    calls = [(number, line) for number, line in numbered if line and not line.startswith("#")]
    for number, line in calls:
        try:
            code = compile("options." + line, name, "exec")
        except (SyntaxError, ValueError) as error:  # ValueError: a null byte
            if not isinstance(error, SyntaxError):
                raise ConfigFileError(f"{error} at line {number} of {name}") from None
            raise ConfigFileError(f"SyntaxError at line {number} of {name}: {error.msg}\n"
                                  f"> options.{line}") from None
        exec(code, {"poptorch": poptorch_shim, "options": options})  # noqa: S102


def apply_environment(options) -> None:
    """Apply ``POPTORCH_DEFAULT_OPTIONS`` (if set) to freshly made ``options``."""
    text = os.environ.get(DEFAULT_OPTIONS_ENV, "").strip()
    if not text:
        return
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{DEFAULT_OPTIONS_ENV} must hold a JSON object such as "
                         f'{{"deviceIterations": 4}}, got {text!r} ({error}).') from None
    if not isinstance(settings, dict):
        raise ValueError(f"{DEFAULT_OPTIONS_ENV} must hold a JSON object mapping setters to "
                         f"their arguments, got {text!r}.")
    for path, value in settings.items():
        method = _setter(options, path)
        arguments = value if isinstance(value, list) else [value]
        method(*[_decode(argument) for argument in arguments])


def _setter(options, path: str):
    """The bound setter ``path`` names, e.g. ``"Training.gradientAccumulation"``."""
    target = options
    for part in path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as error:
            raise ValueError(f"{DEFAULT_OPTIONS_ENV}: {path!r} names no setter: {error}") \
                from None
    if not callable(target):
        raise ValueError(f"{DEFAULT_OPTIONS_ENV}: {path!r} is not a setter; name a method such "
                         "as \"deviceIterations\" or \"Training.gradientAccumulation\".")
    return target


def _decode(value: Any) -> Any:
    """A JSON value as the setter takes it: "Enum.Member" strings become members."""
    if isinstance(value, str):
        match = _ENUM_MEMBER.match(value)
        kind = getattr(enums, match.group(1), None) if match else None
        if isinstance(kind, type) and issubclass(kind, enums.enum.Enum):
            try:
                return kind[match.group(2)]
            except KeyError:
                members = ", ".join(member.name for member in kind)
                raise ValueError(f"{DEFAULT_OPTIONS_ENV}: {value!r} is not a member of "
                                 f"poptorch.{kind.__name__} ({members}).") from None
    return value
