"""``PoplarExecutor``: a torch model run the PopTorch way (what ``trainingModel`` and
``inferenceModel`` return).

Each call takes one step's worth of data, runs real torch compute for every
micro-batch of every replica (forward, and in training backward with the
gradients reduced over micro-batches and replicas), applies one weight
update per device iteration, advances the simulated IPU system by one step
and returns the outputs the output mode asks for. A timing-only model
(``Options.Simulation.timingOnly``) measures its stages once on fake
tensors and then only simulates.
"""
from __future__ import annotations

import difflib
import logging
import sys
from dataclasses import replace
from typing import Any

import torch

import ipusim
from ipusim.plan.memory import OutOfMemoryError
from poptorch_shim import enums
from poptorch_shim._core import loader_feed, simulated_clock
from poptorch_shim._core.compile_hooks import compile_hooks
from poptorch_shim._core.option_names import report_names
from poptorch_shim._distributed.process_group import align_clock, join_instances, reduce_gradients
from poptorch_shim._execution.anchors import Anchors, activation_names
from poptorch_shim._execution.compute import WholeModel, left_as_it_was, promoting_mixed_floats
from poptorch_shim._execution.containers import register_containers
from poptorch_shim._execution.cost_probe import tensor_bytes
from poptorch_shim._execution.debug_context import recording_contexts
from poptorch_shim._execution.device import SimulatedDevice
from poptorch_shim._execution.engine_config import (
    check_inference_options,
    check_layout,
    log_compilation,
    overlapped,
)
from poptorch_shim._execution.fake import fake_inputs, placeholder_outputs
from poptorch_shim._execution.optimum_graphcore import (
    device_generation_loop,
    host_generation_loop,
    library_of,
    without_device_loop,
)
from poptorch_shim._execution.poptorch_errors import SIMULATOR_ERRORS, poptorch_error
from poptorch_shim._execution.progress import ModelProgress
from poptorch_shim._execution.recursion import recursion_room, stack_needed
from poptorch_shim._execution.step_shape import (
    StepShape,
    assemble,
    batch_size_of,
    flatten,
    flatten_detached,
    flatten_inputs,
    split,
    split_to_single_samples,
)
from poptorch_shim._execution.tensor_layout import parameter_variables
from poptorch_shim._optim.state import update_program
from poptorch_shim._run import model_reports
from poptorch_shim.annotations import OVERLAP_INPUT, OVERLAP_OUTPUT, observing
from poptorch_shim.blocks import BlockRecorder, module_repr, recording
from poptorch_shim.custom_args import flatten_custom_types
from poptorch_shim.errors import Error, ExecutionError, InvalidUseError
from poptorch_shim.ipu_context import running_on_ipu
from poptorch_shim.optim import check_ipu_optimizer, optimizer_state_bytes
from poptorch_shim.options import Options
from poptorch_shim.strategies import PipelinedExecution

logger = logging.getLogger(__name__)
_poptorch_log = logging.getLogger("poptorch")  # PopTorch's own lines, in its words

NO_EXECUTABLE_ERR = "Model has not been compiled or has been destroyed."
OFFLINE_ERR = ("Trying to run a model on an offline device (ConnectionType.Never): use "
               "model.compile(inputs) instead of model(inputs)")

def _optimizer_state_ratio(optimizer: torch.optim.Optimizer | None) -> float:
    """Bytes of optimizer state per byte of weights."""
    if optimizer is None:
        return 0.0
    weights = sum(p.numel() * p.element_size() for group in optimizer.param_groups
                  for p in group["params"])
    return optimizer_state_bytes(optimizer) / weights if weights else 0.0


class PoplarExecutor:
    """The wrapper returned by :func:`trainingModel` and :func:`inferenceModel`.

    It runs ``model``; ``user_model`` (by default ``model``) is the one its
    ``model`` property returns and its attributes are read from.
    """

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer: torch.optim.Optimizer | None = None,
                 user_model: torch.nn.Module | None = None):
        options = options if options is not None else Options()
        if not isinstance(options, Options):
            raise InvalidUseError(f"Invalid type: 'options' is of type {type(options)} "
                                  "(Expected poptorch.Options)")
        if not training:
            check_inference_options(options)
            if optimizer is not None:
                raise InvalidUseError("An optimizer is only for training: inferenceModel "
                                      "takes none")
        # The step's shape: how each call splits, runs and returns, and the run configuration.
        shape = StepShape.of(options, training)
        shape.check_output_period()
        options._freeze()
        # The options as given: DataLoaders built with them are found by identity.
        self._given_options = options
        options = _own_copy(options, training)
        # Training across poprun instances: all-reduce gradients, align clocks.
        self._across_instances = training and join_instances(options.Distributed)
        self._model = model
        self._user_model = model if user_model is None else user_model
        self._stack_needed = stack_needed(model)
        self._options = options
        self._training = training
        # Read once: the model's own options are frozen, and every call needs these.
        self._offline = options.connection_type is enums.ConnectionType.Never
        self._mean = options.Training.reduction_type == enums.ReductionType.Mean
        self._optimizer = optimizer
        if training and optimizer is None:
            self._optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        if training:
            check_ipu_optimizer(self._optimizer)
            _reduce_as_optimizer_needs(self._options, self._optimizer, compiled=False)
        self._runner = self._make_runner(model)
        self._anchors = Anchors(options.anchored_tensors, model, training)
        self._timing_only = options.Simulation.runs_timing_only
        # The words of the settings in its reports: PopTorch's, or a library's that wraps it.
        self._names = report_names(library_of(), training,
                                   device_loop=device_generation_loop(model),
                                   no_device_loop=None if training else without_device_loop(model))
        self._placeholder: Any = None  # a timing-only model's flattened output per micro-batch
        self._signature: tuple = ()    # the input shapes and dtypes it was compiled for
        self._device: SimulatedDevice | None = None
        self._progress: ModelProgress | None = None  # the model's progress bar, once compiling
        self._attached = False
        self._shape = shape

    def _make_runner(self, model: torch.nn.Module, strategy=None):
        strategy = strategy or self._options.execution_strategy
        if strategy is None:
            return WholeModel(model)
        from poptorch_shim._execution.staged import StagedModel
        return StagedModel(model, strategy)

    # -- properties --------------------------------------------------------
    @property
    def model(self) -> torch.nn.Module:
        """The wrapped torch model."""
        return self._user_model

    @property
    def options(self) -> Options:
        return self._options

    @property
    def training(self) -> bool:
        return self._training

    @property
    def timing_only(self) -> bool:
        """Whether its calls compute no tensors, only the simulated timeline (fixed when
        the model is wrapped)."""
        return self._timing_only

    @property
    def timeline(self):
        """The simulated :class:`ipusim.Timeline` of every call so far."""
        return self._require_device().timeline

    @property
    def device(self) -> SimulatedDevice:
        """The simulated device (work, run configuration, system, memory)."""
        return self._require_device()

    def __repr__(self) -> str:
        """The wrapped model with its Blocks, as PopTorch prints it."""
        return module_repr(self._user_model)

    def __getattr__(self, name: str) -> Any:
        """The wrapped model's attributes, as PopTorch forwards them."""
        model = self.__dict__["_user_model"]
        try:
            return getattr(model, name)
        except AttributeError:
            pass
        known = [n for n in dir(type(self)) + dir(model) if not n.startswith("_")]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        # name=None: the message has its hint; Python must not add a second.
        raise AttributeError(f"{type(self).__name__} (wrapping {type(model).__name__}) has no "
                             f"attribute {name!r}.{hint}", name=None) from None

    @property
    def given_options(self) -> Options:
        """The options the script passed (the model runs on its own copy): the
        DataLoaders built with them are found by them."""
        return self._given_options

    @property
    def _executable(self) -> SimulatedDevice | None:
        """What PopTorch keeps its compiled program in, and libraries test for
        None to know whether a model is compiled (Lightning's IPU strategy
        does): here the simulated device, None before compiling and after
        ``destroy``."""
        return self._device

    def isCompiled(self) -> bool:
        return self._device is not None

    def isAttachedToDevice(self) -> bool:
        return self._attached

    def _require_device(self) -> SimulatedDevice:
        if self._device is None:
            raise ExecutionError(NO_EXECUTABLE_ERR)
        return self._device

    # -- observing tensors ---------------------------------------------------
    def getTensorNames(self) -> list[str]:
        """The names of the compiled model's tensors, as ``Options.anchorTensor``
        takes them (see :mod:`poptorch_shim._execution.anchors`)."""
        if self._device is None:
            raise ExecutionError("Model must be compiled before calling getTensorNames")
        return self._anchors.tensor_names()

    def getAnchoredTensor(self, short_name: str) -> Any:
        """The value the last run returned for the tensor anchored as ``short_name``."""
        if self._timing_only:
            raise InvalidUseError(
                f"getAnchoredTensor({short_name!r}): a timing-only model computes no tensor "
                "values; turn Simulation.timingOnly (or IPUSIM_TIMING_ONLY) off to read them.")
        return self._anchors.value(short_name)

    # -- compile and run -----------------------------------------------------
    def compile(self, *args, **kwargs) -> None:
        """Measure the model on one micro-batch and build the simulated device.

        Like PopTorch, compiling leaves the weights as they were: the
        measurement runs on the model itself, whose gradients and buffers are
        then restored.
        """
        if self._device is None:
            flatten_custom_types((args, kwargs))
            with recursion_room(self._stack_needed):
                try:
                    self._compile(split((args, kwargs), self._shape)[0])
                except SIMULATOR_ERRORS as error:
                    raise poptorch_error(error) from None
        else:
            logger.warning("Call to compile() ignored: the executable is already compiled")

    def _compile(self, first_micro_batch: tuple) -> None:
        self._progress = ModelProgress(model_reports.model_name(self._options, self._training),
                                       self._options.show_compilation_progress_bar)
        with compile_hooks(self, first_micro_batch):
            self._compile_model(first_micro_batch)

    def _compile_model(self, first_micro_batch: tuple) -> None:
        self._updatable_buffers()  # PopART refuses an unknown name when it builds the session
        first_args, first_kwargs = first_micro_batch
        self._signature = input_signature(first_micro_batch)
        run, stages, output, blocks, called = self._profile(first_args, first_kwargs)
        if self._runner.strategy is None and blocks:
            # PopTorch's default strategy: a model with Blocks is pipelined,
            # each block on the IPU its ipu_id names (AutoStage.SameAsIpu).
            self._runner = self._make_runner(self._model, PipelinedExecution.default())
            run, stages, output, _, called = self._profile(first_args, first_kwargs)
        log_compilation(self._options, run, ipusim.Work(tuple(stages)), self._runner.strategy)
        self._anchors.compiled(called, self._shape)
        flatten_custom_types(output)   # outputs of a registered type are assembled too
        register_containers(output)    # and dict subclasses and dataclasses, as PopTorch's
        if self._timing_only:
            self._placeholder = flatten(placeholder_outputs(output))
        try:
            # A generation loop on the host calls the model with its last outputs.
            run = replace(run, autoregressive=not self._training
                          and host_generation_loop(self._model))
            self._device = SimulatedDevice(
                self._options, run, stages, batch_size_of(first_micro_batch),
                input_bytes=tensor_bytes((first_args, first_kwargs)),
                output_bytes=tensor_bytes(output),
                optimizer_state_ratio=_optimizer_state_ratio(self._optimizer),
                parameters=parameter_variables(self._model), debug=self._debug_contexts,
                names=self._names)
        except OutOfMemoryError as error:
            model_reports.write_out_of_memory_report(self, error)  # where the memory goes
            raise
        model_reports.register(self)
        model_reports.write_compiled_profile(self)  # Poplar's graph profile, when compiled
        # OnDemand attaches when first run; Never stays offline.
        self._attached = self._options.connection_type is enums.ConnectionType.Always

    def _profile(self, args: tuple,
                 kwargs: dict) -> tuple[ipusim.RunConfig, list[ipusim.Stage], Any, list, list[str]]:
        """Check the stage layout and measure one micro-batch, leaving the model as
        it was: the run configuration, the measured stages, the output, the
        Blocks it started and the names of the module outputs it made, in order.
        Timing-only, the micro-batch is fake: shapes and dtypes, no data."""
        probe = self._runner
        recorder, asked, called = BlockRecorder(), set(), []
        hooks = [module.register_forward_hook(
                     lambda *_, name=name: called.append(name) if name not in called else None)
                 for name, module in activation_names(probe.model)]
        try:
            modules = list(probe.model.modules())
            with left_as_it_was(probe.model), _mode(modules, self._training), \
                    recording(recorder), running_on_ipu(self._training, compiling=True), \
                    promoting_mixed_floats(modules, (args, kwargs)), \
                    observing(lambda kind, tensors, value: asked.add(kind)), \
                    fake_inputs((args, kwargs), self._timing_only) as (args, kwargs):
                # The weight update runs the operators PopART builds for the optimizer.
                run = check_layout(self._options, self._shape, self._training,
                                   probe.stage_layout(args, kwargs), probe.strategy,
                                   update_program(self._optimizer))
                with self._progress.measuring(), recording_contexts(probe.model) as debug:
                    stages, output = probe.profile(args, kwargs, self._training)
                self._debug_contexts = debug
        finally:
            for hook in hooks:
                hook.remove()
        run = overlapped(run, (OVERLAP_INPUT in asked, OVERLAP_OUTPUT in asked))
        return run, stages, output, list(recorder.ipus), called

    def __call__(self, *args, **kwargs) -> Any:
        with simulated_clock.model_call() as call, recursion_room(self._stack_needed):
            try:
                return self._call(call, args, kwargs)
            except SIMULATOR_ERRORS as error:  # PopTorch's class, raised from the call
                raise poptorch_error(error) from None

    def _call(self, call: simulated_clock.ModelCall, args: tuple, kwargs: dict) -> Any:
        if self._offline:
            raise AssertionError(OFFLINE_ERR)   # PopTorch asserts it: not a poptorch.Error
        if self._device is not None and not self._attached:
            self.attachToDevice()  # as PopTorch does after detachFromDevice()
        flatten_custom_types((args, kwargs))
        fed_by = loader_feed.feeder((args, kwargs))
        micro_batches = split((args, kwargs), self._shape)
        if self._device is None:
            self._compile(micro_batches[0])
            self._attached = True
            single = None if fed_by is not None else split_to_single_samples(
                self._shape, batch_size_of(micro_batches[0]))
            if single is not None:
                print(f"ipusim: {model_reports.model_name(self._options, self._training)}: "
                      f"{single}", file=sys.stderr)
        if fed_by is not None:  # the loader may be gone by the report: keep its rate
            self._device.fed_by(fed_by.measured_rate)
        if input_signature(micro_batches[0]) != self._signature:
            # Inputs of the compiled shapes pass both checks: each says what else differs.
            self._check_micro_batch_size(micro_batches[0])
            self._check_signature(micro_batches[0])
        if self._timing_only:
            shape = self._shape
            outputs = [self._placeholder] * (shape.micro_batches_per_step * shape.replicas)
        else:
            outputs = self._run_step(micro_batches)
        started = self._device.simulation.now_ps
        self._device.step(call.host_start_ns)
        if self._options.log_cycle_count:  # PopTorch logs the count it instruments for
            _poptorch_log.debug("Total number of IPU cycles: %d", self._device.cycle_count())
        if self._across_instances:
            align_clock(self._device.simulation)
        call.lasted(self._device.simulation.now_ps - started)
        return assemble(outputs, self._shape)

    def _check_signature(self, micro_batch: tuple) -> None:
        """A compiled model runs the input shapes and dtypes it was compiled
        (and measured) for; a new one needs a new model, as on the IPU."""
        signature = input_signature(micro_batch)
        if signature != self._signature:
            raise ValueError(
                f"The inputs of this call have the per-micro-batch shapes and dtypes "
                f"{_describe(signature)} but the model was compiled for "
                f"{_describe(self._signature)}: the IPU program has fixed input shapes. Give "
                "every call inputs of the same shapes, or wrap the model again (for example "
                "with poptorch.trainingModel or poptorch.inferenceModel) for the new ones.")

    def _check_micro_batch_size(self, micro_batch: tuple) -> None:
        """A compiled model runs the micro-batch size it was compiled for."""
        compiled = self._device.work.micro_batch_size
        size = batch_size_of(micro_batch)
        if size != compiled:
            raise ValueError(
                f"The inputs of this call split into micro-batches of {size} samples but the "
                f"model was compiled for {compiled} (deviceIterations x replicationFactor x "
                "gradientAccumulation micro-batches per call): the IPU program has fixed input "
                "shapes. Give every call the same batch size (poptorch.DataLoader with "
                "drop_last=True does), or wrap the model again for the new size.")

    def _run_step(self, micro_batches: list) -> list:
        """Real compute of every micro-batch of every replica, in stream order;
        the outputs the output mode returns flattened and detached, None for the rest.

        ``micro_batches`` are the distinct inputs, a row of ``input_groups``
        per iteration and accumulation step; each replica of a row computes on
        its group's input, and the weights update once per device iteration.
        """
        shape = self._shape
        mean = self._mean
        scale = 1.0 / (shape.gradient_accumulation * shape.replicas) if mean else 1.0
        groups = shape.input_groups
        rows = [micro_batches[i:i + groups] for i in range(0, len(micro_batches), groups)]
        returned = shape.returned_rows(len(rows))
        sources = [shape.input_of(replica) for replica in range(shape.replicas)]
        per_row = len(sources)
        outputs: list = [None] * (len(rows) * per_row)
        call = len(self._device.step_durations) + 1
        # The loop runs once per micro-batch: what it does beyond the user's
        # compute is what a call costs, so it looks everything up once.
        run, training, accumulation = self._runner.run, self._training, shape.gradient_accumulation
        modules = list(self._model.modules())  # walked once, for the mode and the dtypes
        with _mode(modules, training), running_on_ipu(training), \
                promoting_mixed_floats(modules, micro_batches[0]), \
                self._anchors.capturing(shape, scale) as anchors, \
                self._progress.computing(len(outputs), call) as computed:
            for start in range(0, len(rows), accumulation):
                if training:
                    self._optimizer.zero_grad()
                for index in range(start, start + accumulation):
                    for place, source in enumerate(sources, index * per_row):
                        mb_args, mb_kwargs = rows[index][source]
                        out = run(mb_args, mb_kwargs, training, scale)
                        if index in returned:
                            outputs[place] = flatten_detached(out)
                        if anchors is not None:
                            anchors.micro_batch_done()
                        computed()
                if training:
                    if self._across_instances:
                        reduce_gradients(self._model.parameters(), mean)
                    self._optimizer.step()
                    if anchors is not None:
                        anchors.weights_updated()
        return outputs

    # -- weights, optimizer, device ----------------------------------------------
    def copyWeightsToHost(self) -> None:
        """Weights live in host memory here: nothing to copy, but the model must exist."""
        self._require_device()

    def copyWeightsToDevice(self) -> None:
        """Weights live in host memory here: nothing to copy, but the model must exist."""
        self._require_device()

    def copyNamedBuffersToDevice(self) -> None:
        """Write the buffers ``Options.updatableNamedBuffers`` names to the device:
        a host-to-device stream copy of their bytes on the simulated timeline,
        before the next call (host and device share the tensors here, so the
        numbers need no copy)."""
        device = self._require_device()
        buffers = self._updatable_buffers()
        if buffers is None:
            raise Error("No named buffers marked as updatable via updatableNamedBuffers option")
        # Which IPU holds a buffer is not tracked: the copy goes to the first stage's.
        nbytes = [0] * device.simulation.plan.ipus_per_replica
        nbytes[device.work.stages[0].ipu] = tensor_bytes(buffers)
        device.simulation.write_from_host(nbytes)

    def _updatable_buffers(self) -> list[torch.Tensor] | None:
        """The buffers ``Options.updatableNamedBuffers`` names (None if it names none),
        each checked to be one of the model's, as PopART checks them."""
        names = self._options.updatable_named_buffers
        if names is None:
            return None
        buffers = dict(self._model.named_buffers())
        for name in names:
            if name not in buffers:
                close = difflib.get_close_matches(name, buffers, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise Error(f"Invalid updatable buffer {name}: Options.updatableNamedBuffers "
                            f"names no buffer of the model (it has {len(buffers)}: "
                            f"{sorted(buffers)[:8]}).{hint}")
        return [buffers[name] for name in names]

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Replace the optimizer of a training model (its state comes with it)."""
        if not self._training:
            raise ValueError("setOptimizer is only for training models")
        check_ipu_optimizer(optimizer)
        _reduce_as_optimizer_needs(self._options, optimizer, compiled=self.isCompiled())
        self._optimizer = optimizer

    def detachFromDevice(self) -> None:
        self._require_device()
        if not self._attached:
            raise RuntimeError("Device is not attached")
        self._attached = False

    def attachToDevice(self) -> None:
        self._require_device()
        if self._options.connection_type is enums.ConnectionType.Never:
            raise AssertionError("Trying to attach to an offline device (ConnectionType.Never)")
        if self._attached:
            raise RuntimeError("Device is already attached")
        self._attached = True

    def destroy(self) -> None:
        """Write the profiling report if one was asked for, then release the
        simulated device; the model must be compiled again to run."""
        if self._device is not None:
            model_reports.keep_figures(self)
            model_reports.write_report(self)
        self._device = None
        self._attached = False

    # -- timing readouts -------------------------------------------------------
    def cycleCount(self) -> int:
        """Cycles of the last call on the simulated IPUs (needs ``logCycleCount(True)``)."""
        if not self._options.log_cycle_count:
            raise ExecutionError(
                "Cycle count logging is disabled. Please set option logCycleCount to True "
                "to enable.")
        return self._require_device().cycle_count()

    def getPerfCounters(self) -> dict:
        """Simulated timestamps of the last call's host transfers (empty before any run)."""
        if self._device is None or not self._device.step_durations:
            return {key: [[]] for key in ("input", "input_complete", "output", "output_complete")}
        return self._device.perf_counters()

    def getLatency(self) -> tuple[float, float, float]:
        """(min, max, mean) round-trip latency in simulated seconds of the last call."""
        if self._device is None or not self._device.step_durations:
            return (0.0, 0.0, 0.0)
        return self._device.latency()


def input_signature(micro_batch: tuple) -> tuple:
    """The structure, shapes and dtypes of the tensors of a micro-batch's
    ``(args, kwargs)``: what an IPU program is compiled for. Keyword arguments
    bind by name, so their order does not count."""
    args, kwargs = micro_batch
    leaves, spec = flatten_inputs(args, dict(sorted(kwargs.items())))
    return (spec, tuple((tuple(leaf.shape), leaf.dtype) if isinstance(leaf, torch.Tensor)
                        else type(leaf) for leaf in leaves))


def _describe(signature: tuple) -> str:
    shapes = [f"{list(leaf[0])} {str(leaf[1]).replace('torch.', '')}"
              for leaf in signature[1] if isinstance(leaf, tuple)]
    return "(" + ", ".join(shapes) + ")"


def _own_copy(options: Options, training: bool) -> Options:
    """The model's own frozen copy of the options, as PopTorch makes one: the
    copy's ``Default`` output mode becomes the one the model uses (``Final``
    for training, ``All`` for inference), and the user's options stay as they
    were, so one ``Options`` can serve a training and an inference model."""
    own = options.clone()
    if own.defaultOutputMode():
        own.outputMode(enums.OutputMode.Final if training else enums.OutputMode.All)
    own._freeze()
    return own


def _reduce_as_optimizer_needs(options: Options, optimizer: torch.optim.Optimizer,
                               compiled: bool) -> None:
    """An optimizer accumulating in FP16 needs the Running mean reduction (a
    Post sum of FP16 gradients would overflow): PopTorch switches the model's
    options to it, unless the executable is compiled already. The combined
    SGD accumulator supports Post only."""
    half = getattr(optimizer, "accum_type", None) == torch.float16
    if not half or getattr(optimizer, "use_combined_accum", False):
        return
    running = enums.MeanReductionStrategy.Running
    if options.Training.mean_reduction_strategy is running:
        return
    if compiled:
        raise InvalidUseError(
            "Invalid optimizer: the new optimizer would require changing options.Training."
            "meanAccumulationAndReplicationReductionStrategy to poptorch.MeanReductionStrategy."
            "Running but the executable is already compiled.")
    options._set_frozen(False, set())   # the model's own copy, not the user's options
    options.Training.setMeanAccumulationAndReplicationReductionStrategy(running)
    options._freeze()


class _mode:
    """Put a module in train or eval mode for a block, then restore it.

    ``modules``: the module's ``modules()``, the module itself first (a call
    walks the tree once for this and for the mixed-float check)."""

    def __init__(self, modules: list[torch.nn.Module], training: bool):
        self.modules, self.training = modules, training

    def __enter__(self):
        self.saved = [(m, m.training) for m in self.modules]
        # Module.train only sets the flags: skipped when they are all set already.
        for m, was in self.saved:
            if was != self.training or type(m).train is not torch.nn.Module.train:
                self.modules[0].train(self.training)
                break

    def __exit__(self, *exc):
        for module, was_training in self.saved:
            if module.training != was_training:
                module.training = was_training
