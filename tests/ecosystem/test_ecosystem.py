"""The ecosystem lane: unmodified optimum-graphcore and lightning-graphcore code on
the shim, with random weights from configs and no hub access.

Their pins (numpy 1.23.5, transformers 4.29.2, lightning 2.1) conflict with the
main environment, so they get their own: ``.venv-ecosystem`` at the repository
root, built by ``scripts/setup_ecosystem_env.sh`` (every package of
``requirements.txt`` pinned and installed without resolving, then ipusim itself)
and reused while that file is unchanged. Each script runs as a user runs it,
``.venv-ecosystem/bin/ipusim run --report DIR`` (:class:`support.ecosystem.Run`),
and every output is checked: the exit line, the reports and the index of their
folder give one throughput, what each run is is read from its ``profile.json``,
and no verdict advises a change the run cannot take. The lane is marked
``ecosystem`` (``conftest.py``); every optimum-graphcore family is in
``test_optimum_families.py``.
"""
import re
import subprocess
from pathlib import Path

import pytest
from support.ecosystem import Run, advice_of, lane_environment

pytestmark = pytest.mark.ecosystem
ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-ecosystem"


def micro_batch(profile: dict) -> int:
    """A report's micro-batch size: the items of a step over its micro-batches."""
    run, figures = profile["run"], profile["figures"]
    per_step = run["device_iterations"] * run["gradient_accumulation"] * run["replicas"]
    return round(figures["items"] / figures["steps"] / per_step)


@pytest.mark.parametrize("layout, ipus, replicas", [
    ("data-parallel", 1, 2), ("pipelined", 2, 1)])
def test_a_lightning_module_fits_validates_tests_and_predicts(ipusim, tmp_path, layout,
                                                              ipus, replicas):
    run = Run(ipusim, tmp_path, "lightning_fit.py", layout)
    assert "predicted 64 rows" in run.out
    found = run.profiles  # a model per stage: fit, its validation, validate, test, predict
    assert sorted(name.split("-")[0] for name in found) == ["inference"] * 4 + ["training"]
    for name, profile in found.items():
        assert profile["figures"]["ipus"] == ipus * replicas, name
        assert profile["run"]["replicas"] == replicas, name
        assert profile["run"]["execution"] == ("pipelined" if ipus > 1 else "sharded"), name
        # The exit line says what the profile says the run is.
        assert f"micro-batch size {micro_batch(profile)}, " in run.exit_lines[name]
        if layout == "data-parallel":  # one IPU a replica: nothing crosses the IPU-Links
            assert profile["verdict"]["kind"] != "ipu_links", name


def test_a_loader_lightning_leaves_unconverted_is_told_where_its_batch_went(guide):
    # Lightning 2.0 hands lightning-graphcore's strategy the DataLoader as it is to fit,
    # validate and test: each batch of 16 is a whole call's, 8 device iterations x 2
    # replicas of one sample. Only predicting (to track the indices) rebuilds it, as a
    # poptorch.DataLoader whose batch is the micro-batch.
    run = guide["lightning"]  # the guide's command: lightning_fit.py device-iterations
    assert "predicted 512 rows" in run.out
    sizes = {name: int(re.search(r"micro-batch size (\d+), device iterations 8, replicas 2",
                                 line).group(1)) for name, line in run.exit_lines.items()}
    assert sizes == {"training": 1, "inference": 1, "inference-2": 1, "inference-3": 1,
                     "inference-4": 16}
    for name, size in sizes.items():
        assert micro_batch(run.profiles[name]) == size, name
    assert ("each call's batch of 16 samples is split into 8 device iterations x 2 replicas, "
            "so the micro-batch size is 1") in run.err


def test_a_pipelined_bert_pretrains_through_the_ipu_trainer(ipusim, tmp_path):
    run = Run(ipusim, tmp_path, "bert_pretraining.py", str(tmp_path / "out"), "small")
    assert "trained 2 steps" in run.out and "loss nan" not in run.out
    (profile,) = run.profiles.values()
    assert profile["run"]["gradient_accumulation"] == 16
    assert profile["run"]["execution"] == "pipelined" and profile["figures"]["ipus"] == 2
    # Recomputation runs on the first IPU only (the last stage recomputes nothing):
    # the balancing what-if weighs each IPU's whole step, so it shows that imbalance.
    assert profile["run"]["recompute"] is True
    balanced = next(w for w in profile["verdict"]["what_if"]
                    if w["change"].startswith("balanced stages"))
    assert balanced["speedup"] > 1.05  # IPU 0 computes about twice what IPU 1 does


def test_bert_large_pretrains_through_the_ipu_trainer_timing_only(guide):
    run = guide["bert-large"]  # the guide's command: --timing-only
    assert "trained 2 steps" in run.out
    (profile,) = run.profiles.values()
    assert profile["figures"]["ipus"] == 4 and profile["run"]["execution"] == "pipelined"
    assert profile["timing_only"] is True
    (line,) = run.exit_lines.values()
    assert "timing-only (no tensors computed" in line


def test_gpt2_generates_the_tokens_of_transformers_greedy_search(guide):
    run = guide["gpt2"]  # the guide's command
    assert "generated (2, 12) tokens" in run.out
    (profile,) = run.profiles.values()
    assert micro_batch(profile) == 2  # the batch, not the step counter
    # Greedy generation on the host: each call needs the last one's token, so the
    # verdict offers optimum's on-device generation, never more device iterations.
    assert profile["run"]["autoregressive"] is True
    said = advice_of(profile["verdict"])
    assert "deviceIterations" not in said and "device iterations" not in said
    assert "device_iterations" not in said and "on_device_generation_steps=" in said


@pytest.fixture(scope="module")
def guide(ipusim, tmp_path_factory) -> dict[str, Run | str]:
    """The user guide's commands run as written, in a reader's checkout (the lane's
    environment and the scripts they name): each run by its report folder's name, and
    the index page of their reports (the last command's) as "index"."""
    text = (ROOT / "docs" / "user-guide.md").read_text()
    section = text.split("## Hugging Face and Lightning on ipusim")[1].split("\n## ")[0]
    commands = [line for block in re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
                for line in block.splitlines() if line.startswith(".venv-ecosystem/bin/ipusim")]
    assert len(commands) == 4, commands
    where = tmp_path_factory.mktemp("reader")
    (where / ".venv-ecosystem").symlink_to(VENV)
    (where / "tests").symlink_to(ROOT / "tests")
    runs = {}
    for command in commands[:-1]:
        assert " run " in command and "--report reports/ecosystem/" in command, command
        run = Run.of_command(ipusim, where, command)
        runs[run.reports.name] = run
    index = subprocess.run(["bash", "-c", commands[-1]], cwd=where, env=lane_environment(),
                           capture_output=True, text=True, timeout=300)
    assert commands[-1].endswith(" report --index reports/ecosystem"), commands[-1]
    assert index.returncode == 0, index.stderr[-4000:]
    runs["index"] = (where / "reports" / "ecosystem" / "index.html").read_text()
    return runs


def test_the_guides_commands_run_as_written_and_write_their_reports(guide):
    assert sorted(guide) == ["bert-large", "gpt2", "index", "lightning"]
    # generation, Lightning's five, BERT-Large: each run's reports in the index
    assert guide["index"].count("<tr><td><a href=") == 7
