"""ARCHITECTURE.md matches the code: it names every module, and every file it names exists.

A newcomer finds where a concept lives from that page, so a module added
without a word there, or a file moved or removed without the page following,
fails here.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ipusim", "poptorch_shim")
DOC = (ROOT / "ARCHITECTURE.md").read_text()
TOKENS = re.compile(r"`([^`\s]+)`")


def modules() -> list[Path]:
    """Every module of both packages, relative to the root (packages' own files aside)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if path.name in ("__init__.py", "__main__.py") or "_aliases" in relative.parts:
                continue
            found.append(relative)
    return found


def named_in(line: str, module: Path) -> bool:
    """Whether ``line`` names ``module``: by its path, or by its file name beside its
    folder's (``_execution/`` ... ``device.py``) or, at a package's top, on its own."""
    tokens = set(TOKENS.findall(line))
    if str(module) in tokens or any(token.endswith("/" + module.name) for token in tokens):
        return True
    if module.name not in tokens:
        return False
    folder = module.parent.name
    return len(module.parts) == 2 or any(
        token.rstrip("/").endswith(folder) or token.startswith(folder + "/") for token in tokens)


def test_every_module_is_named_where_its_subsystem_is_described():
    lines = DOC.splitlines()
    missing = [str(module) for module in modules()
               if not any(named_in(line, module) for line in lines)]
    assert not missing, f"ARCHITECTURE.md does not say where these live: {missing}"


def test_every_file_and_folder_it_names_exists():
    files = set(modules())
    folders = {path.parent for path in files} | {Path(p) for p in PACKAGES}
    stale = []
    for token in set(TOKENS.findall(DOC)):
        name = token.split(".py")[0] + ".py" if ".py" in token else token
        if (ROOT / name).exists():  # a path from the root: tests/..., ARCHITECTURE.md
            continue
        if name.endswith(".py"):
            if not any(str(f) == name or str(f).endswith("/" + name) for f in files):
                stale.append(token)
        elif name.endswith("/"):
            wanted = name.rstrip("/")
            if not any(str(f) == wanted or str(f).endswith("/" + wanted) for f in folders):
                stale.append(token)
    assert not stale, f"ARCHITECTURE.md names files or folders that do not exist: {stale}"


def test_the_check_sees_a_module_the_page_leaves_out():
    assert not named_in("| x | `ipusim/cost/work.py` |", Path("ipusim/report/html.py"))
    assert not named_in("| x | `_options/`: `store.py` |", Path("poptorch_shim/sweep/store.py"))
    assert named_in("| x | `sweep/`: `store.py` |", Path("poptorch_shim/sweep/store.py"))
    assert named_in("| x | `simulation.py` |", Path("ipusim/simulation.py"))
    assert named_in("| x | `ipusim/cost/`: `work.py` |", Path("ipusim/cost/work.py"))
    assert not named_in("| x | `work.py` |", Path("ipusim/cost/work.py"))  # which folder?
