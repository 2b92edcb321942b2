"""The clock a script reads: the host's by default (with a note), the
simulation's with --simulated-clock, and only the script's own code sees it."""
import os
import re
import subprocess
import sys
import time

import pytest

from ipusim.cli import main as ipusim_main

# Times five calls the way the tutorials do, and checks on the side that a
# library (logging) and time spent outside model calls keep to their clocks.
SCRIPT = """\
import logging, time
import torch, poptorch
model = poptorch.inferenceModel(torch.nn.Linear(16, 8), poptorch.Options().deviceIterations(4))
x = torch.ones(4 * 2, 16)
model(x)
t0, p0, m0 = time.time(), time.perf_counter_ns(), time.monotonic()
for _ in range(5):
    model(x)
t1, p1, m1 = time.time(), time.perf_counter_ns(), time.monotonic()
print(f"time {5 * 8 / (t1 - t0)!r} perf_ns {5 * 8 * 1e9 / (p1 - p0)!r} "
      f"monotonic {5 * 8 / (m1 - m0)!r}")
host0 = logging.makeLogRecord({}).created
idle0 = time.perf_counter()
time.sleep(0.05)
print(f"idle {time.perf_counter() - idle0!r} host {logging.makeLogRecord({}).created - host0!r}")
"""
FIGURES = re.compile(r"^  inference: ([\d,]+) items/s", re.MULTILINE)


def _run(tmp_path, *flags, env=None):
    script = tmp_path / "timed.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, "-m", "poptorch_shim", *flags, str(script)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr
    return result


def _readings(stdout: str) -> dict[str, float]:
    words = stdout.split()
    return {words[i]: float(words[i + 1]) for i in range(0, len(words), 2)}


def _simulated_throughput(stderr: str) -> float:
    return float(FIGURES.search(stderr).group(1).replace(",", ""))


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_with_the_simulated_clock_a_scripts_timings_are_the_simulated_ones(tmp_path, how):
    result = (_run(tmp_path, "--simulated-clock") if how == "flag"
              else _run(tmp_path, env={"IPUSIM_SIMULATED_CLOCK": "1"}))
    seen, simulated = _readings(result.stdout), _simulated_throughput(result.stderr)
    # Every call lasts as long, so five of them give the whole run's throughput.
    assert seen["perf_ns"] == pytest.approx(simulated, abs=0.5)  # printed to the item/s
    assert seen["monotonic"] == pytest.approx(simulated, rel=1e-3)
    assert seen["time"] == pytest.approx(simulated, rel=1e-3)  # a float of the epoch
    # Sleeping is no model call; logging keeps the host's clock.
    assert seen["idle"] == 0.0 and seen["host"] >= 0.05
    assert "followed the simulated clock" in result.stderr
    assert "times itself with the host's clock" not in result.stderr


def test_without_it_the_script_reads_the_host_clock_and_is_told_once(tmp_path):
    result = _run(tmp_path, env={"IPUSIM_SIMULATED_CLOCK": ""})
    assert _readings(result.stdout)["idle"] >= 0.05  # the sleep shows: the host's clock
    assert result.stderr.count("this script times itself with the host's clock") == 1
    assert "--simulated-clock" in result.stderr


def test_ipusim_run_takes_the_flag_and_prints_the_figures(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("IPUSIM_SIMULATED_CLOCK", raising=False)
    script = tmp_path / "timed.py"
    script.write_text(SCRIPT)
    assert ipusim_main(["run", "--no-progress", "--report", str(tmp_path / "r"),
                        "--simulated-clock", str(script)]) == 0
    out, err = capsys.readouterr()
    simulated = _simulated_throughput(err)
    assert _readings(out)["perf_ns"] == pytest.approx(simulated, abs=0.5)
    figures = next(line for line in err.splitlines() if line.startswith("  inference:"))
    assert "latency" in figures and "bottleneck" in figures
    assert figures.endswith(f"report {tmp_path / 'r' / 'inference'}")
    assert "IPUSIM_SIMULATED_CLOCK" not in os.environ  # restored after the run
    assert time.time.__module__ == time.perf_counter_ns.__module__ == "time"  # put back


def test_an_unknown_runner_option_is_named(tmp_path):
    result = subprocess.run([sys.executable, "-m", "poptorch_shim", "--simulated-clok", "x.py"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown option --simulated-clok" in result.stderr
