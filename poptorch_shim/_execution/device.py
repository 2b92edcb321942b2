"""The simulated IPU device behind a model: its measured stages on ipusim.

It holds the model's :class:`ipusim.Work` and memory, the
:class:`ipusim.Simulation` that advances with every call, and reads PopTorch's
timing figures (cycle count, performance counters, latency) off the
simulated timeline. The options become the engine's configuration in
:mod:`poptorch_shim._execution.engine_config`.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import pandas as pd

import ipusim
from ipusim import RunConfig, Simulation, Stage, Work
from ipusim.analysis.graph_profile import check_tiles_fit
from ipusim.analysis.program_steps import operator_runs
from ipusim.analysis.tile_memory import Variable
from ipusim.cost.cost_model import PS_PER_S, to_cycles
from ipusim.plan.memory import OutOfMemoryError, check_fits, memory_per_ipu
from ipusim.plan.setting_names import SettingNames
from ipusim.report.verdict import Verdict, bottleneck
from poptorch_shim._core import simulated_clock
from poptorch_shim._core.option_names import REPORT_NAMES
from poptorch_shim._data.loader_rate import LoaderRate
from poptorch_shim._execution.debug_context import DebugRecorder, kernel_key, update_context
from poptorch_shim._execution.engine_config import cost_model, instance_system


def _check_memory(device: SimulatedDevice, training: bool) -> None:
    """Refuse a model that does not fit: an IPU's SRAM as a whole, then its fullest tile."""
    plan = device.simulation.plan
    check_fits(device.memory, plan.stages, REPORT_NAMES, training)
    check_tiles_fit(plan, device.spec, device.memory, device.named,
                    REPORT_NAMES.word("allow_out_of_memory"))


def _warn_if_out_of_memory(device: SimulatedDevice, training: bool) -> None:
    try:
        _check_memory(device, training)
    except OutOfMemoryError as error:
        warnings.warn(f"{error} (debug.allowOutOfMemory is set: simulating anyway)",
                      stacklevel=3)


class SimulatedDevice:
    """One compiled model on the simulated system: a step per call."""

    def __init__(self, options, run: RunConfig, stages: list[Stage], micro_batch_size: int,
                 input_bytes: int, output_bytes: int, optimizer_state_ratio: float,
                 parameters: tuple[Variable, ...] = (),
                 debug: DebugRecorder | None = None,
                 names: SettingNames = REPORT_NAMES):
        """``run``: the run configuration :func:`.engine_config.check_layout` built and checked
        before the stages were measured; ``stages``: the measured stages, whose
        optimizer state is ``optimizer_state_ratio`` times their weights in training;
        ``parameters``: the model's parameter tensors (:mod:`.tensor_layout`), which stand
        for the weights on the tiles when the model runs as one stage; ``debug``: the
        debug contexts its operators were recorded with (:mod:`.debug_context`);
        ``names``: how its verdict and reports word the settings (PopTorch's calls, or
        the library's that wraps the model)."""
        self.names = names
        self.work = Work(
            tuple(replace(s, optimizer_bytes=int(s.weight_bytes * optimizer_state_ratio)
                          if run.training else 0) for s in stages),
            micro_batch_size=micro_batch_size,
            input_bytes_per_sample=input_bytes // micro_batch_size,
            output_bytes_per_sample=output_bytes // micro_batch_size)
        self.run = run
        self.spec = instance_system(options, run, self.work)
        self._instance = options.Distributed.process_id
        self.simulation = Simulation(self.work, self.run, self.spec, cost_model(options),
                                     instance=self._instance)
        self.memory = memory_per_ipu(self.work, self.run, self.spec, plan=self.simulation.plan)
        only = self.simulation.plan.stages
        #: The parameter tensors on the tiles: the model's own when it runs as one stage.
        self.named = (tuple(replace(p, ipu=only[0].ipu) for p in parameters)
                      if len(only) == 1 else ())
        self._debug = debug if len(only) == 1 else None
        if options.engine_options.get("debug.allowOutOfMemory") == "true":
            # Poplar compiles a model that does not fit so its profile shows where the
            # memory goes; here the simulation runs and the report shows the excess.
            _warn_if_out_of_memory(self, run.training)
        else:
            _check_memory(self, run.training)
        self.step_durations: list[int] = []
        # Each call's host perf_counter at its start and end, and its simulated start
        # and end: how a tracepoint's host time maps onto this model's timeline.
        self.host_calls: list[tuple[int, int, int, int]] = []
        self._verdict: tuple[tuple, Verdict] | None = None
        # What the DataLoader whose steps the model received measured (None: none seen),
        # kept here so that the model's figures outlive the script's hold on it.
        self.fed_loader_rate: LoaderRate | None = None

    def debug_contexts(self, timeline) -> dict[str, list[dict]]:
        """The debug contexts of the operator runs, by their name in the profile
        (:func:`ipusim.analysis.program_steps.operator_runs`): each run of a kernel in the
        forward and the backward takes the contexts recorded for it in the order they ran;
        an operator of the optimizer's, run once over each parameter tensor in turn (a
        multiple of their count), the context of the module that owns the tensor. Only a
        model that runs as one stage has them: the kernels of merged stages are no longer
        told apart."""
        if self._debug is None:
            return {}
        runs = operator_runs(timeline)
        queues = {key: list(contexts) for key, contexts in self._debug.contexts.items()}
        counts: dict[tuple[str, str], int] = {}
        for _, phase, name, _ in runs:
            op = name.rsplit("/", 2)[1]
            counts[phase, op] = counts.get((phase, op), 0) + 1
        out = {}
        tensors = len(self.named)
        for _, phase, name, row in runs:
            op = row["op"] or row["kind"]
            if not op.startswith("aten::"):  # the optimizer's, over each parameter tensor
                if tensors and counts[phase, op] % tensors == 0:
                    tensor = int(name.rsplit("/", 1)[1]) % tensors
                    context = update_context(self._debug, self.named[tensor].module, op)
                    if context is not None:
                        out[name] = [context]
                continue
            key = kernel_key(row["op"], row["kind"], row["width"], row["m"], row["k"], row["n"],
                             row["groups"], row["elements"])
            if queues.get(key):
                out[name] = [queues[key].pop(0)]
        return out

    def compiled_timeline(self) -> ipusim.Timeline:
        """One step of the compiled program, simulated apart from the model's own calls
        (which it leaves as they are): what the graph profile a model writes when it
        compiles reads its program steps and liveness from, before any call runs."""
        simulation = Simulation(self.work, self.run, self.spec, self.simulation.cost_model,
                                instance=self._instance)
        simulation.step()
        return simulation.timeline

    def fed_by(self, rate: LoaderRate | None) -> None:
        """A call received a DataLoader's step; ``rate``: its rate as last measured,
        with its spread (None until it has one: the rate measured before stays)."""
        if rate is not None:
            self.fed_loader_rate = rate

    def step(self, host_start_ns: int) -> int:
        """Advance the simulation by one call, which began at ``host_start_ns`` on the
        host (before its compute: see :class:`simulated_clock.ModelCall`); its duration in
        picoseconds."""
        start = self.simulation.now_ps
        duration = self.simulation.step()
        self.step_durations.append(duration)
        self.host_calls.append((host_start_ns, simulated_clock.host_now_ns(), start,
                                start + duration))
        return duration

    @property
    def timeline(self) -> ipusim.Timeline:
        return self.simulation.timeline

    def verdict(self, loader_items_per_s: float | None = None) -> Verdict:
        """What limits the calls so far, in PopTorch's words: the one verdict the exit
        line and every report of this model show. It simulates the calls once per
        what-if, so it is worked out once for each number of calls and loader rate."""
        key = (self.simulation.steps, loader_items_per_s)
        if self._verdict is None or self._verdict[0] != key:
            self._verdict = key, bottleneck(self.timeline, loader_items_per_s, self.names)
        return self._verdict[1]

    def cycle_count(self) -> int:
        """Cycles of the last call at the IPU clock."""
        if not self.step_durations:
            raise RuntimeError("The model has not been run yet: there is no cycle count")
        return to_cycles(self.step_durations[-1], self.spec.ipu.clock_hz)

    def perf_counters(self) -> dict[str, list[list[float]]]:
        """PopTorch's performance counters for the last call, in simulated seconds.

        ``input``/``input_complete``: when each micro-batch's input copy began
        and ended (its first compute, with synthetic data);
        ``output``/``output_complete``: for each micro-batch whose outputs go
        back to the host (per the output mode), when they were ready and when
        they arrived. One list per tensor (here one), one entry per micro-batch.
        """
        io = self.timeline.micro_batch_io()
        returned = io[io["returned"]]

        def seconds(times: pd.Series) -> list[list[float]]:
            return [[float(t) / PS_PER_S for t in times]]

        return {"input": seconds(io["input_start_ps"]),
                "input_complete": seconds(io["input_end_ps"]),
                "output": seconds(returned["output_ready_ps"]),
                "output_complete": seconds(returned["output_end_ps"])}

    def latency(self) -> tuple[float, float, float]:
        """Round-trip latency (min, max, mean) in seconds of the last call, as
        PopTorch computes it: each returned output against the earliest input
        of the group of micro-batches it stands for."""
        counters = self.perf_counters()
        starts, ends = counters["input"][0], counters["output_complete"][0]
        if not ends:
            return (0.0, 0.0, 0.0)
        group = len(starts) // len(ends)
        durations = [end - min(starts[i * group:(i + 1) * group]) for i, end in enumerate(ends)]
        return (min(durations), max(durations), sum(durations) / len(durations))
