"""Bottleneck analysis, table-driven: each case is a situation a user meets, built as a window of Samples.

Each case asserts the primary bottleneck and that the unrelated scores stay low, through the same
Analysis object the agent runs every tick (hold 0 here so the primary follows the candidate at once;
hysteresis has its own tests below).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import pytest

from headroom.analysis.bottleneck import RESOURCES, Hysteresis
from headroom.analysis.pipeline import Analysis
from headroom.config import check_config_text
from headroom.samples import (
    CpuSample,
    CpuTimes,
    DiskSample,
    DiskStats,
    GpuSample,
    MemorySample,
    MountUsage,
    NvmlSample,
    Pressure,
    PressureLine,
    Sample,
    ShmSample,
    SourceResult,
)

GIB = 2**30


@dataclass
class Host:
    """Per-second rates and levels the synthetic window is built from."""

    cpus: int = 16
    cpu_busy: float = 0.2  # share of all CPU time
    iowait: float = 0.0
    psi: dict = field(default_factory=dict)  # "cpu.some" -> avg10
    mem_total: int = 256 * GIB
    mem_available: int = 200 * GIB
    shm_size: int = 64 * GIB
    shm_used: int = 1 * GIB
    disk_busy: float = 0.05  # share of time with I/O in flight
    disk_queue: float = 0.1


@dataclass
class Gpu:
    util: float = 0.9
    mem_used: int = 30 * GIB
    mem_total: int = 80 * GIB
    power: float = 400.0
    power_limit: float = 700.0
    temperature: float = 60.0
    sm_clock_ratio: float = 1.0
    reasons: tuple = ()
    pcie: float | None = None  # bytes/s
    processes: tuple = ()
    util_alternates: float | None = None  # every other tick, for variance


def pressure(avg10: float) -> Pressure:
    line = PressureLine(avg10, avg10, avg10, 0.0)
    return Pressure(some=line, full=line)


def build_window(host: Host, gpus: list[Gpu], seconds: int = 20, extra=None) -> list[Sample]:
    window = []
    for t in range(seconds):
        total = host.cpus * t
        busy = total * host.cpu_busy
        iowait = total * host.iowait
        times = CpuTimes(user=busy, nice=0.0, system=0.0, idle=total - busy - iowait, iowait=iowait)
        psi = {}
        for key, value in host.psi.items():
            resource, kind = key.split(".")
            line = PressureLine(value, value, value, 0.0)
            p = psi.get(resource) or Pressure(some=PressureLine(0, 0, 0, 0), full=PressureLine(0, 0, 0, 0))
            psi[resource] = replace(p, **{kind: line})
        cpu = CpuSample(times=times, logical_cpus=host.cpus, load1=1, load5=1, load15=1, pressure=psi)
        mem = MemorySample(total_bytes=host.mem_total, available_bytes=host.mem_available, free_bytes=host.mem_available,
                           major_faults_total=0)
        shm = ShmSample(mounts=(MountUsage("/dev/shm", "tmpfs", host.shm_size, host.shm_used,
                                           host.shm_size - host.shm_used),))
        disk = DiskSample(devices=(DiskStats("nvme0n1", 0, 0, 0, 0, io_time_seconds=host.disk_busy * t,
                                             weighted_io_time_seconds=host.disk_queue * t, in_flight=0),))
        gpu_samples = []
        for i, g in enumerate(gpus):
            util = g.util if (g.util_alternates is None or t % 2 == 0) else g.util_alternates
            gpu_samples.append(GpuSample(
                index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3", pci_bus_id=f"0000:{i:02x}:00.0",
                memory_total_bytes=g.mem_total, memory_used_bytes=g.mem_used,
                utilization_ratio=util, power_watts=g.power, power_limit_watts=g.power_limit,
                temperature_celsius=g.temperature, sm_clock_hertz=1.98e9 * g.sm_clock_ratio, sm_clock_max_hertz=1.98e9,
                clock_events_active={r: (r in g.reasons) for r in ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown",
                                                                   "hw_thermal_slowdown", "hw_power_brake_slowdown")},
                pcie_tx_bytes_per_second=g.pcie, pcie_rx_bytes_per_second=g.pcie,
                pcie_link_generation=4, pcie_link_width=16, processes=g.processes,
            ))  # fmt: skip
        sources = {
            "nvml": SourceResult("nvml", True, 0.001, NvmlSample(up=True, gpus=tuple(gpu_samples))),
            "cpu": SourceResult("cpu", True, 0.001, cpu),
            "memory": SourceResult("memory", True, 0.001, mem),
            "shm": SourceResult("shm", True, 0.001, shm),
            "disk": SourceResult("disk", True, 0.001, disk),
        }
        if extra:
            sources.update(extra(t))
        window.append(Sample(timestamp=1e9 + t, monotonic=float(t), sources=sources))
    return window


def processes_source(name: str, cores: float):
    """A 'processes' source whose workload burns ``cores`` CPU cores."""
    def make(t: int):
        w = SimpleNamespace(name=name, processes=5, cpu_user_seconds_total=cores * t, cpu_system_seconds_total=0.0)
        return {"processes": SourceResult("processes", True, 0.001, SimpleNamespace(workloads=(w,)))}
    return make


TRAINER = """
workloads:
  - name: trainer
    kind: finetune-lora
    params: 7B
    precision: bf16
    lora: {rank: 16}
    dataloader_workers: 4
    gpus: [0]
"""
SERVER = """
workloads:
  - name: chat
    kind: inference
    params: 8B
    precision: bf16
    runtime: {name: tgi}
    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128}
    context: {max: 8192}
    concurrency: 8
    gpus: [0]
"""
DISTRIBUTED = TRAINER.replace("gpus: [0]", "match: {cmdline: train.py}\n    parallel: {data: 8}")


def analyse(config_text: str, window: list[Sample], hold: float = 0.0, analysis: str = "", gpus_of=None):
    """Run the Analysis over the window; ``gpus_of`` {workload: (gpu indices)} stands in for attribution."""
    config = check_config_text(config_text + f"\nanalysis:\n  hold: {hold}s\n{analysis}", "c.yaml")
    analysis = Analysis(config)
    if gpus_of:
        analysis._attribute = lambda sample: tuple(
            SimpleNamespace(name=n, gpu_indices=g, processes=1, estimate=None, expected_peak_bytes=None)
            for n, g in gpus_of.items())
    findings = None
    for i in range(1, len(window) + 1):
        _, findings = analysis(window[:i])
    return findings


@dataclass
class Case:
    situation: str
    config: str
    host: Host
    gpus: list
    expected: str
    extra: object = None


CASES = [
    Case("DataLoader starves the GPU", TRAINER, Host(cpus=16, cpu_busy=0.3, psi={"cpu.some": 0.42}),
         [Gpu(util=0.31, util_alternates=0.05)], "cpu", extra=processes_source("trainer", 3.97)),
    Case("KV cache fills VRAM", SERVER, Host(), [Gpu(util=0.7, mem_used=int(79 * GIB))], "gpu_memory"),
    Case("thermal throttling under full load", SERVER, Host(),
         [Gpu(util=0.97, temperature=89, sm_clock_ratio=0.6, reasons=("hw_thermal_slowdown", "sw_thermal_slowdown"))],
         "gpu_thermal"),
    Case("power cap holds the clocks down", SERVER, Host(),
         [Gpu(util=0.95, power=699, sm_clock_ratio=0.7, reasons=("sw_power_cap",))], "gpu_power"),
    Case("idle serving at night is not a bottleneck", SERVER, Host(cpu_busy=0.02), [Gpu(util=0.0, mem_used=70 * GIB)],
         "none"),
    Case("iowait without a slow GPU is not disk_io", SERVER, Host(iowait=0.4, psi={"io.some": 0.1}), [Gpu(util=0.96)],
         "gpu_compute"),
    Case("checkpoint writes while the GPU computes are not disk_io", TRAINER,
         Host(disk_busy=0.98, disk_queue=8, psi={"io.some": 0.6}), [Gpu(util=0.97)], "gpu_compute"),
    Case("a busy host CPU beside a busy GPU is not cpu", SERVER, Host(cpu_busy=0.99, psi={"cpu.some": 0.5}),
         [Gpu(util=0.97)], "gpu_compute"),
    Case("a busy, well-fed GPU is compute bound", SERVER, Host(), [Gpu(util=0.99)], "gpu_compute"),
    Case("a full /dev/shm starves DataLoader workers", TRAINER, Host(shm_used=int(63.8 * GIB)), [Gpu(util=0.2)],
         "shared_memory"),
    Case("slow storage starves the GPU", TRAINER, Host(disk_busy=0.98, disk_queue=12, psi={"io.some": 0.6}),
         [Gpu(util=0.25)], "disk_io"),
    Case("memory pressure on the host", TRAINER,
         Host(mem_available=3 * GIB, psi={"memory.full": 0.25, "memory.some": 0.5}), [Gpu(util=0.4)], "host_memory"),
    Case("host-to-GPU copies saturate PCIe", SERVER, Host(), [Gpu(util=0.5, pcie=28e9)], "pcie"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.situation)
def test_situations(case: Case):
    window = build_window(case.host, case.gpus, extra=case.extra)
    findings = analyse(case.config, window)
    (wf,) = findings.workload_findings
    assert wf.verdict.primary == case.expected, (wf.verdict.scores, wf.verdict.evidence)
    for resource in RESOURCES:
        if resource != case.expected:
            assert wf.verdict.scores[resource] < 0.5, (resource, wf.verdict.scores, wf.verdict.evidence[resource])
    if case.expected != "none":
        assert wf.verdict.scores[case.expected] >= 0.5
        assert wf.verdict.evidence[case.expected]


def test_network_limits_a_distributed_trainer_only():
    def nic(t):
        dev = SimpleNamespace(device="ib0", speed_bytes_per_second=12.5e9, receive_bytes=int(12e9 * t),
                              transmit_bytes=int(11e9 * t))
        return {"net": SourceResult("net", True, 0.001, SimpleNamespace(devices=(dev,)))}

    window = build_window(Host(), [Gpu(util=0.3)], extra=nic)
    (wf,) = analyse(DISTRIBUTED, window, gpus_of={"trainer": (0,)}).workload_findings
    assert wf.verdict.primary == "network", wf.verdict.scores
    (single,) = analyse(TRAINER, window).workload_findings
    assert single.verdict.scores["network"] == 0.0


def test_evidence_names_the_numbers():
    window = build_window(Host(cpus=16, cpu_busy=0.3, psi={"cpu.some": 0.42}), [Gpu(util=0.31)],
                          extra=processes_source("trainer", 3.97))
    (wf,) = analyse(TRAINER, window).workload_findings
    text = wf.verdict.evidence["cpu"]
    assert "GPU 0 busy 31 %" in text
    assert "4 DataLoader workers used 3.97 of 4 cores" in text
    assert "PSI cpu some avg10 42 %" in text


def test_gpus_no_profile_claims_get_verdicts_too():
    window = build_window(Host(), [Gpu(util=0.99), Gpu(util=0.96, reasons=("sw_power_cap",), power=700)])
    findings = analyse("", window)
    assert [g.verdict.primary for g in findings.gpu_findings] == ["gpu_compute", "gpu_power"]


def test_idle_gpu_time_and_cost_accumulate():
    window = build_window(Host(), [Gpu(util=0.0), Gpu(util=0.9)], seconds=11)
    findings = analyse("", window, analysis="  cost_per_gpu_hour: 3.6\n")
    assert findings.host.gpus_idle == 1
    assert findings.host.gpu_idle_seconds_total == pytest.approx(10.0)
    assert findings.host.gpu_idle_cost_total == pytest.approx(0.01)  # 10 s at 3.6 per hour


def test_headroom_sequences_and_context_from_measured_free_vram():
    # 8B bf16, KV 131072 B/token; 16 GiB free on GPU 0 -> 16 GiB / (131072 * 8192) = 16 more sequences at 8k,
    # and 16 GiB / (131072 * 8) = 16384 more tokens per sequence at the declared 8 sequences
    window = build_window(Host(), [Gpu(util=0.6, mem_used=64 * GIB, mem_total=80 * GIB)])
    config = SERVER
    statuses = None

    class WithEstimate(Analysis):
        def _attribute(self, sample):
            from headroom import sizing
            est = sizing.estimate(self.profiles[0], gpu_memory_bytes=80 * GIB, gpus=1)
            return (SimpleNamespace(name="chat", gpu_indices=(0,), processes=1, estimate=est,
                                    expected_peak_bytes=est.expected_usage_bytes),)

    analysis = WithEstimate(check_config_text(config, "c.yaml"))
    for i in range(1, len(window) + 1):
        _, statuses = analysis(window[:i])
    (wf,) = statuses.workload_findings
    assert wf.headroom.gpu_memory_bytes == 16 * GIB
    assert wf.headroom.sequences == 16
    assert wf.headroom.context_tokens == 16384
    assert wf.headroom.power_watts == 300
    assert wf.headroom.thermal_celsius == 27


class TestHysteresis:
    def test_primary_changes_only_after_the_hold(self):
        h = Hysteresis(hold=10)
        assert h.update("cpu", 0) == ("none", False)
        assert h.update("cpu", 9) == ("none", False)
        assert h.update("cpu", 10) == ("cpu", True)

    def test_a_flapping_signal_never_changes_the_primary(self):
        h = Hysteresis(hold=5)
        for t in range(60):
            primary, _ = h.update("disk_io" if t % 2 else "none", float(t))
            assert primary == "none"

    def test_returning_to_the_primary_cancels_the_candidate(self):
        h = Hysteresis(hold=5, primary="cpu")
        h.update("none", 0)
        h.update("cpu", 3)
        assert h.update("none", 6) == ("cpu", False)

    def test_a_second_new_candidate_starts_its_own_hold(self):
        """Two candidates that are not the primary, one after the other: the hold restarts with the second."""
        h = Hysteresis(hold=5, primary="cpu")
        for t in range(4):  # disk_io for 4 s
            assert h.update("disk_io", float(t)) == ("cpu", False)
        for t in range(4, 9):  # then network: only at 4 + 5 s does it become primary
            assert h.update("network", float(t)) == ("cpu", False), t
        assert h.update("network", 9.0) == ("network", True)

    def test_an_interrupted_candidate_starts_its_hold_again(self):
        h = Hysteresis(hold=5, primary="cpu")
        h.update("disk_io", 0.0)
        h.interrupt()  # a tick without this entity
        assert h.update("disk_io", 6.0) == ("cpu", False)
        assert h.update("disk_io", 11.0) == ("disk_io", True)
        h.interrupt()
        assert h.primary == "disk_io", "an interruption keeps the primary"

    def test_a_gpu_that_was_not_seen_for_a_while_starts_its_hold_again(self):
        """The GPU is power capped for 3 s, then NVML fails for 40 s, then the cap shows again: the candidate
        was not seen for 40 s, so it must hold 20 s after the GPU is back, not become primary at once."""
        window = build_window(Host(), [Gpu(util=0.9, reasons=("sw_power_cap",))], seconds=70)
        lost = SourceResult("nvml", False, 0.001, None, "NVML_ERROR_GPU_IS_LOST")
        window = [replace(s, sources={**s.sources, "nvml": lost}) if 3 <= t < 43 else s
                  for t, s in enumerate(window)]
        analysis = Analysis(check_config_text(SERVER + "\nanalysis:\n  hold: 20s\n", "c.yaml"))
        became = None
        for i in range(1, len(window) + 1):
            _, f = analysis(window[:i])
            gpu = {g.index: g for g in f.gpu_findings}.get(0)
            if i - 1 == 43:
                assert gpu is not None and gpu.verdict.candidate == "gpu_power", "the cap shows again at once"
            if gpu is not None and gpu.verdict.primary == "gpu_power" and became is None:
                became = i - 1
        assert became == 63, f"gpu_power became primary at t={became}, expected 43 + 20 s hold"

    def test_through_the_analysis_a_noisy_gpu_does_not_flap(self):
        window = build_window(Host(), [Gpu(util=0.99)], seconds=40)
        # every third second the GPU looks starved by a busy CPU: never holds for 20 s
        noisy = []
        for i, s in enumerate(window):
            if i % 3 == 0 and i > 0:
                host = Host(cpu_busy=0.99, psi={"cpu.some": 0.6})
                s = build_window(host, [Gpu(util=0.1)], seconds=i + 1)[-1]
            noisy.append(s)
        config = check_config_text(SERVER, "c.yaml")
        analysis = Analysis(config)
        changes = []
        for i in range(1, len(noisy) + 1):
            _, f = analysis(noisy[:i])
            changes += f.changes
        assert all(c.after != "cpu" for c in changes), changes


def test_docs_analysis_lists_every_threshold_with_its_default():
    from pathlib import Path

    from headroom.analysis.bottleneck import thresholds_markdown

    doc = (Path(__file__).resolve().parent.parent / "docs" / "analysis.md").read_text()
    assert thresholds_markdown() in doc, "docs/analysis.md thresholds table is stale: python -m headroom.analysis.bottleneck"


# ------------------------------------------------------------------------------ counters that reset
def _with(sample, name, data):
    return replace(sample, sources={**sample.sources, name: SourceResult(name, True, 0.001, data)})


def _disk(io_time: float) -> DiskSample:
    return DiskSample(devices=(DiskStats("nvme0n1", 0, 0, 0, 0, io_time_seconds=io_time,
                                         weighted_io_time_seconds=0.1, in_flight=0),))


def test_a_disk_counter_reset_loses_only_the_interval_it_fell_in():
    """io_time_seconds restarts from 0 when a device is re-attached (or a counter wraps): the interval it went
    down in is left out and the rest of the window still gives the rate; never a negative or diluted one."""
    from headroom.analysis.signals import host_signals

    window = build_window(Host(disk_busy=0.9), [Gpu()], seconds=10)
    assert host_signals(window, 15.0).disk_busy == pytest.approx(0.9)
    # re-attached at t=6: the counter restarts near 0 and grows at the same 0.9 s/s
    window = [_with(s, "disk", _disk(0.1 + 0.9 * (t - 6))) if t >= 6 else s for t, s in enumerate(window)]
    assert host_signals(window, 15.0).disk_busy == pytest.approx(0.9)
    # reset in the newest interval: the older intervals still count
    window = build_window(Host(disk_busy=0.9), [Gpu()], seconds=10)
    window[-1] = _with(window[-1], "disk", _disk(0.5))
    assert host_signals(window, 15.0).disk_busy == pytest.approx(0.9)
    # nothing but a reset: no rate
    assert host_signals(window[-2:], 15.0).disk_busy is None


def test_a_workload_process_that_exits_does_not_make_its_cpu_rate_negative_or_diluted():
    """A workload's CPU seconds are a sum over its processes: one exiting makes the sum drop once."""
    from headroom.analysis.signals import workload_signals

    profile = SimpleNamespace(name="trainer", dataloader_workers=None)
    window = build_window(Host(), [Gpu()], seconds=10, extra=processes_source("trainer", 3.0))
    assert workload_signals(window, 15.0, None, profile, 16).cores_used == pytest.approx(3.0)
    # at t=5 a worker that had used 12 CPU seconds exits; the rest go on at 3 cores
    after = build_window(Host(), [Gpu()], seconds=10, extra=lambda t: processes_source("trainer", 3.0)(t - 4))
    window = [replace(s, sources={**s.sources, "processes": after[t].sources["processes"]}) if t >= 5 else s
              for t, s in enumerate(window)]
    assert workload_signals(window, 15.0, None, profile, 16).cores_used == pytest.approx(3.0)


@pytest.mark.parametrize(("short_window", "expected"), [("4s", 1.0), ("16s", 0.5), ("10s", 0.8)])
def test_cpu_utilization_ratio_covers_the_analysis_short_window(short_window, expected):
    """headroom_cpu_utilization_ratio's HELP says the analysis short window: 8 CPUs idle for 22 s, then busy for 8 s."""
    window = []
    busy = 0.0
    for t in range(31):
        if t > 22:
            busy += 8
        idle = 8 * t - busy
        cpu = CpuSample(times=CpuTimes(user=busy, nice=0.0, system=0.0, idle=idle, iowait=0.0), logical_cpus=8,
                        load1=1, load5=1, load15=1)
        window.append(Sample(timestamp=1e9 + t, monotonic=float(t),
                             sources={"cpu": SourceResult("cpu", True, 0.001, cpu)}))
    config = check_config_text(f"analysis:\n  short_window: {short_window}\n", "c.yaml")
    derived, _ = Analysis(config)(window)
    assert derived["cpu_utilization_ratio"] == pytest.approx(expected)


@pytest.mark.parametrize(("setting", "currency"), [("", "USD"), ("  currency: EUR\n", "EUR")])
def test_idle_cost_carries_its_currency_into_the_exposition(setting, currency):
    from headroom.exposition.render import Writer, _render_findings

    window = build_window(Host(), [Gpu(util=0.0), Gpu(util=0.9)], seconds=11)
    findings = analyse("", window, analysis="  cost_per_gpu_hour: 3.6\n" + setting)
    w = Writer()
    _render_findings(w, findings)
    assert f'headroom_gpu_idle_cost_total{{currency="{currency}"}} 0.01\n' in w.render().decode()


@pytest.mark.parametrize("bad", ["usd", "EURO", "$", "1"])
def test_currency_must_be_an_iso_code(bad):
    from headroom.config import ConfigError

    with pytest.raises(ConfigError, match="ISO 4217"):
        check_config_text(f"analysis:\n  currency: '{bad}'\n", "c.yaml")
