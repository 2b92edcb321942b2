"""Every shell command and snippet of the README and the user guide runs as written.

Each fenced ``bash`` line and ``python`` snippet runs in order in a fresh folder that
holds the project's ``.venv`` (linked) and ``scenarios/`` (copied), with a
minute each. The names the docs use for the reader's own files (``my_script.py``,
``big_model.py``, ``train.py``, ``mydata.py``) are small PopTorch scripts written
there first, and the folders a command reads from an earlier one (``old/``, the
main job's tutorial reports) are made the way the docs say. What cannot run that
way is in :data:`NOT_RUN` with the reason, and the docs say so too. The verdict
example's summary is checked line by line against the script that gives it.
"""
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]  # runs the docs' commands, each in its own process

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", ROOT / "docs" / "user-guide.md")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
MINUTE = 60
# A command of under a minute, given twice that on a machine shared with other work.
LIMIT = 2 * MINUTE

# Each command the docs show that the test does not run, by its start, and why.
NOT_RUN = {
    "bash scripts/main.sh": "the main job: every scenario, tens of minutes",
    "bash scripts/test.sh": "the whole test suite, this test included",
    ".venv/bin/ipusim sweep scenarios/sweeps/bert_large.toml --ray": "starts a local Ray: "
    "about a minute and a half; tests/sweep/test_ray.py runs the Ray backend",
    ".venv/bin/ipusim advise --ray": "starts a local Ray; tests/sweep/test_ray.py runs it",
    "from poptorch_shim.sweep import RayCluster": "a 240-point sweep on a local Ray: minutes",
    "bash scripts/setup_ecosystem_env.sh": "the ecosystem lane's own environment, over a "
    "hundred pinned packages: tests/ecosystem/test_ecosystem.py builds it with this script",
    "python3 -m venv --clear .venv-ecosystem": "what that script runs: the same environment",
    ".venv-ecosystem/bin/python -m pip install": "likewise, its packages and ipusim: minutes",
    ".venv-ecosystem/bin/ipusim": "a command of the ecosystem lane, in its environment: "
    "tests/ecosystem/test_ecosystem.py runs each as written and checks its report",
}

# The reader's own files the docs name, as small PopTorch scripts.
TRAINING = """
import sys
import torch
import poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.fc(x)
        return out, self.loss(out, y)

opts = poptorch.Options().deviceIterations(2)
try:  # under poprun: each instance its share of the replicas
    import popdist.poptorch
    if popdist.isPopdistEnvSet():
        opts = popdist.poptorch.Options().deviceIterations(2)
except ImportError:
    pass
net = Net()
model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
rows = 2 * opts.replication_factor
for _ in range(3):
    model(torch.randn(rows * 4, 8), torch.randint(0, 4, (rows * 4,)))
print("arguments:", sys.argv[1:])
"""
MYDATA = """
import torch
import poptorch  # as the docs' mydata.py does

class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 60

    def __getitem__(self, index):
        return torch.tensor(float(index * index))
"""


def snippets(page: Path) -> list[tuple[int, str, str]]:
    """The fenced blocks of ``page``: (line, language, text)."""
    text = page.read_text()
    return [(text[:m.start()].count("\n") + 1, m.group(1), m.group(2))
            for m in BLOCK.finditer(text)]


def not_run(command: str) -> str | None:
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder as a reader's checkout looks: the venv, the scenarios, their own scripts."""
    here = tmp_path_factory.mktemp("reader")
    (here / ".venv").symlink_to(ROOT / ".venv")
    shutil.copytree(ROOT / "scenarios", here / "scenarios",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("my_script.py", "big_model.py", "train.py"):
        (here / name).write_text(TRAINING)
    (here / "mydata.py").write_text(MYDATA)
    return here


def run(command: str, where: Path, timeout: int = LIMIT) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=where, capture_output=True, text=True,
                          timeout=timeout)


def prepare(command: str, where: Path, request: pytest.FixtureRequest) -> None:
    """Make what ``command`` reads from an earlier run, the way the docs say."""
    if "--compare-with old/" in command and not (where / "old").exists():
        earlier = where / "reports" / "mine"  # `ipusim run --report reports/mine my_script.py`
        if (earlier / "training" / "profile.json").is_file():  # of the same script as train.py
            shutil.copytree(earlier, where / "old")
        else:
            assert run(".venv/bin/ipusim run --report old/ train.py", where).returncode == 0
    tutorial = where / "reports" / "tutorial_data_loading"
    if "reports/tutorial_data_loading/" in command and not tutorial.exists():
        # The main job's tutorial, smaller: the run the scenario and comparison tests
        # read too (`python -m poptorch_shim scenarios/tutorial_data_loading.py ...`).
        shutil.copytree(request.getfixturevalue("tutorial_run").reports, tutorial)
    if command.startswith(".venv/bin/python -m pytest -p poptorch_shim.testing tests/"):
        test = next(text for _, lang, text in snippets(PAGES[1])
                    if lang == "python" and "from mydata import Squares" in text)
        (where / "tests").mkdir(exist_ok=True)
        (where / "tests" / "test_data.py").write_text(test)
        (where / "tests" / "conftest.py").write_text(
            f"import sys\nsys.path.insert(0, {str(where)!r})  # mydata.py\n")


def shell_commands(line: int, text: str) -> list[tuple[int, str]]:
    """A bash block's commands with the line each starts on, a line that ends in a
    backslash joined to the next as the shell joins it."""
    commands, pending = [], None
    for k, command in enumerate(text.splitlines()):
        if pending is not None:
            pending = (pending[0], pending[1] + "\n" + command)
        elif command.strip():
            pending = (line + k + 1, command)
        if pending is not None and not pending[1].endswith("\\"):
            commands.append(pending)
            pending = None
    return commands + ([pending] if pending else [])


def python_command(snippet: str) -> str | None:
    """How the docs run a python snippet: a PopTorch one through the runner, the
    simulator's with the venv's interpreter; None for the test file that the pytest
    command line runs."""
    if "def test_" in snippet:
        return None
    if "import poptorch" in snippet:
        return ".venv/bin/python -m poptorch_shim snippet.py"
    return ".venv/bin/python snippet.py"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_and_snippet_runs_as_written(page, workspace, request):
    failures, ran = [], 0
    for line, lang, text in snippets(page):
        if lang == "bash":
            commands = shell_commands(line, text)
        elif lang == "python":
            (workspace / "snippet.py").write_text(textwrap.dedent(text))
            command = python_command(text)
            commands = [] if command is None or not_run(text) else [(line, command)]
        else:
            continue
        for number, command in commands:
            if not_run(command):
                continue
            prepare(command, workspace, request)
            try:
                done = run(command, workspace)
            except subprocess.TimeoutExpired:
                failures.append(f"{page.name}:{number}: {command}: over a minute")
                continue
            ran += 1
            if done.returncode != 0:
                failures.append(f"{page.name}:{number}: {command}: exit {done.returncode}: "
                                f"{done.stderr.strip()[-600:]}")
    assert ran, f"no command of {page.name} ran"
    assert not failures, "\n".join(failures)


def test_what_is_not_run_is_still_in_the_docs_and_says_so():
    text = "\n".join(page.read_text() for page in PAGES)
    for start in NOT_RUN:
        assert start in text, f"NOT_RUN names {start!r}, which the docs no longer show"
    guide = PAGES[1].read_text()
    assert "the lines with `--ray` start a local Ray" in guide


def test_the_verdict_example_is_what_its_script_gives(tmp_path):
    guide = PAGES[1].read_text()
    command = re.search(r"`(\.venv/bin/ipusim run --report reports/verdict "
                        r"scenarios/verdict_imbalance\.py)`", guide).group(1)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert run(command, tmp_path, timeout=2 * MINUTE).returncode == 0
    summary = (tmp_path / "reports/verdict/verdict_imbalance_di64/summary.txt").read_text()
    example = next(text for _, lang, text in snippets(PAGES[1])
                   if lang == "" and text.startswith("Bottleneck: imbalance"))
    for line in example.splitlines():
        if line.strip() != "...":
            assert line in summary.splitlines(), line
