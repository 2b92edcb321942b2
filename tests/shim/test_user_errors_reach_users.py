"""An error the user's code raises reaches them as theirs: not behind the shim's failed
torch.fx trace of the model. The eager fallback's warning says what it means for them,
once per process, at their own line. Each script runs through ``ipusim run``."""
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each runs a script in a fresh interpreter

MODEL = """
import torch, poptorch

class Untraceable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 6), torch.nn.Linear(6, 6)

    def forward(self, x):
        with poptorch.Block("A", ipu_id=0):
            x = self.a(x)
        with poptorch.Block("B", ipu_id=1):
            if x.sum() > {threshold}:  # control flow on data: torch.fx cannot trace it
                x = x * 2
            return self.b(x)[:, {column}]
"""

TWO_MODELS = MODEL.format(threshold=0, column=0) + """
opts = poptorch.Options().deviceIterations(4)
first = poptorch.inferenceModel(Untraceable(), opts)
first(torch.randn(8, 6))
second = poptorch.inferenceModel(Untraceable(), poptorch.Options().deviceIterations(4))
second(torch.randn(8, 6))
print("ran both")
"""

USER_ERROR = MODEL.format(threshold=0, column=100) + """
opts = poptorch.Options().deviceIterations(4)
opts.setExecutionStrategy(poptorch.PipelinedExecution())  # split at its Blocks from the start
model = poptorch.inferenceModel(Untraceable(), opts)
model(torch.randn(8, 6))
"""


def ipusim(tmp_path, source: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(source)
    return subprocess.run([sys.executable, "-m", "ipusim", "run", "--no-progress",
                           str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)


def test_the_users_index_error_is_not_chained_behind_the_failed_trace(tmp_path):
    run = ipusim(tmp_path, USER_ERROR)
    assert run.returncode == 1
    err = run.stderr
    assert re.search(r"IndexError: index 100 is out of bounds", err), err
    assert "During handling of the above exception" not in err
    assert "TraceError" not in err.split("Traceback")[-1]
    assert "torch/fx" not in err
    # The last frame outside the shim and torch is the user's own line, and the model
    # was not said to run eagerly: it never ran.
    frames = [frame for frame in re.findall(r'File "([^"]+)", line \d+, in (\w+)', err)
              if "poptorch_shim" not in frame[0] and "torch" not in frame[0]]
    assert frames[-1] == (str(tmp_path / "script.py"), "forward")
    assert "cannot trace" not in err


def test_the_eager_fallback_is_told_once_in_the_users_terms_at_their_line(tmp_path):
    run = ipusim(tmp_path, TWO_MODELS)
    assert run.returncode == 0, run.stderr
    assert "ran both" in run.stdout
    told = [line for line in run.stderr.splitlines() if "torch.fx cannot trace" in line]
    assert len(told) == 1, run.stderr  # two untraceable models, said once
    assert told[0].startswith(f"{tmp_path / 'script.py'}:")  # at the user's call
    assert "UserWarning: poptorch: torch.fx cannot trace Untraceable to split it at its " \
           "Blocks (TraceError: " in told[0]
    assert "nothing to change in your script" in told[0]
    assert "poptorch_shim" not in told[0]
