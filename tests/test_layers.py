"""The packages' layering: ipusim below the shim, and no import cycles.

``ipusim`` is the simulator and knows nothing of torch or of the PopTorch
shim built on it; within and across both packages, modules import one
another in one direction only (inside functions too), so any of them can be
imported first and each can be read without the ones above it.
"""
import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ipusim", "poptorch_shim")


def modules_of(package: str) -> dict[str, Path]:
    """Every module of ``package`` by dotted name, with its source file; those in a
    folder that is no package itself (the shim's alias folder) too, found by their
    files: walking packages imports them, and importing an alias replaces it."""
    found = {package: ROOT / package / "__init__.py"}
    for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
        path = ROOT / Path(*info.name.split("."))
        found[info.name] = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
    for folder in (ROOT / package).iterdir():
        if folder.is_dir() and folder.name != "__pycache__" and \
                not (folder / "__init__.py").exists():
            for path in folder.rglob("*.py"):
                parts = path.relative_to(ROOT).with_suffix("").parts
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_every_ipusim_module_imports_without_torch_or_the_shim():
    names = sorted(modules_of("ipusim"))
    code = ("import importlib, json, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps(sorted(name for name in sys.modules\n"
            "                        if name.split('.')[0] in ('torch', 'poptorch_shim',"
            " 'poptorch'))))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(names) > 20  # the walk found the package's modules
    assert json.loads(result.stdout) == []


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, type_hints: bool = False):
    """Every import statement of a module, those inside functions included (a
    lazy import is how a cycle hides), those under ``if TYPE_CHECKING`` only with
    ``type_hints`` (a hint may name a module that imports this one, never a layer above)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node) and not type_hints:
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))


def import_graph(type_hints: bool = False) -> dict[str, set[str]]:
    """Each module of both packages and the modules of both it imports, at
    module level or inside a function (and for type hints only, with
    ``type_hints``). ``from package import name`` points at the submodule when
    ``name`` is one, else at the package; a module's own parent packages,
    initialised before it, are not edges."""
    modules = {name: path for package in PACKAGES for name, path in modules_of(package).items()}
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name if is_package else name.rpartition(".")[0]
        edges = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), type_hints):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = ".".join(part for part in (base if node.level else "", node.module or "")
                                  if part)
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                           else source for alias in node.names]
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a non-module
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(f"{target}."):
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the modules along it, or None if it has none."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


@pytest.mark.parametrize("type_hints", [False, True])
def test_the_packages_have_no_import_cycles(type_hints):
    """No two modules import each other, at run time or for their type hints (a hint
    names a module below, or a protocol such as ``TimelineView``)."""
    graph = import_graph(type_hints)
    assert "poptorch_shim._optim.state" in graph["poptorch_shim.optim"]
    assert "poptorch_shim.enums" in graph["poptorch_shim.options"]  # `from . import enums`
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_ipusim_imports_nothing_of_the_shim_even_lazily():
    # Inside functions too: the shim is the layer above.
    offenders = []
    for name, path in modules_of("ipusim").items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{name}: {target}" for target in targets
                          if target.split(".")[0] in ("poptorch_shim", "poptorch", "torch")]
    assert offenders == []


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
])
def test_the_cycle_check_finds_cycles(graph, cycle):
    assert find_cycle(graph) == cycle


# ipusim's layers, bottom up: each folder (or top-level module) imports only
# itself and the layers before it. ARCHITECTURE.md's table, as code.
IPUSIM_LAYERS = (
    ("ipusim.hardware",),
    ("ipusim.cost",),
    ("ipusim.engine",),
    ("ipusim.plan",),
    ("ipusim.analysis",),
    ("ipusim.simulation",),
    ("ipusim.explore",),
    ("ipusim.report",),
    ("ipusim.cli", "ipusim.__main__", "ipusim"),
)


def layer_of(module: str) -> int:
    """The index in :data:`IPUSIM_LAYERS` of the layer ``module`` belongs to."""
    for index, layer in enumerate(IPUSIM_LAYERS):
        if any(module == top or module.startswith(f"{top}.") for top in layer
               if top != "ipusim") or module in layer:
            return index
    raise AssertionError(f"{module} is in no layer of IPUSIM_LAYERS: add it to one")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` by an ipusim module of a layer above its own."""
    return [f"{name} -> {target}" for name, targets in sorted(graph.items())
            if name.split(".")[0] == "ipusim"
            for target in sorted(targets)
            if target.split(".")[0] == "ipusim" and layer_of(target) > layer_of(name)]


def test_ipusim_layers_import_downward_only():
    # Type hints too: a layer that names a type of a layer above it calls into it.
    graph = import_graph(type_hints=True)
    assert "ipusim.hardware" in graph["ipusim.cost.cost_model"]  # the walk sees the layers
    assert "ipusim.plan.engine_plan" in graph["ipusim.analysis.operator_breakdown"]  # a hint
    assert upward_imports(graph) == []


def test_the_top_of_ipusim_holds_at_most_six_modules():
    top = sorted(path.name for path in (ROOT / "ipusim").glob("*.py"))
    assert len(top) <= 6, top


def test_the_layer_check_finds_an_upward_import():
    graph = {"ipusim.cost.work": {"ipusim.engine.system"}, "ipusim.engine.system": set()}
    assert upward_imports(graph) == ["ipusim.cost.work -> ipusim.engine.system"]
    assert upward_imports({"ipusim.report.html": {"ipusim.analysis.timeline"}}) == []


def package_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """``graph`` (as :func:`import_graph` gives it) between the parts of ``package``:
    its top-level modules and its subpackages, a subpackage standing for all its
    modules (``poptorch_shim._run.runner`` counts as ``poptorch_shim._run``). The
    package's own ``__init__`` and the modules of other packages are left out."""
    def part(name: str) -> str | None:
        parts = name.split(".")
        return ".".join(parts[:2]) if parts[0] == package and len(parts) > 1 else None

    parts: dict[str, set[str]] = {}
    for name, targets in graph.items():
        source = part(name)
        if source is not None:
            edges = parts.setdefault(source, set())
            edges.update(target for target in map(part, targets)
                         if target is not None and target != source)
    return parts


def test_the_shims_packages_import_one_another_without_a_cycle():
    # A cycle between packages is one between the subsystems, even when no two
    # modules import each other: each subsystem must be readable without those above it.
    packages = package_graph(import_graph(), "poptorch_shim")
    assert "poptorch_shim._core" in packages["poptorch_shim._data"]  # the batching counts
    assert "poptorch_shim._run.runner" not in packages                # counted as `_run`
    assert "poptorch_shim.popdist" in packages["poptorch_shim._aliases"]  # the alias folder
    cycle = find_cycle(packages)
    assert cycle is None, " -> ".join(cycle)


def test_the_shims_core_imports_no_other_part_of_the_shim():
    # What several subsystems share sits below all of them.
    packages = package_graph(import_graph(), "poptorch_shim")
    assert packages["poptorch_shim._core"] == set()


def test_the_package_graph_finds_a_cycle_between_packages_that_modules_alone_do_not_show():
    modules = {"p": {"p.c"}, "p.a.x": {"p.b.y"}, "p.a.w": set(), "p.b.y": set(),
               "p.b.z": {"p.a.w"}, "p.c": {"p.a.x", "q.r"}}
    assert find_cycle(modules) is None
    packages = package_graph(modules, "p")
    assert packages == {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.a"}}
    assert find_cycle(packages) == ["p.a", "p.b", "p.a"]
