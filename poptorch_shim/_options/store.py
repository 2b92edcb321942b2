"""The machinery behind ``Options``: a store that accepts only declared keys,
checks each value's type and range, and freezes on first use.

Every options group (``Options``, ``Options.Training``, ...) derives from
:class:`OptionsGroup` and declares its settings as :class:`OptionSpec` rows.
Public setters are marked with :func:`setter`, which refuses the call once the
group is frozen and names the setter in the error.

For subclasses (``popdist.poptorch.Options`` overrides ``replicationFactor`` to
raise): a setter is a plain method and can be overridden freely; to store a
value without going through the public setter call ``self._set(key, value)``,
which still type-checks the value and still refuses once frozen.
"""
import copy
import dataclasses
import difflib
import enum
import functools
from collections.abc import Iterator
from typing import Any

from poptorch_shim.errors import FrozenOptionsError


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One declared setting of an options group.

    ``key`` is the snake_case name it is stored and read under, ``setter`` the
    public camelCase method that sets it (named in error messages), ``types``
    the accepted types (``bool`` is never taken for ``int``), ``minimum`` an
    optional lower bound and ``nullable`` whether ``None`` is allowed.
    """
    key: str
    default: Any
    types: tuple[type, ...]
    setter: str
    minimum: int | None = None
    nullable: bool = False


def count(key: str, setter: str, default: int = 1, minimum: int = 1) -> OptionSpec:
    """A whole-number setting that must be at least ``minimum``."""
    return OptionSpec(key, default, (int,), setter, minimum=minimum)


def describe_types(types: tuple[type, ...]) -> str:
    """Say in words what ``types`` accepts, listing enum members."""
    words = {bool: "a bool", int: "an int", float: "a number", str: "a str",
             dict: "a dict", object: "any object"}
    names = []
    for kind in types:
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            members = ", ".join(member.name for member in kind)
            names.append(f"a poptorch.{kind.__name__} ({members})")
        else:
            names.append(words.get(kind, f"a poptorch.{kind.__name__}"))
    return " or ".join(names)


def check_value(path: str, spec: OptionSpec, value: Any) -> None:
    """Raise TypeError or ValueError, naming the setter, the option, the value
    and the rule, unless ``value`` is acceptable for ``spec``."""
    if value is None and spec.nullable:
        return
    bound = f" >= {spec.minimum}" if spec.minimum is not None else ""
    nullable = " (or None)" if spec.nullable else ""
    # bool is a subclass of int, but True is never meant as a count.
    wrong_bool = isinstance(value, bool) and int in spec.types and bool not in spec.types
    if wrong_bool or not isinstance(value, spec.types):
        raise TypeError(
            f"{path}.{spec.setter}: {spec.key} must be "
            f"{describe_types(spec.types)}{bound}{nullable}, got {value!r} "
            f"({type(value).__name__}).")
    if isinstance(value, int) and not isinstance(value, bool) and \
            not -2**63 <= value < 2**64:   # what torch and Poplar hold: 64 bits
        raise ValueError(
            f"{path}.{spec.setter}: {spec.key} must fit in 64 bits, got {value!r}.")
    if isinstance(value, float) and value != value:
        raise ValueError(f"{path}.{spec.setter}: {spec.key} must be a number, got nan.")
    if spec.minimum is not None and value < spec.minimum:
        raise ValueError(
            f"{path}.{spec.setter}: {spec.key} must be{bound}, got {value!r}. "
            f"Pass a value of at least {spec.minimum}.")


def require_arg(path: str, method: str, name: str, value: Any, *types: type,
                minimum: int | None = None) -> None:
    """Check an argument that is not itself a declared setting, with the same
    messages as :func:`check_value`."""
    check_value(path, OptionSpec(name, None, types, method, minimum), value)


def _snapshot(value: Any) -> Any:
    """A private copy of container values, so nobody shares them with the store."""
    if isinstance(value, (dict, list, set)):
        return copy.deepcopy(value)
    return value


class OptionsStore:
    """Values of declared settings, checked on write; refuses writes once frozen.

    A deep copy (and so ``Options.clone()``) is never frozen.
    """

    def __init__(self, path: str, specs: tuple[OptionSpec, ...]):
        self.path = path
        self._specs = {spec.key: spec for spec in specs}
        self._values = {spec.key: _snapshot(spec.default) for spec in specs}
        self._given: set[str] = set()  # keys set by the script, even to their default
        self.frozen = False

    def declares(self, key: str) -> bool:
        return key in self._specs

    def spec(self, key: str) -> OptionSpec:
        if key not in self._specs:
            raise AttributeError(
                f"{self.path} has no option {key!r}; declared options are "
                f"{sorted(self._specs)}.")
        return self._specs[key]

    def get(self, key: str) -> Any:
        self.spec(key)
        return _snapshot(self._values[key])

    def set(self, key: str, value: Any) -> None:
        spec = self.spec(key)
        if self.frozen:
            raise FrozenOptionsError(f"{self.path}.{spec.setter}")
        check_value(self.path, spec, value)
        self._values[key] = _snapshot(value)
        self._given.add(key)

    def given(self, key: str) -> bool:
        """Whether ``key`` was set (by a setter, a file or the environment), even
        to its default: PopTorch's compiler tells such options from its defaults."""
        self.spec(key)
        return key in self._given

    def values(self) -> dict:
        return {key: _snapshot(value) for key, value in self._values.items()}

    def changed(self) -> dict:
        """The settings whose value differs from their declared default."""
        return {key: _snapshot(value) for key, value in self._values.items()
                if not _same(value, self._specs[key].default)}

    def arguments_of(self, setter: str) -> list | None:
        """The arguments of a setter that sets several settings at once, in its order,
        the defaults at the end left out (``Simulation.system("bow", 128)``: ``["bow",
        128]``, as a sweep spec gives them); None for a setter of one setting."""
        specs = [spec for spec in self._specs.values() if spec.setter == setter]
        if len(specs) < 2:
            return None
        arguments = [_snapshot(self._values[spec.key]) for spec in specs]
        while arguments and _same(arguments[-1], specs[len(arguments) - 1].default):
            arguments.pop()
        return arguments

    def __deepcopy__(self, memo: dict) -> "OptionsStore":
        clone = copy.copy(self)
        memo[id(self)] = clone
        clone._values = copy.deepcopy(self._values, memo)
        clone._given = set(self._given)
        clone.frozen = False
        return clone


def _same(value: Any, default: Any) -> bool:
    # Enum members compare equal to ints; compare by type as well.
    return type(value) is type(default) and value == default


def setter(method):
    """Mark a public setter: once the group is frozen, calling it raises
    :class:`FrozenOptionsError` naming it, before any argument is checked."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        self._check_not_frozen(method.__name__)
        return method(self, *args, **kwargs)

    return guarded


class OptionsGroup:
    """Base class of ``Options`` and its sub-groups.

    Declared settings are read as snake_case attributes (``opts.device_iterations``)
    and written only through setters; assigning a public attribute or reading
    an unknown one raises ``AttributeError`` naming it and suggesting the
    closest real name.
    """
    _path = "Options"
    _specs: tuple[OptionSpec, ...] = ()
    # Names a user guesses for what another group sets, with where it is set.
    _elsewhere: dict[str, str] = {}

    def __init__(self) -> None:
        self._store = OptionsStore(self._path, self._specs)

    # -- reading and writing attributes ------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails.
        store = self.__dict__.get("_store")
        if not name.startswith("_") and store is not None and store.declares(name):
            return store.get(name)
        # name=None: the message has its hint; Python must not add a second.
        raise AttributeError(self._unknown_name_message(name), name=None)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        store = self.__dict__.get("_store")
        if store is not None and store.declares(name):
            raise AttributeError(
                f"Can't assign {self._path}.{name} directly; call "
                f"{self._path}.{store.spec(name).setter}(...) instead.")
        attribute = getattr(type(self), name, None)
        if isinstance(attribute, property):
            raise AttributeError(f"Can't assign {self._path}.{name}; it is read-only.")
        if attribute is not None:
            raise AttributeError(f"Can't assign {self._path}.{name}; it is a method: "
                                 f"call {self._path}.{name}(...) instead.")
        # name=None: the message has its hint; Python must not add a second.
        raise AttributeError(self._unknown_name_message(name), name=None)

    def _unknown_name_message(self, name: str) -> str:
        known = [n for n in dir(type(self)) if not n.startswith("_")]
        store = self.__dict__.get("_store")
        if store is not None:
            known += [spec.key for spec in store._specs.values()]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        if name in self._elsewhere:
            hint = f" {self._elsewhere[name]}"
        return f"{self._path} has no option or method {name!r}.{hint}"

    def _set_popart_flag(self, method: str, key: str, value: bool, name: str = "enabled"):
        """Check ``value``, the boolean argument ``name`` of setter ``method``, and set
        PopART's option ``key`` to it (for groups that hold the PopART options, as
        ``self._popart``); returns the group, as the setter does."""
        require_arg(self._path, method, name, value, bool)
        self._popart.set(key, value)
        return self

    def _set(self, key: str, value: Any) -> None:
        """Store a declared setting without going through its public setter
        (for subclasses whose public setter refuses); still type-checked and
        still refused once frozen."""
        self._store.set(key, value)

    def _check_not_frozen(self, method_name: str) -> None:
        if self._store.frozen:
            raise FrozenOptionsError(f"{self._path}.{method_name}")

    # -- freezing ------------------------------------------------------------
    def _children(self) -> Iterator["OptionsGroup"]:
        """Groups held by this one, as attributes or as stored values."""
        for value in list(vars(self).values()) + list(self._store._values.values()):
            if isinstance(value, OptionsGroup):
                yield value

    def _set_frozen(self, frozen: bool, seen: set) -> None:
        if id(self) in seen:
            return
        seen.add(id(self))
        self._store.frozen = frozen
        for child in self._children():
            child._set_frozen(frozen, seen)

    def _freeze(self) -> None:
        """Refuse every setter of this group and of the groups it holds."""
        self._set_frozen(True, set())

    @property
    def frozen(self) -> bool:
        """Whether the options have been used and so can no longer change."""
        return self._store.frozen

    def checkIsFrozen(self, option: str | None = None) -> None:
        """Raise ``AttributeError("Can't modify frozen Options")`` (naming
        ``option`` if given) once the options have been used, as PopTorch does."""
        if self._store.frozen:
            raise FrozenOptionsError(f"{self._path}.{option or 'checkIsFrozen'}")

    # -- printing --------------------------------------------------------------
    def _changed(self) -> dict:
        """The settings that differ from their defaults."""
        return self._store.changed()

    def _values(self) -> dict:
        """Every setting (a copy), for printing and ``Options.toDict``."""
        return self._store.values()

    def _given(self, key: str) -> bool:
        """Whether the script set ``key`` (by a setter, a file or the environment), even
        to its default."""
        return self._store.given(key)

    def _calls(self) -> dict[str, list]:
        """The setters whose settings differ from their defaults, each with its call's
        arguments: a setter of several settings those of its settings (the defaults at
        the end left out), a setter of one setting its value."""
        calls = {}
        for key, value in self._store.changed().items():
            setter = self._store.spec(key).setter
            calls[setter] = self._store.arguments_of(setter) or [value]
        return calls

    def _repr_parts(self) -> list:
        return [f"{key}={_show(value)}" for key, value in self._values().items()]

    def __repr__(self) -> str:
        """Every setting, defaults included, as PopTorch prints options."""
        return f"{type(self).__name__}({', '.join(self._repr_parts())})"


def _show(value: Any) -> str:
    """Enum members as ``OutputMode.All`` rather than ``<OutputMode.All: 2>``."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)
