"""Running a model stage by stage, split at its Blocks.

The model is traced with torch.fx by a tracer that tags every node with the
block current when it was recorded; the execution strategy places the blocks
on IPUs (consecutive blocks on one IPU merge into one stage) and torch.fx's
``split_module`` cuts the graph into one sub-module per stage. A micro-batch
then runs the stages in order. In training an activation crossing into a
stage is detached and made to require grad again, so each stage's backward
is its own autograd graph; the backward runs stage by stage in reverse,
handing each boundary's gradient back to the stage that produced it, as a
pipeline of IPUs does. The split graph is cached per input signature.

A model torch.fx cannot trace (data-dependent control flow, ...) runs
eagerly as one graph instead; its work is still charged to its blocks' stages
as it runs (:mod:`poptorch_shim._execution.eager_stages`). A warning says what
that means for the user, once per process, pointing at the user's call; and
an error the model's own code raises then comes from that eager run, without
the failed trace chained in front of it.
So does a model whose stages of one phase use each other's results (they run
at once and exchange tensors both ways, which no order of stage graphs can).
"""
from __future__ import annotations

import functools
import operator
import sys
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.split_module import split_module
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

from ipusim import Cost, Stage
from poptorch_shim._execution.compute import measured_stage
from poptorch_shim._execution.cost_probe import Measurement, measure, tensor_bytes
from poptorch_shim._execution.eager_stages import EagerStages
from poptorch_shim._execution.loss_finder import LossFinder
from poptorch_shim._execution.step_shape import flatten
from poptorch_shim.blocks import (
    BlockRecorder,
    block_hooks,
    current_block,
    recording,
    require_active_block,
)
from poptorch_shim.strategies import ExecutionStrategy, PlacedStage

_TENSOR = object()   # marks a tensor leaf among the constant leaves of a call
_INPUT, _STAGE, _CONST = range(3)   # where a stage's input comes from
_IN_PLACE_OPERATORS = (operator.setitem, operator.iadd, operator.isub, operator.imul,
                       operator.itruediv, operator.ifloordiv, operator.imod, operator.ipow,
                       operator.imatmul, operator.iand, operator.ior, operator.ixor)


#: Calls that read a tensor's shape or pick an output of a call returning several
#: (``torch.split``), which PopTorch's graph holds no operation for.
_SHAPE_QUERIES = frozenset({"size", "dim", "numel", getattr, len, operator.getitem})


class _BlockTracer(fx.Tracer):
    """A torch.fx tracer that records, in ``node.meta["block"]``, the block
    that was current when each node was created."""

    def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
        if kind in ("call_function", "call_method", "call_module") \
                and target not in _SHAPE_QUERIES:
            require_active_block()
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        mark = current_block()
        node.meta["block"] = None if mark is None else mark.user_id
        return node

    def call_module(self, m, forward, args, kwargs):
        try:
            path = self.path_of_module(m)
        except NameError:
            # A module made inside forward (``nn.L1Loss()(out, target)``): not part
            # of the model, so its operations are traced through.
            return forward(*args, **kwargs)
        # A leaf module becomes one node without running its hooks: start its
        # BeginBlock here so that the node lands in the block.
        if self.is_leaf_module(m, path):
            for hook in block_hooks(m):
                hook(m, args)
        return super().call_module(m, forward, args, kwargs)


class _FlatCall(torch.nn.Module):
    """The model called on a flat list of its input tensors, returning its
    output leaves: the shape of call the tracer and the splitter work on."""

    def __init__(self, model: torch.nn.Module, spec: TreeSpec, leaves: tuple):
        super().__init__()
        self.model = model
        self._spec, self._leaves = spec, leaves
        self.out_spec: TreeSpec | None = None

    def forward(self, flat):
        tensors = iter(flat)
        leaves = [next(tensors) if leaf is _TENSOR else leaf for leaf in self._leaves]
        args, kwargs = tree_unflatten(leaves, self._spec)
        out_leaves, self.out_spec = flatten(self.model(*args, **kwargs))
        return tuple(out_leaves)


@dataclass(frozen=True)
class _StagePlan:
    """One stage of the split graph: its sub-module and where its inputs come from."""

    placed: PlacedStage
    module: torch.nn.Module
    inputs: tuple[tuple, ...]        # (_INPUT, i) | (_STAGE, k, j) | (_CONST, value)
    parameters: tuple[torch.nn.Parameter, ...]
    clone_inputs: bool               # the stage writes in place: give it its own copies


class _GraphPlan:
    """A model split into stages for one input signature."""

    def __init__(self, stages: list[_StagePlan], outputs: tuple[tuple, ...], out_spec: TreeSpec):
        self.stages, self.outputs, self.out_spec = stages, outputs, out_spec
        # (k, j) values live across each boundary k -> k+1
        self.crossing = [sorted({(r[1], r[2]) for later in stages[k + 1:] for r in later.inputs
                                 if r[0] == _STAGE and r[1] <= k}) for k in range(len(stages))]

    @property
    def layout(self) -> list[PlacedStage]:
        return [stage.placed for stage in self.stages]

    def forward(self, flat: list, grad: bool, probes: list | None = None):
        """Run the stages in order; returns each stage's outputs and, per stage,
        its detached boundary inputs with the (stage, output) they came from."""
        results: list[tuple] = []
        boundaries: list[list] = []
        for stage in self.stages:
            values, detached = [], []
            for ref in stage.inputs:
                if ref[0] == _STAGE:
                    value = results[ref[1]][ref[2]]
                    if grad and isinstance(value, torch.Tensor) and value.requires_grad:
                        local = value.detach().requires_grad_()
                        detached.append((local, ref[1], ref[2]))
                        value = local.clone() if stage.clone_inputs else local
                elif ref[0] == _INPUT:
                    value = flat[ref[1]]
                else:
                    value = ref[1]
                values.append(value)
            with measure() if probes is not None else nullcontext() as probe:
                results.append(stage.module(*values))
            if probes is not None:
                probes.append(probe)
            boundaries.append(detached)
        return results, boundaries

    def output(self, flat: list, results: list[tuple]) -> Any:
        leaves = [results[r[1]][r[2]] if r[0] == _STAGE else flat[r[1]] if r[0] == _INPUT
                  else r[1] for r in self.outputs]
        return tree_unflatten(leaves, self.out_spec)

    def backward(self, results: list[tuple], boundaries: list[list], loss: torch.Tensor,
                 scale: float, probes: list | None = None) -> None:
        """Backward stage by stage in reverse, from ``loss * scale``."""
        loss_stage = next((r[1] for r in self.outputs
                           if r[0] == _STAGE and results[r[1]][r[2]] is loss), None)
        if loss_stage is None:
            raise RuntimeError("The loss of a training model must be computed by the model, not "
                               "passed in as an input")
        pending: dict[tuple[int, int], torch.Tensor] = {}
        for k in range(len(self.stages) - 1, -1, -1):
            roots, grads = [], []
            if k == loss_stage:
                roots.append(loss)
                grads.append(torch.full_like(loss, scale))
            for j, out in enumerate(results[k]):
                grad = pending.pop((k, j), None)
                if grad is not None:
                    roots.append(out)
                    grads.append(grad)
            with measure() if probes is not None else nullcontext() as probe:
                if roots:
                    torch.autograd.backward(roots, grads)
            if probes is not None:
                probes[k] = probe
            for local, src, index in boundaries[k]:
                if local.grad is not None:
                    key = (src, index)
                    pending[key] = pending[key] + local.grad if key in pending else local.grad

    def profiles(self, results: list[tuple], forward: list[Measurement],
                 backward: list[Measurement]) -> list[Stage]:
        """What each stage cost and holds; a parameter used by several stages
        (tied weights) counts where it is first used."""
        seen: set[int] = set()
        profiles = []
        last = len(self.stages) - 1
        for k, stage in enumerate(self.stages):
            sizes = []
            for param in stage.parameters:
                if id(param) not in seen:
                    seen.add(id(param))
                    sizes.append(param.numel() * param.element_size())
            weights, tensors = sum(sizes), len(sizes)
            crossing = (tensor_bytes(results[last]) if k == last else
                        tensor_bytes([results[src][j] for src, j in self.crossing[k]]))
            profiles.append(measured_stage(stage.placed.name, stage.placed.ipu, forward[k],
                                           backward[k].cost, activation_bytes=crossing,
                                           weight_bytes=weights, weight_tensors=tensors,
                                           weight_sizes=tuple(sizes)))
        return profiles


def _writes_in_place(module: fx.GraphModule) -> bool:
    """Whether a stage's graph has an in-place operation (which a detached
    boundary input, a leaf that requires grad, would refuse)."""
    for node in module.graph.nodes:
        if node.op == "call_module" and getattr(module.get_submodule(node.target), "inplace",
                                                False):
            return True
        if node.op in ("call_method", "call_function"):
            name = getattr(node.target, "__name__", str(node.target))
            if (name.endswith("_") and not name.endswith("__")) or node.kwargs.get("inplace") \
                    or node.target in _IN_PLACE_OPERATORS:
                return True
    return False


def _trace(model: torch.nn.Module, spec: TreeSpec, leaves: tuple,
           num_inputs: int) -> tuple[fx.GraphModule, TreeSpec, BlockRecorder]:
    """Trace the model for one input signature, each node tagged with its block."""
    root = _FlatCall(model, spec, leaves)
    recorder = BlockRecorder()
    with recording(recorder):
        graph = _BlockTracer().trace(root, concrete_args={"flat": [fx.PH] * num_inputs})
    return fx.GraphModule(root, graph), root.out_spec, recorder


class _ExchangeWithinPhase(Exception):
    """Two stages that run at once use each other's results: no order of
    stage graphs computes them, so the model runs eagerly, block by block."""


def _split(traced: fx.GraphModule, out_spec: TreeSpec, recorder: BlockRecorder,
           strategy: ExecutionStrategy) -> _GraphPlan:
    """Place the traced model's blocks and split its graph into those stages."""
    ops = [n for n in traced.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    first = next((n.meta["block"] for n in ops if n.meta["block"] is not None), None)
    # Work before the first block (None) has a stage of its own if the strategy gives it
    # one, else is the first block's; a shape query makes no operation to place.
    computing = {n.meta["block"] for n in ops
                 if n.meta["block"] is not None or n.target not in _SHAPE_QUERIES}
    placed = strategy.place(recorder.ipus, computing)
    index = {block: k for k, stage in enumerate(placed) for block in stage.blocks}
    before = index.get(None, index.get(first, 0))
    block_of = {n: n.meta["block"] if n.meta["block"] is not None
                else None if None in index else first for n in ops}
    stage_of = {n: before if n.meta["block"] is None else index.get(n.meta["block"], 0)
                for n in ops}
    for node in ops:
        for source in node.all_input_nodes:
            if source in stage_of and stage_of[source] > stage_of[node]:
                if strategy.run_together(block_of[node], block_of[source]):
                    raise _ExchangeWithinPhase()
                raise ValueError(
                    f"Block {block_of[node]!r} (stage {placed[stage_of[node]].name!r}) uses a "
                    f"result of block {block_of[source]!r}, which runs in the later stage "
                    f"{placed[stage_of[source]].name!r}. Stages run in the order the strategy "
                    "lists them: list the blocks in the order forward() starts them, and start "
                    "each block once.")
    split = split_module(traced, traced, lambda node: stage_of[node], keep_original_order=True,
                         tuple_return=True)
    sources: dict[fx.Node, tuple] = {}
    stages: dict[int, _StagePlan] = {}
    for node in split.graph.nodes:
        if node.op == "placeholder":
            sources[node] = (_INPUT, len(sources))
        elif node.op == "get_attr":
            sources[node] = (_CONST, functools.reduce(getattr, node.target.split("."), split))
        elif node.op == "call_module":
            k = int(node.target.rsplit("_", 1)[1])
            module = split.get_submodule(node.target)
            inputs = tuple(sources[arg] for arg in node.args)
            params = tuple(module.parameters()) + tuple(
                ref[1] for ref in inputs if ref[0] == _CONST
                and isinstance(ref[1], torch.nn.Parameter))
            stages[k] = _StagePlan(placed[k], module, inputs, params, _writes_in_place(module))
            sources[node] = (_STAGE, k)
        elif node.op == "call_function" and node.target is operator.getitem:
            sources[node] = (_STAGE, sources[node.args[0]][1], node.args[1])
        elif node.op == "output":
            results = node.args[0]
            results = (results,) if isinstance(results, fx.Node) else results
            outputs = tuple(sources[r] if isinstance(r, fx.Node) else (_CONST, r) for r in results)
    return _GraphPlan([stages[k] for k in sorted(stages)], outputs, out_spec)


# Whether this process has said what running a model eagerly means (said once).
_told_eager = False
_SHIM = str(Path(__file__).resolve().parents[1])
_TORCH = str(Path(torch.__file__).resolve().parent)


def _tell_eager(model: torch.nn.Module, error: Exception) -> None:
    """Warn, once per process and at the caller's line outside the shim and torch,
    that ``model`` runs eagerly because torch.fx could not trace it (``error``)."""
    global _told_eager
    if _told_eager:
        return
    _told_eager = True
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith((_SHIM, _TORCH)):
        frame, level = frame.f_back, level + 1
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
    warnings.warn(
        f"poptorch: torch.fx cannot trace {type(model).__name__} to split it at its Blocks "
        f"({type(error).__name__}: {first_line}). It runs eagerly as one autograd graph "
        "instead: nothing to change in your script. Its results are the same, and each "
        "block's work, saved activations, weights and boundary tensors are still charged to "
        "the IPU it is placed on. Said once, for the first model it applies to.",
        stacklevel=level)


class StagedModel:
    """Runs a model stage by stage, as an execution strategy places its blocks."""

    def __init__(self, model: torch.nn.Module, strategy: ExecutionStrategy):
        if not isinstance(strategy, ExecutionStrategy):
            raise TypeError(
                "Options.setExecutionStrategy: the strategy must be a poptorch.PipelinedExecution, "
                "ShardedExecution, SerialPhasedExecution or ParallelPhasedExecution, got "
                f"{strategy!r} ({type(strategy).__name__}).")
        self.model = model
        self.strategy = strategy
        self.loss_finder = LossFinder()
        self._plans: dict[Any, _GraphPlan | EagerStages] = {}

    def _plan(self, args: tuple, kwargs: dict) -> tuple[_GraphPlan | EagerStages, list]:
        leaves, spec = tree_flatten((args, kwargs))
        flat = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        consts = tuple(_TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)
        key: Any = (spec, consts, self.model.training)
        try:
            plan = self._plans.get(key)
        except TypeError:  # an unhashable constant argument
            key = repr(key)
            plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._build(spec, consts, flat, args, kwargs)
        return plan, flat

    def _build(self, spec, consts, flat, args, kwargs) -> _GraphPlan | EagerStages:
        untraced: Exception | None = None
        try:
            traced = _trace(self.model, spec, consts, len(flat))
        except Exception as error:  # noqa: BLE001 - the eager run below raises the model's own
            untraced = error
        else:
            try:
                return _split(*traced, self.strategy)
            except _ExchangeWithinPhase:
                pass  # the same results and charges per block as stage graphs would give
        # Outside the handlers: an error of the model's own code raised by the eager run
        # reaches the user without the failed trace chained in front of it.
        eager = EagerStages(self.model, self.strategy, args, kwargs)
        if untraced is not None:
            _tell_eager(self.model, untraced)
        return eager

    def stage_layout(self, args: tuple, kwargs: dict) -> list[tuple[str, int]]:
        """The stages (name, IPU) one micro-batch of these inputs runs through."""
        plan, _ = self._plan(args, kwargs)
        return [(stage.name, stage.ipu) for stage in plan.layout]

    def run(self, args: tuple, kwargs: dict, training: bool, loss_scale: float) -> Any:
        """Forward one micro-batch stage by stage; in training also backward,
        gradients scaled by ``loss_scale``."""
        plan, flat = self._plan(args, kwargs)
        if isinstance(plan, EagerStages):
            return plan.run(args, kwargs, training, loss_scale)
        if not training:
            with torch.no_grad():
                results, _ = plan.forward(flat, grad=False)
            return plan.output(flat, results)
        with self.loss_finder.watching() as losses:
            results, boundaries = plan.forward(flat, grad=True)
        output = plan.output(flat, results)
        plan.backward(results, boundaries, self.loss_finder.find(output, losses), loss_scale)
        return output

    def profile(self, args: tuple, kwargs: dict,
                training: bool) -> tuple[list[Stage], Any]:
        """Measure one micro-batch stage by stage: each stage's costs, and the output."""
        plan, flat = self._plan(args, kwargs)
        if isinstance(plan, EagerStages):
            return plan.profile(args, kwargs, training)
        forward: list[Measurement] = []
        with torch.set_grad_enabled(training), self.loss_finder.watching() as losses:
            results, boundaries = plan.forward(flat, grad=training, probes=forward)
        output = plan.output(flat, results)
        backward = [Measurement(Cost()) for _ in plan.stages]
        if training:
            loss = self.loss_finder.find(output, losses)
            plan.backward(results, boundaries, loss, 1.0, probes=backward)
        return plan.profiles(results, forward, backward), output
