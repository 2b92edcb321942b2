"""ipusim speaks its own terms: no PopTorch option path in anything it says.

The verdict, the reports and the sweep page name a run's settings by
ipusim's names (``RunConfig``'s fields) unless a caller gives its own words
(``ipusim.SettingNames``); the shim gives PopTorch's, from its one table
(``poptorch_shim/_core/option_names.py``). So no string in ipusim's code
holds ``opts.``, ``poptorch.`` or a PopTorch word of that table; docstrings
and comments may mention them.
"""
import ast
import re
from pathlib import Path

import ipusim
from poptorch_shim._core import option_names

ROOT = Path(__file__).resolve().parent.parent

# Strings of ipusim's code that may hold a PopTorch word, by module (none).
EXCEPTIONS: dict[str, frozenset[str]] = {}

PATHS = re.compile(r"\b(opts|poptorch)\.")


def poptorch_words() -> set[str]:
    """The PopTorch words of the shim's table that ipusim has no name of its own for:
    the option calls (``Training.gradientAccumulation``) and the identifiers of its
    other words (``num_workers``, ``PipelinedExecution``...)."""
    words = {option.call for option in option_names.OPTION_CALLS.values()}
    for text in option_names.OTHER_WORDS.values():
        words |= {word for word in re.findall(r"[A-Za-z_]\w+", text)
                  if "_" in word or re.search(r"[a-z][A-Z]", word)}
    return {word for word in words if not hasattr(ipusim, word)}


def code_strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module (f-strings' parts included) but its docstrings
    and the bare strings that document attributes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    documentation = {id(node.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in documentation]


def offenders() -> list[str]:
    words = poptorch_words()
    pattern = re.compile("|".join(rf"(?<![\w.]){re.escape(word)}(?!\w)"
                                  for word in sorted(words, key=len, reverse=True)))
    found = []
    for path in sorted((ROOT / "ipusim").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        for line, text in code_strings(path):
            if text in EXCEPTIONS.get(relative, ()):
                continue
            hit = PATHS.search(text) or pattern.search(text)
            if hit:
                found.append(f"{relative}:{line}: {hit.group(0)!r} in {text[:60]!r}")
    return found


def test_the_words_looked_for_are_poptorchs():
    words = poptorch_words()
    assert {"Training.gradientAccumulation", "deviceIterations", "replicationFactor",
            "num_workers", "PipelinedExecution", "DataLoaderMode"} <= words
    assert "SyncPattern" not in words  # ipusim's own enum, named as PopART names it


def test_ipusim_holds_no_poptorch_option_path_outside_its_documentation():
    assert offenders() == []


def test_the_check_sees_a_poptorch_word(tmp_path):
    module = tmp_path / "module.py"
    module.write_text('"""Says opts.deviceIterations, allowed."""\n'
                      'X = "raise it (opts.deviceIterations)"\n'
                      'Y = f"{1} Training.gradientAccumulation"  # opts. in a comment\n')
    strings = [text for _, text in code_strings(module)]
    assert strings == ["raise it (opts.deviceIterations)", " Training.gradientAccumulation"]
