"""A matmul or convolution as the program poplin builds for it, step by step.

Around the AMP's Convolve compute set, poplin's convolution adds the steps that
PopVision's program tree shows for every matmul (graphcore/tutorials fcd2a67,
``tutorials/poplar/tut4_profiling/screenshots/PopVision_GA_program_tree.png``):
operands rearranged into the AMP's grouped layout (``preRegroup``,
``actsRearranged``, ``weightsRearranged``: an exchange and a copy), operands laid
out for the forward pass transposed for a backward one (``Transpose``), the
operands' exchange into the plan (``Convolve/ExchangePre``), the convolve, the
stages of the partials' reduction (``Reduce0``, ``Reduce1`` …) and a cast of the
partials to the output's type. Which operands are rearranged follows poplin's
planner (lib/poplin/ConvModel.cpp:1363-1404 at graphcore/poplibs 7eac0f2): a weight
update rearranges both operands; input channels that are not a whole number of
the AMP's input groups (padded, or expanded by the kernel's taps) rearrange the
activations and the weights; output channels that are not a whole number of the
conv units' groups rearrange the weights. The planner also charges the padded
output a rearrangement; the program does not run one (the result is a slice of
the padded partials, which the next operator's regroup moves, as the same
program tree shows: ``partialReduceOut`` of one matmul goes straight into the
next one's ``preRegroup`` exchange), so neither does this.
"""
from __future__ import annotations

from math import ceil
from typing import TYPE_CHECKING

from ipusim.cost.matmul_plan import Convolution, MatmulPlan, plan_matmul
from ipusim.cost.program import OperatorCycles, ProgramKind, Step, Unit, compute_set
from ipusim.cost.transforms import rearrange_cycles, transpose_cycles
from ipusim.cost.work import Kernel
from ipusim.hardware.specs import element_bytes

if TYPE_CHECKING:
    from ipusim.cost.tile_figures import TileFigures
    from ipusim.hardware import IPUSpec


def matmul_program(kernel: Kernel, ipu: IPUSpec, model: TileFigures) -> OperatorCycles:
    """The steps of ``kernel`` (a matmul or a convolution as an implicit GEMM) with
    the quicker of its two operand orders (the planner may swap them)."""
    if kernel.m == 0 or kernel.k == 0 or kernel.n == 0:
        return OperatorCycles()
    # The operand a convolution's kernel positions expand: (its positions' dimension,
    # its taps' dimension) in the plan, for each order of the operands.
    expanded = {"k": (("rows", "k"), ("cols", "k")), "n": (("k", "cols"), ("k", "rows"))}[
        kernel.taps_on] if kernel.taps > 1 else (None, None)
    orders = [(kernel.m, kernel.n, expanded[0]), (kernel.n, kernel.m, expanded[1])]
    if kernel.m == kernel.n and kernel.taps == 1:
        orders = orders[:1]
    programs = (_program(kernel, cols, plan_matmul(
        kernel.groups, rows, kernel.k, cols, kernel.width, ipu, model,
        Convolution(*dims, kernel.taps, kernel.stride) if dims else None), ipu, model)
        for rows, cols, dims in orders)
    return min(programs, key=lambda program: program.total)


def _program(kernel: Kernel, cols: int, plan: MatmulPlan, ipu: IPUSpec,
             model: TileFigures) -> OperatorCycles:
    """The steps of ``kernel`` run with ``plan`` and ``cols`` output channels (its
    ``n``, or its ``m`` with the operands swapped): its transforms, then the plan's."""
    steps: list[Step] = []
    tiles = max(1, plan.tiles_used)
    if kernel.regroup:
        steps += _transpose(kernel, tiles, ipu, model)
    for name, nbytes, atom in rearrangements(kernel, cols, ipu, model):
        per_tile = nbytes / tiles
        steps += compute_set(name, rearrange_cycles(per_tile, atom), model, ipu, glue=True,
                             received_bytes=per_tile)
    steps += compute_set("Convolve", plan.amp, model, ipu, unit=Unit.AMP,
                         exchange_cycles=plan.received, count=plan.serial)
    if plan.out_exchange:
        steps.append(Step(ProgramKind.DO_EXCHANGE, "Convolve/ExchangeOut", plan.out_exchange,
                          Unit.EXCHANGE, count=plan.serial))
    for index, (exchange, vector) in enumerate(plan.stages):
        steps += compute_set(f"Reduce{index}", vector, model, ipu, glue=True,
                             exchange_cycles=exchange, count=plan.serial)
    if plan.cast:
        steps += compute_set("Cast", plan.cast, model, ipu, glue=True)
    return OperatorCycles(tuple(steps))


def rearrangements(kernel: Kernel, cols: int, ipu: IPUSpec,
                   model: TileFigures) -> list[tuple[str, float, int]]:
    """The operands poplin rearranges before ``kernel``'s convolve with ``cols``
    output channels, as (step name, bytes, bytes of the atoms the copy moves): the
    planner's conditions (ConvModel.cpp:1363-1404) on the AMP's groups of ``ipu``,
    the output's aside (above). The atoms are the input-channel grain a group holds
    (ConvModel.cpp:1597-1620)."""
    width = element_bytes(kernel.width)
    in_chans, units = ipu.amp_block(width, model.half_partials and width <= 2)
    groups, stride_area = kernel.groups, kernel.stride ** 2
    if kernel.taps_on == "n":      # a convolution's weight gradient: both operands
        channels = max(1, kernel.n // kernel.taps)
        return [("actsRearranged", groups * kernel.k * channels * width * stride_area,
                 min(channels, in_chans) * width),
                ("weightsRearranged", groups * kernel.m * kernel.k * width,
                 min(kernel.m, in_chans) * width)]
    channels = max(1, kernel.k // kernel.taps)
    atom = min(channels, in_chans) * width
    pad_in = channels % in_chans != 0
    expand = kernel.taps > 1 and channels < in_chans
    pad_out = cols % units != 0
    out: list[tuple[str, float, int]] = []
    if pad_in or expand:
        out.append(("actsRearranged", groups * kernel.m * channels * width * stride_area, atom))
    if pad_in or expand or pad_out:
        out.append(("weightsRearranged", groups * kernel.k * kernel.n * width, atom))
    return out


def _transpose(kernel: Kernel, tiles: int, ipu: IPUSpec,
               model: TileFigures) -> tuple[Step, ...]:
    """A backward pass's operand, laid out for the forward, transposed into the AMP's
    groups: its blocks (an input group by a conv units' group) gathered onto the
    tiles that transpose them, then the transpose vertex on each."""
    width = element_bytes(kernel.width)
    in_chans, units = ipu.amp_block(width, model.half_partials and width <= 2)
    per_tile = kernel.regroup / tiles
    blocks = ceil(per_tile / (in_chans * units * width))
    return compute_set("Transpose", transpose_cycles(in_chans, units, blocks, width,
                                                     ipu.workers),
                       model, ipu, glue=True, received_bytes=per_tile)
