"""How a piece of work is run: batching, replication, execution and sync pattern.

These are PopTorch's batching knobs in ipusim's own words. The checks here
are the ones PopTorch and PopART make, with the same numbers in the message.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ipusim.cost.optimizer import DEFAULT_PROGRAM, UpdateProgram
from ipusim.cost.work import Cost, Execution, Stage, Work
from ipusim.engine.sync_groups import SyncPattern
from ipusim.hardware import IPUSpec
from ipusim.hardware.specs import check_amount, check_type
from ipusim.plan.pipeline_stages import pipeline_depth
from ipusim.plan.setting_names import error_names


def returned_micro_batches(micro_batches: int, output_period: int) -> range:
    """Which of a call's ``micro_batches`` (per replica) send their outputs to the
    host: every ``output_period``-th one, or with a period of 0 only the last."""
    if output_period == 0:
        return range(micro_batches - 1, micro_batches)
    return range(output_period - 1, micro_batches, output_period)


class SettingError(ValueError):
    """A run configuration the checks refuse, in ipusim's words: the ``setting`` at fault
    (ipusim's name: a :class:`RunConfig` field, or ``num_ipus``), its ``value`` and
    ``needed``, the bound the rule sets (the least, the most or the only value it
    takes). A front end words it its own way from these (the shim as PopTorch does)."""

    def __init__(self, message: str, setting: str, value: int, needed: int):
        super().__init__(message)
        self.setting, self.value, self.needed = setting, value, needed


class PipelineTooShallow(SettingError):
    """A pipelined call with fewer micro-batches than the pipeline has stages:
    ``model_stages`` forward stages (F), ``needed`` pipeline stages (P), ``training``."""

    def __init__(self, message: str, setting: str, value: int, needed: int,
                 model_stages: int, training: bool):
        super().__init__(message, setting, value, needed)
        self.model_stages, self.training = model_stages, training


def check_inference_accumulation(training: bool, gradient_accumulation: int) -> None:
    """An inference run accumulates no gradients: its accumulation must be 1."""
    if not training and gradient_accumulation != 1:
        raise SettingError(
            "You must set gradient_accumulation to 1 for inference: gradient accumulation "
            f"only applies to training, got gradient_accumulation={gradient_accumulation}",
            "gradient_accumulation", gradient_accumulation, 1)


def check_pipeline_depth(run: RunConfig, model_stages: int,
                         names: Mapping[str, str] | None = None) -> None:
    """A pipelined call must fill the pipeline of ``model_stages`` forward stages (its
    stages as scheduled): in training the accumulation, in inference the device
    iterations, at least the pipeline stages P. ``names`` as :meth:`RunConfig.validate`'s."""
    if run.execution is not Execution.PIPELINED:
        return
    name = error_names(names)
    needed = pipeline_depth(model_stages, run.training)
    if run.training and run.gradient_accumulation < needed:
        setting = name["gradient_accumulation"]
        raise PipelineTooShallow(
            f"{setting} must be greater than or equal to the number of pipeline stages "
            f"({needed}) when using {name['pipelined']}. Please note that a model with "
            f"{model_stages} pipeline stages will have an additional {needed - model_stages} "
            f"stages when training. Got {setting}={run.gradient_accumulation}; raise it to at "
            f"least {needed} or use fewer pipeline stages.",
            "gradient_accumulation", run.gradient_accumulation, needed, model_stages, True)
    if not run.training and run.device_iterations < needed:
        setting = name["device_iterations"]
        raise PipelineTooShallow(
            f"{setting} must be greater than or equal to the number of pipeline stages "
            f"({needed}) for pipelined inference, got {setting}={run.device_iterations}: each "
            f"micro-batch of a call fills one stage of {name['pipelined']}. Raise it to at "
            f"least {needed}.", "device_iterations", run.device_iterations, needed,
            model_stages, False)


@dataclass(frozen=True)
class Offload:
    """Which tensors live in streaming memory instead of SRAM (PopTorch's TensorLocations)."""

    weights: bool = False
    optimizer: bool = False
    accumulators: bool = False
    activations: bool = False
    sharded_optimizer: bool = False  # replicated tensor sharding: 1/replicas of the state each

    def __post_init__(self) -> None:
        for name in ("weights", "optimizer", "accumulators", "activations", "sharded_optimizer"):
            check_type("Offload.", name, getattr(self, name), bool)


@dataclass(frozen=True)
class RunConfig:
    """The batching and execution options of one engine (one compiled model)."""

    training: bool = field(default=True,
                           metadata={"help": "forward+backward+update, or forward only"})
    replicas: int = field(default=1, metadata={"help": "data-parallel copies of the model"})
    device_iterations: int = field(default=1,
                                   metadata={"help": "iterations run on the device per call"})
    gradient_accumulation: int = field(default=1,
                                       metadata={"help": "micro-batches per weight update"})
    execution: Execution = field(default=Execution.SHARDED,
                                 metadata={"help": "how the stages share the IPUs in time"})
    sync_pattern: SyncPattern = field(default=SyncPattern.FULL,
                                      metadata={"help": "host I/O sync groups"})
    synthetic_data: bool = field(default=False, metadata={"help": "no host<->device stream copies"})
    recompute: bool = field(
        default=False, metadata={"help": "recompute the forward before the backward, keeping "
                                         "only stage inputs and checkpoints (pipelined and "
                                         "sharded execution)"})
    instances: int = field(
        default=1, metadata={"help": "host processes (poprun instances) whose replicas all-reduce "
                                     "together"})
    offload: Offload = field(default=Offload(), metadata={"help": "tensors in streaming memory"})
    io_tiles: int = field(
        default=0, metadata={"help": "tiles of each IPU kept for I/O; compute gets the rest"})
    overlap_inputs: bool = field(
        default=False, metadata={"help": "input stream copies run on the I/O tiles while the "
                                         "compute tiles work, double-buffered"})
    overlap_outputs: bool = field(
        default=False, metadata={"help": "output stream copies run on the I/O tiles, sent in "
                                         "the background"})
    output_period: int = field(
        default=0,
        metadata={"help": "return outputs every N micro-batches; 0: only the last of a call"})
    stash_off_chip: bool = field(
        default=False, metadata={"help": "phased training: each phase's stash streams out after "
                                         "the forward and back in before the backward "
                                         "(PopTorch's Liveness other than AlwaysLive)"})
    optimizer: UpdateProgram = field(
        default=DEFAULT_PROGRAM, metadata={"help": "the weight update's operators over each "
                                                   "parameter tensor, as PopART builds them"})
    merge_all_reduce: bool = field(
        default=False, metadata={"help": "the gradients' all-reduces run as one buffer per IPU "
                                         "(PopART's replicatedCollectivesSettings."
                                         "mergeAllReduceCollectives); otherwise one per "
                                         "parameter tensor"})
    autoregressive: bool = field(
        default=False, metadata={"help": "each call's inputs are made from the previous call's "
                                         "outputs (a generation loop on the host): its calls "
                                         "cannot run together as device iterations, only as "
                                         "steps of the loop run on the device"})

    def __post_init__(self) -> None:
        for name in ("replicas", "device_iterations", "gradient_accumulation", "instances"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
            check_amount("RunConfig.", name, value, integer=True)
        for name in ("training", "synthetic_data", "recompute", "overlap_inputs",
                     "overlap_outputs", "stash_off_chip", "merge_all_reduce",
                     "autoregressive"):
            check_type("RunConfig.", name, getattr(self, name), bool)
        check_type("RunConfig.", "execution", self.execution, Execution)
        check_type("RunConfig.", "sync_pattern", self.sync_pattern, SyncPattern)
        check_type("RunConfig.", "offload", self.offload, Offload)
        check_type("RunConfig.", "optimizer", self.optimizer, UpdateProgram)
        if not isinstance(self.io_tiles, int) or self.io_tiles < 0:
            raise ValueError(f"io_tiles must be a non-negative integer, got {self.io_tiles!r}")
        if (self.overlap_inputs or self.overlap_outputs) and not self.io_tiles:
            raise ValueError("overlap_inputs and overlap_outputs need I/O tiles to copy on: set "
                             "io_tiles (32 or more)")
        if not isinstance(self.output_period, int) or self.output_period < 0:
            raise ValueError(
                f"output_period must be a non-negative integer, got {self.output_period!r}")
        for name in ("io_tiles", "output_period"):
            check_amount("RunConfig.", name, getattr(self, name), integer=True)
        check_inference_accumulation(self.training, self.gradient_accumulation)

    @property
    def micro_batches_per_step(self) -> int:
        """Micro-batches each replica runs in one call."""
        return self.device_iterations * self.gradient_accumulation

    def returns_outputs(self, micro_batch: int) -> bool:
        """Whether the outputs of ``micro_batch`` (index within a call) go back to the host."""
        return micro_batch in self.returned_micro_batches

    @property
    def returned_micro_batches(self) -> range:
        """The micro-batches of a call whose outputs go back to the host."""
        return returned_micro_batches(self.micro_batches_per_step, self.output_period)

    @property
    def accumulating(self) -> bool:
        """Whether gradients accumulate over several micro-batches before an update."""
        return self.training and self.gradient_accumulation > 1

    @property
    def optimizer_shards(self) -> int:
        """Replicas the optimizer state is split across (1 without replicated
        tensor sharding): each holds, streams and updates its share."""
        return self.total_replicas if self.offload.sharded_optimizer else 1

    def ipus(self, work: Work) -> int:
        """IPUs the engine spans: its replicas, each on the IPUs ``work`` is placed on."""
        return self.replicas * work.ipus_per_replica

    @property
    def total_replicas(self) -> int:
        """Replicas over all instances: the width of the gradient all-reduce."""
        return self.replicas * self.instances

    def scheduled(self, work: Work, derived_update: Callable[[Stage], Cost] | None = None,
                  derived_accumulate: Callable[[Stage], Cost] | None = None) -> Work:
        """The stages as the schedule runs them: consecutive stages on one IPU
        merge (as PopART does), except in phased execution, where each stage
        is a phase of its own. ``derived_update`` and ``derived_accumulate`` price
        the weight update and the accumulators' adds of a stage that gives none
        (see :meth:`Work.merged`)."""
        return work if self.execution.phased else work.merged(derived_update,
                                                               derived_accumulate)

    def compute_ipu(self, ipu: IPUSpec) -> IPUSpec:
        """The IPU its compute runs on: the tiles not kept for I/O."""
        if not self.io_tiles:
            return ipu
        if self.io_tiles >= ipu.tiles:
            raise ValueError(f"io_tiles={self.io_tiles} leaves no compute tiles on an IPU of "
                             f"{ipu.tiles} tiles")
        return replace(ipu, tiles=ipu.tiles - self.io_tiles)

    def validate(self, work: Work, num_ipus: int, names: Mapping[str, str] | None = None,
                 scheduled: Work | None = None) -> None:
        """Check that ``work`` run this way fits a system of ``num_ipus`` IPUs.

        ``scheduled`` is ``work`` as :meth:`scheduled` merges it, where the caller
        has it already (the engine plan), so that the stages are merged once.

        ``names`` words the settings as the caller's users know them, e.g.
        ``{"gradient_accumulation": "poptorch.Options().Training.gradientAccumulation"}``;
        keys: gradient_accumulation, device_iterations, replicas, pipelined, num_ipus.
        """
        name = error_names(names)
        for stage in work.stages:
            if stage.ipu >= num_ipus:
                raise SettingError(
                    f"Stage {stage.name!r} is placed on IPU {stage.ipu} but the system has "
                    f"{name['num_ipus']}={num_ipus} (IPUs 0..{num_ipus - 1}); place it on an "
                    "existing IPU or simulate a larger system", "num_ipus", num_ipus,
                    stage.ipu + 1)
        ipus_needed = self.ipus(work)
        if ipus_needed > num_ipus:
            raise SettingError(
                f"{name['replicas']}={self.replicas} x {work.ipus_per_replica} IPU(s) per replica "
                f"needs {ipus_needed} IPUs but the system has {name['num_ipus']}={num_ipus}; lower "
                "the replication factor or simulate a larger system", "replicas", self.replicas,
                num_ipus // work.ipus_per_replica)
        scheduled = scheduled if scheduled is not None else self.scheduled(work)
        check_pipeline_depth(self, len(scheduled.stages), names)
