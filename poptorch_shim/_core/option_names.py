"""The one table from ipusim's names for a run's settings to PopTorch's option calls.

ipusim names the settings of a run by its own terms (``RunConfig``'s fields:
``gradient_accumulation``, ``device_iterations``...). A PopTorch user sets them
through ``poptorch.Options`` and reads that API in everything the shim writes,
so every PopTorch word for them comes from here:

- :data:`REPORT_NAMES`: the verdict's advice (``opts.Training.gradientAccumulation``)
  in the reports, their summary and their profile, and which column of a sweep
  table holds a setting;
- :data:`ERROR_NAMES`: ipusim's run-configuration errors
  (``poptorch.Options().Training.gradientAccumulation``);
- :func:`sweep_key`: a setting as a sweep spec and its results table name it,
  the call without ``opts.`` (``Training.gradientAccumulation``), which the
  advisor searches over.

It imports nothing from the shim's other packages.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from ipusim.plan.setting_names import SETTING_WORDS, SettingNames


@dataclass(frozen=True)
class OptionCall:
    """The ``poptorch.Options`` call that makes a setting."""

    call: str  # on the options, without ``opts.``: "Training.gradientAccumulation"
    # What advice passes it, a ``str.format`` template of the suggested ``value``
    # (None: advice names the call alone).
    argument: str | None = None

    @property
    def code(self) -> str:
        """The call as a script writes it: ``opts.enableSyntheticData(True)``."""
        arguments = "" if self.argument is None else f"({self.argument})"
        return f"opts.{self.call}{arguments}"

    @property
    def in_errors(self) -> str:
        """The option as PopTorch's errors name it: ``poptorch.Options().deviceIterations``."""
        return f"poptorch.Options().{self.call}"


#: ipusim's setting -> the ``poptorch.Options`` call that makes it.
OPTION_CALLS: MappingProxyType[str, OptionCall] = MappingProxyType({
    "device_iterations": OptionCall("deviceIterations"),
    "gradient_accumulation": OptionCall("Training.gradientAccumulation"),
    "replicas": OptionCall("replicationFactor"),
    "synthetic_data": OptionCall("enableSyntheticData", "True"),
    "sync_pattern": OptionCall("syncPattern", "poptorch.SyncPattern.{value.value}"),
    "io_tiles": OptionCall("TensorLocations.numIOTiles"),
    # The shim's own options: the simulated machine, where the optimizer state lives.
    "system": OptionCall("Simulation.system"),
    "offload.optimizer": OptionCall("TensorLocations.setOptimizerLocation"),
})

#: ipusim's setting -> PopTorch's words for what no single ``Options`` call makes:
#: an execution strategy, an output mode, the DataLoader's arguments.
OTHER_WORDS: MappingProxyType[str, str] = MappingProxyType({
    "pipelined": "poptorch.PipelinedExecution",
    # The one on-device loop a library makes: optimum-graphcore's generation.
    "on_device_loop": ("optimum-graphcore's on-device generation, "
                       "parallelize(for_generation=True, on_device_generation_steps={value})"),
    "parallel_phased": "poptorch.ParallelPhasedExecution",
    "output_period": "OutputMode.Final or EveryN",
    "async_loader": "poptorch.DataLoader(..., mode=poptorch.DataLoaderMode.Async)",
    "loader_workers": "num_workers",
    "stage_placement": "poptorch.BeginBlock(layer, ipu_id=...) or poptorch.Block(ipu_id=...)",
    "recompute": ("opts._Popart.set('autoRecomputation', 3) (RecomputationType::Pipeline) "
                  "with poptorch.recomputationCheckpoint"),
    "micro_batch": "a smaller batch_size of the poptorch.DataLoader",
    "allow_out_of_memory": ("opts._Popart.set('engineOptions', "
                            "{{'debug.allowOutOfMemory': 'true'}})"),
    "optimizer_location": ("opts.TensorLocations.setOptimizerLocation("
                           "poptorch.TensorLocationSettings().useOnChipStorage(...))"),
    "loader_miss_sleep": "async_options={{'miss_sleep_time_in_ms': 0}}",
    "loader_epoch_start": ("persistent_workers=True, load_indefinitely=True (the default), a "
                           "larger buffer_size or early_preload=True"),
})


def sweep_key(setting: str) -> str:
    """The name of ipusim's ``setting`` in a sweep spec and its results table:
    the PopTorch call that makes it (``Training.gradientAccumulation``)."""
    return OPTION_CALLS[setting].call


def _report_names() -> SettingNames:
    named = [setting for setting in OPTION_CALLS if setting in SETTING_WORDS]
    return SettingNames(
        words=MappingProxyType({**{setting: OPTION_CALLS[setting].code for setting in named},
                                **OTHER_WORDS}),
        columns=MappingProxyType({setting: sweep_key(setting) for setting in named}))


#: How ipusim's reports word the settings for a PopTorch user.
REPORT_NAMES: SettingNames = _report_names()

def _optimum_words(training: bool) -> dict[str, str]:
    """How an optimum-graphcore user sets the settings optimum turns into Options: its
    IPUConfig's fields (an inference model's device iterations and replicas its
    ``inference_`` ones)."""
    prefix = "" if training else "inference_"
    return {"device_iterations": f"IPUConfig.{prefix}device_iterations",
            "replicas": f"IPUConfig.{prefix}replication_factor",
            "gradient_accumulation": "IPUConfig.gradient_accumulation_steps"}


#: How an IPUTrainer user sets its DataLoader: IPUTrainingArguments' fields, and
#: what only the trainer's own ``get_train_dataloader`` passes (overridden in a subclass).
TRAINER_LOADER_WORDS: MappingProxyType[str, str] = MappingProxyType({
    "async_loader": "IPUTrainingArguments.dataloader_mode = \"async\"",
    "loader_workers": "IPUTrainingArguments.dataloader_num_workers",
    "loader_miss_sleep": ("async_options={{'miss_sleep_time_in_ms': 0}} in the "
                          "poptorch.DataLoader of an IPUTrainer subclass's get_train_dataloader"),
    "loader_epoch_start": ("persistent_workers=True, a larger buffer_size or early_preload=True "
                           "in the poptorch.DataLoader of an IPUTrainer subclass's "
                           "get_train_dataloader"),
})


#: The device iterations of optimum-graphcore's generation loop on the device: its steps.
DEVICE_LOOP_ITERATIONS = ("the generation steps on the device, "
                          "parallelize(for_generation=True, on_device_generation_steps=...)")


def report_names(library: str | None, training: bool, device_loop: bool = False,
                 no_device_loop: tuple[str, tuple[str, ...]] | None = None) -> SettingNames:
    """How the reports of a model word its settings: PopTorch's calls
    (:data:`REPORT_NAMES`), or for a model optimum-graphcore wraps (``library``:
    ``"optimum"``, or ``"trainer"`` for its IPUTrainer, which also builds the
    DataLoader) the IPUConfig and IPUTrainingArguments fields its users set; for its
    generation loop on the device (``device_loop``) the device iterations are the
    loop's steps, which optimum sets from ``on_device_generation_steps``. A loop on
    the host that optimum cannot move to the device (``no_device_loop``: the pipelined
    model's class, and those optimum keeps a KV cache for) is told what that needs."""
    if library is None and not device_loop and no_device_loop is None:
        return REPORT_NAMES
    words = dict(REPORT_NAMES.words)
    if library is not None:
        words.update(_optimum_words(training))
    if library == "trainer":
        words.update(TRAINER_LOADER_WORDS)
    if device_loop:
        words["device_iterations"] = DEVICE_LOOP_ITERATIONS
    if no_device_loop is not None:
        words["on_device_loop"] = device_loop_needs_kv_cache(*no_device_loop)
    return SettingNames(MappingProxyType(words), REPORT_NAMES.columns)


def device_loop_needs_kv_cache(model: str, supported: tuple[str, ...]) -> str:
    """The words of optimum-graphcore's on-device generation for a model it keeps no KV
    cache for: the change needs one of the models it does."""
    among = ", ".join(supported) or "none of its models"
    return (f"optimum-graphcore's on-device generation, which needs the KV cache it keeps "
            f"only for {among} ({model} has none): one of those, parallelize("
            "for_generation=True, use_cache=True, on_device_generation_steps={value})")


#: How ipusim's run-configuration errors (``RunConfig.validate``) name the settings.
ERROR_NAMES: MappingProxyType[str, str] = MappingProxyType({
    **{setting: OPTION_CALLS[setting].in_errors
       for setting in ("gradient_accumulation", "device_iterations", "replicas")},
    "pipelined": OTHER_WORDS["pipelined"],
})
