"""The prepared real-GPU check (``python -m bench.gpu --check``): its comparisons against nvidia-smi,
checked here on the collector's output from the driver stand-in (no GPU is needed to test the judge)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from bench.gpu import SMI_FIELDS, Check, compare_gpu, compare_processes, parse_smi, smi_number

from headroom.simulation import ManualClock, load_scenario
from headroom.sources import SourceContext
from headroom.sources.nvml import NvmlCollector

from conftest import ROOT


@pytest.fixture(scope="module")
def golden():
    scenario = load_scenario("golden")
    clock = ManualClock(0.0)
    scenario.nvml_library(clock=clock)
    c = NvmlCollector(SourceContext(scenario=scenario, monotonic=clock, settings={"pcie_poll_interval": 60.0}))
    c.collect()
    clock.advance(1.0)
    sample = c.collect()
    c.close()
    return sample.gpus


def smi_row(g) -> str:
    """What nvidia-smi --query-gpu=SMI_FIELDS --format=csv,noheader,nounits prints for this GPU."""
    def n(v, scale=1.0, fmt="{:.0f}"):
        return "[N/A]" if v is None else fmt.format(v / scale)
    return ", ".join([
        str(g.index), g.uuid, n(g.utilization_ratio, 0.01), n(g.memory_used_bytes, 2**20), n(g.memory_total_bytes, 2**20),
        n(g.power_watts, fmt="{:.2f}"), n(g.power_limit_watts, fmt="{:.2f}"), n(g.temperature_celsius),
        n(g.memory_temperature_celsius), n(g.sm_clock_hertz, 1e6), n(g.sm_clock_max_hertz, 1e6),
        n(g.memory_clock_hertz, 1e6), n(g.memory_clock_max_hertz, 1e6), f"P{g.performance_state}",
        n(g.fan_speed_ratio, 0.01), n(g.pcie_link_generation), n(g.pcie_link_width), n(g.pcie_link_max_generation),
        n(g.pcie_link_max_width), "Enabled" if g.mig_enabled else "[N/A]",
    ])  # fmt: skip


def results(checks: list[Check]) -> dict[str, bool | None]:
    return {c.what.split(" ", 2)[2]: c.ok for c in checks}


def test_smi_numbers_in_nvidia_smi_spelling():
    assert smi_number(" 71 ") == 71 and smi_number("P2") == 2 and smi_number("[N/A]") is None
    assert smi_number("[Not Supported]") is None and smi_number("299.12") == 299.12


def test_the_same_readings_in_nvidia_smi_units_pass_and_absent_on_both_is_not_a_pass(golden):
    for g in golden:
        (row,) = parse_smi(smi_row(g), SMI_FIELDS)
        got = results(compare_gpu(g, row))
        assert False not in got.values(), got
        assert sum(v is True for v in got.values()) >= 12
    assert results(compare_gpu(golden[1], parse_smi(smi_row(golden[1]), SMI_FIELDS)[0]))["fan_speed_ratio vs fan.speed"] is None


def test_a_reading_off_by_more_than_its_tolerance_or_on_one_side_only_fails(golden):
    g = golden[0]
    (row,) = parse_smi(smi_row(g), SMI_FIELDS)
    off = replace(g, memory_used_bytes=int(g.memory_used_bytes * 1.1), temperature_celsius=g.temperature_celsius + 1)
    got = results(compare_gpu(off, row))
    assert got["memory_used_bytes vs memory.used"] is False
    assert got["temperature_celsius vs temperature.gpu"] is True  # within 2 degC
    assert results(compare_gpu(replace(g, power_watts=None), row))["power_watts vs power.draw"] is False


def test_every_compute_app_nvidia_smi_lists_must_be_in_headroom_with_its_memory(golden):
    g = golden[0]
    apps = parse_smi(f"1001, {g.uuid}, 30720\n1002, {g.uuid}, [N/A]\n4242, {g.uuid}, 100", ("pid", "gpu_uuid", "used_memory"))
    got = {c.what.split(" ")[1]: c.ok for c in compare_processes(golden, apps)}
    assert got == {"1001": True, "1002": True, "4242": False}


def test_without_a_gpu_the_check_says_why_and_fails():
    r = subprocess.run([sys.executable, "-m", "bench.gpu", "--check"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1 and "GPU check not run:" in r.stdout and "Traceback" not in r.stderr
