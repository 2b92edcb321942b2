"""A model torch.fx cannot trace, run eagerly with its work charged to its blocks.

Data-dependent control flow and the like stop torch.fx, so such a model
cannot be split into stage graphs. It then runs as one autograd graph, as
plain torch would, and profiling charges its work to the stages of its
blocks as it happens: each torch call of the forward to the block current
when it runs, each autograd node of the backward to the block whose forward
created it, each parameter to the block that first uses it, and each tensor
used by a later block than the one that made it to the boundaries between.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ipusim import Cost, Stage
from poptorch_shim._execution.compute import WholeModel, left_as_it_was
from poptorch_shim._execution.cost_probe import (
    FlopCounter,
    SavedActivations,
    TrafficCounter,
    tensor_bytes,
)
from poptorch_shim.annotations import CHECKPOINT, observing
from poptorch_shim.blocks import BlockRecorder, current_block, recording, require_active_block
from poptorch_shim.strategies import ExecutionStrategy


class _Charges:
    """One measurement of an eager pass, charged block by block.

    ``switch(block)`` charges the work done since the previous switch to the
    block that was current. The counters stay entered throughout: the
    autograd engine restores the caller's dispatch modes around every node,
    so they could not be swapped from a backward hook.
    """

    def __init__(self) -> None:
        self.costs: dict[str | None, Cost] = {}
        self.saved: dict[str | None, SavedActivations] = {}
        self._block: str | None = None
        self._mark = (0.0, 0.0, 0)
        self._flops = FlopCounter()
        self._traffic = TrafficCounter()

    @contextmanager
    def active(self, block: str | None) -> Iterator[_Charges]:
        self._block = block
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor), \
                observing(self._annotated), self._flops, self._traffic:
            yield self
            self.switch(None)
        for saved in self.saved.values():
            saved.close_segment()

    def switch(self, block: str | None) -> None:
        now = (float(self._flops.get_total_flops() + self._traffic.uncounted_flops),
               float(self._traffic.bytes), self._traffic.ops)
        flops, nbytes, ops = (a - b for a, b in zip(now, self._mark))
        kernels = tuple(self._traffic.take_kernels().items())
        if ops or flops or nbytes:
            self.costs[self._block] = (self.costs.get(self._block, Cost())
                                       + Cost(flops, nbytes, ops, kernels=kernels))
        self._block, self._mark = block, now

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.saved.setdefault(self._block, SavedActivations()).pack(tensor)
        return tensor

    def _annotated(self, kind: str, tensors: tuple[torch.Tensor, ...], value) -> None:
        if kind == CHECKPOINT:
            self.saved.setdefault(self._block, SavedActivations()).checkpoint(tensors)
        self._traffic.observe(kind, tensors, value)


#: Calls that read a tensor's shape, which PopTorch's graph holds no operation for.
_SHAPE_QUERIES = frozenset({"size", "dim", "numel", "__get__", "__len__"})


class _Attribution(TorchFunctionMode):
    """Charges each torch call of an eager forward to the current block: which
    blocks compute, the parameters each uses first, the tensors that cross
    from one block to another, and the autograd nodes each creates."""

    def __init__(self) -> None:
        super().__init__()
        self.computing: dict[str | None, None] = {}
        self.params: dict[int, tuple] = {}      # id -> (first block, parameter)
        self.produced: dict[int, tuple] = {}    # id -> (block, tensor); holds them alive
        self.consumers: dict[int, set] = {}     # id -> blocks using it besides its producer
        self.nodes: dict[Any, str | None] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        mark = current_block()
        block = None if mark is None else mark.user_id
        if getattr(func, "__name__", "") not in _SHAPE_QUERIES:
            self.computing.setdefault(block)
        for leaf in tree_flatten((args, kwargs))[0]:
            if isinstance(leaf, torch.nn.Parameter):
                self.params.setdefault(id(leaf), (block, leaf))
            elif isinstance(leaf, torch.Tensor) and id(leaf) in self.produced \
                    and self.produced[id(leaf)][0] != block:
                self.consumers.setdefault(id(leaf), set()).add(block)
        out = func(*args, **kwargs)
        if mark is None and getattr(func, "__name__", "") not in _SHAPE_QUERIES \
                and any(isinstance(leaf, torch.Tensor) for leaf in tree_flatten(out)[0]):
            require_active_block()   # an operation outside every block
        for leaf in tree_flatten(out)[0]:
            if isinstance(leaf, torch.Tensor) and not isinstance(leaf, torch.nn.Parameter):
                self.produced.setdefault(id(leaf), (block, leaf))
                stack = [leaf.grad_fn]
                while stack:  # claim the autograd nodes this call created
                    node = stack.pop()
                    if node is not None and node not in self.nodes:
                        self.nodes[node] = block
                        stack.extend(next_node for next_node, _ in node.next_functions)
        return out


class EagerStages(WholeModel):
    """A model run eagerly as one autograd graph, its work charged to the
    stages of its blocks as it runs: the forward by the block current at each
    call, the backward by the block whose forward created each autograd node."""

    def __init__(self, model: torch.nn.Module, strategy: ExecutionStrategy, args: tuple,
                 kwargs: dict):
        super().__init__(model)
        # Find the blocks with a forward pass, leaving the model and the random
        # generator as they were.
        recorder, attribution = BlockRecorder(), _Attribution()
        with left_as_it_was(model), torch.random.fork_rng(), torch.no_grad(), \
                recording(recorder), attribution:
            model(*args, **kwargs)
        # Work before the first block (None) has a stage of its own if the strategy gives
        # it one, else is the first block's.
        self._first = next((b for b in attribution.computing if b is not None), None)
        self.layout = strategy.place(recorder.ipus, set(attribution.computing))

    def profile(self, args: tuple, kwargs: dict,
                training: bool) -> tuple[list[Stage], Any]:
        """Measure one micro-batch, its work charged to its blocks' stages."""
        forward, backward, attribution = _Charges(), _Charges(), _Attribution()
        recorder = BlockRecorder(on_start=lambda mark: forward.switch(mark.user_id))
        with torch.set_grad_enabled(training), recording(recorder), forward.active(None), \
                attribution, self.loss_finder.watching() as losses:
            output = self.model(*args, **kwargs)
        if training:
            loss = self.loss_finder.find(output, losses)
            hooks = [node.register_prehook(lambda grads, b=block: backward.switch(b))
                     for node, block in attribution.nodes.items()]
            try:
                with backward.active(attribution.nodes.get(loss.grad_fn)):
                    loss.backward()
            finally:
                for hook in hooks:
                    hook.remove()
        return self._profiles(forward, backward, attribution, output), output

    def _profiles(self, forward: _Charges, backward: _Charges, attribution: _Attribution,
                  output: Any) -> list[Stage]:
        index = {block: k for k, stage in enumerate(self.layout) for block in stage.blocks}
        before = index.get(None, index.get(self._first, 0))
        stage = lambda block: before if block is None else index.get(block, 0)  # noqa: E731
        n = len(self.layout)
        fwd, bwd, stash = [Cost()] * n, [Cost()] * n, [0] * n
        checkpoints, segments = [0] * n, [0] * n
        for block, cost in forward.costs.items():
            fwd[stage(block)] += cost
        for block, saved in forward.saved.items():
            stash[stage(block)] += saved.saved_bytes
            checkpoints[stage(block)] += saved.checkpoint_bytes
            segments[stage(block)] = max(segments[stage(block)], saved.segment_bytes)
        for block, cost in backward.costs.items():
            bwd[stage(block)] += cost
        weights, crossing = [0] * n, [0] * n
        sizes: list[list[int]] = [[] for _ in range(n)]
        for block, param in attribution.params.values():
            weights[stage(block)] += param.numel() * param.element_size()
            sizes[stage(block)].append(param.numel() * param.element_size())
        for key, blocks in attribution.consumers.items():
            producer, tensor = attribution.produced[key]
            for k in range(stage(producer), max(stage(b) for b in blocks)):
                crossing[k] += tensor.numel() * tensor.element_size()
        crossing[-1] = tensor_bytes(output)
        return [Stage(s.name, ipu=s.ipu, forward=fwd[k], backward=bwd[k],
                      activation_bytes=crossing[k], stash_bytes=stash[k], weight_bytes=weights[k],
                      weight_tensors=len(sizes[k]), weight_sizes=tuple(sizes[k]),
                      checkpoint_bytes=checkpoints[k], segment_stash_bytes=segments[k])
                for k, s in enumerate(self.layout)]
