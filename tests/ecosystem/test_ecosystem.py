"""The ecosystem lane: unmodified optimum-graphcore and lightning-graphcore code on
the shim, with random weights from configs and no hub access.

Their pins (numpy 1.23.5, transformers 4.29.2, lightning 2.1) conflict with the
main environment, so they get their own: ``.venv-ecosystem`` at the repository
root, built by ``scripts/setup_ecosystem_env.sh`` (every package of
``requirements.txt`` pinned and installed without resolving, then ipusim itself)
and reused while that file is unchanged. Each script runs as a user runs it,
``.venv-ecosystem/bin/ipusim run --report DIR``, and every output is checked:
the exit line, the reports and the index of their folder give one throughput,
and no verdict advises a change the run cannot take.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VENV = ROOT / ".venv-ecosystem"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def ipusim() -> Path:
    """The lane's ``ipusim`` command, its environment built first if missing or stale."""
    built = subprocess.run(["bash", str(ROOT / "scripts" / "setup_ecosystem_env.sh")],
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, f"building {VENV.name} failed:\n{built.stderr[-4000:]}"
    return VENV / "bin" / "ipusim"


class Run:
    """A script run through the lane's ``ipusim run --report``: its output, exit lines
    (by model folder) and reports' folder."""

    def __init__(self, ipusim: Path, tmp_path: Path, script: str, *args: str,
                 timing_only: bool = False):
        self.reports = tmp_path / "reports"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_DATASETS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
        for name in ("IPUSIM_TIMING_ONLY", "IPUSIM_REPORT_DIR", "PYTHONPATH"):
            env.pop(name, None)
        flags = ["--timing-only"] if timing_only else []
        result = subprocess.run(
            [str(ipusim), "run", "--no-progress", *flags, "--report", str(self.reports),
             str(HERE / "scripts" / script), *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
        self.out, self.err = result.stdout, result.stderr
        self.exit_lines = {Path(line.rsplit("; report ", 1)[1]).name: line
                           for line in self.err.splitlines()
                           if line.startswith("  ") and "; report " in line}
        self.profiles = {path.parent.name: json.loads(path.read_text())
                         for path in sorted(self.reports.rglob("profile.json"))}
        assert set(self.exit_lines) == set(self.profiles), (self.exit_lines, self.profiles)
        self._one_throughput(ipusim)

    def summaries(self) -> dict[str, str]:
        """Each report's summary, by its folder's name."""
        return {path.parent.name: path.read_text()
                for path in sorted(self.reports.rglob("summary.txt"))}

    def _one_throughput(self, ipusim: Path) -> None:
        """The exit line, the summary and the index of the reports give each model one
        throughput, the same figure."""
        index = subprocess.run([str(ipusim), "report", "--index", str(self.reports)],
                               capture_output=True, text=True, timeout=300)
        assert index.returncode == 0, index.stderr
        page = (self.reports / "index.html").read_text()
        for name, line in self.exit_lines.items():
            said = re.match(r"  [^:]+: ([\d,]+) items/s", line).group(1)
            cell = re.search(rf'>{re.escape(name)}</a></td><td class="value">([\d,]+)', page)
            assert cell and cell.group(1) == said, (name, line)
            summary = (self.reports / name / "summary.txt").read_text()
            shown = re.search(r"  Throughput: +([\d,]+)\.\d items/s", summary).group(1)
            assert abs(int(shown.replace(",", "")) - int(said.replace(",", ""))) <= 1


def advice_of(verdict: dict) -> str:
    """Everything a verdict suggests: its headline, advice and changes tried."""
    return " ".join([verdict["headline"], *verdict["advice"],
                     *(f"{w['change']} {w['option']}" for w in verdict["what_if"])])


@pytest.mark.parametrize("layout, execution, replicas", [
    ("data-parallel", "single IPU", 2), ("pipelined", "on 2 IPU(s) per replica", 1)])
def test_a_lightning_module_fits_validates_tests_and_predicts(ipusim, tmp_path, layout,
                                                              execution, replicas):
    run = Run(ipusim, tmp_path, "lightning_fit.py", layout)
    assert "predicted 64 rows" in run.out
    found = run.summaries()  # a model per stage: fit, its validation, validate, test, predict
    assert sorted(name.split("-")[0] for name in found) == ["inference"] * 4 + ["training"]
    for summary in found.values():
        assert execution in summary
        assert f"Replicas:                   {replicas}\n" in summary
    for name, profile in run.profiles.items():
        # The exit line says what the summary says the run is.
        size = re.search(r"Micro-batch size: +(\d+)\n", found[name]).group(1)
        assert f"micro-batch size {size}, " in run.exit_lines[name]
        if layout == "data-parallel":  # one IPU a replica: nothing crosses the IPU-Links
            assert profile["verdict"]["kind"] != "ipu_links", name


def test_a_loader_lightning_leaves_unconverted_is_told_where_its_batch_went(ipusim, tmp_path):
    # Lightning 2.0 hands lightning-graphcore's strategy the DataLoader as it is to fit,
    # validate and test: each batch of 16 is a whole call's, 8 device iterations x 2
    # replicas of one sample. Only predicting (to track the indices) rebuilds it, as a
    # poptorch.DataLoader whose batch is the micro-batch.
    run = Run(ipusim, tmp_path, "lightning_fit.py", "device-iterations")
    assert "predicted 512 rows" in run.out
    sizes = {name: int(re.search(r"micro-batch size (\d+), device iterations 8, replicas 2",
                                 line).group(1)) for name, line in run.exit_lines.items()}
    assert sizes == {"training": 1, "inference": 1, "inference-2": 1, "inference-3": 1,
                     "inference-4": 16}
    for name, size in sizes.items():
        assert f"Micro-batch size:           {size}\n" in run.summaries()[name]
    assert ("each call's batch of 16 samples is split into 8 device iterations x 2 replicas, "
            "so the micro-batch size is 1") in run.err


def test_a_pipelined_bert_pretrains_through_the_ipu_trainer(ipusim, tmp_path):
    run = Run(ipusim, tmp_path, "bert_pretraining.py", str(tmp_path / "out"), "small")
    assert "trained 2 steps" in run.out and "loss nan" not in run.out
    (summary,) = run.summaries().values()
    assert "Gradient accumulation:      16" in summary and "on 2 IPU(s)" in summary
    # Recomputation runs on the first IPU only (the last stage recomputes nothing):
    # the balancing what-if weighs each IPU's whole step, so it shows that imbalance.
    (profile,) = run.profiles.values()
    assert profile["run"]["recompute"] is True
    balanced = next(w for w in profile["verdict"]["what_if"]
                    if w["change"].startswith("balanced stages"))
    assert balanced["speedup"] > 1.05  # IPU 0 computes about twice what IPU 1 does


def test_bert_large_pretrains_through_the_ipu_trainer_timing_only(ipusim, tmp_path):
    run = Run(ipusim, tmp_path, "bert_pretraining.py", str(tmp_path / "out"), "large",
              timing_only=True)
    assert "trained 2 steps" in run.out
    (summary,) = run.summaries().values()
    assert "on 4 IPU(s) per replica" in summary
    (line,) = run.exit_lines.values()
    assert "timing-only (no tensors computed" in line


def test_gpt2_generates_the_tokens_of_transformers_greedy_search(ipusim, tmp_path):
    run = Run(ipusim, tmp_path, "gpt2_generate.py")
    assert "generated (2, 12) tokens" in run.out
    (summary,) = run.summaries().values()
    assert "Micro-batch size:           2\n" in summary  # the batch, not the step counter
    # Greedy generation on the host: each call needs the last one's token, so the
    # verdict offers optimum's on-device generation, never more device iterations.
    (profile,) = run.profiles.values()
    assert profile["run"]["autoregressive"] is True
    said = advice_of(profile["verdict"])
    assert "deviceIterations" not in said and "device iterations" not in said
    assert "device_iterations" not in said and "on_device_generation_steps=" in said


def test_the_guides_commands_run_as_written_and_write_their_reports(ipusim, tmp_path):
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    section = guide.split("## Hugging Face and Lightning on ipusim")[1].split("\n## ")[0]
    commands = [line for block in re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
                for line in block.splitlines() if line.startswith(".venv-ecosystem/bin/ipusim")]
    assert len(commands) == 4, commands
    # A reader's checkout: the lane's environment and the scripts the commands name.
    (tmp_path / ".venv-ecosystem").symlink_to(VENV)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    for name in ("IPUSIM_TIMING_ONLY", "IPUSIM_REPORT_DIR", "PYTHONPATH"):
        env.pop(name, None)
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (command, done.stderr[-4000:])
        folder = tmp_path / command.split("--report ")[1].split()[0] if "--report" in \
            command else tmp_path / command.split()[-1]
        if " run " in command:
            assert "; report " in done.stderr and any(folder.rglob("profile.json")), command
        else:
            assert (folder / "index.html").is_file()
    index = (tmp_path / "reports" / "ecosystem" / "index.html").read_text()
    assert index.count("<tr><td><a href=") >= 7  # generation, Lightning's five, BERT-Large
