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

import inspect
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from ipusim import Cost, Kernel, KernelKind
from poptorch_shim._execution.debug_context import kernel_key, note
from poptorch_shim._execution.progress import operator_measured
from poptorch_shim.annotations import AVAILABLE_MEMORY, CHECKPOINT, CUSTOM_COST, observing

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
        "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training", "native_layer_norm", "native_group_norm"},
    KernelKind.NORMALISE_GRAD: {
        "native_batch_norm_backward", "native_layer_norm_backward", "native_group_norm_backward"},
    KernelKind.SOFTMAX: {"_softmax", "_log_softmax", "_safe_softmax"},
    KernelKind.SOFTMAX_GRAD: {"_softmax_backward_data", "_log_softmax_backward_data"},
    KernelKind.DATA: {
        "index_select", "gather", "scatter",
        "scatter_add", "index_add", "index", "index_put", "cat", "stack", "copy", "_to_copy",
        "constant_pad_nd", "zeros_like", "ones_like", "new_zeros", "fill", "zero", "full_like"},
}
_KIND_OF = {name: kind for kind, names in _VECTOR_KINDS.items() for name in names}


def _tensors(value) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]


def _width(tensors: list[torch.Tensor]) -> int:
    """Bytes per element the operator computes in: its first floating-point operand's."""
    for tensor in tensors:
        if tensor.is_floating_point():
            return tensor.element_size()
    return min(tensors[0].element_size(), 8) if tensors else 4  # complex: as wide as a double


def _prod(values) -> int:
    out = 1
    for value in values:
        out *= int(value)
    return out


def _stride(stride) -> int:
    """A convolution's stride as one number (the largest of its dimensions')."""
    return max(int(value) for value in stride) if len(stride) else 1


def _haloed(taps: int, dilation, transposed: bool) -> int:
    """The kernel positions whose copies of the input the exchange does not carry (its
    field with a halo instead): all of them, except for a transposed or dilated
    convolution, whose input the implicit GEMM's view is kept for."""
    return 1 if transposed or any(int(d) > 1 for d in dilation) else taps


def _conv_kernels(name: str, args: tuple, out, width: int) -> list[Kernel]:
    """A convolution (or its backward) as implicit GEMMs on the AMP."""
    if name == "convolution":
        x, weight, transposed, groups = args[0], args[1], args[6], args[8]
        taps, stride = _prod(weight.shape[2:]), _stride(args[3])
        haloed = _haloed(taps, args[5], transposed)
        if transposed:  # weight is (in, out/groups, *kernel): each input scatters its taps
            return [Kernel(KernelKind.MATMUL, width, m=x.shape[0] * _prod(x.shape[2:]),
                           k=weight.shape[0] // groups, n=weight.shape[1] * taps,
                           groups=groups)]
        # weight is (out, in/groups, *kernel): each output gathers its taps
        return [Kernel(KernelKind.MATMUL, width, m=out.shape[0] * _prod(out.shape[2:]),
                       k=weight.shape[1] * taps, n=weight.shape[0] // groups, groups=groups,
                       taps=haloed, stride=stride)]
    grad_out, x, weight = args[0], args[1], args[2]
    stride, dilation, transposed, groups, mask = args[4], args[6], args[7], args[9], args[10]
    c_out, c_in = grad_out.shape[1], x.shape[1]
    taps = _prod(weight.shape[2:])
    haloed = _haloed(taps, dilation, transposed)
    kernels = []
    if mask[0]:  # the input gradient: a convolution of the output gradient
        kernels.append(Kernel(KernelKind.MATMUL, width, m=x.shape[0] * _prod(x.shape[2:]),
                              k=c_out // groups * taps, n=c_in // groups, groups=groups,
                              taps=haloed))
    if mask[1]:  # the weight gradient: reduce over every position of the output
        # (of the input, for a transposed convolution, which scatters the input's)
        field = x if transposed else grad_out
        kernels.append(Kernel(KernelKind.MATMUL, width,
                              m=(c_in if transposed else c_out) // groups,
                              k=field.shape[0] * _prod(field.shape[2:]),
                              n=(c_out if transposed else c_in) // groups * taps, groups=groups,
                              taps=haloed, stride=_stride(stride), taps_on="n"))
    if mask[2]:
        kernels.append(Kernel(KernelKind.ELEMENTWISE, width, elements=grad_out.numel(),
                              bytes=grad_out.numel() * width))
    return kernels


def _pool_kernels(name: str, args: tuple, out, width: int) -> list[Kernel]:
    """Max pooling as popnn runs it: its pooling vertex over the output's rows, one
    work item a row and kernel position; the gradient first copies the incoming
    gradient into the layout of the forward's output (lib/popnn/Pooling.cpp:976-982)."""
    kernel_size = args[1] if name == "max_pool2d_with_indices" else args[2]
    taps = _prod(kernel_size) if len(kernel_size) > 1 else int(kernel_size[0]) ** 2
    pooled = _tensors(out)[0] if name == "max_pool2d_with_indices" else args[0]
    rows, row = pooled.numel() // max(pooled.shape[-1], 1), pooled.shape[-1]
    kind = KernelKind.POOL if name == "max_pool2d_with_indices" else KernelKind.POOL_GRAD
    pool = Kernel(kind, width, m=rows, n=row, k=taps, elements=pooled.numel(),
                  bytes=tensor_bytes(args[:2]) + tensor_bytes(out))
    if kind is KernelKind.POOL:
        return [pool]
    grad_bytes = pooled.numel() * width
    return [Kernel(KernelKind.DATA, width, elements=pooled.numel(), bytes=grad_bytes), pool]


def _fused_attention(name: str) -> bool:
    """Whether an aten operator is a fused scaled-dot-product attention (the
    math variant decomposes into matmuls the probe sees one by one)."""
    return "scaled_dot_product" in name and "math" not in name


def _attention_kernels(name: str, args: tuple, width: int) -> list[Kernel]:
    """A fused scaled-dot-product attention as the IPU runs it: the scores
    (Q K^T), a softmax over them and their product with V, per batch and head;
    its backward recomputes the scores and takes the four gradient products."""
    backward = name.endswith("_backward")
    q, k, v = args[1:4] if backward else args[0:3]
    heads, length, embed = _prod(q.shape[:-2]), q.shape[-2], q.shape[-1]
    source, value = k.shape[-2], v.shape[-1]

    def product(m: int, inner: int, n: int) -> Kernel:
        return Kernel(KernelKind.MATMUL, width, m=m, k=inner, n=n, groups=heads)
    scores = heads * length * source
    softmax = Kernel(KernelKind.SOFTMAX, width, elements=scores, bytes=2 * scores * width)
    if not backward:
        return [product(length, embed, source), softmax, product(length, source, value)]
    return [product(length, embed, source), softmax,            # the scores again
            product(source, length, value), product(length, value, source),  # dV, dP
            replace(softmax, kind=KernelKind.SOFTMAX_GRAD),     # the softmax's backward
            product(length, source, embed), product(source, length, embed)]  # dQ, dK


def kernels_of(func, args: tuple, kwargs: dict, out) -> list[Kernel]:
    """The IPU operators an aten call amounts to."""
    name = func.overloadpacket.__name__.rstrip("_")
    width = _width(_tensors(args))
    if _fused_attention(name):
        return _attention_kernels(name, args, width)
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = (args[1], args[2]) if name.startswith(("addmm", "baddbmm")) else (args[0], args[1])
        groups = a.shape[0] if a.dim() == 3 else 1
        return [Kernel(KernelKind.MATMUL, width, m=a.shape[-2], k=a.shape[-1], n=b.shape[-1],
                       groups=groups)]
    if name in ("convolution", "convolution_backward"):
        return _conv_kernels(name, args, out, width)
    if name in ("max_pool2d_with_indices", "max_pool2d_with_indices_backward"):
        return _pool_kernels(name, args, out, width)
    if name in ("embedding", "embedding_dense_backward"):
        # A lookup reads only the rows it returns; its gradient zeroes a dense table
        # and adds each row back into it: popops' multi-slice and multi-update-add.
        rows = _tensors(out)[0] if name == "embedding" else args[0]
        indices = args[1]
        row = rows.shape[-1] if rows.dim() else 1
        gather = Kernel(KernelKind.GATHER, width, m=indices.numel(), n=row,
                        elements=indices.numel() * row,
                        bytes=2 * indices.numel() * row * rows.element_size()
                        + tensor_bytes(indices))
        if name == "embedding":
            return [gather]
        table = _tensors(out)[0]
        return [Kernel(KernelKind.ELEMENTWISE, width, elements=table.numel(),
                       bytes=tensor_bytes(table)), gather]
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


def regrouped(kernel: Kernel) -> Kernel:
    """A backward pass's matmul: one operand is laid out for the forward (the
    weights by output channels, the activations by rows) and must be transposed
    into the AMP's groups first; PopLibs rearranges the smaller one."""
    if kernel.kind is not KernelKind.MATMUL:
        return kernel
    smaller = kernel.groups * min(kernel.m, kernel.n) * kernel.k * kernel.width
    return replace(kernel, regroup=smaller)


#: How many operators back ``set_available_memory`` looks for the matmul it bounds: the
#: tensor's maker, or through a reshape or a bias the two before it (PopTorch's
#: FixupSetAvailableMemory.cpp searches a node's inputs two levels up).
_AVAILABLE_MEMORY_REACH = 3


def _note(kernel: Kernel) -> None:
    """Give the operator's debug context to the recorder in use (see :mod:`.debug_context`)."""
    note(kernel_key(kernel.op, kernel.kind.value, kernel.width, kernel.m, kernel.k, kernel.n,
                    kernel.groups, kernel.elements))


class TrafficCounter(TorchDispatchMode):
    """Counts operators, the bytes they read and write, and their kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.bytes = 0
        self.uncounted_flops = 0
        self.kernels: dict[Kernel, int] = {}
        self.paused = False   # an operator counted whole above the aten calls it makes
        # The kernels of the last few operators counted, latest last.
        self._recent: deque[list[Kernel]] = deque(maxlen=_AVAILABLE_MEMORY_REACH)

    def observe(self, kind: str, tensors: tuple, value) -> None:
        """An annotation reached while counting: a custom operator's registered
        :class:`Cost` is counted; ``set_available_memory`` plans the latest recent
        operator with a matmul (each once) within its proportion."""
        if kind == CUSTOM_COST:
            self.ops += value.ops
            self.bytes += value.bytes
            self.uncounted_flops += value.flops
            for kernel, count in value.kernels:
                self.kernels[kernel] = self.kernels.get(kernel, 0) + count
            self._recent.append([kernel for kernel, _ in value.kernels])
            return
        if kind != AVAILABLE_MEMORY:
            return
        for index in range(len(self._recent) - 1, -1, -1):
            kernels = self._recent[index]
            if any(kernel.kind is KernelKind.MATMUL for kernel in kernels):
                for kernel in kernels:
                    if kernel.kind is KernelKind.MATMUL and self.kernels.get(kernel):
                        self.kernels[kernel] -= 1
                        if not self.kernels[kernel]:
                            del self.kernels[kernel]
                        bounded = replace(kernel, available_memory=value)
                        self.kernels[bounded] = self.kernels.get(bounded, 0) + 1
                del self._recent[index]
                return

    def count(self, kernel: Kernel, nbytes: int) -> None:
        """Count one IPU operator the aten calls do not show as such."""
        self.ops += 1
        self.bytes += nbytes
        self.kernels[kernel] = self.kernels.get(kernel, 0) + 1
        _note(kernel)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.paused and _does_work(func, args, out):
            self.ops += 1
            operator_measured()
            self.bytes += tensor_bytes(args) + tensor_bytes(kwargs) + tensor_bytes(out)
            op = f"aten::{func.overloadpacket.__name__}"
            kernels = [replace(kernel, op=op) for kernel in kernels_of(func, args, kwargs, out)]
            if torch._C._current_autograd_node() is not None:  # in a backward pass
                kernels = [regrouped(kernel) for kernel in kernels]
            for kernel in kernels:
                self.kernels[kernel] = self.kernels.get(kernel, 0) + 1
                _note(kernel)
            self._recent.append(kernels)
            if _fused_attention(func.overloadpacket.__name__):  # torch's FLOP counter misses it
                self.uncounted_flops += sum(2 * k.groups * k.m * k.k * k.n for k in kernels
                                            if k.kind is KernelKind.MATMUL)
        return out

    def take_kernels(self) -> dict[Kernel, int]:
        """The kernels counted since the last take, and start counting afresh."""
        kernels, self.kernels = self.kernels, {}
        return kernels


class _WholeRegion:
    """What :class:`FlopCounter` gives torch's counter instead of its module tracker:
    one region, "Global", which is all the probe reads."""

    parents = frozenset({"Global"})

    def __enter__(self) -> _WholeRegion:
        return self

    def __exit__(self, *exc) -> None:
        return None


class FlopCounter(FlopCounterMode):
    """torch's FLOP counter over a whole region, without its per-module breakdown.

    torch's counter tracks modules with global hooks that hand every module's
    output to autograd; an output that needs a gradient but has no autograd node
    (a view of a parameter made without grad: transformers'
    ``WhisperPositionalEmbedding`` returns a slice of its own weight) makes them
    fail ("Expected gradient function to be set"). The probe reads only the total,
    so it needs no module tracking, and no hook on every module call.
    """

    def __init__(self) -> None:
        super().__init__(display=False)
        self.mod_tracker = _WholeRegion()


def activation_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor autograd saves, unless it is a parameter or a view of
    one: an IPU keeps its weights anyway and stashes only activations."""
    base = tensor if tensor._base is None else tensor._base
    return 0 if isinstance(base, torch.nn.Parameter) else tensor.numel() * tensor.element_size()


class SavedActivations:
    """What autograd saves for the backward, cut into segments at the
    recomputation checkpoints: all of it (``saved_bytes``), the checkpoints
    (``checkpoint_bytes``), and the most one segment saves besides them
    (``segment_bytes``), which is what recomputing a segment holds at once.
    The checkpoints are kept anyway, so a segment saving one again adds nothing."""

    def __init__(self) -> None:
        self.saved_bytes = self.checkpoint_bytes = self.segment_bytes = 0
        self._segment: dict[int, int] = {}  # bytes saved in the current segment, by tensor
        self._checkpoints: set[int] = set()

    def pack(self, tensor: torch.Tensor) -> None:
        nbytes = activation_bytes(tensor)
        self.saved_bytes += nbytes
        if id(tensor) not in self._checkpoints:
            self._segment[id(tensor)] = self._segment.get(id(tensor), 0) + nbytes

    def checkpoint(self, tensors: tuple[torch.Tensor, ...]) -> None:
        self.checkpoint_bytes += tensor_bytes(tensors)
        for tensor in tensors:
            self._checkpoints.add(id(tensor))
            self._segment.pop(id(tensor), None)
        self.close_segment()

    def close_segment(self) -> None:
        self.segment_bytes = max(self.segment_bytes, sum(self._segment.values()))
        self._segment.clear()


#: The functions PopART lowers to poprand's dropout (their CPU forms draw a mask, scale
#: it and multiply: three aten calls where the IPU runs one operator).
_DROPOUTS = frozenset({torch.nn.functional.dropout, torch.dropout, torch.nn.functional.dropout1d,
                       torch.nn.functional.dropout2d, torch.nn.functional.dropout3d})


def _dropping(func, args: tuple, kwargs: dict) -> bool:
    """Whether a dropout call drops anything: in training, with a probability above 0
    (in place or not); otherwise it is the identity and costs nothing."""
    if func is torch.dropout:   # (input, p, train), a builtin without a signature
        named = dict(zip(("input", "p", "train"), args)) | kwargs
        return bool(named.get("train")) and named.get("p", 0) > 0
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    return bool(bound.arguments["training"]) and bound.arguments["p"] > 0


class DropoutAsPoprand(TorchFunctionMode):
    """Counts a training-mode dropout as the one operator the IPU runs, poprand's
    dropout (the mask drawn and applied in one vertex), instead of the aten calls
    of its CPU form; its gradient, the mask multiplied in again, the backward sees."""

    def __init__(self, traffic: TrafficCounter) -> None:
        super().__init__()
        self.traffic = traffic

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _DROPOUTS or self.traffic.paused:
            return func(*args, **kwargs)
        self.traffic.paused = True
        try:
            out = func(*args, **kwargs)
        finally:
            self.traffic.paused = False
        if _dropping(func, args, kwargs) and isinstance(out, torch.Tensor) \
                and out.numel() > 1 and out.is_floating_point():
            self.traffic.count(Kernel(KernelKind.DROPOUT, out.element_size(),
                                      elements=out.numel(), bytes=2 * tensor_bytes(out),
                                      op="aten::native_dropout"), 2 * tensor_bytes(out))
        return out


@dataclass
class Measurement:
    """What one measured region cost; filled in when its ``with`` block ends."""

    cost: Cost = field(default_factory=Cost)
    saved: SavedActivations = field(default_factory=SavedActivations)


@contextmanager
def measure() -> Iterator[Measurement]:
    """Measure the torch compute run inside the block."""
    result = Measurement()
    flops = FlopCounter()
    traffic = TrafficCounter()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        result.saved.pack(tensor)
        return tensor

    def annotated(kind: str, tensors: tuple[torch.Tensor, ...], value) -> None:
        if kind == CHECKPOINT:
            result.saved.checkpoint(tensors)
        traffic.observe(kind, tensors, value)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), observing(annotated), \
            flops, traffic, DropoutAsPoprand(traffic):
        yield result
    result.saved.close_segment()
    result.cost = Cost(flops=float(flops.get_total_flops() + traffic.uncounted_flops),
                       bytes=float(traffic.bytes),
                       ops=traffic.ops, kernels=tuple(traffic.kernels.items()))
