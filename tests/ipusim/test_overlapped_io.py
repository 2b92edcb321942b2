"""Stream copies on the I/O tiles, overlapped with compute.

With overlapped I/O the input of the next micro-batch streams in while the
compute tiles work on this one, and outputs go back in the background; the
compute tiles wait only for data that has not arrived, and no host sync
holds them.
"""
import pytest

import ipusim
from ipusim import Cost, RunConfig, Stage, Work, simulate, system_spec
from ipusim.plan.memory import memory_per_ipu

MB = 1_000_000


def work(flops: float = 6.4e10) -> Work:
    stage = Stage("model", forward=Cost(flops=flops, ops=10), backward=Cost(flops=2 * flops))
    return Work((stage,), micro_batch_size=8, input_bytes_per_sample=MB // 8,
                output_bytes_per_sample=1000)


def run(overlap: bool, **extra) -> RunConfig:
    return RunConfig(gradient_accumulation=6, replicas=2, io_tiles=64 if overlap else 0,
                     overlap_inputs=overlap, overlap_outputs=overlap, **extra)


@pytest.mark.parametrize("flops", [6.4e10, 1e8])  # compute longer, then shorter, than a copy
def test_each_input_arrives_before_its_forward_and_once(flops):
    events = simulate(work(flops), run(True), system_spec("mk2", 2), steps=2).events
    copies = events[(events["kind"] == "io_tiles_copy") & (events["bytes"] == MB)]
    forward = events[events["kind"] == "forward"]
    keys = ["ipu", "step", "micro_batch"]
    assert not copies.duplicated(keys).any()
    joined = forward.merge(copies, on=keys, suffixes=("", "_copy"))
    assert len(joined) == len(forward) == 2 * 2 * 6
    assert (joined["end_ps_copy"] <= joined["start_ps"]).all()
    assert not {"host_to_device", "device_to_host"} & set(events["kind"])


def test_overlapping_hides_the_copies_behind_compute():
    spec = system_spec("mk2", 2)
    serial = simulate(work(), run(False), spec, steps=1)
    overlapped = simulate(work(), run(True), spec, steps=1)
    events = overlapped.events
    copy_ps = int((events[events["kind"] == "io_tiles_copy"]["end_ps"]
                   - events[events["kind"] == "io_tiles_copy"]["start_ps"]).max())
    assert overlapped.duration_ps < serial.duration_ps
    # Compute is the longer: after the first input the compute tiles never wait.
    waits = events[events["kind"] == "host_link_wait"]
    assert (waits["micro_batch"] == 0).all() and len(waits) == 2
    assert serial.duration_ps - overlapped.duration_ps > 4 * copy_ps


def test_copies_longer_than_compute_set_the_pace():
    spec = system_spec("mk2", 1)
    timeline = simulate(work(1e6), RunConfig(gradient_accumulation=6, io_tiles=64,
                                             overlap_inputs=True), spec, steps=1)
    events = timeline.events
    inputs = events[(events["kind"] == "io_tiles_copy") & (events["bytes"] == MB)]
    copy_ps = int((inputs["end_ps"] - inputs["start_ps"]).iloc[0])
    # Back-to-back input copies: the link is the bottleneck.
    starts = inputs["start_ps"].sort_values().to_numpy()
    assert (starts[1:] - starts[:-1] == copy_ps).all()


def test_io_tiles_leave_fewer_tiles_for_compute_and_sram():
    kernel = ipusim.Kernel(ipusim.KernelKind.MATMUL, 2, m=8192, k=1024, n=1024)
    stage = Stage("model", forward=Cost(kernels=((kernel, 1),)), weight_bytes=10)
    spec = system_spec("mk2", 1)
    plain = simulate(Work((stage,)), RunConfig(training=False), spec, steps=1)
    io = simulate(Work((stage,)), RunConfig(training=False, io_tiles=128), spec, steps=1)

    def busy(t):
        forward = t.events[t.events["kind"] == "forward"]
        return int(forward["end_ps"].iloc[0] - forward["start_ps"].iloc[0])

    assert busy(io) > busy(plain) * 1.05
    memory = memory_per_ipu(Work((stage,)), RunConfig(io_tiles=128), spec)
    assert memory["capacity"][0] == (1472 - 128) * 624 * 1024


def test_overlap_needs_io_tiles():
    with pytest.raises(ValueError, match="io_tiles"):
        RunConfig(overlap_inputs=True)
    with pytest.raises(ValueError, match="io_tiles"):
        RunConfig(overlap_outputs=True)
