"""The cost model: operators, FLOPs and bytes in, simulated picoseconds out.

This is the only place that turns work into time. Every constant is a named,
documented field of :class:`CostModel`. A measured model's operators are
priced one by one by :mod:`ipusim.cost.operator_model` from their shapes and the
tile's figures; a hand-written :class:`~ipusim.cost.work.Cost` with FLOPs and
bytes alone is priced by a roofline. Every field cites its source; the one
calibrated on a published host-side measurement (``engine_run_ps``) and the
assumptions no public figure pins say so, with their ranges (docs/cost-model.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ipusim.cost.collectives import ALL_GATHER, REDUCE_SCATTER, ring_links, ring_steps
from ipusim.cost.operator_model import kernel_cycles
from ipusim.cost.program import compute_set_fixed_cycles
from ipusim.cost.tile_figures import TileFigures
from ipusim.cost.work import Cost, Kernel, KernelKind, check_amount
from ipusim.hardware import IPUSpec, SystemSpec

PS_PER_S = 10**12
PS_PER_MS = 10**9
PS_PER_US = 10**6


def to_ps(seconds: float) -> int:
    """Seconds to integer picoseconds (simulated time is kept in integers)."""
    return int(round(seconds * PS_PER_S))


def to_cycles(ps: float, clock_hz: float) -> int:
    """Simulated picoseconds as whole cycles of a clock of ``clock_hz``, rounded."""
    return int(round(ps * clock_hz / PS_PER_S))



def _host_hops(system: SystemSpec, to_device: bool) -> tuple[float, float]:
    """A stream copy's two hops (bytes/s): the machine's shared one between host and
    the gateway's buffer, then the IPU's own between the buffer and its tiles."""
    if to_device:
        return system.host_to_gateway_bandwidth, system.gateway_to_ipu_bandwidth
    return system.gateway_to_host_bandwidth, system.ipu_to_gateway_bandwidth

@dataclass(frozen=True)
class CostModel(TileFigures):
    """The compute model's tile figures (:class:`TileFigures`, the operator model's,
    from PopLibs), the links' and syncs' costs, the host round trip, and the roofline
    that prices a hand-written cost listing no operators."""

    precision: str = field(
        default="fp32", metadata={"help": "roofline only: the precision of a hand-written cost "
                                          "(fp32 or fp16); measured operators carry their own"})
    flops_efficiency: float = field(
        default=0.64, metadata={"help": "roofline only: fraction of peak FLOP/s a hand-written "
                                        "cost reaches: the best published dense matmul's, "
                                        "PopSparse's dense baseline of 1024x1024x16384 in "
                                        "fp16 on a Bow IPU, 223.1 of 350 TFLOP/s "
                                        "(benchmarks/operator_benchmarks.csv); a cost that "
                                        "gives only its FLOPs is priced as that best case"})
    ipu_sync_hop_ps: int = field(
        default=to_ps(30e-9), metadata={"help": "a sync between IPUs (GS2) per hop of the sync "
                                                "network, there and back: 15 ns each way "
                                                "(poplibs' IPU model, syncLatencyPerHop, "
                                                "lib/poplibs_test/Util.cpp:432-438)"})
    host_sync_ps: int = field(
        default=to_ps(1485e-6 / 4095),
        metadata={"help": "a sync with the host before a stream copy (GS1): 0.36 us, Graphcore's "
                          "gc-hostsynclatencytest example (Command Line Tools guide): 4,095 "
                          "syncs through the host sync proxy, each followed by 32 delays of "
                          "5 cycles, took 1,485 us (the delays included)"})
    host_transfer_latency_ps: int = field(
        default=to_ps(2e-6), metadata={"help": "fixed cost of one stream copy or streaming-"
                                               "memory transfer: an assumption, no public "
                                               "figure found (range 0 to 5 us)"})
    poptorch_call_ps: int = field(
        default=to_ps(50e-6),
        metadata={"help": "assumption: PopTorch's own Python path of a call beyond what "
                          "popxl's session.run also does (PoplarExecutor.__call__: the "
                          "argument parser, validateInputs, flattening the inputs for "
                          "poptorch_core.execute, rebuilding the outputs; graphcore/poptorch "
                          "python/_poplar_executor.py). No published figure: range 10 to 200 us"})
    engine_run_ps: int = field(
        default=to_ps(700e-6),
        metadata={"help": "calibrated: the host's side of one run of the engine (popxl's or "
                          "PopART's session.run: StepIO set-up, reconnecting the input streams, "
                          "Poplar's engine.run with the host syncs that start and end it; "
                          "graphcore/popart willow/src/popx/devicex.cpp). popxl's session.run "
                          "of a batch-80 MLP takes 0.80 ms with its copies and compute "
                          "(graphcore/examples 429857d, tutorials/tutorials/popxl/"
                          "5_remote_variables_and_rts/mnist.ipynb:1170); less the 0.10 ms "
                          "ipusim prices those at, 0.70 ms (range 0.55 to 0.80 ms: the "
                          "measurement less at most 0.25 ms of copies and compute)"})
    ipu_link_efficiency: float = field(
        default=0.85, metadata={"help": "fraction of IPU-Link bandwidth that copies and "
                                        "collectives reach: PopLibs' own model of the links "
                                        "(linkEfficiency, lib/poplibs_test/Util.cpp:405 at "
                                        "graphcore/poplibs 7eac0f2)"})
    def __post_init__(self) -> None:
        if not isinstance(self.precision, str) or self.precision not in ("fp32", "fp16"):
            raise ValueError(
                f"CostModel.precision must be 'fp32' or 'fp16', got {self.precision!r}")
        for name in ("flops_efficiency", "ipu_link_efficiency"):
            check_amount("CostModel.", name, getattr(self, name), fraction=True)
        super().__post_init__()
        for name in ("ipu_sync_hop_ps", "host_sync_ps",
                     "host_transfer_latency_ps", "poptorch_call_ps", "engine_run_ps"):
            check_amount("CostModel.", name, getattr(self, name), integer=True)

    def on_ipu(self, ipu: int) -> CostModel:
        """The model that prices the stages of IPU ``ipu`` of a replica: its own
        available memory proportion where one is set."""
        own = dict(self.available_memory_by_ipu).get(ipu)
        if own is None or own == self.available_memory_proportion:
            return self
        return replace(self, available_memory_proportion=own, available_memory_by_ipu=())

    # Compute -------------------------------------------------------------
    def compute_ps(self, cost: Cost, ipu: IPUSpec) -> int:
        """Time of ``cost`` on one IPU: its operators priced from their shapes
        (:mod:`ipusim.cost.operator_model`), or, for a cost that lists none, a
        roofline: its FLOPs at :attr:`flops_efficiency` of the peak or its bytes
        through the tiles' vector paths (8 bytes a cycle a tile), whichever is
        slower, and each operator one compute set's sync and exchange phase."""
        if cost.kernels:
            cycles = sum(count * kernel_cycles(kernel, ipu, self) for kernel, count in cost.kernels)
            return cost.time_ps + to_ps(cycles / ipu.clock_hz)
        flop_s = cost.flops / (ipu.peak_flops(self.precision) * self.flops_efficiency)
        mem_s = cost.bytes / (ipu.tiles * ipu.vector_bytes_per_cycle * ipu.clock_hz)
        overhead_s = cost.ops * compute_set_fixed_cycles(self) / ipu.clock_hz
        return cost.time_ps + to_ps(overhead_s + max(flop_s, mem_s))

    # Links -----------------------------------------------------------------
    def ipu_sync_ps(self, num_ipus: int) -> int:
        """A sync between IPUs on GS2 across ``num_ipus``: 1 + num_ipus // 4 hops, one
        within a card and one per card pair, as poplibs' IPU model counts them
        (lib/poplibs_test/Util.cpp:432-438), so a larger device syncs slower."""
        return (1 + num_ipus // 4) * self.ipu_sync_hop_ps

    def host_transfer_ps(self, nbytes: float, system: SystemSpec, ipus: int | None = None,
                         to_device: bool = True) -> int:
        """One stream copy of ``nbytes`` (excluding the sync) while ``ipus`` IPUs stream.

        A copy crosses two hops that PopART pipelines (its data streams prefetch
        into the gateway's buffer while the IPU computes): the host link into the
        gateway's buffer (in a switched Pod, also its share of the host servers'
        NICs) and the buffer to the IPU's tiles, so it runs at the slower of the
        two. The first hop is the machine's, shared by its IPUs' copies one at a
        time (:meth:`host_link_held_ps`); the second is each IPU's own.
        """
        return self._host_copy_ps(nbytes, min(*_host_hops(system, to_device)), system, ipus)

    def host_link_held_ps(self, nbytes: float, system: SystemSpec, ipus: int | None = None,
                          to_device: bool = True) -> int:
        """How long one stream copy of ``nbytes`` holds its machine's shared hop:
        the host link into the gateway's buffer (7.06 GB/s, gc-hosttraffictest) or
        out of it (2.93), or in a switched Pod the link's share of the servers'
        NICs where that is less. The machine's IPUs queue for it one copy at a
        time; each then goes on on its own hop to or from its tiles (3.30, 3.76
        GB/s), so two IPUs' input copies overlap where the shared hop is twice as
        fast as the own one. An assumption: gc-hosttraffictest measured one IPU
        (32 of its tiles) streaming, and no public figure gives what the gateway
        does when four pull at once."""
        shared, _ = _host_hops(system, to_device)
        return self._host_copy_ps(nbytes, shared, system, ipus)

    def _host_copy_ps(self, nbytes: float, rate: float, system: SystemSpec,
                      ipus: int | None) -> int:
        """A stream copy's fixed cost and its bytes at ``rate``, or at the host link's
        share of a switched Pod's servers where that is less."""
        if nbytes <= 0:
            return 0
        return self.host_transfer_latency_ps + to_ps(
            nbytes / min(rate, system.host_link_share(ipus)))

    @property
    def host_call_ps(self) -> int:
        """The host's side of one call to a model: PopTorch's Python path, then the
        engine's run (its set-up and the host syncs that start and end it)."""
        return self.poptorch_call_ps + self.engine_run_ps

    def ipu_copy_ps(self, nbytes: float, ipu: IPUSpec, system: SystemSpec | None = None) -> int:
        """An inter-IPU copy of ``nbytes`` between neighbouring IPUs of a replica
        (the GS2 sync that opens its exchange is the schedule's), on its slowest
        hop: a rail's links (a copy from an odd IPU to the next even one crosses
        the rung, then a rail), as PopLibs' model routes it (Util.cpp:360-430)."""
        if nbytes <= 0:
            return 0
        links = (system or _LADDER).rail_links
        return to_ps(nbytes / (links * ipu.ipu_link_bandwidth * self.ipu_link_efficiency))

    def all_reduce_ps(self, nbytes: float, replicas: int, ipu: IPUSpec,
                      system: SystemSpec | None = None, ipus_per_replica: int = 1) -> int:
        """An all-reduce of ``nbytes`` across ``replicas`` as PopLibs' replicated
        collectives run it: a reduce-scatter, then an all-gather, each a ring over
        the IPU-Links (:func:`ring_steps`, :func:`ring_links`). Each phase sets up
        its ring index (two maps) and slices its first fragment: three compute
        sets (RC:229-270, CollectivesProgram.hpp:235-241); every step copies a
        fragment to a neighbour over the links of its slowest hop, syncs the
        replicas' IPUs and runs three compute sets (the ring index, the next
        fragment's slice, and in the reduce-scatter the add, in the gradient's
        own dtype: its bytes are the buffer's). Replicas of ``ipus_per_replica``
        IPUs that fill more than one IPU-Link domain of ``system`` reduce in two
        levels (:meth:`gw_all_reduce_ps`); without a system, the IPU-M2000's
        ladder in one domain.

        graphcore/poplibs f5f9369 (the last public version of the collectives),
        lib/popops/ReplicatedCollectives.cpp:434-523, 883-1113, 1761-1795 and
        lib/popops/CollectivesProgram.hpp:179-332.
        """
        if replicas <= 1 or nbytes <= 0:
            return 0
        if system is not None:
            per_domain = max(1, system.ipus_per_link_domain // ipus_per_replica)
            if replicas > per_domain:
                return self.gw_all_reduce_ps(nbytes, replicas, per_domain, ipu, system,
                                             ipus_per_replica)
        ladder = system or _LADDER
        torus = ladder.ipu_link_topology == "torus"
        twist = ladder.ipu_link_configuration == "barley-twist"
        links = ring_links(replicas, ipus_per_replica, ladder.rung_links, ladder.rail_links,
                           twist and ipus_per_replica == 1)
        link = links * ipu.ipu_link_bandwidth * self.ipu_link_efficiency
        sets = 3 * compute_set_fixed_cycles(self)
        sync = self.ipu_sync_ps(replicas * ipus_per_replica)
        total = 0
        for phase in (REDUCE_SCATTER, ALL_GATHER):
            steps, step_bytes = ring_steps(phase, nbytes, replicas, ipus_per_replica, torus,
                                           twist and ipus_per_replica == 1)
            add = (kernel_cycles(Kernel(KernelKind.ELEMENTWISE, width=1, elements=int(
                nbytes / replicas), bytes=int(3 * nbytes / replicas)), ipu, self)
                if phase is REDUCE_SCATTER else 0)
            total += to_ps(sets / ipu.clock_hz) + steps * (
                sync + to_ps(step_bytes / link + (sets + add) / ipu.clock_hz))
        return total

    def gradients_all_reduce_ps(self, sizes: tuple[int, ...], replicas: int, ipu: IPUSpec,
                                system: SystemSpec | None = None, ipus_per_replica: int = 1,
                                merged: bool = False) -> int:
        """The all-reduces of one IPU's gradients, of ``sizes`` bytes each, one
        after the other: PopART reduces each weight's gradient on its own
        (``OptimizerDecompose::gradReduce``, one ReplicatedAllReduceOp per weight,
        willow/src/patterns/optimizerdecompose.cpp:419-450 at graphcore/popart
        d2f20d78), each with its fixed costs and its own ring; with
        ``replicatedCollectivesSettings.mergeAllReduceCollectives`` they run as one
        larger all-reduce (willow/src/transforms/mergecollectives.cpp:76-85,
        ir.cpp:1660-1665): here all of the IPU's, one buffer."""
        if merged:
            return self.all_reduce_ps(sum(sizes), replicas, ipu, system, ipus_per_replica)
        return sum(self.all_reduce_ps(size, replicas, ipu, system, ipus_per_replica)
                   for size in sizes)

    def gw_all_reduce_ps(self, nbytes: float, replicas: int, per_domain: int, ipu: IPUSpec,
                         system: SystemSpec, ipus_per_replica: int) -> int:
        """An all-reduce across IPU-Link domains, in two levels: a ring within each
        domain (its reduce-scatter and all-gather, :meth:`all_reduce_ps`), and
        between them a ring all-reduce of each IPU's 1/``per_domain`` share over
        the machines' GW-Links, east and west at once, which a machine's IPUs
        share. Public PopLibs rings within a domain only (replicasPerILD,
        ReplicatedCollectives.cpp:80-90 at f5f9369); the cross-domain phase is
        GCL's, closed: its shape here is an assumption (docs/cost-model.md)."""
        domains = -(-replicas // per_domain)
        share = nbytes / per_domain
        volume = 2 * (domains - 1) / domains * share
        rate = system.gw_link_bandwidth / system.ipus_per_machine  # both ways: east and west
        across = (2 * (domains - 1) * self.ipu_sync_ps(replicas * ipus_per_replica)
                  + to_ps(volume / rate))
        within = replace(system, ipus_per_link_domain=per_domain * ipus_per_replica)
        return self.all_reduce_ps(nbytes, per_domain, ipu, within, ipus_per_replica) + across

    def streaming_ps(self, nbytes: float, system: SystemSpec, to_device: bool = True) -> int:
        """Moving ``nbytes`` between an IPU and streaming memory, into the IPU
        (``to_device``) or out (:meth:`SystemSpec.streaming_bandwidth`)."""
        if nbytes <= 0:
            return 0
        return self.host_transfer_latency_ps + to_ps(
            nbytes / system.streaming_bandwidth(to_device))


#: The IPU-Links of an IPU-M2000 Pod (:class:`SystemSpec`'s defaults): what a
#: copy or an all-reduce priced without a system runs on.
_LADDER = SystemSpec()

# The defaults: PopLibs' figures, Graphcore's measured host and sync figures, and
# the one host-side parameter calibrated on popxl's measured session.run (see
# docs/cost-model.md).
CALIBRATED_MK2 = CostModel()
DEFAULT = CALIBRATED_MK2

PROFILES: dict[str, CostModel] = {"default": DEFAULT, "calibrated-mk2": CALIBRATED_MK2}
