"""``ipusim run --compare-with`` takes what ``ipusim compare`` takes: a report folder,
an earlier --report directory, or a report's profile.json."""
from support.reports import fresh_report_registry

from poptorch_shim import commands

SCRIPT = """
import torch, poptorch
model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
model(torch.ones(2, 4))
"""


def test_compare_with_a_profile_json(tmp_path, capsys, monkeypatch):
    fresh_report_registry(monkeypatch)
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    base, new = tmp_path / "base", tmp_path / "new"
    assert commands.main(["run", "--no-progress", "--report", str(base), str(script)]) == 0
    fresh_report_registry(monkeypatch)
    assert commands.main(["run", "--no-progress", "--report", str(new), "--compare-with",
                          str(base / "inference" / "profile.json"), str(script)]) == 0
    assert (new / "inference" / "compare.html").is_file()
    assert "no such directory" not in capsys.readouterr().err
