"""Exact event logs of hand-built programs run on :class:`ipusim.engine.system.System`.

In the manner of SimPy's own tests: build a few instructions, run them and
assert the whole log of ``(kind, ipu, start, end)`` in picoseconds.
"""
import pytest

from ipusim.engine.program import Busy, Exchange, HostIO
from ipusim.engine.system import System
from ipusim.hardware import SystemSpec


def log(system: System) -> list[tuple[str, int, int, int]]:
    """The recorded events as (kind, ipu, start, end), in time then IPU order."""
    rows = [(kind, ipu, start, end) for start, end, ipu, kind, *_ in system.recorder.rows]
    return sorted(rows, key=lambda row: (row[2], row[1], row[3]))


def busy(duration: int, kind: str = "forward", stage: int = 0, micro_batch: int = 0) -> Busy:
    return Busy(kind, stage, micro_batch, 0, -1, duration)


def exchange(group, sync: int, phase: int, copy: int) -> Exchange:
    return Exchange(group, sync, phase, copy, 10 if copy else 0, 0, 0, 0, -1)


def host_io(group, sync: int, h2d: int = 0, d2h: int = 0) -> HostIO:
    return HostIO(group, sync, h2d, 100 if h2d else 0, d2h, 100 if d2h else 0, 0, 0, 0, -1)


def test_busy_then_exchange_on_two_ipus():
    system = System(SystemSpec(num_ipus=2))
    end = system.run([
        [busy(100), exchange((0, 1), sync=10, phase=50, copy=50)],
        [busy(300), exchange((0, 1), sync=10, phase=50, copy=20)],
    ])
    assert end == 360
    assert log(system) == [
        ("forward", 0, 0, 100),
        ("forward", 1, 0, 300),
        ("sync_wait", 0, 100, 310),
        ("sync_wait", 1, 300, 310),
        ("ipu_copy", 0, 310, 360),
        ("ipu_copy", 1, 310, 330),
    ]


def test_barrier_with_three_members_releases_after_the_last_plus_the_sync():
    system = System(SystemSpec(num_ipus=3))
    group = (0, 1, 2)
    end = system.run([[busy(d), exchange(group, sync=5, phase=0, copy=0), busy(1)]
                      for d in (10, 20, 30)])
    assert end == 36
    assert log(system) == [
        ("forward", 0, 0, 10),
        ("forward", 1, 0, 20),
        ("forward", 2, 0, 30),
        ("sync_wait", 0, 10, 35),
        ("sync_wait", 1, 20, 35),
        ("sync_wait", 2, 30, 35),
        ("forward", 0, 35, 36),
        ("forward", 1, 35, 36),
        ("forward", 2, 35, 36),
    ]


def test_barrier_is_reusable_generation_after_generation():
    system = System(SystemSpec(num_ipus=2))
    group = (0, 1)
    end = system.run([
        [busy(10), exchange(group, 0, 0, 0), busy(10), exchange(group, 0, 0, 0)],
        [busy(20), exchange(group, 0, 0, 0), busy(5), exchange(group, 0, 0, 0)],
    ])
    assert end == 30
    assert log(system) == [
        ("forward", 0, 0, 10),
        ("forward", 1, 0, 20),
        ("sync_wait", 0, 10, 20),
        ("forward", 0, 20, 30),
        ("forward", 1, 20, 25),
        ("sync_wait", 1, 25, 30),
    ]


def test_host_io_is_serialised_on_a_shared_host_link():
    system = System(SystemSpec(num_ipus=2))
    end = system.run([[host_io((0,), sync=5, h2d=100)], [host_io((1,), sync=5, h2d=100)]])
    assert end == 205
    assert log(system) == [
        ("sync_wait", 0, 0, 5),
        ("sync_wait", 1, 0, 5),
        ("host_to_device", 0, 5, 105),
        ("host_link_wait", 1, 5, 105),
        ("host_to_device", 1, 105, 205),
    ]


def test_an_ipu_takes_its_place_on_the_host_link_only_when_its_compute_ends():
    system = System(SystemSpec(num_ipus=2))
    end = system.run([[busy(50), host_io((0,), sync=5, h2d=100)],
                      [busy(60), host_io((1,), sync=5, h2d=100)]])
    assert end == 255
    assert log(system) == [
        ("forward", 0, 0, 50),
        ("forward", 1, 0, 60),
        ("sync_wait", 0, 50, 55),
        ("host_to_device", 0, 55, 155),
        ("sync_wait", 1, 60, 65),
        ("host_link_wait", 1, 65, 155),
        ("host_to_device", 1, 155, 255),
    ]


def test_host_link_is_full_duplex():
    system = System(SystemSpec(num_ipus=2))
    end = system.run([[host_io((0,), sync=5, h2d=100)], [host_io((1,), sync=5, d2h=40)]])
    assert end == 105
    assert log(system) == [
        ("sync_wait", 0, 0, 5),
        ("sync_wait", 1, 0, 5),
        ("host_to_device", 0, 5, 105),
        ("device_to_host", 1, 5, 45),
    ]


def test_host_links_are_not_shared_across_ipu_m2000s():
    system = System(SystemSpec(num_ipus=8))
    programs = [[] for _ in range(8)]
    programs[0] = [host_io((0,), sync=5, h2d=100)]
    programs[4] = [host_io((4,), sync=5, h2d=100)]
    assert system.run(programs) == 105
    assert log(system) == [
        ("sync_wait", 0, 0, 5),
        ("sync_wait", 4, 0, 5),
        ("host_to_device", 0, 5, 105),
        ("host_to_device", 4, 5, 105),
    ]


def test_gs1_members_without_data_wait_for_the_transfer():
    system = System(SystemSpec(num_ipus=2))
    end = system.run([[host_io((0, 1), sync=5, h2d=100), busy(10)],
                      [host_io((0, 1), sync=5), busy(10)]])
    assert end == 115
    assert log(system) == [
        ("sync_wait", 0, 0, 5),
        ("sync_wait", 1, 0, 5),
        ("host_to_device", 0, 5, 105),
        ("sync_wait", 1, 5, 105),
        ("forward", 0, 105, 115),
        ("forward", 1, 105, 115),
    ]


def test_a_sync_on_one_ipu_is_its_own_latency():
    system = System(SystemSpec(num_ipus=1))
    assert system.run([[exchange((0,), sync=7, phase=3, copy=3)]]) == 10
    assert log(system) == [("sync_wait", 0, 0, 7), ("ipu_copy", 0, 7, 10)]


def test_clock_and_host_link_carry_over_between_calls():
    system = System(SystemSpec(num_ipus=2))
    assert system.run([[busy(50)], [busy(20)]]) == 50
    assert system.now_ps == 50
    assert system.run([[host_io((0,), 0, h2d=10)], [busy(5)]]) == 60
    assert log(system) == [
        ("forward", 0, 0, 50),
        ("forward", 1, 0, 20),
        ("host_to_device", 0, 50, 60),
        ("forward", 1, 50, 55),
    ]


def test_ipus_without_a_program_stay_idle():
    system = System(SystemSpec(num_ipus=4))
    assert system.run([[busy(10)]]) == 10
    assert log(system) == [("forward", 0, 0, 10)]


def test_more_programs_than_ipus_is_an_error():
    system = System(SystemSpec(num_ipus=1))
    with pytest.raises(ValueError, match="2 IPU programs for a system of num_ipus=1"):
        system.run([[busy(1)], [busy(1)]])


def test_a_barrier_that_never_fills_fails_instead_of_hanging():
    system = System(SystemSpec(num_ipus=2))
    with pytest.raises(RuntimeError, match="No scheduled events left"):
        system.run([[exchange((0, 1), 1, 0, 0)], [busy(3)]])


def test_recorded_rows_carry_the_instruction_labels():
    system = System(SystemSpec(num_ipus=1))
    system.run([[Busy("backward", 2, 7, 3, 4, 11, flops=5.0, nbytes=6.0)]])
    assert system.recorder.rows == [(0, 11, 0, "backward", 2, 7, 3, 4, 6.0, 5.0)]


def test_an_idle_clock_moves_on_as_running_until_a_time_does():
    from ipusim.engine.system import Environment
    ran, idled = Environment(), Environment()
    ran.run(until=7)
    idled.idle_until(7)
    assert (ran.now, idled.now) == (7, 7) and type(idled.now) is int
    with pytest.raises(ValueError, match="greater than the current simulation time"):
        idled.idle_until(7)
    idled.timeout(3)
    with pytest.raises(RuntimeError, match="events scheduled"):
        idled.idle_until(20)
