"""A script of the ecosystem lane (``tests/ecosystem/scripts``) run as a user runs it,
``.venv-ecosystem/bin/ipusim run --report DIR``, with its outputs checked."""
import json
import os
import re
import subprocess
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "ecosystem" / "scripts"
# No hub access: every model is built from its config.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def lane_environment(**extra: str) -> dict[str, str]:
    """This process's environment, offline, without the settings a run would inherit."""
    env = {**os.environ, **OFFLINE, **extra}
    for name in ("IPUSIM_TIMING_ONLY", "IPUSIM_REPORT_DIR", "PYTHONPATH"):
        env.pop(name, None)
    return env


class Run:
    """A script run through the lane's ``ipusim run --report``: its output, exit lines
    (by model folder), reports' folder and each report's ``profile.json``. The exit
    line, the report and the index of the reports must give each model one
    throughput."""

    def __init__(self, ipusim: Path, tmp_path: Path, script: str, *args: str,
                 timing_only: bool = False):
        reports = tmp_path / "reports"
        flags = ["--timing-only"] if timing_only else []
        self._take(ipusim, reports, subprocess.run(
            [str(ipusim), "run", "--no-progress", *flags, "--report", str(reports),
             str(SCRIPTS / script), *args],
            cwd=tmp_path, env=lane_environment(PYTHONWARNINGS="ignore"), capture_output=True,
            text=True, timeout=900))

    @classmethod
    def of_command(cls, ipusim: Path, where: Path, command: str) -> "Run":
        """``command``, an ``ipusim run --report DIR`` line as a reader types it in
        ``where``."""
        run = cls.__new__(cls)
        reports = where / command.split("--report ")[1].split()[0]
        run._take(ipusim, reports, subprocess.run(
            ["bash", "-c", command], cwd=where, env=lane_environment(), capture_output=True,
            text=True, timeout=900))
        return run

    def _take(self, ipusim: Path, reports: Path, result: subprocess.CompletedProcess) -> None:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
        self.reports = reports
        self.out, self.err = result.stdout, result.stderr
        self.exit_lines = {Path(line.rsplit("; report ", 1)[1]).name: line
                           for line in self.err.splitlines()
                           if line.startswith("  ") and "; report " in line}
        self.profiles = {path.parent.name: json.loads(path.read_text())
                         for path in sorted(self.reports.rglob("profile.json"))}
        assert self.profiles and set(self.exit_lines) == set(self.profiles), \
            (self.exit_lines, self.profiles)
        self._one_throughput(ipusim)

    def _one_throughput(self, ipusim: Path) -> None:
        """The exit line, the profile and the index of the reports give each model one
        throughput, the same figure."""
        index = subprocess.run([str(ipusim), "report", "--index", str(self.reports)],
                               capture_output=True, text=True, timeout=300)
        assert index.returncode == 0, index.stderr
        page = (self.reports / "index.html").read_text()
        for name, line in self.exit_lines.items():
            said = int(re.match(r"  [^:]+: ([\d,]+) items/s", line).group(1).replace(",", ""))
            cell = re.search(rf'>{re.escape(name)}</a></td><td class="value">([\d,]+)', page)
            assert cell and int(cell.group(1).replace(",", "")) == said, (name, line)
            assert abs(throughput(self.profiles[name]) - said) <= 1, (name, line)


def throughput(profile: dict) -> float:
    """A report's one throughput: fed by its data loader where that is slower than the
    IPUs, else the IPUs' own."""
    device = profile["figures"]["throughput(items/s)"]
    loader = profile["loader_items_per_s"]
    return device if loader is None else min(device, loader)


def advice_of(verdict: dict) -> str:
    """Everything a verdict suggests: its headline, advice and changes tried."""
    return " ".join([verdict["headline"], *verdict["advice"],
                     *(f"{w['change']} {w['option']}" for w in verdict["what_if"])])
