"""Scripts written like Graphcore's PopTorch tutorials (observing tensors, the
basics walkthrough in half precision, custom inputs and error handling), with
small generated data instead of downloads, run unmodified through
``python -m poptorch_shim``."""
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]  # runs the seed tutorials' scripts


SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run(script: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "poptorch_shim", str(SCRIPTS / script)],
                            capture_output=True, text=True, timeout=300, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize("script, expected", [
    ("observing_tensors.py", ["tensor names: ['fc1/Linear:0', 'relu/ReLU:0'",
                              "'Gradient___fc1.weight'", "'UpdatedVar___fc3.bias'",
                              # 784*32 + 32 + 32*16 + 16 + 16*10 + 10 anchored gradient values
                              "gradients: 25818 histogram total: 25818",
                              "hidden: (16, 16)"]),
    ("basics_half_precision.py", ["training output torch.float16 loss torch.float16 finite True",
                                  "weights torch.float16", "evaluated 64 images"]),
    ("custom_inputs_and_errors.py", [
        "custom input output (4, 2) loss per replica (2,)",
        "Received You must set poptorch.Options().Training... from component "
        "poptorch_py_error, location: ''"]),
])
def test_tutorial_style_script_runs_unmodified(script, expected, tmp_path):
    output = run(script, tmp_path)
    for line in expected:
        assert line in output, output
