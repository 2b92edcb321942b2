"""Measuring what a piece of real torch compute costs: FLOPs, bytes, operators.

FLOPs come from torch's own FLOP counter; memory traffic, the operator count
and each operator as an :class:`ipusim.Kernel` (a matmul's dimensions, a
convolution in implicit-GEMM form, the elements of a vector operator, in the
dtype it really runs in) from a dispatch mode that sees every aten call; the
bytes autograd saves for the backward from saved-tensor hooks. The result is
an :class:`ipusim.Cost`, the currency of the simulator. It works the same on
real tensors and on fake ones (``FakeTensorMode``), which is how a
timing-only run measures without computing.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from ipusim import Cost, Kernel, KernelKind
from poptorch_shim.annotations import CHECKPOINT, observing

# Operators that only reshape, alias or allocate move no data on an IPU.
_FREE_OPS = {"detach", "view", "_unsafe_view", "t", "transpose", "permute", "expand",
             "unsqueeze", "squeeze", "alias", "reshape", "slice", "select", "as_strided",
             "lift_fresh", "clone", "empty", "empty_like", "empty_strided", "new_empty",
             "new_empty_strided"}


# How the IPU runs the other aten operators (by overload packet name); the rest
# are element-wise on the vector unit.
_VECTOR_KINDS = {
    KernelKind.TRANSCENDENTAL: {
        "exp", "log", "tanh", "sigmoid", "gelu", "gelu_backward", "erf", "silu",
        "silu_backward", "tanh_backward", "sigmoid_backward", "log1p", "expm1", "pow"},
    KernelKind.DIVIDE: {"div", "sqrt", "rsqrt", "reciprocal"},
    KernelKind.NORMALISE: {
        "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
        "native_layer_norm", "native_layer_norm_backward", "native_group_norm",
        "native_group_norm_backward", "_softmax", "_log_softmax", "_softmax_backward_data",
        "_log_softmax_backward_data"},
    KernelKind.DATA: {
        "embedding", "embedding_dense_backward", "index_select", "gather", "scatter",
        "scatter_add", "index_add", "index", "index_put", "cat", "stack", "copy", "_to_copy",
        "constant_pad_nd", "zeros_like", "ones_like", "new_zeros", "new_empty", "fill", "zero",
        "empty_like", "full_like", "max_pool2d_with_indices_backward"},
}
_KIND_OF = {name: kind for kind, names in _VECTOR_KINDS.items() for name in names}


def _tensors(value) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _width(tensors: list[torch.Tensor]) -> int:
    """Bytes per element the operator computes in: its first floating-point operand's."""
    for tensor in tensors:
        if tensor.is_floating_point():
            return tensor.element_size()
    return tensors[0].element_size() if tensors else 4


def _prod(values) -> int:
    out = 1
    for value in values:
        out *= int(value)
    return out


def _conv_kernels(name: str, args: tuple, out, width: int) -> list[Kernel]:
    """A convolution (or its backward) as implicit GEMMs on the AMP."""
    if name == "convolution":
        x, weight, transposed, groups = args[0], args[1], args[6], args[8]
        y = out
        if transposed:  # weight is (in, out/groups, *kernel)
            c_in, c_out = weight.shape[0], weight.shape[1] * groups
        else:           # weight is (out, in/groups, *kernel)
            c_out, c_in = weight.shape[0], weight.shape[1] * groups
        return [Kernel(KernelKind.MATMUL, width, m=y.shape[0] * _prod(y.shape[2:]),
                       k=c_in // groups * _prod(weight.shape[2:]), n=c_out // groups,
                       groups=groups)]
    grad_out, x, weight = args[0], args[1], args[2]
    groups, mask = args[9], args[10]
    c_out, c_in = grad_out.shape[1], x.shape[1]
    taps = _prod(weight.shape[2:])
    kernels = []
    if mask[0]:  # the input gradient: a convolution of the output gradient
        kernels.append(Kernel(KernelKind.MATMUL, width, m=x.shape[0] * _prod(x.shape[2:]),
                              k=c_out // groups * taps, n=c_in // groups, groups=groups))
    if mask[1]:  # the weight gradient: reduce over every output position
        kernels.append(Kernel(KernelKind.MATMUL, width, m=c_out // groups,
                              k=grad_out.shape[0] * _prod(grad_out.shape[2:]),
                              n=c_in // groups * taps, groups=groups))
    if mask[2]:
        kernels.append(Kernel(KernelKind.ELEMENTWISE, width, elements=grad_out.numel(),
                              bytes=grad_out.numel() * width))
    return kernels


def kernels_of(func, args: tuple, kwargs: dict, out) -> list[Kernel]:
    """The IPU operators an aten call amounts to."""
    name = func.overloadpacket.__name__.rstrip("_")
    width = _width(_tensors(args))
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = (args[1], args[2]) if name.startswith(("addmm", "baddbmm")) else (args[0], args[1])
        groups = a.shape[0] if a.dim() == 3 else 1
        return [Kernel(KernelKind.MATMUL, width, m=a.shape[-2], k=a.shape[-1], n=b.shape[-1],
                       groups=groups)]
    if name in ("convolution", "convolution_backward"):
        return _conv_kernels(name, args, out, width)
    tensors = _tensors(args) + _tensors(kwargs) + _tensors(out)
    if not tensors:
        return []
    return [Kernel(_KIND_OF.get(name, KernelKind.ELEMENTWISE), width,
                   elements=max(t.numel() for t in tensors),
                   bytes=sum(t.numel() * t.element_size() for t in tensors))]


def tensor_bytes(value) -> int:
    """Bytes of every tensor in a (nested) value."""
    return sum(leaf.numel() * leaf.element_size() for leaf in tree_flatten(value)[0]
               if isinstance(leaf, torch.Tensor))


def _does_work(func, args: tuple, out) -> bool:
    """Whether an aten call computes or moves data on the IPU: not a view, a
    reshape, an allocation, a query of metadata (the ``prim.device`` calls
    fake tensors make), nor one-element bookkeeping such as BatchNorm's
    ``num_batches_tracked += 1``, which the IPU program folds into its loop."""
    if func.namespace != "aten" or func.is_view \
            or func.overloadpacket.__name__.rstrip("_") in _FREE_OPS:
        return False
    outputs = _tensors(out)
    return bool(outputs) and any(t.numel() > 1 for t in _tensors(args) + outputs)


class _TrafficCounter(TorchDispatchMode):
    """Counts operators, the bytes they read and write, and their kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.bytes = 0
        self.kernels: dict[Kernel, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _does_work(func, args, out):
            self.ops += 1
            self.bytes += tensor_bytes(args) + tensor_bytes(kwargs) + tensor_bytes(out)
            for kernel in kernels_of(func, args, kwargs, out):
                self.kernels[kernel] = self.kernels.get(kernel, 0) + 1
        return out

    def take_kernels(self) -> dict[Kernel, int]:
        """The kernels counted since the last take, and start counting afresh."""
        kernels, self.kernels = self.kernels, {}
        return kernels


def activation_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor autograd saves, unless it is a parameter or a view of
    one: an IPU keeps its weights anyway and stashes only activations."""
    base = tensor if tensor._base is None else tensor._base
    return 0 if isinstance(base, torch.nn.Parameter) else tensor.numel() * tensor.element_size()


@dataclass
class Measurement:
    """What one measured region cost; filled in when its ``with`` block ends.

    ``saved_bytes`` are the activations autograd keeps for the backward;
    ``checkpoint_bytes`` those marked with ``recomputationCheckpoint``, and
    ``segment_bytes`` the most saved between two checkpoints: what
    recomputing one segment holds at once.
    """

    cost: Cost = field(default_factory=Cost)
    saved_bytes: int = 0
    checkpoint_bytes: int = 0
    segment_bytes: int = 0


@contextmanager
def measure() -> Iterator[Measurement]:
    """Measure the torch compute run inside the block."""
    result = Measurement()
    flops = FlopCounterMode(display=False)
    traffic = _TrafficCounter()
    segment = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nbytes = activation_bytes(tensor)
        result.saved_bytes += nbytes
        segment[0] += nbytes
        return tensor

    def checkpoint(kind: str, tensors: tuple[torch.Tensor, ...]) -> None:
        if kind != CHECKPOINT:
            return
        result.checkpoint_bytes += tensor_bytes(tensors)
        result.segment_bytes = max(result.segment_bytes, segment[0])
        segment[0] = 0

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), observing(checkpoint), \
            flops, traffic:
        yield result
    result.segment_bytes = max(result.segment_bytes, segment[0])
    result.cost = Cost(flops=float(flops.get_total_flops()), bytes=float(traffic.bytes),
                       ops=traffic.ops, kernels=tuple(traffic.kernels.items()))
