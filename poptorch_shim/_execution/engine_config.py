"""PopTorch's options as the engine's configuration: ipusim's run configuration,
system and cost model, checked with PopTorch's wording.

A model's run configuration is built once, from its options and its stage
layout, before any compute (:func:`check_layout`); the sweep builds each
point's the same way (:func:`checked_run_config`).
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace

import torch

import ipusim
from ipusim import Execution, Offload, RunConfig, Stage, Work
from ipusim.cost.optimizer import DEFAULT_PROGRAM, UpdateProgram
from ipusim.plan.pipeline_stages import pipeline_depth
from ipusim.plan.run_config import SettingError, check_inference_accumulation
from poptorch_shim import enums, strategies
from poptorch_shim._core import run_settings
from poptorch_shim._core.option_names import ERROR_NAMES, OPTION_CALLS
from poptorch_shim._execution.poptorch_errors import poptorch_error
from poptorch_shim._execution.step_shape import StepShape
from poptorch_shim.errors import InvalidUseError

POPRUN_IPUS_PER_REPLICA_ENV = "POPDIST_NUM_IPUS_PER_REPLICA"  # set by poprun

#: PopTorch's own log lines (the options the compiler is given, its defaults).
poptorch_log = logging.getLogger("poptorch")

#: PopTorch's ``execution_mode`` numbers (popart_compiler's ExecutionMode enum).
EXECUTION_MODES = {Execution.PIPELINED: 0, Execution.SHARDED: 1}


def execution_of(strategy) -> Execution:
    """The ipusim execution kind of a PopTorch execution strategy (None: sharded)."""
    if strategy is None:
        return Execution.SHARDED
    return Execution(strategy.execution_kind)


NO_IO_TILES_ERR = ("No IO tiles allocated. You must allocate at least 32 IO tiles using "
                   f"{OPTION_CALLS['io_tiles'].in_errors}, or leave out "
                   "poptorch.set_overlap_for_input and set_overlap_for_output.")


def recomputation(options, execution: Execution, num_ipus: int) -> enums.RecomputationType:
    """The ``autoRecomputation`` mode a model compiles with: the script's, or else
    PopTorch's default, which turns pipeline recomputation on for a pipelined model
    over more than one IPU and leaves a value the script set alone (graphcore/poptorch
    at c2a8b17, popart_compiler/source/Compiler.cpp:568-579 and CompilerImpl.hpp:354-365;
    PopART acts on it only in training)."""
    if options.recomputation_set:
        return options.recomputation
    if execution is Execution.PIPELINED and num_ipus > 1:
        return enums.RecomputationType.Pipeline
    return enums.RecomputationType.NoRecompute


def run_config(options, shape: StepShape, training: bool, work: Work, strategy=None,
               overlap: tuple[bool, bool] = (False, False),
               optimizer: UpdateProgram = DEFAULT_PROGRAM) -> RunConfig:
    """PopTorch options as an ipusim :class:`RunConfig`, for a model of ``work``'s
    stages whose calls have ``shape``; ``strategy`` is the execution strategy the
    model runs under (None: one stage), ``overlap`` whether the model asked for its
    input and its output stream copies to overlap compute, ``optimizer`` the weight
    update PopART builds for the model's optimizer."""

    def offloaded(kind: str) -> bool:
        settings = options.TensorLocations.location(kind)
        return settings is not None and settings.on_chip is False

    def sharded(kind: str) -> bool:
        settings = options.TensorLocations.location(kind)
        return settings is not None and settings.replicated_tensor_sharding is True

    execution = execution_of(strategy)
    num_stages = len(work.stages)
    mode = recomputation(options, execution, work.ipus_per_replica)
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
        recompute=(training and mode != enums.RecomputationType.NoRecompute
                   and (execution is Execution.SHARDED
                        or execution is Execution.PIPELINED and num_stages > 1)),
        offload=Offload(weights=offloaded("weight"), optimizer=offloaded("optimizer"),
                        accumulators=offloaded("accumulator"), activations=offloaded("activation"),
                        sharded_optimizer=sharded("optimizer")),
        io_tiles=options.TensorLocations.num_io_tiles,
        output_period=shape.output_period,
        stash_off_chip=getattr(strategy, "tensors_liveness",
                               enums.Liveness.AlwaysLive) is not enums.Liveness.AlwaysLive,
        optimizer=optimizer,
        merge_all_reduce=bool(options._Popart.options.get(
            "replicatedCollectivesSettings.mergeAllReduceCollectives", False)))
    return overlapped(run, overlap)


def overlapped(run: RunConfig, overlap: tuple[bool, bool]) -> RunConfig:
    """``run`` with its input and output stream copies overlapping compute as the
    model asked (``poptorch.set_overlap_for_input`` / ``_output``), which takes I/O tiles."""
    if any(overlap) and not run.io_tiles:
        raise RuntimeError(NO_IO_TILES_ERR)
    if (run.overlap_inputs, run.overlap_outputs) == overlap:
        return run
    return replace(run, overlap_inputs=overlap[0], overlap_outputs=overlap[1])


def check_layout(options, shape: StepShape, training: bool, layout: list[tuple[str, int]],
                 strategy=None, optimizer: UpdateProgram = DEFAULT_PROGRAM) -> RunConfig:
    """The run configuration of the stages' placement (name, IPU) under
    ``strategy`` with ``optimizer``'s weight update, checked against the options and
    the simulated system before any compute, with PopTorch's wording."""
    work = Work(tuple(Stage(name, ipu=ipu) for name, ipu in layout))
    # PopTorch reserves the device before it checks the pipeline.
    reserved_ipus(options, shape.replicas * work.ipus_per_replica)
    run = checked_run_config(options, shape, training, work, strategy, optimizer=optimizer)
    _check_poprun_ipus(work.ipus_per_replica)
    return run


def round_up_num_ipus(num_ipus: int) -> int:
    """The IPUs PopTorch reserves for ``num_ipus``: the next power of two (as
    popart_compiler's ``roundUpNumIPUs``), or the count itself where it is a
    whole number of 64-IPU blocks."""
    if num_ipus >= 64 and num_ipus % 64 == 0:
        return num_ipus
    rounded = 1
    while rounded < num_ipus:
        rounded *= 2
    return rounded


def reserved_ipus(options, num_ipus: int) -> int:
    """The IPUs one process reserves for a model that uses ``num_ipus``: on
    hardware PopTorch refuses a count it would have to round up (a device is a
    power of two IPUs) unless ``autoRoundNumIPUs(True)``, then reserves the
    rounded count and warns that the rest go unused (the simulated run uses only
    ``num_ipus``); an IPU Model or an offline target is never rounded."""
    rounded = round_up_num_ipus(num_ipus)
    if rounded == num_ipus or options.use_model \
            or options.connection_type is enums.ConnectionType.Never:
        return num_ipus   # an IPU Model or an offline target has exactly the IPUs asked for
    common = ", because PopTorch must reserve a power of 2 or maximum of 64 IPUs per process"
    if not options.auto_round_num_ipus:
        raise InvalidUseError(
            f"The model specifies the use of {num_ipus} IPUs, however PopTorch must reserve a "
            f"minimum of {rounded} in order to allow the model to run{common}. Please "
            "reconfigure your model to use a different number of IPUs or set "
            "poptorch.Options().autoRoundNumIPUs(True).", type="poptorch_cpp_error")
    poptorch_log.warning("Reserving %d IPUs when the model specifices the use of only %d%s. "
                         "%d will be reserved but not used.", rounded, num_ipus, common,
                         rounded - num_ipus)
    return rounded


def _log_value(value) -> str:
    """An option's value as PopTorch's C++ logs it: booleans as true / false,
    enums as their numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "value") and isinstance(value.value, int):
        return str(value.value)
    return str(value)


def log_compilation(options, run: RunConfig, work: Work, strategy=None) -> None:
    """Log, at PopTorch's levels and in its words, each option the compiler is
    given ("poptorch.Options set replication_factor to value 2") and the
    defaults it then chooses for this model (pipelining, recomputation,
    execution phases, tensor locations): what PopTorch logs when it compiles."""
    if not poptorch_log.isEnabledFor(logging.INFO):
        return
    if options._given("use_model"):
        # PopTorch's choice of an IPU Model or hardware, where the script made it.
        poptorch_log.info("From the user configuration: Ipu model: %s",
                          "Enabled" if options.use_model else "Disabled")
    given = options.toDict()
    popart = options._Popart.options
    log_options({key: value for key, value in given.items()
                 if not key.startswith("sim_") and key not in popart
                 and not isinstance(value, (dict, list, set, tuple))})
    if run.execution in EXECUTION_MODES:
        poptorch_log.debug("poptorch.Options set execution_mode to value %d",
                           EXECUTION_MODES[run.execution])
    elif run.execution.phased:
        # What PopTorch's phased strategies hand the compiler (their backendOptions).
        log_options({"execution_mode": 2,
                     "separate_backward_phase": strategy.separate_backward_phase,
                     "tensors_liveness": strategy.tensors_liveness.value,
                     "serial_phases_execution": run.execution is Execution.PHASED})
    log_options(popart)
    _log_defaults(options, run, work, popart, strategy)


def log_options(values: dict) -> None:
    """Log each option of ``values`` as PopTorch's compiler does when it is given
    it: "poptorch.Options set X to value V", a container's items one by one
    ("poptorch.Options added FINAL to dotChecks", "poptorch.Options set
    engineOptions[debug.allowOutOfMemory] to true"); unset (None) ones are not."""
    if not poptorch_log.isEnabledFor(logging.DEBUG):
        return
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, dict):
            for item, text in value.items():
                poptorch_log.debug("poptorch.Options set %s[%s] to %s", key, item, text)
        elif isinstance(value, (list, set, tuple)):
            for item in value:
                poptorch_log.debug("poptorch.Options added %s to %s", item, key)
        else:
            poptorch_log.debug("poptorch.Options set %s to value %s", key, _log_value(value))


def _log_defaults(options, run: RunConfig, work: Work, popart: dict, strategy) -> None:
    """The compiler's defaults for this model, as PopTorch's ``setOptionIfNotSet``
    logs them ("enablePipelining set to value 1"), where the script left them."""
    def default(name: str, value: str) -> None:
        if name not in popart:
            poptorch_log.debug("%s set to value %s", name, value)

    ipus = work.ipus_per_replica
    if run.execution is Execution.PIPELINED:
        default("enablePipelining", _log_value(int(ipus > 1)))
        if ipus > 1:
            default("autoRecomputation", "pipeline")
        forward = len(run.scheduled(work).stages)
        poptorch_log.info(
            "Pipelined execution: %d model stage(s) on %d IPU(s), %d pipeline stage(s) "
            "(%s), recomputation %s", forward, ipus, pipeline_depth(forward, run.training),
            "training" if run.training else "inference", "on" if run.recompute else "off")
    else:
        default("enablePipelining", "0")
    if run.execution.phased:
        if strategy is not None:
            # Phases are numbered 0, s, 2s... with the stride s the liveness needs
            # (PopTorch's tests of tensor liveness; 1 for the parallel strategy, whose
            # phases are numbered as listed); tensors sent off chip leave a gap of 3
            # phases before the backward pass, a separate backward phase 1.
            liveness = strategy.tensors_liveness
            stride = {enums.Liveness.OffChipAfterFwdNoOverlap: 2,
                      enums.Liveness.OffChipAfterEachPhase: 4}.get(liveness, 1)
            phases = (len(strategy._phases) - 1) * stride + 1
            if liveness is not enums.Liveness.AlwaysLive:
                phases += 3
            elif strategy.separate_backward_phase:
                phases += 1
            default("executionPhaseSettings.phases", str(phases))
        default("executionPhaseSettings.stages", "1" if run.execution is Execution.PHASED else "2")
        for kind in ("activation", "weight", "optimizer", "accumulator"):
            if options.TensorLocations.location(kind) is None:
                poptorch_log.debug("location_%s set to value useOnChipStorage(False)", kind)
    default("enableLoadAndOffloadRNGState", "1")
    default("enableReplicatedGraphs", _log_value(int(run.replicas > 1)))


def checked_run_config(options, shape: StepShape, training: bool, work: Work, strategy=None,
                       overlap: tuple[bool, bool] = (False, False),
                       optimizer: UpdateProgram = DEFAULT_PROGRAM) -> RunConfig:
    """:func:`run_config` for ``work``, checked against the simulated system with
    PopTorch's names for the settings."""
    run = run_config(options, shape, training, work, strategy, overlap, optimizer)
    try:
        run.validate(work, system_spec(options).num_ipus, names=ERROR_NAMES)
    except SettingError as error:
        raise poptorch_error(error) from None
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
    num_ipus = options.Simulation.num_ipus or run_settings.available_ipus()
    return ipusim.system_spec(options.Simulation.preset, num_ipus, **options.Simulation.overrides)


def instance_system(options, run: RunConfig, work: Work) -> ipusim.SystemSpec:
    """The part of the simulated system this instance runs ``work`` on (the whole
    system unless poprun shares it between instances)."""
    return system_spec(options).per_instance(run.instances, run.ipus(work))


def cost_model(options) -> ipusim.CostModel:
    """The calibrated Mk2 cost model with the options' partials type
    (``Precision.setPartialsType``), available memory proportions per IPU
    (``setAvailableMemoryProportion``) and overrides."""
    half_partials = options.Precision.partials_type == torch.float16
    by_ipu = tuple(sorted(options.available_memory_proportion.items()))
    return replace(ipusim.CALIBRATED_MK2, half_partials=half_partials,
                   available_memory_by_ipu=by_ipu, **options.Simulation.cost_overrides)


def check_inference_options(options) -> None:
    """An inference model accumulates no gradients: say so in PopTorch's words (checked
    when the model is wrapped, and for each point of a sweep)."""
    try:
        check_inference_accumulation(False, options.Training.gradient_accumulation)
    except SettingError as error:
        accumulation = error.value
    else:
        return
    message = (f"You must set {ERROR_NAMES['gradient_accumulation']} to 1 or leave it "
               "as its default value (1) when running a poptorch.inferenceModel().")
    strategy = options.execution_strategy   # None: PopTorch's default, pipelined
    if strategy is None or (isinstance(strategy, strategies.PipelinedExecution)
                            and strategy.execution_kind == "pipelined"):
        message += (f" Use {ERROR_NAMES['device_iterations']} to process a sufficient number "
                    "of batches each run for pipelined execution instead.")
    raise InvalidUseError(message + f" (got gradientAccumulation({accumulation}))")
