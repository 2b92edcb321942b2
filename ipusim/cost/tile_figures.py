"""The tile's figures from PopLibs that the operator model reads.

The planner's constants and the AMP vertex's overheads as PopLibs' estimators give
them, each field citing its source (graphcore/poplibs 7eac0f2; ``PE`` is
lib/poplin/PerformanceEstimation.hpp), and the two settings a user changes through
PopTorch (the partials' type, the available memory proportion). The operator model
(:mod:`ipusim.cost.operator_model` and the modules it uses) takes these figures;
:class:`~ipusim.cost.cost_model.CostModel` adds the links, the host and the
roofline to them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ipusim.cost.work import check_amount, check_type


@dataclass(frozen=True)
class TileFigures:
    """PopLibs' figures for one tile's compute sets, AMP passes and exchange phases."""

    half_partials: bool = field(
        default=False, metadata={"help": "fp16 matmuls accumulate in fp16 partials, on all the "
                                         "AMP's conv units (PopTorch's default is fp32 partials: "
                                         "half of them on Mk2)"})
    available_memory_proportion: float = field(
        default=0.6, metadata={"help": "the share of each tile's memory a matmul's or "
                                       "convolution's plan may use for its temporary operands "
                                       "and partials (Poplar's availableMemoryProportion, "
                                       "default 0.6: lib/poplin/ConvOptions.hpp; the plan's "
                                       "bound, ConvPlan.cpp:1703-1704, ConvModel.cpp:3531)"})
    available_memory_by_ipu: tuple[tuple[int, float], ...] = field(
        default=(), metadata={"help": "(IPU of a replica, proportion) pairs that set "
                                      "available_memory_proportion for that IPU's stages "
                                      "(PopTorch's setAvailableMemoryProportion)"})
    amp_worker_overhead_cycles: float = field(
        default=19, metadata={"help": "worker cycles an AMP pass costs each worker beyond its "
                                      "rows, half inputs: 38 for 3 rows at 4 a row after that, "
                                      "less the 7 that state retention saves "
                                      "(ConvPartial1x1Out, PerformanceEstimation.hpp:404, "
                                      "460-466, 50-59)"})
    amp_worker_retention_cycles: float = field(
        default=7, metadata={"help": "worker cycles of state set-up that retention saves a "
                                     "half AMP pass (PerformanceEstimation.hpp:50-59): a "
                                     "vertex's first pass has no state to retain and pays "
                                     "them, as the tile benchmark's one-pass vertices show "
                                     "(benchmarks: tile_amp rows)"})
    amp_worker_overhead_cycles_float: float = field(
        default=22, metadata={"help": "the same for float activations: 46 for 3 rows at 8 a "
                                      "row after that, no retention savings "
                                      "(PerformanceEstimation.hpp:457-460, 50-59)"})
    amp_pass_overhead_cycles: float = field(
        default=26, metadata={"help": "supervisor cycles per AMP pass besides loading the "
                                      "weights: 19 per output group and 7 per pass "
                                      "(PerformanceEstimation.hpp:574-615)"})
    amp_vertex_overhead_cycles: float = field(
        default=74, metadata={"help": "supervisor cycles once per AMP vertex, half inputs: 50 "
                                      "and 6 workers x 7 of retained state, less the first "
                                      "input-channel group's 6 x 3 "
                                      "(PerformanceEstimation.hpp:598-602)"})
    amp_vertex_overhead_cycles_float: float = field(
        default=50, metadata={"help": "the same for float activations, which retain no state "
                                      "(PerformanceEstimation.hpp:50-59, 598)"})
    amp_conv_group_overhead_cycles: float = field(
        default=9, metadata={"help": "supervisor cycles per conv group of an AMP vertex: "
                                     "12 + 1 to start it, 10 + 1 around its last input-channel "
                                     "group, less the 15 + 1 - 1 counted per input-channel "
                                     "group (PerformanceEstimation.hpp:603-614)"})
    amp_in_group_overhead_cycles: float = field(
        default=33, metadata={"help": "supervisor cycles per input-channel group of an AMP "
                                      "vertex, half inputs: 6 x 3 of retained state and 15 for "
                                      "its loop (PerformanceEstimation.hpp:601-607)"})
    amp_in_group_overhead_cycles_float: float = field(
        default=15, metadata={"help": "the same for float activations: the loop's 15 "
                                      "(PerformanceEstimation.hpp:605-607)"})
    amp_weight_load_bytes_per_cycle: float = field(
        default=8, metadata={"help": "bytes a cycle the weights load into the conv units: "
                                     "the target's 16 halved unless use128BitConvUnitLoad, "
                                     "off by default (ConvModel.cpp:290-294, "
                                     "ConvOptions.hpp:42)"})
    sync_cycles: float = field(
        default=90, metadata={"help": "the on-chip sync that ends each compute set (poplibs' "
                                      "planners: syncCycles, lib/popnn/CTCLossPlan.cpp:349-351)"})
    exchange_overhead_cycles: float = field(
        default=100, metadata={"help": "fixed cycles of the exchange phase each compute set "
                                       "opens, beyond its bytes (fixedOverheadExchangeCycles, "
                                       "lib/popnn/CTCLossPlan.cpp:309-312)"})

    def __post_init__(self) -> None:
        owner = f"{type(self).__name__}."
        check_type(owner, "half_partials", self.half_partials, bool)
        check_amount(owner, "available_memory_proportion", self.available_memory_proportion,
                     fraction=True)
        check_type(owner, "available_memory_by_ipu", self.available_memory_by_ipu, tuple)
        for ipu, proportion in self.available_memory_by_ipu:
            check_amount(owner, f"available_memory_by_ipu[{ipu}]", proportion, fraction=True)
        check_amount(owner, "amp_weight_load_bytes_per_cycle",
                     self.amp_weight_load_bytes_per_cycle, positive=True)
        for name in ("sync_cycles", "exchange_overhead_cycles",
                     "amp_worker_overhead_cycles", "amp_worker_overhead_cycles_float",
                     "amp_worker_retention_cycles",
                     "amp_pass_overhead_cycles", "amp_vertex_overhead_cycles",
                     "amp_vertex_overhead_cycles_float", "amp_conv_group_overhead_cycles",
                     "amp_in_group_overhead_cycles", "amp_in_group_overhead_cycles_float"):
            check_amount(owner, name, getattr(self, name))
