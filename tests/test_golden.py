"""Golden exposition: a fixture host tree + the deterministic `golden` scenario render to a checked-in file.

Regenerate after an intended change with `make golden` (pytest tests/test_golden.py --update-golden) and
review the diff. Volatile series (durations, the version, statvfs sizes of the test machine) are filtered.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from headroom.analysis.pipeline import Analysis
from headroom.config import load_config
from headroom.exposition.render import render as render_exposition
from headroom.sampler import Sampler
from headroom.simulation import ManualClock, load_scenario
from headroom.sources import Paths, SourceContext, load_all

from conftest import FIXTURES

GOLDEN = Path(__file__).resolve().parent / "golden" / "exposition.prom"
VOLATILE = re.compile(
    r"^headroom_(collector_duration_seconds|sample_duration(_max)?_seconds|build_info|shm_(size|used|available)_bytes"
    r"|config_last_reload_success_timestamp_seconds)\b"
)


def render(tmp_path: Path) -> str:
    """The exposition the code renders now for the golden scenario (every series, volatile ones included)."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "dev" / "shm").mkdir(parents=True)
    paths = Paths(procfs=FIXTURES / "proc" / "modern", sysfs=FIXTURES / "proc" / "modern" / "sys", rootfs=rootfs)
    clock = ManualClock(1000.0)
    scenario = load_scenario("golden")
    config = load_config(None)
    registry = load_all()
    collectors = []
    for name in ("nvml", "cpu", "memory", "shm", "disk", "net"):
        settings = {"pcie_poll_interval": 0.01} if name == "nvml" else {}
        collectors.append(registry[name](SourceContext(paths=paths, settings=settings, scenario=scenario,
                                                       interval=1.0, monotonic=clock)))
    scenario.nvml_library(clock=lambda: clock() - 1000.0)
    sampler = Sampler(render=render_exposition, collectors=collectors, interval=1.0, collector_timeout=5.0, scenario="golden",
                      analyse=Analysis(config), clock=clock, wall_clock=lambda: 1_700_000_000.0 + clock() - 1000.0)
    sampler.config_reload_success_timestamp = 1_700_000_000.0
    nvml = collectors[0]
    try:
        # With the clock frozen, reads accumulate nothing: wait (real time) until the background PCIe poller has
        # dealt with every GPU (on a loaded machine GPU 1's first poll may come well after GPU 0's) and the XID
        # thread has reported, then take exactly two ticks one simulated second apart.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            gpus = nvml.collect().gpus
            # private: the PCIe poller thread: the test waits until it has read every GPU, no public name says it has
            poller = nvml._pcie
            polled = poller is not None and all(  # every GPU read, found unsupported, or counted (not polled)
                uuid in poller.values or uuid in poller.unsupported or uuid in poller.counted
                for uuid, _ in poller.targets)
            if polled and gpus[0].xid_errors_total:
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the PCIe poller or the XID thread never reported")
        sampler.tick()
        clock.advance(1.0)
        body = sampler.tick().exposition.decode()
    finally:
        sampler.stop()
    return body


def stable(body: str) -> str:
    """``body`` without the series that differ between machines and runs (what the golden file holds)."""
    lines = [line for line in body.splitlines() if not VOLATILE.match(line)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> str:
    """Rendered once per module: the checks below read what the code renders now, not the golden file."""
    return render(tmp_path_factory.mktemp("golden"))


def test_golden_exposition(rendered, update_golden):
    """Only --update-golden writes the file: a missing golden fails (deleting it must not pass)."""
    body = stable(rendered)
    if update_golden:
        GOLDEN.write_text(body)
    assert GOLDEN.exists(), f"{GOLDEN} is missing: run `make golden`, review and commit it"
    assert body == GOLDEN.read_text(), "exposition changed: run `make golden` and review the diff"


def test_promtool_accepts_the_exposition(rendered):
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "check", "metrics"], input=rendered.encode(), capture_output=True, timeout=30)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_the_exposition_shows_what_the_scenario_declares(rendered):
    text = rendered
    # NOT_SUPPORTED leaves series absent, never 0: GPU 1 has no fan and no memory sensor, GPU 0 no remapped rows
    assert 'headroom_gpu_fan_speed_ratio{gpu="1"' not in text
    assert 'headroom_gpu_memory_temperature_celsius{gpu="1"' not in text
    assert 'headroom_gpu_remapped_rows{gpu="0"' not in text
    assert 'headroom_gpu_remapped_rows{gpu="1",uuid="GPU-11111111-1111-4111-8111-111111111111",kind="correctable"} 1' in text
    assert 'headroom_gpu_clock_event_active{gpu="0",uuid="GPU-00000000-0000-4000-8000-000000000000",reason="sw_power_cap"} 1' in text
    assert 'headroom_gpu_xid_errors_total{gpu="0",uuid="GPU-00000000-0000-4000-8000-000000000000",xid="13"} 1' in text
    assert text.count("headroom_gpu_mig_memory_size_bytes{") == 2
    assert 'headroom_disk_read_bytes_total{device="nvme0n1"}' in text and 'device="nvme0n1p1"' not in text
    assert 'headroom_pressure_ratio{resource="io",kind="full",window="10s"}' in text
    # net: lo, docker0 and the veth are dropped by default; a link without a known speed has no speed series
    assert 'headroom_network_speed_bytes{device="enp65s0f0"} 3125000000' in text
    assert 'headroom_network_receive_bytes_total{device="enp65s0f1"} 0' in text
    assert 'headroom_network_speed_bytes{device="enp65s0f1"}' not in text
    assert 'device="lo"' not in text and 'device="docker0"' not in text and 'device="veth' not in text
