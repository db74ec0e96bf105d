"""The previous tick, the one input a collector may read of the tick before (docs/architecture.md): a frozen
``samples.PreviousTick`` with exactly the fields collectors read, built by the daemon once per Snapshot."""

from __future__ import annotations

import dataclasses

import pytest

from headroom.analysis.bottleneck import Verdict
from headroom.analysis.headroom import WorkloadHeadroom
from headroom.analysis.pipeline import Findings, HostFinding, WorkloadFinding
from headroom.daemon import LatestSample, previous_tick
from headroom.sampler import Sampler
from headroom.samples import (
    CpuSample,
    CpuTimes,
    IdentitySample,
    MemorySample,
    NvmlSample,
    PreviousTick,
    ProcessesSample,
    Sample,
    Snapshot,
    SourceResult,
)

CPU = CpuSample(times=CpuTimes(user=1, nice=0, system=0, idle=0, iowait=0), logical_cpus=4, load1=1, load5=1,
                load15=1)
MEMORY = MemorySample(total_bytes=1 << 30, available_bytes=1 << 29, free_bytes=1 << 29)


def _sample(**data: object) -> Sample:
    return Sample(1e9, 5.0, {k: SourceResult(k, True, 0.0, v) for k, v in data.items()})


def test_a_previous_tick_holds_exactly_what_collectors_read():
    assert [f.name for f in dataclasses.fields(PreviousTick)] == [
        "cpu", "memory", "nvml", "processes", "identity", "workload_scores", "host_pressure"]
    tick = PreviousTick()
    with pytest.raises(dataclasses.FrozenInstanceError):
        tick.cpu = CPU  # type: ignore[misc]


def test_of_a_sample_takes_each_collector_that_succeeded_and_nothing_else():
    nvml, processes, identity = NvmlSample(up=True), ProcessesSample(), IdentitySample()
    sample = Sample(1e9, 5.0, {"cpu": SourceResult("cpu", True, 0.0, CPU),
                               "memory": SourceResult("memory", False, 0.0, None, "failed"),
                               "nvml": SourceResult("nvml", True, 0.0, nvml),
                               "processes": SourceResult("processes", True, 0.0, processes),
                               "identity": SourceResult("identity", True, 0.0, identity),
                               "disk": SourceResult("disk", True, 0.0, object())})
    tick = PreviousTick.of(sample)
    assert tick == PreviousTick(cpu=CPU, memory=None, nvml=nvml, processes=processes, identity=identity)
    assert tick.workload_scores is None and dict(tick.host_pressure) == {}
    assert PreviousTick.of(None) is None  # no tick yet
    # a value of another type under a collector's name (a stand-in collector) is not taken for that collector's
    assert PreviousTick.of(_sample(cpu=MEMORY, memory=CPU)) == PreviousTick()


def test_the_daemon_hands_the_collectors_last_ticks_sample_and_its_analysis():
    wf = WorkloadFinding("trainer", Verdict({"cpu": 0.4, "disk_io": 0.0}, {}, "cpu"), WorkloadHeadroom())
    findings = Findings(workload_findings=(wf,), host=HostFinding(host_pressure={"cpu": 0.9}))
    tick = previous_tick(_sample(cpu=CPU, memory=MEMORY), findings)
    assert tick == PreviousTick(cpu=CPU, memory=MEMORY, workload_scores=({"cpu": 0.4, "disk_io": 0.0},),
                                host_pressure={"cpu": 0.9})
    assert previous_tick(_sample(cpu=CPU), None).workload_scores is None  # no analysis (or it failed)


def test_latest_sample_is_the_newest_snapshots_tick_built_once_per_snapshot():
    sampler = Sampler([], interval=1.0)
    latest = LatestSample(sampler)
    assert latest() is None and LatestSample()() is None  # before the first tick; no sampler
    sampler.snapshot = Snapshot(sample=_sample(cpu=CPU), ticks=1, interval=1.0, tick_duration_seconds=0.0)
    first = latest()
    assert first == PreviousTick(cpu=CPU)
    assert latest() is first  # the lanes' second reader of the same tick gets the same value
    sampler.snapshot = Snapshot(sample=_sample(memory=MEMORY), ticks=2, interval=1.0, tick_duration_seconds=0.0)
    assert latest() == PreviousTick(memory=MEMORY)
    sampler.stop()
