"""Hardware presets: the IPUs and the system they sit in.

Every figure is a field of a frozen dataclass, so a user can override any of
them with :func:`dataclasses.replace` or through :func:`system`.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

GB = 1e9
TFLOPS = 1e12


#: The largest whole number a field may hold: the event tables keep times,
#: bytes and counts as 64-bit integers.
MAX_INT = 2**63 - 1


def check_amount(owner: str, name: str, value, *, integer: bool = False,
                 positive: bool = False, optional: bool = False,
                 fraction: bool = False) -> None:
    """Refuse a field that is not a number of the kind asked, naming ``owner.name``,
    the value and the rule: the one check every public dataclass of ipusim uses.

    An amount (bytes, FLOPs, cycles, picoseconds) must be a real number (not a
    bool, a string or None, unless ``optional`` allows None), not negative, not
    NaN and finite; ``positive`` also refuses 0, ``integer`` anything but a
    whole number up to :data:`MAX_INT` and ``fraction`` anything outside (0, 1].
    """
    what = f"{owner}{name}"
    if value is None and optional:
        return
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        rule = "must be positive" if positive else f"must be {kind}"
        raise ValueError(f"{what} {rule}, got {value!r} ({type(value).__name__}, not "
                         f"{kind})")
    if fraction and not 0 < value <= 1:   # NaN too
        raise ValueError(f"{what} must be in (0, 1], got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    if not value >= 0:   # NaN too
        raise ValueError(f"{what} must not be negative, got {value!r}")
    if not isinstance(value, numbers.Integral) and not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value!r}")
    if integer and not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be {kind}, got {value!r}")
    if integer and value > MAX_INT:
        raise ValueError(f"{what} must be at most 2**63 - 1 (a 64-bit integer), got {value!r}")


def check_type(owner: str, name: str, value, kind: type | tuple[type, ...],
               optional: bool = False) -> None:
    """Refuse a field that is not an instance of ``kind`` (a bool where a number
    is wanted included), naming ``owner.name``, the value and the type wanted."""
    if value is None and optional:
        return
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(k.__name__ for k in kinds) + (" or None" if optional else "")
        raise ValueError(f"{owner}{name} must be a {wanted}, got {value!r} "
                         f"({type(value).__name__})")


def element_bytes(width: int) -> int:
    """Bytes of an element as a tile's vector and AMP paths move it: at most 4
    (neither has a wider path; an 8-byte type is handled as 4-byte halves)."""
    return min(width, 4)


@dataclass(frozen=True)
class IPUSpec:
    """One IPU processor: tiles, SRAM, clock, peak compute and IPU-Links."""

    name: str = field(metadata={"help": "marketing name of the processor"})
    tiles: int = field(metadata={"help": "number of tiles (core + SRAM pairs)"})
    sram_per_tile_bytes: int = field(metadata={"help": "In-Processor-Memory per tile"})
    clock_hz: float = field(metadata={"help": "tile clock frequency"})
    fp16_flops: float = field(metadata={"help": "peak FP16 (mixed precision) FLOP/s"})
    fp32_flops: float = field(metadata={"help": "peak FP32 FLOP/s"})
    memory_bandwidth: float = field(metadata={"help": "aggregate on-chip SRAM bandwidth, bytes/s"})
    ipu_links: int = field(metadata={"help": "number of IPU-Links to other IPUs"})
    ipu_link_bandwidth: float = field(
        metadata={"help": "bandwidth of one IPU-Link in each direction, bytes/s"})
    # The tile, as graphcore/poplibs (commit 7eac0f2) describes it; see
    # ipusim.cost.operator_model. Conv units per tile: Mk2 runs half inputs on 16 units
    # with half partials and 8 with float partials ("hh16", "hf8": the
    # conv_partial_1x1_half_float_8_and_half_half_h16.S codelet,
    # lib/poplin/CMakeLists.txt:115-120) and float inputs on 16 units
    # (conv_partial_*_float_float_16.S, IPU2 only, lib/poplin/CMakeLists.txt:121-124);
    # Mk1's are PopLibs' NetOptions defaults (include/popnn/Net.hpp). An AMP pass
    # takes 16 halves or 8 floats of input channels (a chain of four 64-bit loads,
    # lib/poplin/ConvVertexType.cpp:305) and one output row every 4 cycles for half
    # inputs, 8 for float (coreCycles, lib/poplin/PerformanceEstimation.hpp:402).
    # The geometry gives the datasheets' peaks: Mk2 1,472 x 16 x 16 / 4 x 2 x 1.33
    # GHz = 250 TFLOP/s, fp32 1,472 x 8 x 16 / 8 x 2 x 1.33 GHz = 62.5 TFLOP/s.
    amp_units_half: int = field(
        default=16, metadata={"help": "AMP conv units per tile, fp16 inputs and fp16 partials"})
    amp_units_half_float_partials: int = field(
        default=8, metadata={"help": "AMP conv units per tile, fp16 inputs and fp32 partials"})
    amp_units_float: int = field(
        default=16, metadata={"help": "AMP conv units per tile, fp32 inputs"})
    amp_input_bytes: int = field(
        default=32, metadata={"help": "input-channel bytes one AMP pass consumes per output "
                                      "(4 loads of 64 bits: 16 halves or 8 floats)"})
    amp_cycles_per_output_half: int = field(
        default=4, metadata={"help": "a worker's cycles per output row of an AMP pass, fp16 "
                                     "inputs (the six workers take turns: one row every 4 "
                                     "tile cycles in all)"})
    amp_cycles_per_output_float: int = field(
        default=8, metadata={"help": "a worker's cycles per output row of an AMP pass, fp32 "
                                     "inputs"})
    # Six hardware workers (the estimators' numWorkerContexts; "divide work between
    # 6 workers", lib/popops/codelets/asm/workDivision.h.S:6); a 64-bit load/store
    # path per worker; 4 exchange bytes a cycle per tile: Graphcore's aggregate
    # IPU-Exchange bandwidth over the tiles at the clock (GC200 datasheet: 8 TB/s /
    # 1,472 / 1.33 GHz = 4.1 B; Bow IPU brief: 11 TB/s / 1,472 / 1.85 GHz = 4.0 B).
    workers: int = field(default=6, metadata={"help": "hardware worker threads per tile"})
    vector_bytes_per_cycle: int = field(
        default=8, metadata={"help": "bytes the vector unit processes per tile cycle (64 bits)"})
    exchange_bytes_per_cycle: int = field(
        default=4, metadata={"help": "bytes one tile receives from the exchange per cycle"})

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                check_type("IPUSpec.", "name", value, str)
                continue
            check_amount("IPUSpec.", f.name, value, positive=True,
                         integer=f.type in ("int", int))

    def amp_units(self, width: int, half_partials: bool) -> int:
        """AMP conv units per tile for inputs of ``width`` bytes (output channels per pass)."""
        if width > 2:
            return self.amp_units_float
        return self.amp_units_half if half_partials else self.amp_units_half_float_partials

    def amp_block(self, width: int, half_partials: bool) -> tuple[int, int]:
        """The weights one AMP pass holds for inputs of ``width`` bytes: (input
        channels, output channels), 16 halves or 8 floats by the conv units."""
        return self.amp_input_bytes // element_bytes(width), self.amp_units(width, half_partials)

    def amp_cycles_per_output(self, width: int) -> int:
        """Tile cycles per output row of an AMP pass for inputs of ``width`` bytes."""
        return self.amp_cycles_per_output_half if width <= 2 else self.amp_cycles_per_output_float

    def amp_macs_per_cycle(self, width: int, half_partials: bool) -> float:
        """Multiply-accumulates per tile cycle the AMP reaches at full occupancy.

        Mk2: 16 halves x 16 units / 4 cycles = 64, i.e. 1,472 tiles x 64 x 2
        FLOPs x 1.33 GHz = 250 TFLOP/s; fp32 8 x 16 / 8 = 16 (62.5 TFLOP/s).
        """
        inputs, outputs = self.amp_block(width, half_partials)
        return inputs * outputs / self.amp_cycles_per_output(width)

    @property
    def sram_bytes(self) -> int:
        """Total In-Processor-Memory of the IPU."""
        return self.tiles * self.sram_per_tile_bytes

    def peak_flops(self, precision: str = "fp32") -> float:
        """Peak FLOP/s for ``"fp32"`` or ``"fp16"`` arithmetic."""
        if precision not in ("fp32", "fp16"):
            raise ValueError(f"precision must be 'fp32' or 'fp16', got {precision!r}")
        return self.fp32_flops if precision == "fp32" else self.fp16_flops


MK2_GC200 = IPUSpec(
    # Graphcore GC200 datasheet and the IPU-M2000 product brief: 1,472 tiles,
    # 900 MB In-Processor-Memory (624 KiB a tile), 1.33 GHz, 250 TFLOP/s FP16,
    # 62.5 TFLOP/s FP32, 47.5 TB/s memory bandwidth, 10 IPU-Links with 320 GB/s of
    # chip-to-chip bandwidth: both directions of all ten, 16 GB/s each way a link.
    name="Mk2 GC200",
    tiles=1472,
    sram_per_tile_bytes=624 * 1024,
    clock_hz=1.33e9,
    fp16_flops=250 * TFLOPS,
    fp32_flops=62.5 * TFLOPS,
    memory_bandwidth=47.5e12,
    ipu_links=10,
    ipu_link_bandwidth=16 * GB,
)

MK1_GC2 = IPUSpec(
    # Graphcore C2 card brief and Jia et al., "Dissecting the Graphcore IPU
    # Architecture via Microbenchmarking" (2019): 1,216 tiles x 256 KiB, 1.6 GHz,
    # 31.1 TFLOP/s FP32, 124.5 TFLOP/s mixed precision, 45 TB/s memory
    # bandwidth, 10 IPU-Links (80 Gbps each way).
    name="Mk1 GC2",
    tiles=1216,
    sram_per_tile_bytes=256 * 1024,
    clock_hz=1.6e9,
    fp16_flops=124.5 * TFLOPS,
    fp32_flops=31.1 * TFLOPS,
    memory_bandwidth=45e12,
    ipu_links=10,
    ipu_link_bandwidth=10 * GB,
    # PopLibs' Mk1 defaults (include/popnn/Net.hpp): 8 conv units for half
    # inputs with either partials, 8 for float at 8 cycles a row (32 and 8 MACs
    # a cycle: the datasheet's 124.5 and 31.1 TFLOP/s).
    amp_units_half=8,
    amp_units_half_float_partials=8,
    amp_units_float=8,
)

BOW = IPUSpec(
    # Graphcore Bow IPU / Bow-2000 brief: the GC200 die with wafer-on-wafer power
    # delivery, 1,472 tiles, 900 MB, 1.85 GHz, 350 TFLOP/s FP16 (87.5 FP32),
    # 65.4 TB/s memory bandwidth, 10 IPU-Links at 320 GB/s in all (16 GB/s each way
    # a link, as the GC200's).
    name="Bow",
    tiles=1472,
    sram_per_tile_bytes=624 * 1024,
    clock_hz=1.85e9,
    fp16_flops=350 * TFLOPS,
    fp32_flops=87.5 * TFLOPS,
    memory_bandwidth=65.4e12,
    ipu_links=10,
    ipu_link_bandwidth=16 * GB,
)

PRESETS: dict[str, IPUSpec] = {
    "mk2": MK2_GC200,
    "gc200": MK2_GC200,
    "mk1": MK1_GC2,
    "gc2": MK1_GC2,
    "bow": BOW,
}


@dataclass(frozen=True)
class SystemSpec:
    """A machine of ``num_ipus`` identical IPUs, their host links and streaming memory."""

    ipu: IPUSpec = field(default=MK2_GC200, metadata={"help": "the processor"})
    num_ipus: int = field(default=1, metadata={"help": "IPUs in the system"})
    # An IPU-M2000 or Bow-2000 reaches its host through its gateway's one 100 GbE
    # RoCEv2 NIC (IPU-POD DA Build and Test Guide, 1.2 "System summary"; Bow-2000
    # datasheet, "Host-Link"); a Pod16 is four such machines on one host server, a
    # Pod64 sixteen on one to four (IPU-POD64 datasheet, 2.1).
    ipus_per_host_link: int = field(
        default=4, metadata={"help": "IPUs sharing one host link (4 per IPU-M2000)"})
    host_link_bandwidth: float = field(
        default=12.5 * GB,
        metadata={"help": "raw bandwidth of one host link each way, bytes/s "
                          "(IPU-M2000: 100 GbE RoCEv2 to the host)"})
    # What a stream copy reaches through the gateway, measured: Graphcore's
    # gc-hosttraffictest example output on an IPU-M2000 (Command Line Tools guide, 9
    # "gc-hosttraffictest"; its figures are Gbit/s): host to the gateway's buffer
    # 56.5 Gbit/s (7.06 GB/s), the buffer to an IPU's tiles 26.4 (3.30 GB/s); the
    # buffer to the host 23.4 (2.93 GB/s), the tiles to the buffer 30.1 (3.76 GB/s).
    host_to_gateway_bandwidth: float = field(
        default=7.06 * GB, metadata={"help": "host memory into the gateway's buffer over a "
                                             "machine's host link, bytes/s (shared by its IPUs)"})
    gateway_to_ipu_bandwidth: float = field(
        default=3.30 * GB, metadata={"help": "the gateway's buffer into one IPU's tiles, bytes/s"})
    gateway_to_host_bandwidth: float = field(
        default=2.93 * GB, metadata={"help": "the gateway's buffer back to host memory over a "
                                             "machine's host link, bytes/s (shared by its IPUs)"})
    ipu_to_gateway_bandwidth: float = field(
        default=3.76 * GB, metadata={"help": "one IPU's tiles into the gateway's buffer, bytes/s"})
    # Where the host links end: a Pod4 or Pod16 attaches its machines directly to
    # one host server, a port each ("4 Bow-2000 machines directly attach to a single
    # host server", Bow-2000 datasheet 2.1); a larger Pod is switched, its machines
    # reaching 1 to 4 host servers per Pod64 through a ToR switch (IPU-POD64
    # datasheet 2.1: "Default number of servers is 1"; Bow Pod256: 4 to 16), each
    # server with a "single/dual port Mellanox ConnectX-5 EN 100Gb/s" NIC (IPU-POD64
    # Build and Test Guide 4.1.1). There the servers' NICs bound the host I/O.
    direct_attach_ipus: int = field(
        default=16, metadata={"help": "largest system whose machines attach directly to the "
                                      "host server, one NIC port each (Pod16 DA); larger "
                                      "ones are switched and share the servers' NICs"})
    ipus_per_host_server: int = field(
        default=64, metadata={"help": "IPUs one host server serves in a switched Pod (one "
                                      "server per Pod64, the IPU-POD64 datasheet's default)"})
    host_server_bandwidth: float = field(
        default=25 * GB,
        metadata={"help": "bandwidth of one host server's NIC each way, bytes/s, shared by "
                          "the host links it serves in a switched Pod (a dual-port 100 GbE "
                          "ConnectX-5: 2 x 12.5 GB/s)"})
    # The IPU-Links of a Pod: a ladder of IPU pairs (IPU 2k and 2k + 1 across a rung,
    # each rail from an IPU to the one two above), as PopLibs' own model of them
    # has it (graphcore/poplibs 7eac0f2, lib/poplibs_test/Util.cpp:360-430): a
    # pair's own traffic on 4 links each way, each rail 2 links each way. That is
    # the GC200's 10 links (4 + 2 cross-routing across the rung, 2 up, 2 down) and
    # an IPU-M2000's 8 IPU-Link ports (its four IPUs' outer rails, 2 each: IPU-POD
    # DA Build and Test Guide 2.1). Graphcore's gc-iputraffictest example (Command
    # Line Tools guide, "gc-iputraffictest": 423.3 Gbit/s both ways between two
    # IPUs of an IPU-M2000, 26.5 GB/s each way) is what 2 links reach at PopLibs'
    # 0.85 (27.2 GB/s); it is a 64-tile probe (4,096,000 KB in 64 KB transfers, 1,000
    # a tile), so it bounds the links from below.
    rung_links: int = field(
        default=4, metadata={"help": "IPU-Links each way between the two IPUs of a pair "
                                     "that carry the pair's own traffic (PopLibs' IPU "
                                     "model, numIntraIpuLinks, Util.cpp:406)"})
    rail_links: int = field(
        default=2, metadata={"help": "IPU-Links each way along a rail, from a pair to the "
                                     "next (PopLibs' IPU model, numUpLinks and "
                                     "numDownLinks, Util.cpp:408-409)"})
    ipu_link_topology: str = field(
        default="torus", metadata={"help": "the IPU-Links' topology as Poplar's target "
                                           "reports it: 'torus' (a Pod's rails looped, "
                                           "IPU-POD64 datasheet 2.1: 2D torus) or 'mesh'; "
                                           "PopLibs picks its rings by it"})
    ipu_link_configuration: str = field(
        default="default", metadata={"help": "'default', or 'barley-twist' (a Mk1 Pod64 "
                                             "wiring whose rings PopLibs runs four at a "
                                             "time, ReplicatedCollectives.cpp:444-453 at "
                                             "f5f9369)"})
    # Beyond one IPU-Link domain (the 2D torus of a Pod64: IPU-POD64 datasheet 2.1;
    # PopLibs' collectives count IPU-Link domains, getIpuLinkDomainSize,
    # lib/popops/ReplicatedCollectives.cpp:80-90 at f5f9369) the Pods are joined by
    # each machine's two GW-Links ("2x 100Gbps Gateway-Links for communication between
    # Bow Pods", Bow-2000 datasheet 1; east and west, Switched GW-Links guide 1.2).
    ipus_per_link_domain: int = field(
        default=64, metadata={"help": "IPUs joined by IPU-Links (a Pod64); larger systems "
                                      "join their domains by GW-Links"})
    ipus_per_machine: int = field(
        default=4, metadata={"help": "IPUs of one IPU-M2000 or Bow-2000, which share its "
                                     "gateway and its GW-Links (4 GC200s: IPU-M2000 "
                                     "datasheet)"})
    gw_link_bandwidth: float = field(
        default=25 * GB,
        metadata={"help": "GW-Link bandwidth of one machine each way, bytes/s, east and west "
                          "together (2 x 100 Gbps), shared by its IPUs"})
    # Streaming memory is DRAM behind a machine's gateway, the memory that also
    # buffers its host copies ("host transfers to and from the IPU are remotely
    # buffered", Command Line Tools guide, gc-hosttraffictest). No public figure
    # gives what an IPU reaches to it; the one measured rate of that path is
    # gc-hosttraffictest's tiles to and from the buffer (a 32-tile probe: 3.30 GB/s
    # in, 3.76 out), which bounds it from below.
    streaming_memory_bandwidth: float | None = field(
        default=None,
        metadata={"help": "bandwidth between an IPU and streaming memory, bytes/s; None: "
                          "the gateway's measured buffer-to-tiles rates (3.30 GB/s in, 3.76 "
                          "out), an assumption (range 3.3 to 16 GB/s)"})
    streaming_memory_bytes: int = field(
        default=128 * 2**30, metadata={"help": "streaming memory per IPU-M2000"})
    # The host server that runs the script and its data loader: Graphcore's reference
    # server for a Pod is a Dell PowerEdge R6525 "containing dual AMD EPYC 7742
    # processors" (IPU-POD DA Build and Test Guide 5.1.1; IPU-POD64 Build and Test
    # Guide 4.1.1), 2 x 64 cores. Graphcore's approved server list also qualifies
    # other CPU variants "suitable for systems with different numbers of
    # IPU-Machines", and a Pod64 may have one to four servers (IPU-POD64 datasheet
    # 2.1): 128 is the reference server's count, an assumption for any other host.
    host_cpu_cores: int = field(
        default=128, metadata={"help": "CPU cores of the host server that run the data "
                                       "loader's processes (dual AMD EPYC 7742: 128), each "
                                       "taken as fast as a core of the machine that "
                                       "measures the loader; shared by a poprun job's "
                                       "instances"})

    def __post_init__(self) -> None:
        check_type("SystemSpec.", "ipu", self.ipu, IPUSpec)
        for name in ("num_ipus", "ipus_per_host_link", "direct_attach_ipus",
                     "ipus_per_host_server", "ipus_per_link_domain", "ipus_per_machine",
                     "rung_links", "rail_links", "host_cpu_cores"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SystemSpec.{name} must be a positive integer, got {value!r}")
            check_amount("SystemSpec.", name, value, integer=True)
        for name in ("host_link_bandwidth", "host_to_gateway_bandwidth",
                     "gateway_to_ipu_bandwidth", "gateway_to_host_bandwidth",
                     "ipu_to_gateway_bandwidth", "host_server_bandwidth", "gw_link_bandwidth"):
            check_amount("SystemSpec.", name, getattr(self, name), positive=True)
        if self.streaming_memory_bandwidth is not None:
            check_amount("SystemSpec.", "streaming_memory_bandwidth",
                         self.streaming_memory_bandwidth, positive=True)
        if self.ipu_link_topology not in ("torus", "mesh"):
            raise ValueError("SystemSpec.ipu_link_topology must be 'torus' or 'mesh', got "
                             f"{self.ipu_link_topology!r}")
        if self.ipu_link_configuration not in ("default", "barley-twist"):
            raise ValueError("SystemSpec.ipu_link_configuration must be 'default' or "
                             f"'barley-twist', got {self.ipu_link_configuration!r}")
        check_amount("SystemSpec.", "streaming_memory_bytes", self.streaming_memory_bytes,
                     integer=True)

    def streaming_bandwidth(self, to_device: bool = True) -> float:
        """What an IPU reaches to streaming memory, into it (``to_device``) or out."""
        if self.streaming_memory_bandwidth is not None:
            return self.streaming_memory_bandwidth
        return self.gateway_to_ipu_bandwidth if to_device else self.ipu_to_gateway_bandwidth

    @property
    def num_host_links(self) -> int:
        """Host links in the system: one per ``ipus_per_host_link`` IPUs."""
        return -(-self.num_ipus // self.ipus_per_host_link)

    def host_link_of(self, ipu: int | np.ndarray | pd.Series) -> int | np.ndarray | pd.Series:
        """Index of the host link that serves IPU ``ipu`` (an index, or an array of them)."""
        return ipu // self.ipus_per_host_link

    def host_link_share(self, ipus: int | None = None) -> float:
        """Bandwidth each way one host link gets when ``ipus`` IPUs (all of the
        system by default) stream at once: its own, or in a switched Pod its
        share of the host servers' NICs, which all the links in use divide."""
        if self.num_ipus <= self.direct_attach_ipus:
            return self.host_link_bandwidth
        ipus = self.num_ipus if ipus is None else min(max(ipus, 1), self.num_ipus)
        servers = -(-ipus // self.ipus_per_host_server)
        links = -(-ipus // self.ipus_per_host_link)
        return min(self.host_link_bandwidth, servers * self.host_server_bandwidth / links)

    def per_instance(self, instances: int, instance_ipus: int) -> SystemSpec:
        """The system as one of ``instances`` host processes (poprun instances)
        of ``instance_ipus`` IPUs each sees it.

        Each instance simulates only its own IPUs, so a host link's bandwidth
        (and its share of a host server's NIC) is divided among the instances
        co-located on it (fair sharing, where one process's simulation queues
        the copies first come, first served).
        """
        co_located = min(instances, max(1, self.ipus_per_host_link // instance_ipus))
        if co_located == 1:
            return self
        return replace(self, host_link_bandwidth=self.host_link_bandwidth / co_located,
                       host_to_gateway_bandwidth=self.host_to_gateway_bandwidth / co_located,
                       gateway_to_host_bandwidth=self.gateway_to_host_bandwidth / co_located,
                       host_server_bandwidth=self.host_server_bandwidth / co_located)


def system_spec(preset: str = "mk2", num_ipus: int = 1, **overrides) -> SystemSpec:
    """Build a :class:`SystemSpec` from a preset name and overrides.

    Overrides may name a field of :class:`SystemSpec` or of :class:`IPUSpec`,
    e.g. ``system_spec("mk2", 8, clock_hz=1.2e9, host_link_bandwidth=8e9)``.
    """
    try:
        ipu = PRESETS[preset.lower()]
    except KeyError:
        raise ValueError(
            f"Unknown IPU preset {preset!r}; expected one of {sorted(PRESETS)}") from None
    ipu_fields = {f.name for f in fields(IPUSpec)}
    system_fields = {f.name for f in fields(SystemSpec)} - {"ipu", "num_ipus"}
    unknown = set(overrides) - ipu_fields - system_fields
    if unknown:
        raise ValueError(
            f"Unknown system override(s) {sorted(unknown)}; IPU fields are "
            f"{sorted(ipu_fields)} and system fields are {sorted(system_fields)}")
    ipu = replace(ipu, **{k: v for k, v in overrides.items() if k in ipu_fields})
    return SystemSpec(ipu=ipu, num_ipus=num_ipus,
                      **{k: v for k, v in overrides.items() if k in system_fields})
