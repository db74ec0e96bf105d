"""GPM (SM activity, occupancy, tensor and DRAM activity) and NVLink, read through the real pynvml binding
from the driver stand-in, and the analysis that uses them: gpu_compute scaled by SM activity (a busy GPU
with idle SMs is launch- or latency-bound) and the nvlink interconnect resource."""

from __future__ import annotations

import pytest

from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, rule_gpu_compute, rule_nvlink, score_gpu
from headroom.analysis.signals import HostSignals, gpu_signals
from headroom.samples import Sample, SourceResult
from headroom.simulation import ManualClock, parse_scenario
from headroom.sources import SourceContext
from headroom.sources.nvml import (
    NvmlCollector,
    threads,  # its private _EVENT_WAIT_MS is patched: no public name says it
)

GB = 1e9
H100 = """
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    utilization: {utilization}
    sm_active: {sm_active}
    sm_occupancy: 0.3
    tensor_active: 0.1
    dram_active: {{steps: [[0s, 0.2], [1.5s, 0.6]]}}
    nvlink: {{links: 18, version: 4, down: [17]}}
    nvlink_tx: {nvlink_tx}
    nvlink_rx: 10GB
  - name: NVIDIA A100 without GPM or NVLink
    memory_total: 80GiB
    power_limit: 400
    utilization: 1.0
"""


@pytest.fixture
def rig(monkeypatch):
    # private: a tuning constant, shortened for the test (no setting or public name for it)
    monkeypatch.setattr(threads, "_EVENT_WAIT_MS", 20)
    made = []

    def build(sm_active: float = 0.15, nvlink_tx: str = "100GB", utilization: float = 1.0):
        scenario = parse_scenario(H100.format(sm_active=sm_active, nvlink_tx=nvlink_tx, utilization=utilization))
        clock = ManualClock(0.0)
        lib = scenario.nvml_library(clock=clock)
        collector = NvmlCollector(SourceContext(scenario=scenario, monotonic=clock, settings={"pcie_poll_interval": 60.0}))
        made.append((lib, collector))
        return clock, lib, collector

    yield build
    for lib, collector in made:
        lib.release()
        collector.close()
        assert lib.errors == []


def test_gpm_ratios_are_averages_over_the_tick_from_two_samples(rig):
    clock, lib, c = rig()
    first = c.collect().gpus
    assert first[0].sm_active_ratio is None  # one sample: nothing to compare yet
    clock.advance(1.0)
    g = c.collect().gpus[0]
    assert (g.sm_active_ratio, g.sm_occupancy_ratio, g.tensor_active_ratio) == pytest.approx((0.15, 0.3, 0.1))
    assert g.dram_active_ratio == pytest.approx(0.2)
    clock.advance(1.0)  # t 1 -> 2: 0.2 until 1.5 s, 0.6 after: the average, not the value at the end
    assert c.collect().gpus[0].dram_active_ratio == pytest.approx(0.4, abs=0.01)
    assert lib.calls[("nvmlGpmSampleGet", 0)] == 3 and lib.calls[("nvmlGpmMetricsGet", None)] == 2


def test_gpm_is_absent_where_the_gpu_has_none_and_not_asked_again(rig):
    clock, lib, c = rig()
    for _ in range(3):
        clock.advance(1.0)
        g = c.collect().gpus[1]
    assert (g.sm_active_ratio, g.sm_occupancy_ratio, g.tensor_active_ratio, g.dram_active_ratio) == (None,) * 4
    assert lib.calls[("nvmlGpmQueryDeviceSupport", 1)] == 1 and lib.calls[("nvmlGpmSampleGet", 1)] == 0


def test_gpm_samples_are_freed_at_close(rig):
    _clock, lib, c = rig()
    c.collect()
    # private: the simulated driver's GPM sample handles: that they are freed is what is tested
    assert len(lib._gpm_samples) == 2
    c.close()
    # private: the simulated driver's GPM sample handles: that they are freed is what is tested
    assert lib._gpm_samples == {}


def test_nvlink_counters_per_active_link_and_link_state_without_extra_calls_per_tick(rig):
    clock, lib, c = rig()
    first = c.collect().gpus[0]
    calls = lib.calls[("nvmlDeviceGetFieldValues", 0)]
    clock.advance(2.0)
    g = c.collect().gpus[0]
    assert lib.calls[("nvmlDeviceGetFieldValues", 0)] - calls == 1  # NVLink rides in the per-tick field read
    links = {link.link: link for link in g.nvlink_links}
    assert len(links) == 18 and not links[17].up and links[17].tx_bytes_total is None
    assert all(links[n].up for n in range(17)) and g.nvlink_version == 4
    before = {link.link: link.tx_bytes_total for link in first.nvlink_links if link.up}
    sent = sum(links[n].tx_bytes_total - before[n] for n in range(17))
    assert sent == pytest.approx(200 * GB, rel=0.001)  # 100 GB/s for 2 s over the 17 active links
    assert c.collect().gpus[1].nvlink_links == ()


def window(c: NvmlCollector, clock: ManualClock, ticks: int = 6) -> list[Sample]:
    out = []
    for _ in range(ticks):
        clock.advance(1.0)
        data = c.collect()
        out.append(Sample(timestamp=clock(), monotonic=clock(), sources={"nvml": SourceResult("nvml", True, 0.0, data)}))
    return out


def test_a_busy_gpu_with_idle_sms_is_called_latency_bound_not_compute_bound(rig):
    clock, _, c = rig(sm_active=0.15, nvlink_tx="1GB")
    h100, a100 = gpu_signals(window(c, clock), 30.0)
    assert h100.busy == 1.0 and h100.sm_active == pytest.approx(0.15)
    score, text = rule_gpu_compute(h100, DEFAULT_THRESHOLDS)
    assert score == 0.0 and "SMs active 15 %" in text and "launch- or latency-bound" in text
    assert rule_gpu_compute(a100, DEFAULT_THRESHOLDS)[0] == 1.0  # no GPM: utilization is all there is
    verdict = score_gpu(h100, HostSignals(), DEFAULT_THRESHOLDS)
    assert verdict.candidate != "gpu_compute"


@pytest.mark.parametrize(("sm_active", "expected"), [(0.49, 0.0), (0.5, 0.0), (0.65, 0.5), (0.8, 1.0), (0.95, 1.0)])
def test_gpu_compute_follows_sm_activity_between_its_thresholds(rig, sm_active, expected):
    clock, _, c = rig(sm_active=sm_active, nvlink_tx="1GB")
    h100 = gpu_signals(window(c, clock, 3), 30.0)[0]
    assert rule_gpu_compute(h100, DEFAULT_THRESHOLDS)[0] == pytest.approx(expected, abs=0.02)


@pytest.mark.parametrize(("nvlink_tx", "expected"), [("200GB", 0.0), ("255GB", 0.0), ("308.125GB", 0.5), ("361.25GB", 1.0)])
def test_nvlink_scores_near_the_capacity_of_the_active_links(rig, nvlink_tx, expected):
    """17 active NVLink 4 links: 425 GB/s per direction; nvlink_low 0.6 = 255 GB/s, high 0.85 = 361 GB/s. The GPU
    half busy: saturation alone decides (a busy GPU that does not compute is bound by steady traffic below it)."""
    clock, _, c = rig(sm_active=0.2, nvlink_tx=nvlink_tx, utilization=0.5)
    h100 = gpu_signals(window(c, clock), 30.0)[0]
    assert h100.nvlink_capability_bytes_per_second == 17 * 25 * GB
    score, text = rule_nvlink(h100, DEFAULT_THRESHOLDS)
    assert score == pytest.approx(expected, abs=0.02)
    assert "of 425 GB/s" in text


def test_nvlink_saturation_with_busy_sms_is_compute_not_the_links(rig):
    clock, _, c = rig(sm_active=0.9, nvlink_tx="400GB")
    h100 = gpu_signals(window(c, clock), 30.0)[0]
    assert rule_nvlink(h100, DEFAULT_THRESHOLDS)[0] == 0.0
    clock2, _, c2 = rig(sm_active=0.2, nvlink_tx="400GB")
    verdict = score_gpu(gpu_signals(window(c2, clock2), 30.0)[0], HostSignals(), DEFAULT_THRESHOLDS)
    assert verdict.candidate == "nvlink"
