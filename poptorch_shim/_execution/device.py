"""The simulated IPU device behind a model: options and measured stages to ipusim.

This module translates PopTorch's options into ipusim's run configuration
and system, keeps the :class:`ipusim.Simulation` that advances with every
call, and reads PopTorch's timing figures (cycle count, performance
counters, latency) off the simulated event table.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import replace

import pandas as pd
import torch
from tqdm import tqdm

import ipusim
from ipusim import Execution, Offload, RunConfig, Simulation, Stage, Work
from ipusim.cost_model import PS_PER_MS, PS_PER_S
from ipusim.memory import OutOfMemoryError, check_fits, memory_per_ipu
from poptorch_shim import enums, strategies
from poptorch_shim._execution.batching import StepShape
from poptorch_shim._run import run_settings
from poptorch_shim._run.profiling import model_name
from poptorch_shim.errors import InvalidUseError

POPRUN_IPUS_PER_REPLICA_ENV = "POPDIST_NUM_IPUS_PER_REPLICA"  # set by poprun


def available_ipus() -> int:
    """IPUs of the simulated machine: ``IPUSIM_NUM_IPUS`` or an IPU-POD16."""
    return run_settings.current().num_ipus


def execution_of(strategy) -> Execution:
    """The ipusim execution kind of a PopTorch execution strategy (None: sharded)."""
    if strategy is None:
        return Execution.SHARDED
    return Execution(strategy.execution_kind)


NO_IO_TILES_ERR = ("No IO tiles allocated. You must allocate at least 32 IO tiles using "
                   "poptorch.Options().TensorLocations.numIOTiles, or leave out "
                   "poptorch.set_overlap_for_input and set_overlap_for_output.")


def run_config(options, training: bool, num_stages: int, strategy=None,
               overlap: tuple[bool, bool] = (False, False),
               shape: StepShape | None = None) -> RunConfig:
    """PopTorch options as an ipusim :class:`RunConfig`; ``strategy`` is the
    execution strategy the model runs under (None: one stage), ``overlap``
    whether the model asked for its input and its output stream copies to
    overlap compute, ``shape`` the model's step shape (default: the options')."""
    shape = shape or StepShape.of(options, training)

    def offloaded(kind: str) -> bool:
        settings = options.TensorLocations.location(kind)
        return settings is not None and settings.on_chip is False

    def sharded(kind: str) -> bool:
        settings = options.TensorLocations.location(kind)
        return settings is not None and settings.replicated_tensor_sharding is True

    execution = execution_of(strategy)
    run = RunConfig(
        training=training,
        replicas=shape.replicas,
        instances=options.Distributed.num_processes,
        device_iterations=shape.device_iterations,
        gradient_accumulation=shape.gradient_accumulation,
        execution=execution,
        sync_pattern=ipusim.SyncPattern(options.sync_pattern.name),
        synthetic_data=options.synthetic_data,
        # PopART recomputes a pipeline stage by stage (a one-stage pipeline has
        # nothing to recompute) and a sharded or single-IPU model as a whole.
        recompute=(training and options.recomputation != enums.RecomputationType.NoRecompute
                   and (execution is Execution.SHARDED
                        or execution is Execution.PIPELINED and num_stages > 1)),
        offload=Offload(weights=offloaded("weight"), optimizer=offloaded("optimizer"),
                        accumulators=offloaded("accumulator"), activations=offloaded("activation"),
                        sharded_optimizer=sharded("optimizer")),
        io_tiles=options.TensorLocations.num_io_tiles,
        output_period=shape.output_period,
        stash_off_chip=getattr(strategy, "tensors_liveness",
                               enums.Liveness.AlwaysLive) is not enums.Liveness.AlwaysLive)
    return overlapped(run, overlap)


def overlapped(run: RunConfig, overlap: tuple[bool, bool]) -> RunConfig:
    """``run`` with its input and output stream copies overlapping compute as the
    model asked (``poptorch.set_overlap_for_input`` / ``_output``), which takes I/O tiles."""
    if any(overlap) and not run.io_tiles:
        raise RuntimeError(NO_IO_TILES_ERR)
    if (run.overlap_inputs, run.overlap_outputs) == overlap:
        return run
    return replace(run, overlap_inputs=overlap[0], overlap_outputs=overlap[1])


# PopTorch's names for the settings ipusim checks, so its messages speak PopTorch.
_POPTORCH_NAMES = {
    "gradient_accumulation": "poptorch.Options().Training.gradientAccumulation",
    "device_iterations": "poptorch.Options().deviceIterations",
    "replicas": "poptorch.Options().replicationFactor",
    "pipelined": "poptorch.PipelinedExecution",
}


def check_layout(options, training: bool, layout: list[tuple[str, int]], strategy=None,
                 shape: StepShape | None = None) -> RunConfig:
    """The run configuration of the stages' placement (name, IPU) under
    ``strategy``, checked against the options and the simulated system before
    any compute, with PopTorch's wording."""
    work = Work(tuple(Stage(name, ipu=ipu) for name, ipu in layout))
    run = checked_run_config(options, training, work, strategy, shape)
    _check_poprun_ipus(work.ipus_per_replica)
    return run


def checked_run_config(options, training: bool, work: Work, strategy=None,
                       shape: StepShape | None = None,
                       overlap: tuple[bool, bool] = (False, False)) -> RunConfig:
    """:func:`run_config` for ``work``, checked against the simulated system with
    PopTorch's names for the settings."""
    run = run_config(options, training, len(work.stages), strategy, overlap, shape)
    run.validate(work, system_spec(options).num_ipus, names=_POPTORCH_NAMES)
    return run


def _check_poprun_ipus(ipus_per_replica: int) -> None:
    """Under poprun, a replica of the model spans the IPUs ``--ipus-per-replica``
    gave it: the partition was sized for that many."""
    given = os.environ.get(POPRUN_IPUS_PER_REPLICA_ENV)
    if given is None or not given.isdigit() or int(given) == ipus_per_replica:
        return
    raise ValueError(
        f"The model needs {ipus_per_replica} IPU(s) per replica but poprun was run with "
        f"--ipus-per-replica {given} ({POPRUN_IPUS_PER_REPLICA_ENV}={given}): run poprun "
        f"with --ipus-per-replica {ipus_per_replica}, or place the model's blocks on "
        f"{given} IPU(s).")


def system_spec(options) -> ipusim.SystemSpec:
    """The simulated system the options ask for (an IPU-POD16 of Mk2 IPUs by default)."""
    num_ipus = options.sim_num_ipus or available_ipus()
    return ipusim.system_spec(options.sim_preset, num_ipus, **options.sim_overrides)


def instance_system(options, run: RunConfig, work: Work) -> ipusim.SystemSpec:
    """The part of the simulated system this instance runs ``work`` on (the whole
    system unless poprun shares it between instances)."""
    return system_spec(options).per_instance(run.instances, run.ipus(work))


def _warn_if_out_of_memory(memory: pd.DataFrame) -> None:
    try:
        check_fits(memory)
    except OutOfMemoryError as error:
        warnings.warn(f"{error} (debug.allowOutOfMemory is set: simulating anyway)",
                      stacklevel=3)


def cost_model(options) -> ipusim.CostModel:
    """The calibrated Mk2 cost model with the options' partials type
    (``Precision.setPartialsType``) and overrides."""
    half_partials = options.Precision.partials_type == torch.float16
    return replace(ipusim.CALIBRATED_MK2, half_partials=half_partials,
                   **options.sim_cost_overrides)


def check_inference_options(options) -> None:
    """An inference model accumulates no gradients: say so in PopTorch's words (checked
    when the model is wrapped, and for each point of a sweep)."""
    if options.Training.gradient_accumulation == 1:
        return
    message = ("You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it "
               "as its default value (1) when running a poptorch.inferenceModel().")
    strategy = options.execution_strategy   # None: PopTorch's default, pipelined
    if strategy is None or (isinstance(strategy, strategies.PipelinedExecution)
                            and strategy.execution_kind == "pipelined"):
        message += (" Use poptorch.Options().deviceIterations to process a sufficient number "
                    "of batches each run for pipelined execution instead.")
    raise InvalidUseError(message + f" (got gradientAccumulation("
                                    f"{options.Training.gradient_accumulation}))")


class SimulatedDevice:
    """One compiled model on the simulated system: a step per call."""

    def __init__(self, options, run: RunConfig, stages: list[Stage], micro_batch_size: int,
                 input_bytes: int, output_bytes: int, optimizer_state_ratio: float):
        """``run``: the run configuration :func:`check_layout` built and checked
        before the stages were measured; ``stages``: the measured stages, whose
        optimizer state is ``optimizer_state_ratio`` times their weights in training."""
        self.work = Work(
            tuple(replace(s, optimizer_bytes=int(s.weight_bytes * optimizer_state_ratio)
                          if run.training else 0) for s in stages),
            micro_batch_size=micro_batch_size,
            input_bytes_per_sample=input_bytes // micro_batch_size,
            output_bytes_per_sample=output_bytes // micro_batch_size)
        self.run = run
        self.spec = instance_system(options, run, self.work)
        self.memory = memory_per_ipu(self.work, self.run, self.spec)
        if options.engine_options.get("debug.allowOutOfMemory") == "true":
            # Poplar compiles a model that does not fit so its profile shows where the
            # memory goes; here the simulation runs and the report shows the excess.
            _warn_if_out_of_memory(self.memory)
        else:
            check_fits(self.memory)
        self.simulation = Simulation(self.work, self.run, self.spec, cost_model(options),
                                     instance=options.Distributed.process_id)
        self.step_durations: list[int] = []
        # `ipusim run` asks for a progress bar of the simulated calls.
        name = model_name(options, run.training)
        self._progress = (tqdm(desc=f"simulating {name}", unit="call", leave=False)
                          if run_settings.current().progress else None)

    def step(self) -> int:
        """Advance the simulation by one call; its duration in picoseconds."""
        duration = self.simulation.step()
        self.step_durations.append(duration)
        if self._progress is not None:
            self._progress.set_postfix_str(f"{self.simulation.now_ps / PS_PER_MS:.3f} ms simulated",
                                           refresh=False)
            self._progress.update()
        return duration

    @property
    def timeline(self) -> ipusim.Timeline:
        return self.simulation.timeline

    def cycle_count(self) -> int:
        """Cycles of the last call at the IPU clock."""
        if not self.step_durations:
            raise RuntimeError("The model has not been run yet: there is no cycle count")
        return self.timeline.to_cycles(self.step_durations[-1])

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
