"""samples.share_unchanged: a value equal to the previous tick's is that tick's object, and nothing else changes."""

from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

from headroom.samples import EMPTY, GpuSample, WorkloadProcesses, share_unchanged, to_jsonable


def gpu(**values: object) -> GpuSample:
    base = {"index": 0, "uuid": "GPU-0", "name": "H100", "pci_bus_id": "00000000:10:00.0"}
    return GpuSample(**{**base, **values})


def test_equal_fields_become_the_previous_objects_and_the_sample_still_equals_a_fresh_build():
    old = gpu(power_limit_watts=float("700"), memory_total_bytes=int("85899345920"), power_watts=float("300"),
              clock_events_seconds_total={"sw_power_cap": float("12.5")})
    values = {"power_limit_watts": float("700"), "memory_total_bytes": int("85899345920"), "power_watts": float("310"),
              "clock_events_seconds_total": {"sw_power_cap": float("12.5")}}
    new = gpu(**values)
    out = share_unchanged(new, old)
    assert out is new
    assert out == gpu(**values)  # what the source built, field for field
    assert new.power_limit_watts is old.power_limit_watts
    assert new.memory_total_bytes is old.memory_total_bytes
    assert new.clock_events_seconds_total is old.clock_events_seconds_total
    assert new.power_watts == 310.0 and old.power_watts == 300.0  # a changed value stays the new one


def test_only_the_named_fields_are_looked_at():
    old = gpu(power_limit_watts=float("700"), sm_clock_max_hertz=float("1.98e9"))  # values built at run time,
    new = gpu(power_limit_watts=float("700"), sm_clock_max_hertz=float("1.98e9"))  # not one shared constant
    share_unchanged(new, old, ("power_limit_watts",))
    assert new.power_limit_watts is old.power_limit_watts
    assert new.sm_clock_max_hertz is not old.sm_clock_max_hertz


def test_equal_values_of_another_type_or_sign_are_not_shared():
    old = WorkloadProcesses(name="w", pids=(1,), threads=1, cpu_user_seconds_total=0.0, cpu_system_seconds_total=1.0,
                            resident_memory_bytes=1, process_cpu_seconds={1: 5})
    new = WorkloadProcesses(name="".join("w"),
                            pids=tuple([1]),  # noqa: C409 - an equal tuple, not the same constant
                            threads=1, cpu_user_seconds_total=-0.0, cpu_system_seconds_total=1,
                            resident_memory_bytes=1, process_cpu_seconds={1: 5.0})
    share_unchanged(new, old)
    assert json.dumps(to_jsonable(new)) == json.dumps(to_jsonable(dataclasses.replace(new)))
    assert type(new.cpu_system_seconds_total) is int and type(new.process_cpu_seconds[1]) is float
    assert str(new.cpu_user_seconds_total) == "-0.0"
    assert new.pids is old.pids  # an equal tuple of the same type is shared


def test_read_only_maps_are_shared_and_a_shared_sample_serialises_as_before():
    old = WorkloadProcesses(name="w", pids=(1, 2), threads=2, cpu_user_seconds_total=1.5, cpu_system_seconds_total=0.5,
                            resident_memory_bytes=4096, process_cpu_seconds=MappingProxyType({1: 1.0, 2: 1.0}),
                            rank_thread_cpu_seconds=MappingProxyType({}))
    new = WorkloadProcesses(name="w", pids=(1, 2), threads=2, cpu_user_seconds_total=1.5, cpu_system_seconds_total=0.5,
                            resident_memory_bytes=4096, process_cpu_seconds=MappingProxyType({1: 1.0, 2: 1.0}),
                            rank_thread_cpu_seconds=EMPTY)
    share_unchanged(new, old)
    assert new.process_cpu_seconds is old.process_cpu_seconds
    assert new.rank_thread_cpu_seconds is old.rank_thread_cpu_seconds
    assert to_jsonable(new) == to_jsonable(old)


def test_nothing_to_share_with_on_the_first_tick():
    new = gpu(power_limit_watts=700.0)
    assert share_unchanged(new, None) is new
    assert share_unchanged(new, new) is new


def test_a_value_equal_in_every_field_is_the_previous_object():
    old = gpu(power_limit_watts=float("700"), clock_events_seconds_total={"gpu_idle": float("0")})
    new = gpu(power_limit_watts=float("700"), clock_events_seconds_total={"gpu_idle": float("0")})
    assert share_unchanged(new, old) is old
    assert share_unchanged(new, old, ("power_limit_watts",)) is new  # only some fields looked at: not known equal
