"""A data loader's cost is the CPU time its processes spend on each step, run on the
simulated host's cores by its worker processes: the accounting, piece by piece, and
a loader-fed script run three times on a machine this test keeps busy."""
import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support.reports import fresh_report_registry

import poptorch_shim as poptorch
from ipusim.analysis.headline import delivered_items_per_s
from poptorch_shim import commands
from poptorch_shim._data import worker_cpu
from poptorch_shim._data.cpu_clock import Stopwatch
from poptorch_shim._data.data_loader import host_cores
from poptorch_shim._data.item_structure import describe
from poptorch_shim._data.loader_rate import (
    WINDOWS,
    CostLog,
    StepCost,
    measured_rate,
    step_seconds,
)
from poptorch_shim._data.ring_buffer import DATA, SharedRing


def _burn(cpu_s: float, clock=time.thread_time) -> None:
    """Spend ``cpu_s`` seconds of CPU time on ``clock``, whatever the machine's load."""
    end = clock() + cpu_s
    while clock() < end:
        pass


@pytest.mark.parametrize("cost, workers, cores, seconds", [
    (StepCost(0.010, 0.002, 0.0), 0, 128, 0.012),      # the thread loads alone, its sleeps too
    (StepCost(0.001, 0.0, 0.040), 2, 128, 0.020),      # two workers share the work
    (StepCost(0.001, 0.0, 0.040), 8, 4, 0.01025),      # eight workers and the thread, 4 cores
    (StepCost(0.030, 0.0, 0.040), 8, 128, 0.030),      # the serial thread is the slowest
    (StepCost(0.010, 0.0, 0.040), 8, 1, 0.050),        # one core runs everything
])
def test_a_step_takes_the_longest_of_its_serial_thread_workers_and_cores(cost, workers, cores,
                                                                         seconds):
    assert step_seconds(cost, workers, cores) == pytest.approx(seconds)


def test_a_host_without_cores_is_refused_by_name():
    with pytest.raises(ValueError, match=r"host_cpu_cores must be a positive integer, got 0"):
        step_seconds(StepCost(0.01), 0, 0)
    with pytest.raises(ValueError, match="host_cpu_cores"):
        poptorch.Options().Simulation.system("mk2", 1, host_cpu_cores=0)


def test_the_host_cores_are_the_systems_shared_by_a_jobs_processes():
    opts = poptorch.Options()
    assert host_cores(opts) == 128  # the reference server: dual AMD EPYC 7742
    opts.Simulation.system("mk2", 4, host_cpu_cores=6)
    assert host_cores(opts) == 6
    opts.Distributed.configureProcessId(0, 4)
    assert host_cores(opts) == 1  # 6 cores, 4 processes: one each, at least one


def test_the_rate_is_the_steps_items_over_their_time_on_the_host():
    costs = CostLog((StepCost(0.0005, 0.0, 0.008),) * 16)
    rate = measured_rate(costs, 64, workers=2, cores=128)
    assert rate.items_per_s == pytest.approx(64 / 0.004)
    assert rate.low == pytest.approx(rate.high) == pytest.approx(rate.items_per_s)
    # The same CPU time on a host of one core: serial and workers' time add up.
    assert measured_rate(costs, 64, 2, 1).items_per_s == pytest.approx(64 / 0.0085)


def test_a_window_of_costly_steps_moves_the_spread_not_the_rate():
    costs = [StepCost(0.001)] * 32
    costs[5] = StepCost(0.050)  # one step the loader did something once
    rate = measured_rate(CostLog(tuple(costs)), 100, 0, 128)
    assert rate.items_per_s == pytest.approx(100_000)
    assert rate.low == pytest.approx(4 * 100 / (0.001 * 3 + 0.050))


def test_no_step_costed_gives_no_rate():
    assert measured_rate(CostLog(), 100, 2, 128) is None
    assert measured_rate(CostLog((StepCost(),) * 4), 100, 2, 128) is None


def test_the_rate_takes_as_long_after_ten_thousand_steps_as_after_ten():
    class Counted(CostLog):
        reads = 0

        def total(self, start=0, end=None):
            Counted.reads += 1
            return super().total(start, end)

    costs = Counted()
    for step in range(10_000):
        costs.append(StepCost(0.001, 0.0, 0.004 + step % 3 * 0.001))
    assert dataclasses.astuple(costs.total(10, 13)) == pytest.approx((0.003, 0.0, 0.015))
    Counted.reads = 0
    assert measured_rate(costs, 64, 2, 128).items_per_s == pytest.approx(64 / 0.0025, rel=1e-3)
    assert Counted.reads <= 2 + WINDOWS  # a model reads the rate after every call


def test_the_stopwatch_counts_cpu_and_own_waits_not_paused_time():
    watch = Stopwatch()
    _burn(0.02)
    time.sleep(0.05)
    cpu_s, off_cpu_s = watch.take()
    assert cpu_s >= 0.02 and off_cpu_s >= 0.045
    watch.pause()
    _burn(0.02)
    time.sleep(0.02)
    watch.resume()
    cpu_s, off_cpu_s = watch.take()
    assert cpu_s < 0.01 and off_cpu_s < 0.01


def test_a_workers_batch_carries_its_cpu_time_since_the_last(monkeypatch):
    monkeypatch.setattr(worker_cpu, "_last_cpu_s", None)
    started = []
    worker_cpu.TimedWorkerInit(started.append)(3)
    _burn(0.01, time.process_time)  # e.g. the fetch of the samples
    batch = worker_cpu.TimedCollate(lambda samples: sum(samples))([1, 2])
    assert started == [3] and batch.batch == 3 and batch.cpu_s >= 0.01
    received = []
    assert list(worker_cpu.unwrapped(iter([batch, "plain"]), received.append)) == [3, "plain"]
    assert received == [batch.cpu_s]


def test_a_slot_carries_what_its_item_cost():
    layout = describe((torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)), None)
    ring = SharedRing.create(layout, 2)
    try:
        ring.publish(1, DATA, 1, [4, 4], cost_s=(0.0015, 0.0002, 0.012))
        assert ring.cost(1) == pytest.approx((0.0015, 0.0002, 0.012))
        assert ring.cost(0) == (0.0, 0.0, 0.0)
    finally:
        ring.unlink()
        ring.release()


SCRIPT = """
import sys
import time
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.fc(x)
        return out, self.loss(out, y)

class Decoded(torch.utils.data.Dataset):
    # Each item costs its worker 0.4 ms of CPU, as decoding an image would: the same
    # work whatever else the machine runs.
    def __len__(self):
        return 14 * 64

    def __getitem__(self, index):
        end = time.process_time() + 0.0004
        while time.process_time() < end:
            pass
        return torch.full((16,), float(index % 5)), index % 4

if __name__ == "__main__":
    opts = poptorch.Options().deviceIterations(4)
    opts.Training.gradientAccumulation(4)
    # The profile and the summary only: the figures, without drawing the HTML report.
    opts._Popart.set("engineOptions", {"autoReport.all": "true",
                                       "autoReport.outputExecutionProfile": "false",
                                       "autoReport.directory": sys.argv[2]})
    net = Net()
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.01))
    loader = poptorch.DataLoader(opts, Decoded(), batch_size=4, num_workers=2,
                                 persistent_workers=False,
                                 mode=getattr(poptorch.DataLoaderMode, sys.argv[1]))
    for x, y in loader:
        model(x, y)
    loader.terminate()
"""


def _children() -> dict[int, str]:
    """The processes whose parent is this one, with their command lines; Python's
    resource tracker, which a spawned process starts once for the interpreter's
    life, left out."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and "resource_tracker" not in command:
            found[int(stat.parent.name)] = command
    return found


def _shared_memory() -> set[str]:
    shm = Path("/dev/shm")
    return {entry.name for entry in shm.iterdir()} if shm.is_dir() else set()


@pytest.fixture
def busy_machine():
    """One spinning process per CPU and one more, for this test only: each stops by
    itself after a minute, and is killed and reaped when the test ends."""
    spin = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin])
            for _ in range((os.cpu_count() or 1) + 1)]
    try:
        time.sleep(0.2)  # they are running
        yield [process.pid for process in busy]
    finally:
        for process in busy:
            process.kill()
        for process in busy:
            process.wait(timeout=10)


def _run(tmp_path: Path, name: str, mode: str) -> tuple[dict, float, str]:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    reports = tmp_path / name
    assert commands.main(["run", "--no-progress", "--timing-only", str(script), mode,
                          str(reports)]) == 0
    profile = json.loads((reports / "training" / "profile.json").read_text())
    fed = delivered_items_per_s(profile["figures"]["throughput(items/s)"],
                                profile["loader_items_per_s"])
    return profile, fed, profile["verdict"]["kind"]


@pytest.mark.slow  # starts worker processes, and keeps the machine busy with more
@pytest.mark.parametrize("mode", ["Sync", "Async"])
def test_three_runs_on_a_busy_machine_give_one_verdict_and_figures_within_5_percent(
        tmp_path, monkeypatch, busy_machine, mode):
    fresh_report_registry(monkeypatch)
    before, shared_before = _children(), _shared_memory()
    runs = [_run(tmp_path, f"run{index}", mode) for index in range(3)]
    rates = [profile["loader_items_per_s"] for profile, _, _ in runs]
    fed = [throughput for _, throughput, _ in runs]
    print(f"{mode}: loader {[round(rate) for rate in rates]} items/s, fed {fed}, "
          f"verdicts {[kind for _, _, kind in runs]}")
    assert {kind for _, _, kind in runs} == {"data_loader"}
    # 64 items a step, 25.6 ms of the workers' CPU for them, two workers: 5,000 items/s
    # at most; less what torch's worker loop and the handing over add.
    assert all(3000 < rate < 5000 for rate in rates), rates
    assert max(rates) / min(rates) <= 1.05, rates
    assert max(fed) / min(fed) <= 1.05, fed
    what_ifs = [{entry["change"]: entry["items_per_s"] for entry in profile["verdict"]["what_if"]}
                for profile, _, _ in runs]
    assert what_ifs[0].keys() == what_ifs[1].keys() == what_ifs[2].keys()
    for change in what_ifs[0]:  # each what-if, fed by the loader, as its run would be
        gains = [figures[change] for figures in what_ifs]
        assert max(gains) / min(gains) <= 1.05, (change, gains)
    assert multiprocessing.active_children() == []
    left = {pid: command for pid, command in _children().items()
            if pid not in before and pid not in busy_machine}
    assert left == {}  # no worker left behind
    assert {name for name in _shared_memory() - shared_before
            if name.startswith(("ipusim-ring", "torch_"))} == set()


class _Decoding(torch.utils.data.Dataset):
    """Each item costs 1 ms of CPU time in the thread that loads it."""

    def __len__(self):
        return 96

    def __getitem__(self, index):
        _burn(0.001)
        return torch.full((4,), float(index))


def test_a_loader_without_workers_costs_its_threads_cpu_time():
    loader = poptorch.DataLoader(poptorch.Options().deviceIterations(2), _Decoding(),
                                 batch_size=4)
    for _ in loader:
        pass
    # 8 items a step, 8 ms of CPU time, plus what collating them costs.
    assert 850 < loader.measured_items_per_s <= 1000
    assert loader.workers_cpu_s == 0


def _collate(samples):
    return torch.stack(samples)


@pytest.mark.slow  # starts worker processes
def test_the_loaders_own_functions_stay_the_ones_given():
    loader = poptorch.DataLoader(poptorch.Options(), [torch.ones(2)] * 8, batch_size=2,
                                 num_workers=1, collate_fn=_collate)
    steps = [batch.shape for batch in loader]
    assert steps == [torch.Size([2, 2])] * 4
    assert loader.collate_fn is _collate and loader.worker_init_fn is None
    assert loader.workers_cpu_s > 0
