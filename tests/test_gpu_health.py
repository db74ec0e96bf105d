"""GPU health (analysis/health.py): each condition holds while its cause does and clears when it clears; through
the NVML collector over the driver stand-in (scenario keys xids, ecc, remapped_rows, reset_at, faults)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS
from headroom.analysis.health import CONDITIONS, HealthTracker
from headroom.samples import GpuSample

GPU = GpuSample(index=0, uuid="GPU-0", name="H100", pci_bus_id="0", up=True, utilization_ratio=0.9,
                sm_clock_hertz=1980e6, sm_clock_max_hertz=1980e6, ecc_uncorrected_volatile_total=0,
                remapped_rows_pending=False, remapped_rows_failure=False)


def judge(tracker, g, now):
    (h,) = tracker([g], now)
    return {c.condition: c for c in h.conditions}, h


def test_a_healthy_gpu_has_no_condition():
    found, h = judge(HealthTracker(DEFAULT_THRESHOLDS), GPU, 0.0)
    assert found == {} and h.healthy and h.status == "healthy" and h.reason == "healthy"


def test_an_xid_that_needs_a_reset_holds_until_the_gpu_resets():
    t = HealthTracker(DEFAULT_THRESHOLDS)
    judge(t, GPU, 0.0)
    found, h = judge(t, replace(GPU, xid_errors_total={48: 1, 13: 4}), 1.0)
    assert set(found) == {"xid_reset_required"}
    assert found["xid_reset_required"].reason == "XID 48 needs a GPU reset" and found["xid_reset_required"].action == "reset"
    found, _ = judge(t, replace(GPU, xid_errors_total={48: 1, 13: 4}), 1000.0)  # no recurrence, no reset: it holds
    assert set(found) == {"xid_reset_required"} and found["xid_reset_required"].since == 1.0
    judge(t, replace(GPU, up=False, error="GPU is lost (GPU_IS_LOST)"), 1001.0)  # the reset takes it off the bus
    found, h = judge(t, replace(GPU, xid_errors_total={48: 1, 13: 4}), 1002.0)
    assert found == {} and h.healthy


def test_an_application_xid_is_not_a_health_condition():
    t = HealthTracker(DEFAULT_THRESHOLDS)
    found, _ = judge(t, replace(GPU, xid_errors_total={13: 3, 31: 1, 94: 1}), 0.0)
    assert found == {}


def test_fallen_off_the_bus_asks_for_a_reboot_and_a_quiet_window_clears_it():
    t = HealthTracker({**DEFAULT_THRESHOLDS, "health_xid_clear_seconds": 60.0})
    found, _ = judge(t, replace(GPU, xid_errors_total={79: 1}), 0.0)
    assert found["xid_reset_required"].action == "reboot"
    assert set(judge(t, replace(GPU, xid_errors_total={79: 1}), 59.0)[0]) == {"xid_reset_required"}
    assert set(judge(t, replace(GPU, xid_errors_total={79: 2}), 59.5)[0]) == {"xid_reset_required"}  # recurred
    assert set(judge(t, replace(GPU, xid_errors_total={79: 2}), 100.0)[0]) == {"xid_reset_required"}
    assert judge(t, replace(GPU, xid_errors_total={79: 2}), 119.5)[0] == {}


def test_uncorrected_ecc_holds_until_a_reset_zeroes_the_volatile_count_which_also_clears_the_xid():
    t = HealthTracker(DEFAULT_THRESHOLDS)
    found, _ = judge(t, replace(GPU, ecc_uncorrected_volatile_total=2, xid_errors_total={48: 1}), 0.0)
    assert set(found) == {"xid_reset_required", "ecc_uncorrectable"}
    assert found["ecc_uncorrectable"].reason == "2 uncorrected ECC error(s) since the driver loaded"
    found, _ = judge(t, replace(GPU, ecc_uncorrected_volatile_total=0, ecc_uncorrected_aggregate_total=2,
                                xid_errors_total={48: 1}), 1.0)
    assert found == {}


def test_row_remap_pending_and_failed():
    t = HealthTracker(DEFAULT_THRESHOLDS)
    found, _ = judge(t, replace(GPU, remapped_rows_pending=True, remapped_rows_failure=True), 0.0)
    assert [c for c in CONDITIONS if c in found] == ["row_remap_pending", "row_remap_failed"]
    assert found["row_remap_pending"].action == "reset" and found["row_remap_failed"].action == "service"
    assert judge(t, GPU, 1.0)[0] == {}


def test_a_lost_gpu_clears_when_it_answers_again():
    t = HealthTracker(DEFAULT_THRESHOLDS)
    found, h = judge(t, replace(GPU, up=False, error="nvmlDeviceGetUtilizationRates: GPU is lost (GPU_IS_LOST)"), 0.0)
    assert set(found) == {"gpu_lost"} and "GPU_IS_LOST" in h.reason and found["gpu_lost"].action == "reboot"
    assert judge(t, GPU, 1.0)[0] == {}


def test_clocks_stuck_after_a_long_hardware_slowdown_or_an_unexplained_low_clock():
    t = HealthTracker({**DEFAULT_THRESHOLDS, "health_clocks_stuck_seconds": 60.0})
    slow = replace(GPU, clock_events_active={"hw_slowdown": True, "gpu_idle": False}, sm_clock_hertz=600e6)
    assert judge(t, slow, 0.0)[0] == {}
    assert judge(t, slow, 59.0)[0] == {}
    found, _ = judge(t, slow, 60.0)
    assert found["clocks_stuck"].reason == "hw_slowdown active for 60 s or more"
    assert judge(t, GPU, 61.0)[0] == {}  # clocks move again
    low = replace(GPU, sm_clock_hertz=700e6, clock_events_active={"gpu_idle": False})
    judge(t, low, 100.0)
    found, _ = judge(t, low, 160.0)
    assert found["clocks_stuck"].reason.startswith("SM clock held at 700 MHz (35% of max) for 60 s or more while busy")
    capped = replace(low, clock_events_active={"sw_power_cap": True})  # a reason explains it: not stuck
    judge(t, capped, 200.0)
    assert judge(t, capped, 400.0)[0] == {}


@pytest.fixture
def collector(tmp_path):
    from headroom.simulation.scenario import load_scenario
    from headroom.sources import SourceContext
    from headroom.sources.nvml import NvmlCollector

    made = []

    def make(text: str, clock):
        path = tmp_path / "s.yaml"
        path.write_text(text)
        scenario = load_scenario(str(path))
        scenario.nvml_library(clock=clock)
        c = NvmlCollector(SourceContext(scenario=scenario, monotonic=clock))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


SICK = """
description: health
seed: 1
gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    ecc: {uncorrected_volatile: 1, uncorrected_aggregate: 1}
    remapped_rows: {uncorrectable: 1, pending: true}
    reset_at: 10s
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
faults:
  - {call: nvmlDeviceGetUtilizationRates, gpu: 1, error: GPU_IS_LOST, until: 10s}
"""


def test_through_the_stand_in_a_reset_clears_ecc_and_the_pending_remap_and_a_lost_gpu_returns(collector):
    now = [1.0]
    c = collector(SICK, lambda: now[0])
    t = HealthTracker(DEFAULT_THRESHOLDS)
    before = t(c.collect().gpus, now[0])
    assert [sorted(x.condition for x in h.conditions) for h in before] == [
        ["ecc_uncorrectable", "row_remap_pending"], ["gpu_lost"]]
    now[0] = 80.0  # after the reset and the fault's end (the lost GPU is re-probed with backoff)
    for _ in range(3):
        after = t(c.collect().gpus, now[0])
        now[0] += 70.0
    assert [h.conditions for h in after] == [(), ()]
