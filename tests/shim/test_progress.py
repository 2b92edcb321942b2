"""A model's progress bar: it moves while the model is measured and computed, is gone
before the script prints again, and stays quiet beside the script's own tqdm bar and
where stderr is no terminal."""
import io
import re
import textwrap
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch
from support.reports import fresh_report_registry
from tqdm import tqdm

import poptorch_shim as poptorch
from poptorch_shim._core import run_settings
from poptorch_shim._core.run_settings import RunSettings
from poptorch_shim._execution import progress
from poptorch_shim._execution.cost_probe import measure
from poptorch_shim._execution.progress import ModelProgress
from poptorch_shim._run.runner import run_script


class Terminal(io.StringIO):
    """A stream that says it is a terminal, and what a terminal would show of it."""

    def isatty(self) -> bool:
        return True

    def screen(self) -> list[str]:
        """The lines left on the screen: carriage returns go back to the line's start,
        newlines down a line, tqdm's cursor-up (ESC [A) up one; text overwrites."""
        lines, row, column = [[]], 0, 0
        for token in re.findall(r"\x1b\[A|\r|\n|[^\r\n\x1b]", self.getvalue()):
            if token == "\r":
                column = 0
            elif token == "\n":
                row, column = row + 1, 0
                lines.extend([] for _ in range(row + 1 - len(lines)))
            elif token == "\x1b[A":
                row = max(row - 1, 0)
            else:
                line = lines[row]
                line.extend(" " for _ in range(column + 1 - len(line)))
                line[column] = token
                column += 1
        shown = ["".join(line).rstrip() for line in lines]
        while shown and not shown[-1]:
            shown.pop()
        return shown


@pytest.fixture
def terminal(monkeypatch):
    """A terminal for stderr (pytest puts its own capture back before each test runs,
    so each test redirects stderr itself); the run asks for progress, and bars draw
    at once."""
    monkeypatch.setattr(progress, "DELAY_S", 0)
    monkeypatch.setattr(progress, "MININTERVAL_S", 0)
    with run_settings.given(RunSettings(progress=True)):
        yield Terminal()


def measured_matmuls(bar: ModelProgress, count: int) -> None:
    x = torch.ones(4, 4)
    with bar.measuring(), measure():
        for _ in range(count):
            x = x @ x


def test_the_bar_counts_the_operators_measured_and_is_cleared_after(terminal):
    with redirect_stderr(terminal):
        measured_matmuls(ModelProgress("training"), 5)
    drawn = terminal.getvalue()
    counts = [int(n) for n in re.findall(r"measuring training: (\d+) operators", drawn)]
    assert counts == sorted(counts) and counts[-1] == 5 and len(set(counts)) > 1  # it moved
    assert terminal.screen() == []  # and left nothing behind


def test_the_bar_counts_the_micro_batches_of_a_call_to_their_total(terminal):
    with redirect_stderr(terminal), ModelProgress("training").computing(4, call=3) as computed:
        for _ in range(4):
            computed()
    drawn = terminal.getvalue()
    assert re.findall(r"training, call 3: +\d+%\|[^|]*\| (\d)/4", drawn) == \
        ["0", "1", "2", "3", "4"]
    assert terminal.screen() == []


def test_no_bar_where_stderr_is_not_a_terminal(terminal):
    log = io.StringIO()  # isatty() is False: a file, a pipe
    with redirect_stderr(log):
        measured_matmuls(ModelProgress("training"), 5)
        with ModelProgress("training").computing(2, call=1) as computed:
            computed()
            computed()
    assert log.getvalue() == ""


def test_no_bar_when_the_run_asks_for_none_or_the_options_hide_compilation(terminal):
    with redirect_stderr(terminal):
        with run_settings.given(RunSettings(progress=False)):
            measured_matmuls(ModelProgress("training"), 5)
        measured_matmuls(ModelProgress("training", measuring=False), 5)
    assert terminal.getvalue() == ""


def test_the_bar_is_quiet_while_the_script_has_a_tqdm_bar_open(terminal):
    script_output = io.StringIO()
    with redirect_stderr(terminal), tqdm(total=2, file=script_output, desc="epoch") as script_bar:
        assert progress.script_bar_open()
        measured_matmuls(ModelProgress("training"), 5)
        with ModelProgress("training").computing(1, call=1) as computed:
            computed()
        script_bar.update(2)
    assert terminal.getvalue() == ""
    assert not progress.script_bar_open()
    assert "epoch" in script_output.getvalue()


SCRIPT = textwrap.dedent("""\
    import torch
    from tqdm import tqdm

    import poptorch


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            out = self.fc(x)
            return out, poptorch.identity_loss(out.pow(2).mean(), "mean")


    model = poptorch.trainingModel(Net(), poptorch.Options().deviceIterations(4))
    x = torch.ones(16, 8)
    model.compile(x)
    print("compiled")
    for step in tqdm(range(3), desc="steps", bar_format="{desc}: {n}/{total}"):
        model(x)
        tqdm.write(f"step {step} done")
    model(x)
    print("last call done")
""")


def test_a_script_with_its_own_tqdm_bar_keeps_every_line_whole(tmp_path, terminal, monkeypatch):
    # stdout and stderr are one terminal, as in a shell: the script's prints, its bar
    # and the shim's bar all land on it, in the order they were written.
    fresh_report_registry(monkeypatch)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    with redirect_stderr(terminal), redirect_stdout(terminal):
        assert run_script(str(script), [], RunSettings(progress=True)) == 0
    drawn = terminal.getvalue()
    assert "measuring training:" in drawn  # the compile before the loop showed its bar
    assert "training, call 4:" in drawn    # and so did the call after it
    # Inside the loop only the script's bar drew: the shim's bar kept quiet.
    assert not re.search(r"training, call [1-3]:", drawn)
    screen = terminal.screen()
    assert screen[:6] == ["compiled", "step 0 done", "step 1 done", "step 2 done",
                          "steps: 3/3", "last call done"]
    # Then only the closing figures: no bar left over, nothing run together on a line.
    assert screen[6:8] == ["", "ipusim: simulated figures (the script's own timings are this "
                               "host's wall clock, not the IPUs'):"], screen
    assert len(screen) == 9 and screen[8].startswith("  training: "), screen


def test_the_options_can_hide_the_measuring_bar_as_poptorchs_compilation_bar(terminal):
    drawn = {}
    for show in (True, False):
        options = poptorch.Options().showCompilationProgressBar(show)
        model = poptorch.inferenceModel(torch.nn.Linear(4, 4), options)
        terminal.seek(0)
        terminal.truncate()
        with redirect_stderr(terminal):
            model.compile(torch.ones(2, 4))
        drawn[show] = terminal.getvalue()
    assert "measuring inference:" in drawn[True]
    assert drawn[False] == ""
