"""Where ``import poptorch`` (and ``import popdist``, ``import popart``, ``import pva``)
resolve to the shim: the one home of aliasing.

The folder ``poptorch_shim/_aliases/`` holds four alias packages, ``poptorch/``,
``popdist/``, ``popart/`` and ``pva/``, and PopTorch's package metadata
(``poptorch-<version>.dist-info``, so that ``importlib.metadata.version("poptorch")``
answers the PopTorch version the shim implements wherever the name is the
shim's, and libraries' version checks pass). Putting the folder on ``sys.path``
makes those names the shim's (it is no regular package, so that walking the
shim's packages never imports the aliases). Each alias package imports the
module it stands for and hands it to :func:`stand_in`. This module, below
every subsystem, is what the rest of the shim uses to do that, and to carry
it into the processes the shim starts:

- :func:`install`: here and in every process started from here (``sys.path``
  and ``PYTHONPATH``): the runner, the pytest plugin (``poptorch_shim.testing``),
  poprun's instances;
- :func:`stand_in`: an alias package becomes the module it stands for, its
  loaded public submodules too;
- :func:`in_use`: whether this process resolves ``poptorch`` to the shim,
  however it came to (the runner, the plugin, a ``.pth`` file, or a
  ``sys.modules`` entry a conftest made);
- :func:`for_child`: an object to pass first among a spawned process's
  arguments: unpickling it installs the aliases there before the rest (a
  dataset whose module does ``import poptorch``) is unpickled;
- :func:`install_in_site` / :func:`remove_from_site`: a ``.pth`` file that
  makes the names the shim's in a whole environment (``ipusim alias``).

The folder goes first on ``sys.path``, so any module in it is also a top-level
module: it holds the four alias packages, PopTorch's metadata and nothing else.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

ALIASES = Path(__file__).resolve().parent.parent / "_aliases"  # the folder on sys.path
#: The names the folder makes the shim's, and the shim's module each stands for.
STANDS_FOR = {"poptorch": "poptorch_shim", "popdist": "poptorch_shim.popdist",
              "popart": "poptorch_shim.popart", "pva": "poptorch_shim.pva"}
NAMES = tuple(STANDS_FOR)
# The private modules of PopTorch's that libraries import by name.
_PRIVATE_BUT_IMPORTED = ("_impl",)
#: The file ``ipusim alias install`` writes into site-packages.
PTH_NAME = "ipusim-poptorch-alias.pth"
_PTH_HEADER = ("# ipusim: `import poptorch` is ipusim's PopTorch shim "
               "(`ipusim alias remove` undoes it)")


def install() -> None:
    """Make ``poptorch``, ``popdist``, ``popart`` and ``pva`` importable here and in any process
    started from here."""
    path = str(ALIASES)
    if path not in sys.path:
        sys.path.insert(0, path)
    current = os.environ.get("PYTHONPATH", "")
    if path not in current.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (path, current) if p)


def stand_in(alias: str, module: ModuleType) -> None:
    """Make the alias package ``alias`` the shim's ``module``: ``alias.X`` is
    every loaded public ``module.X`` (no part of its name private, PopTorch's
    ``_impl`` aside), so both names share module objects, then ``alias`` itself."""
    package = module.__name__
    for name, loaded in list(sys.modules.items()):
        parts = name[len(package):].split(".")[1:]
        if name.startswith(package + ".") and not any(
                p.startswith("_") and p not in _PRIVATE_BUT_IMPORTED for p in parts):
            sys.modules.setdefault(alias + name[len(package):], loaded)
    sys.modules[alias] = module


def in_use() -> bool:
    """Whether ``poptorch``, ``popdist``, ``popart`` or ``pva`` means the shim in this
    process (the alias folder on ``sys.path``, or a ``sys.modules`` entry made by hand)."""
    if str(ALIASES) in sys.path:
        return True
    return any(sys.modules.get(target) is not None
               and sys.modules.get(alias) is sys.modules.get(target)
               for alias, target in STANDS_FOR.items())


class _InstallInChild:
    """Unpickled in a child process, it installs the aliases there."""

    def __reduce__(self):
        return install, ()


def for_child() -> _InstallInChild | None:
    """What to pass first among a spawned process's arguments so that it can
    import ``poptorch`` whenever this process can: it unpickles as None,
    after installing the aliases there. None when this process does not use
    them (a real PopTorch stays the child's)."""
    return _InstallInChild() if in_use() else None


def real_install(site_dir: str | os.PathLike | None = None) -> str | None:
    """Where a real ``poptorch``, ``popdist``, ``popart`` or ``pva`` is installed: in ``site_dir``,
    or importable by this interpreter outside the shim's alias folder; None
    if there is none."""
    site = Path(site_dir) if site_dir is not None else None
    for name in NAMES:
        if site is not None:
            for found in (site / name, site / f"{name}.py", *site.glob(f"{name}-*.dist-info")):
                if found.exists():
                    return str(found)
        path = [p for p in sys.path if Path(p or ".").resolve() != ALIASES]
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            return spec.origin or str(list(spec.submodule_search_locations or ["?"])[0])
    return None


def site_packages() -> Path:
    """This environment's site-packages (the venv's, in a venv)."""
    return Path(sysconfig.get_paths()["purelib"])


def install_in_site(site_dir: str | os.PathLike | None = None) -> Path:
    """Write the ``.pth`` file that puts the alias folder on ``sys.path`` of
    every interpreter of this environment. Refuses (``FileExistsError``) when
    a real PopTorch is installed there or importable here."""
    site = Path(site_dir) if site_dir is not None else site_packages()
    real = real_install(site)
    if real is not None:
        raise FileExistsError(
            f"a real PopTorch is installed ({real}): the alias would hide it. "
            "Run the shim in another environment, or uninstall PopTorch first.")
    pth = site / PTH_NAME
    if pth.is_file() and not ours(pth):
        raise FileExistsError(f"{pth} was not written by `ipusim alias install`; left as is "
                              "(move it away to install the alias)")
    pth.write_text(f"{_PTH_HEADER}\n{ALIASES}\n")
    return pth


def ours(pth: Path) -> bool:
    """Whether the ``.pth`` file at ``pth`` is one :func:`install_in_site` wrote."""
    try:
        return pth.read_text().startswith(_PTH_HEADER)
    except (OSError, UnicodeDecodeError):
        return False


def remove_from_site(site_dir: str | os.PathLike | None = None) -> Path | None:
    """Remove the ``.pth`` file :func:`install_in_site` wrote; its path, or
    None if there was none."""
    site = Path(site_dir) if site_dir is not None else site_packages()
    pth = site / PTH_NAME
    if not pth.is_file():
        return None
    if not ours(pth):
        raise FileExistsError(f"{pth} was not written by `ipusim alias install`; left as is")
    pth.unlink()
    return pth
