"""``ipusim compare`` on real shim runs: the data-loading tutorial's model on one replica
and on four, compared by hand and with ``ipusim run --compare-with``."""
import json
import shutil
import textwrap
from pathlib import Path

import pytest
from support.reports import fresh_report_registry

from ipusim.analysis.comparison import compare
from ipusim.cli import main as ipusim
from ipusim.report.compare import load_run, per_ipu_basis
from poptorch_shim.commands import main as ipusim_run

ROOT = Path(__file__).resolve().parents[2]

# The tutorial's model and loader (scenarios/tutorial_data_loading.py), two calls of
# two device iterations on --replicas replicas.
SCRIPT = textwrap.dedent("""\
    import argparse

    import torch

    import poptorch
    from scenarios.tutorial_data_loading import ClassificationModel

    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    opts = poptorch.Options()
    opts.deviceIterations(2)
    opts.replicationFactor(args.replicas)
    opts.modelName("tutorial")
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 1, 128, 128),
                                             torch.randint(0, 10, (64,)))
    loader = poptorch.DataLoader(opts, dataset, batch_size=4)
    model = ClassificationModel()
    training = poptorch.trainingModel(model, opts,
                                      poptorch.optim.SGD(model.parameters(), lr=0.01))
    for step, (data, labels) in enumerate(loader):
        training(data, labels)
        if step == 1:
            break
    """)


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    fresh_report_registry(monkeypatch)


def figures(directory: Path) -> dict:
    return json.loads((directory / "profile.json").read_text())["figures"]


@pytest.mark.slow  # two runs of the tutorial's model, some seconds
def test_one_replica_against_four_after_a_run(tmp_path, capsys, monkeypatch):
    script = tmp_path / "tutorial.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(ROOT)  # where the script finds the tutorial's model
    assert ipusim_run(["run", "--no-progress", "--timing-only", "--report",
                       str(tmp_path / "one"), str(script), "--replicas", "1"]) == 0
    capsys.readouterr()
    assert ipusim_run(["run", "--no-progress", "--timing-only", "--report",
                       str(tmp_path / "four"), "--compare-with", str(tmp_path / "one"),
                       str(script), "--replicas", "4"]) == 0
    printed = capsys.readouterr().out
    one, four = tmp_path / "one" / "tutorial", tmp_path / "four" / "tutorial"
    page = four / "compare.html"
    assert page.is_file() and f"Page: {page}" in printed
    assert "replicationFactor: (default) → 4" in printed

    # By hand, from the two saved reports: the same comparison.
    assert ipusim(["compare", str(one), str(four), "-o", str(tmp_path / "c.html")]) == 0
    by_hand = capsys.readouterr().out
    assert by_hand.split("\nPage:")[0] in printed
    comparison = compare(load_run(one), load_run(four))
    assert comparison.throughput_ratio == pytest.approx(
        figures(four)["throughput(items/s)"] / figures(one)["throughput(items/s)"], rel=1e-9)
    assert f"{comparison.throughput_ratio:.2f}×" in by_hand
    parts = comparison.parts
    assert parts["delta_us"].sum() == pytest.approx(comparison.step_time_delta_us, rel=1e-9)
    assert parts["a_us"].sum() * 1e-3 == pytest.approx(
        figures(one)["duration(ms)"] / figures(one)["steps"], rel=1e-9)
    # Four replicas share one host link and all-reduce their gradients.
    assert parts.at["exchange", "a_us"] == 0 < parts.at["exchange", "b_us"]
    assert parts.at["host_io", "delta_us"] > 0
    assert comparison.b.items_per_step == 4 * comparison.a.items_per_step
    assert list(comparison.options["setting"]) == ["replicationFactor"]
    assert "IPUs compared by their place in a replica" in per_ipu_basis(comparison)
    assert comparison.operators is not None
    assert set(comparison.operators["status"]) == {"same"}


def test_compare_with_needs_a_report_and_an_earlier_one(tmp_path, capsys):
    script = tmp_path / "tutorial.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    earlier = tmp_path / "earlier" / "training"
    earlier.mkdir(parents=True)
    (earlier / "profile.json").write_text("{}")
    for argv, words in (
            (["--compare-with", str(tmp_path)], "needs --report DIR"),
            (["--report", str(tmp_path / "r"), "--compare-with", str(tmp_path / "nowhere")],
             "no such directory"),
            (["--report", str(tmp_path / "r"), "--compare-with", str(tmp_path)],
             "holds no profile.json"),
            (["--report", str(earlier.parent), "--compare-with", str(earlier)],
             "the run would overwrite what it compares with"),
            (["--report", str(earlier.parent), "--compare-with", str(earlier.parent)],
             "the run would overwrite what it compares with")):
        assert ipusim_run(["run", *argv, str(script)]) == 2
        err = capsys.readouterr().err
        assert words in err and err.startswith("ipusim run: error: --compare-with"), err


@pytest.mark.slow  # the tutorial itself: its four cases, each a model of its own
def test_ipusim_compare_on_the_tutorials_replication_cases(tmp_path, tutorial_run, capsys):
    reports = Path(shutil.copytree(tutorial_run.reports, tmp_path / "reports"))  # compare writes
    one, four = reports / "tutorial_r1_real", reports / "tutorial_r4_real"
    assert ipusim(["compare", str(one), str(four)]) == 0
    printed = capsys.readouterr().out
    ratio = figures(four)["throughput(items/s)"] / figures(one)["throughput(items/s)"]
    assert f"{ratio:.2f}×" in printed
    assert "replicationFactor: (default) → 4" in printed
    assert (four / "compare.html").is_file()
    # Bad input from the command line: exit status 2, one line naming the path.
    assert ipusim(["compare", str(reports), str(four)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"A: No profile.json in {reports}" in err
    assert "tutorial_r1_real" in err  # the folders it holds, to name one
