"""The clock a script reads: the host's by default (with a note), the
simulation's with --simulated-clock, and only the script's own code sees it."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import poptorch_shim
from poptorch_shim._core.simulated_clock import NAMES, ScriptClock, model_call
from poptorch_shim.commands import main as ipusim_main

pytestmark = [pytest.mark.slow]  # runs scripts in their own processes

# Times five calls the way the tutorials do, each call a simulated 20 ms (a long
# host round trip) so that the host's few microseconds between calls hardly
# count; checks on the side that a library (logging) keeps the host's clock and
# that the host's own time between calls (a sleep) passes.
SCRIPT = """\
import logging, time
import torch, poptorch
opts = poptorch.Options().deviceIterations(4)
opts.Simulation.costModel(engine_run_ps=20 * 10**9, poptorch_call_ps=0)
model = poptorch.inferenceModel(torch.nn.Linear(16, 8), opts)
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
    for reading in ("perf_ns", "monotonic", "time"):
        assert seen[reading] == pytest.approx(simulated, rel=0.01)
    # The host's own time between calls passes; logging keeps the host's clock.
    assert seen["idle"] >= 0.05 and seen["host"] >= 0.05
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
    assert _readings(out)["perf_ns"] == pytest.approx(simulated, rel=0.01)
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


class HostClock:
    """A host clock the test moves by hand: every reading is the same count of ns."""

    def __init__(self):
        self.now_ns = 1_000_000_000

    def readers(self):
        return {name: (lambda: self.now_ns) for name in NAMES}


def test_a_call_lasts_its_simulated_time_and_the_host_time_between_calls_passes(tmp_path):
    host = HostClock()
    clock = ScriptClock(tmp_path / "script.py", simulated=True, host_ns=host.readers())
    start = clock.reading_ns("time")
    assert start == host.now_ns
    clock.call_started()
    host.now_ns += 3_000_000_000  # torch takes 3 s on this CPU...
    assert clock.reading_ns("perf_counter") == start  # ... while the clock stands still
    clock.call_ended(2_500_000_000)  # ... for a call of 2.5 ms on the IPUs
    assert clock.reading_ns("time") - start == 2_500_000
    host.now_ns += 40_000  # 40 µs of the script's own Python
    assert clock.reading_ns("monotonic") - start == 2_540_000
    assert clock.calls == 1


def test_only_the_scripts_own_files_read_it(tmp_path):
    clock = ScriptClock(tmp_path / "script.py", simulated=True)
    assert clock.is_script(str(tmp_path / "script.py"))
    assert clock.is_script(str(tmp_path / "helpers" / "timing.py"))
    assert not clock.is_script(str(tmp_path / "venv" / "lib" / "site-packages" / "tqdm.py"))
    assert not clock.is_script(time.__file__ if hasattr(time, "__file__") else "<built-in>")
    assert not clock.is_script("<string>")
    # A script beside the simulator's packages: the packages are not the script's.
    shim = Path(ScriptClock.__init__.__code__.co_filename)
    root = Path(poptorch_shim.__file__).parent.parent
    beside = ScriptClock(root / "script.py", simulated=True)
    assert beside.is_script(str(root / "script.py"))
    assert not beside.is_script(str(shim))


def test_a_model_call_outside_the_runner_leaves_no_clock_behind():
    with model_call() as call:
        call.lasted(5)
    assert call.simulated_ps == 5
