"""Bottleneck analysis, table-driven: each case is a situation a user meets, built as a window of Samples.

Each case asserts the primary bottleneck and that the unrelated scores stay low, through the same
Analysis object the agent runs every tick (hold 0 here so the primary follows the candidate at once;
hysteresis has its own tests below).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from types import SimpleNamespace

import pytest

from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, RESOURCES, Hysteresis, rule_cpu
from headroom.analysis.pipeline import Analysis
from headroom.analysis.signals import HostSignals, WorkloadSignals
from headroom.config import check_config_text
from headroom.samples import (
    CpuSample,
    CpuTimes,
    DiskSample,
    DiskStats,
    Sample,
    SourceResult,
)

from situations import (  # noqa: F401 (re-exported for the other analysis tests)
    ALL,
    DISTRIBUTED,
    GIB,
    SERVER,
    TRAINER,
    Gpu,
    Host,
    analyse,
    build_window,
    pressure,
    processes_source,
)


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_situations(case):
    assert case.source, f"situation {case.name!r} cites no real-world report (source=)"
    findings = analyse(case.config, case.window(), gpus_of=case.gpus_of)
    by_name = {wf.name: wf for wf in findings.workload_findings}
    for workload, expected in case.expectations().items():
        if workload == "*":
            (wf,) = findings.workload_findings
        else:
            wf = by_name[workload]
        assert wf.verdict.primary == expected, (wf.name, wf.verdict.scores, wf.verdict.evidence)
        for resource in RESOURCES:
            if resource != expected and resource not in case.ties:
                assert wf.verdict.scores[resource] < 0.5, (wf.name, resource, wf.verdict.scores,
                                                           wf.verdict.evidence[resource])
        if expected != "none":
            assert wf.verdict.scores[expected] >= 0.5
            assert wf.verdict.evidence[expected]
        text = (case.evidence or {}).get(workload)
        if text is not None:
            assert text in wf.verdict.evidence[expected if expected != "none" else "none"], wf.verdict.evidence
    gpus = {g.index: g for g in findings.gpu_findings}
    for index, expected in (case.gpu_expected or {}).items():
        assert gpus[index].verdict.primary == expected, (index, gpus[index].verdict.scores, gpus[index].verdict.evidence)


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
                          extra=processes_source("trainer", 3.97, per_process={500: 0.05, 501: 0.98, 502: 0.98,
                                                                               503: 0.98, 504: 0.98},
                                                 main_pid=500, ranks={500: (501, 502, 503, 504)}))
    (wf,) = analyse(TRAINER, window).workload_findings
    text = wf.verdict.evidence["cpu"]
    assert "GPU 0 busy 31 %" in text
    # what is counted is said (issue 29): every process of the workload against what it may use, and the workers
    # found under the rank (issue 25) against the cores they can use, their own cores, not the main process's
    assert "the workload's 5 processes used 3.97 cores, of the 16 it may use (cgroup quota or CPU affinity, else logical CPUs)" in text
    assert ("its main process (pid 500)'s 4 DataLoader workers used 3.92 of the 4 cores they can use (one each): they "
            "cannot keep up") in text
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
            from headroom.workload import sizing
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


def test_the_long_window_is_thinned_evenly_keeping_both_ends_and_counter_rates():
    """Long-window scores come from at most LONG_POINTS samples (window.thinned): both ends kept, evenly
    spaced back from the newest, so counter rates over the long window are those of every sample."""
    from headroom.analysis.pipeline import LONG_POINTS
    from headroom.analysis.signals import host_signals
    from headroom.analysis.window import thinned

    window = build_window(Host(disk_busy=0.37), [Gpu()], seconds=300)  # 301 samples, 1 s apart
    kept = thinned(window, 300.0, LONG_POINTS)
    assert 2 <= len(kept) <= LONG_POINTS and kept[0] is window[0] and kept[-1] is window[-1]
    gaps = {round(b.monotonic - a.monotonic, 6) for a, b in pairwise(kept)}
    assert len(gaps) <= 2 and max(gaps) - min(gaps) <= max(gaps) / 2  # even: at most the oldest gap shorter
    assert host_signals(kept, 300.0).disk_busy == pytest.approx(host_signals(window, 300.0).disk_busy)
    assert host_signals(kept, 300.0).cpu_busy == pytest.approx(host_signals(window, 300.0).cpu_busy)
    short = window[-40:]
    assert thinned(short, 300.0, LONG_POINTS) == short  # fewer samples than points: all of them
    assert thinned(window, 20.0, LONG_POINTS) == window[-21:]  # only the samples within the span


def test_long_scores_are_refreshed_from_the_thinned_long_window(monkeypatch):
    """The refresh reads the thinned long window (at most LONG_POINTS samples), the short scores every sample
    of the short window; and the long disk score is the one every sample gives (rates keep both ends)."""
    from headroom.analysis import pipeline, signals
    from headroom.analysis import window as window_module

    seen = []
    real = signals.host_signals
    monkeypatch.setattr(pipeline.signals, "host_signals", lambda w, s: seen.append((len(w), s)) or real(w, s))
    window = build_window(Host(disk_busy=0.97, iowait=0.2), [Gpu(util=0.3)], seconds=300)  # starved, disk busy
    _, findings = Analysis(check_config_text(SERVER, "c.yaml"))(window)
    assert seen == [(len(window), 15.0), (len(window_module.thinned(window, 300.0, pipeline.LONG_POINTS)), 300.0)]
    assert seen[1][0] <= pipeline.LONG_POINTS < len(window)
    (gpu,) = findings.gpu_findings
    every = bottleneck_score_gpu_long(window)
    assert every["disk_io"] > 0.5 and gpu.verdict.long_scores["disk_io"] == pytest.approx(every["disk_io"])


def test_short_and_long_verdicts_each_read_their_own_window_of_the_host():
    """The host's side of the starvation rules is worked out once per window (bottleneck.host_view) and shared by
    every GPU and workload: the short verdicts read the short window's host, the long ones the long window's. A
    disk busy only in the last 15 s makes disk_io the short verdict of a starved GPU and its workload, not the
    long one (and the evidence says which)."""
    from headroom.analysis import bottleneck, signals

    window = build_window(Host(disk_busy=0.0), [Gpu(util=0.3)], seconds=300)
    window = [_with(s, "disk", _disk(max(0.0, t - 284.0))) if t >= 285 else s for t, s in enumerate(window)]
    analysis = Analysis(check_config_text(TRAINER, "c.yaml"))
    analysis._attribute = lambda sample: (SimpleNamespace(name="trainer", gpu_indices=(0,), processes=1, estimate=None,
                                                          expected_peak_bytes=None),)
    _, findings = analysis(window)  # a first tick: short and long scores alike
    (gpu,) = findings.gpu_findings
    (workload,) = findings.workload_findings
    for verdict in (gpu.verdict, workload.verdict):
        assert verdict.scores["disk_io"] > 0.5 and "nvme0n1 busy 100 %" in verdict.evidence["disk_io"]
        assert verdict.long_scores["disk_io"] < 0.1
    (g,) = signals.gpu_signals(window, 15.0)
    alone = bottleneck.score_gpu(g, signals.host_signals(window, 15.0), bottleneck.DEFAULT_THRESHOLDS)
    assert (gpu.verdict.scores, gpu.verdict.evidence) == (alone.scores, alone.evidence)


def test_a_gpus_own_rules_run_once_per_signals_object_and_are_never_another_gpus():
    """bottleneck.GpuRules: the rules that read one GPU's signals alone run once per GpuSignals object in a tick
    and are shared by its verdict and its workloads'; another object (another GPU, a MIG slice's signals, a GPU
    made at an address an earlier one freed) gets its own results, and other thresholds their own rules."""
    from headroom.analysis import bottleneck
    from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals

    t = bottleneck.DEFAULT_THRESHOLDS
    rules = bottleneck.GpuRules(t)
    hot = GpuSignals(index=0, uuid="GPU-0", name="H100", up=True, busy=0.97, thermal_share=0.6,
                     temperature_celsius=90.0, thermal_limit_celsius=87.0, sm_clock_ratio=0.7)
    assert rules(hot) is rules(hot)
    for name, rule in bottleneck.GPU_OWN_RULES:
        assert rules(hot)[name] == rule(hot, t)
    for i in range(50):  # each one dropped after use: CPython hands its memory to the next
        g = GpuSignals(index=1, uuid="GPU-1", name="H100", up=True, busy=i / 50)
        assert rules(g)["gpu_compute"] == bottleneck.rule_gpu_compute(g, t)
    w = WorkloadSignals(name="trainer", gpus=(0,))
    trainer = SimpleNamespace(name="trainer", kind="training", runtime=None, dataloader_workers=None, parallel=None)
    strict = {**t, "compute_busy_high": 0.99}
    for thresholds in (t, strict):  # rules made for other thresholds are not used
        alone = bottleneck.score_workload(trainer, w, [hot], HostSignals(), thresholds)
        shared = bottleneck.score_workload(trainer, w, [hot], HostSignals(), thresholds, rules=rules)
        assert (shared.scores, shared.evidence) == (alone.scores, alone.evidence)
    assert bottleneck.score_workload(trainer, w, [hot], HostSignals(), strict, rules=rules).scores["gpu_compute"] != \
        bottleneck.score_workload(trainer, w, [hot], HostSignals(), t, rules=rules).scores["gpu_compute"]


def bottleneck_score_gpu_long(window):
    """The GPU's long-window scores from every sample of the long window (no thinning)."""
    from headroom.analysis import bottleneck, signals

    (g,) = signals.gpu_signals(window, 300.0)
    return bottleneck.score_gpu(g, signals.host_signals(window, 300.0), bottleneck.DEFAULT_THRESHOLDS).scores


# --------------------------------------------------------------------------- headroom, figure by figure
def _headroom(kind="inference", vllm=False, estimate=None, gpus=(), host=None, w=None):
    from headroom.analysis.headroom import workload_headroom
    from headroom.analysis.signals import GpuSignals, HostSignals, WorkloadSignals

    profile = SimpleNamespace(kind=kind, runtime=SimpleNamespace(is_vllm=vllm))
    gpus = [GpuSignals(index=i, uuid=f"GPU-{i}", name="H100", up=True, **g) for i, g in enumerate(gpus)]
    return workload_headroom(profile, w or WorkloadSignals(name="w"), gpus, host or HostSignals(), estimate, 87.0)


def test_headroom_from_measured_free_vram_rounds_down_on_the_tightest_gpu():
    est = SimpleNamespace(kv_bytes_per_token=1000, context=100, concurrency=3,
                          max_concurrency_at_max_context=None, max_context_at_concurrency=None)
    gpus = [dict(memory_total_bytes=1_000_000, memory_used_bytes=450_001),  # 549 999 free: the tightest
            dict(memory_total_bytes=1_000_000, memory_used_bytes=100_000),
            dict(memory_total_bytes=None, memory_used_bytes=5)]  # unknown: not counted
    h = _headroom(estimate=est, gpus=gpus)
    assert h.gpu_memory_bytes == 549_999 + 900_000
    assert h.sequences == 5 and isinstance(h.sequences, int)  # 549 999 // (1000 * 100)
    assert h.context_tokens == 183 and isinstance(h.context_tokens, int)  # 549 999 // (1000 * 3)
    assert h.basis == "free_vram"
    assert _headroom(kind="training", estimate=est, gpus=gpus).sequences is None


def test_headroom_for_vllm_comes_from_the_memory_model_not_nvml():
    """vLLM reserves its KV pool up front: NVML shows it full, so room comes from the model's budget."""
    est = SimpleNamespace(kv_bytes_per_token=1000, context=8192, concurrency=8,
                          max_concurrency_at_max_context=20, max_context_at_concurrency=12_000)
    full = [dict(memory_total_bytes=1_000_000, memory_used_bytes=990_000)]
    h = _headroom(vllm=True, estimate=est, gpus=full)
    assert (h.sequences, h.context_tokens) == (12, 3808)
    assert h.basis == "memory_model"
    est.max_context_at_concurrency = None
    assert _headroom(vllm=True, estimate=est, gpus=full).context_tokens is None
    assert _headroom(vllm=False, estimate=est, gpus=full).basis == "free_vram"


def test_headroom_cpu_host_memory_shared_memory_power_and_thermal():
    from headroom.analysis.signals import HostSignals, WorkloadSignals

    host = HostSignals(logical_cpus=16, cpu_busy=0.5, cpu_iowait=0.1, memory_available_bytes=7 * GIB,
                       shm_available_bytes=3 * GIB)
    # 16 x (1 - 0.5 - 0.1) = 6.4 idle cores on the host; the workload may use 4 and uses 1.23456
    w = WorkloadSignals(name="w", cores_used=1.23456, cores_allowed=4.0)
    gpus = [dict(power_watts=500.0, power_limit_watts=700.0, temperature_celsius=80.0),
            dict(power_watts=100.0, power_limit_watts=300.0, temperature_celsius=60.0),
            dict(power_watts=None, power_limit_watts=300.0, temperature_celsius=None)]
    h = _headroom(gpus=gpus, host=host, w=w)
    assert h.cpu_cores == 2.765  # its quota left, rounded to 3 places, below the host's idle 6.4
    assert _headroom(host=host).cpu_cores == 6.4  # no quota: the host's idle cores
    assert _headroom(host=host, w=WorkloadSignals(name="w", cores_used=9.0, cores_allowed=4.0)).cpu_cores == 0.0
    assert (h.host_memory_bytes, h.shared_memory_bytes) == (7 * GIB, 3 * GIB)
    assert h.power_watts == 400.0  # 200 + 200 W; the GPU without a reading is left out
    assert h.thermal_celsius == 7.0  # 87 - the hottest GPU (80)
    assert _headroom().cpu_cores is None and _headroom().power_watts is None


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
    from headroom.exposition.render import Writer
    from headroom.exposition.render.findings import _render_findings  # private: no public name

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


def test_vram_reserved_by_vllm_does_not_score_gpu_memory():
    """vLLM holds ~90 % of the card from the start: NVML's figure says nothing about its KV cache."""
    from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, Reserved, rule_gpu_memory
    from headroom.analysis.signals import GpuSignals

    g = GpuSignals(index=0, uuid="GPU-0", name="H100", up=True, busy=0.9, memory_used_bytes=99,
                   memory_total_bytes=100, memory_used_ratio=0.99)
    assert rule_gpu_memory(g, DEFAULT_THRESHOLDS)[0] == 1.0
    reserved = Reserved("vLLM", "gpu_memory_utilization, default 0.9", "that share of the card", "its profile")
    score, evidence = rule_gpu_memory(g, DEFAULT_THRESHOLDS, reserved=reserved)
    assert score == 0.0 and "reserved up front by vLLM (found from its profile" in evidence


def test_idle_gpu_time_follows_the_sample_interval_below_a_second():
    """Idle GPU-seconds add each tick's real length: 40 ticks 250 ms apart are 9.75 s, not 39."""
    window = [replace(s, monotonic=s.monotonic / 4) for s in build_window(Host(), [Gpu(util=0.0)], seconds=40)]
    findings = analyse("", window)
    assert findings.host.gpu_idle_seconds_total == pytest.approx(39 * 0.25)


def test_a_primary_change_is_recorded_once_with_before_after_and_evidence():
    """The bottleneck_changed log event and the record: what it was, what it is, and why."""
    window = build_window(Host(), [Gpu(util=0.97, power=700, reasons=("sw_power_cap",))], seconds=30)
    analysis = Analysis(check_config_text(SERVER + "\nanalysis:\n  hold: 5s\n", "c.yaml"))
    changes = []
    for i in range(1, len(window) + 1):
        _, f = analysis(window[:i])
        changes += [(c.entity, c.name, c.before, c.after, c.evidence) for c in f.changes]
    assert [c[:4] for c in changes] == [("gpu", "0", "none", "gpu_power"), ("workload", "chat", "none", "gpu_power")]
    assert all("power cap active 100 % of the window" in c[4] for c in changes), changes


def test_a_gpu_that_is_down_scores_nothing_and_says_so():
    from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, RESOURCES, score_gpu
    from headroom.analysis.signals import GpuSignals, HostSignals

    v = score_gpu(GpuSignals(index=3, uuid="GPU-3", name="H100", up=False), HostSignals(cpu_busy=1.0),
                  DEFAULT_THRESHOLDS)
    assert v.scores == dict.fromkeys(RESOURCES, 0.0) and v.candidate == "none"
    assert set(v.evidence.values()) == {"GPU 3 is down"}


# ------------------------------------------------------------------------ ties and stragglers (issue 12)
@pytest.mark.parametrize(("scores", "direct", "expected"), [
    ({"cpu": 1.0, "host_memory": 1.0}, set(), "host_memory"),  # the cause, though cpu is listed first
    ({"cpu": 1.0, "host_memory": 0.96}, {"cpu"}, "host_memory"),  # a cause within tie_margin beats direct evidence
    ({"disk_io": 1.0, "host_memory": 1.0}, {"disk_io"}, "host_memory"),
    ({"gpu_compute": 1.0, "gpu_power": 0.97}, {"gpu_compute", "gpu_power"}, "gpu_power"),
    ({"cpu": 1.0, "shared_memory": 1.0}, {"shared_memory"}, "shared_memory"),  # cpu is listed first
    ({"cpu": 1.0, "shared_memory": 1.0}, {"cpu"}, "cpu"),
    ({"cpu": 1.0, "shared_memory": 0.9}, {"shared_memory"}, "cpu"),  # outside tie_margin: the score decides
])
def test_ties_are_decided_by_causal_evidence_not_list_order(scores, direct, expected):
    from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, decide

    candidate, why = decide(scores, DEFAULT_THRESHOLDS, direct)
    assert candidate == expected, why
    assert bool(why) == (scores.get("shared_memory") != 0.9), why  # a decided tie says how


def test_the_straggler_is_the_rank_throttled_clearly_more_than_the_others():
    from headroom.analysis.bottleneck import DEFAULT_THRESHOLDS, straggler
    from headroom.analysis.signals import GpuSignals

    def g(i, **kw):
        return GpuSignals(index=i, uuid=f"GPU-{i}", name="H100", up=True, busy=0.97, **{"sm_clock_ratio": 0.98, **kw})

    t = DEFAULT_THRESHOLDS
    assert straggler([g(0), g(1, thermal_share=0.8), g(2)], t).index == 1
    assert straggler([g(0, power_cap_share=1.0), g(1, power_cap_share=1.0)], t) is None  # all alike: none
    assert straggler([g(0, power_cap_share=0.5), g(1, power_cap_share=0.4)], t) is None  # not clearly more
    assert straggler([g(0), g(1), g(2, sm_clock_ratio=0.8)], t).index == 2  # clocks 18 points below the others
    assert straggler([g(0), g(1, sm_clock_ratio=0.92)], t) is None
    assert straggler([g(0, thermal_share=1.0)], t) is None  # one GPU: nothing waits for it


def test_an_idle_gpu_says_why_nothing_limits_it_in_the_status():
    """Per-GPU verdicts carry the sentence for none too (status API and landing page), not only workloads'."""
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    from headroom.exposition.status_api import _verdict

    window = build_window(Host(cpu_busy=0.99, psi={"cpu.some": 0.6}), [Gpu(util=0.0), Gpu(util=0.3)])
    findings = analyse("", window)
    idle, busy = (_verdict(g.verdict) for g in findings.gpu_findings)
    assert idle["primary_bottleneck"] == "none"
    assert idle["evidence"]["none"].startswith("GPU 0 busy 0 % (below 5 %): idle for lack of work")
    assert "not limiting" in idle["evidence"]["cpu"]
    assert busy["primary_bottleneck"] == "cpu" and "none" not in busy["evidence"]  # 30 %: starved, host saturated


def test_a_workload_on_a_mig_slice_gets_the_slice_s_vram_headroom_not_the_gpu_s():
    """MIG partitions memory: a workload on a 1g.10gb slice can grow into its slice's free memory only, however
    empty the other slices are (situations/mig.py has the verdict; this is the headroom figure)."""
    from situations import analyse, build_window
    from situations.mig import SLICE, SLICE_SERVER, _a100

    findings = analyse(SLICE_SERVER, build_window(Host(), [_a100(own_used=3 * GIB, others_used=0.5 * GIB)]))
    (status,) = findings.workloads
    (w,) = findings.workload_findings
    assert status.gpus[0].mig_instances == ("MIG-a",) and status.gpus[0].memory_total_bytes == SLICE
    est = status.estimate
    assert est is not None and est.kv_bytes_per_token
    assert w.headroom.sequences == (SLICE - 3 * GIB) // (est.kv_bytes_per_token * est.context)
    assert w.headroom.gpu_memory_bytes == SLICE - 3 * GIB
    assert "MIG instance MIG-a" in w.verdict.evidence["gpu_memory"]


# ------------------------------------------------------------------- ranks and DataLoader workers, measured
def _ranked(cores_by_pid: dict[int, float], ranks: dict[int, tuple[int, ...]], main_pid: int = 7000):
    return processes_source("trainer", sum(cores_by_pid.values()), io=0.0, per_process=cores_by_pid,
                            main_pid=main_pid, ranks=ranks)


def test_a_torchrun_rank_pinned_at_one_core_with_0_workers_starves_its_gpu_though_the_total_looks_modest():
    """Issue 25: the profile declares 4 workers, 0 run; rank 7001's own process sits at a full core while the tree's
    total (1.3 cores of 64) looks modest and the busiest process is no 'main process' (torchrun is)."""
    window = build_window(Host(cpus=64, cpu_busy=0.03), [Gpu(util=0.3, util_alternates=0.02)],
                          extra=_ranked({7000: 0.02, 7001: 0.98, 7002: 0.3}, {7001: (), 7002: ()}))
    (wf,) = analyse(TRAINER, window).workload_findings
    text = wf.verdict.evidence["cpu"]
    assert wf.verdict.primary == "cpu", wf.verdict.scores
    assert "rank pid 7001 used 0.98 cores: one core saturated" in text and "with 0 DataLoader workers" in text
    assert "4 DataLoader workers" not in text  # the declared count is not quoted


def test_a_rank_whose_four_workers_keep_up_is_not_cpu_and_its_evidence_gives_their_own_cores():
    workers = (7010, 7011, 7012, 7013)
    window = build_window(Host(cpus=64, cpu_busy=0.05), [Gpu(util=0.3, util_alternates=0.02)],
                          extra=_ranked({7000: 0.02, 7001: 0.4, **dict.fromkeys(workers, 0.3)}, {7001: workers}))
    (wf,) = analyse(TRAINER, window).workload_findings
    assert wf.verdict.primary != "cpu" and wf.verdict.scores["cpu"] == 0.0
    assert "rank pid 7001's 4 DataLoader workers used 1.20 of the 4 cores they can use (one each)" in \
        wf.verdict.evidence["cpu"]


def test_the_worst_of_several_ranks_speaks_with_its_own_worker_count():
    window = build_window(Host(cpus=64, cpu_busy=0.05), [Gpu(util=0.3, util_alternates=0.02)],
                          extra=_ranked({7001: 0.3, 7010: 0.99, 7002: 0.3, 7020: 0.2}, {7001: (7010,), 7002: (7020,)}))
    (wf,) = analyse(TRAINER, window).workload_findings
    assert wf.verdict.primary == "cpu"
    assert ("rank pid 7001's 1 DataLoader worker used 0.99 of the 1 core it can use: it cannot keep up (the worst "
            "of 2 ranks)") in wf.verdict.evidence["cpu"]
    assert "1 DataLoader worker (rank pid 7001) cannot keep up: raise `num_workers`" in wf.verdict.remedies["cpu"].text


def test_a_full_shm_counts_before_starvation_only_where_workers_run_not_where_they_are_declared():
    """The profile declares 4 workers; the tree shows 0: a full /dev/shm no worker uses does not limit a busy GPU."""
    host = Host(cpus=64, cpu_busy=0.05, shm_used=int(63.9 * GIB))
    none_run = build_window(host, [Gpu(util=0.9)], extra=_ranked({7001: 0.3}, {7001: ()}, main_pid=7001))
    four_run = build_window(host, [Gpu(util=0.9)], extra=_ranked(
        {7001: 0.3, 7010: 0.2, 7011: 0.2, 7012: 0.2, 7013: 0.2}, {7001: (7010, 7011, 7012, 7013)}, main_pid=7001))
    (idle,) = analyse(TRAINER, none_run).workload_findings
    (busy,) = analyse(TRAINER, four_run).workload_findings
    assert idle.verdict.scores["shared_memory"] < 0.3 < busy.verdict.scores["shared_memory"]
    assert "while 4 DataLoader workers run under its ranks" in busy.verdict.evidence["shared_memory"]


def test_status_and_landing_page_report_a_declared_worker_count_that_disagrees_with_the_tree():
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    from headroom.exposition.landing import _workload_card

    # private: the status API's entry of one workload; status() needs a whole agent's state
    from headroom.exposition.status_api import _workload_status

    window = build_window(Host(cpus=64, cpu_busy=0.03), [Gpu(util=0.3)],
                          extra=_ranked({7000: 0.02, 7001: 0.5, 7002: 0.5}, {7001: (), 7002: ()}))
    findings = analyse(TRAINER, window)
    (wf,), (st,) = findings.workload_findings, findings.workloads
    status = _workload_status(wf, st)
    assert status["measured"]["dataloader_workers"] == 0
    assert status["measured"]["ranks"] == {"7001": [], "7002": []}
    assert status["declared"] == {"dataloader_workers": 4}
    problem = ("the profile declares dataloader_workers 4 (per rank) but 0 run under its 2 ranks (pid 7001 0, "
               "pid 7002 0); the measured count is used")
    assert status["problems"] == [problem]
    assert f"<p class=warn>{problem}</p>" in _workload_card(status)


# ------------------------------------------------------------- issue 26, class 2: oversubscribed CPUs
def _waiting(share: float, runnable: float = 8.0, cores_used: float = 12.0, cores_allowed: float = 16.0,
             threads: int | None = 289) -> WorkloadSignals:
    return WorkloadSignals(name="trainer", processes=17, cores_used=cores_used, cores_allowed=cores_allowed,
                           threads=threads, cpu_wait_share=share, runnable_main_threads=runnable)


def test_threads_waiting_for_cpus_no_thread_saturated_score_cpu_with_threads_per_core_and_run_queue():
    """16 workers' thread pools on 16 cores: 12 cores used (not all), no process at a core, no PSI; the main threads
    waited 70 % of their runnable time. cpu, on direct evidence that names the threads, the cores and the run queue."""
    host = HostSignals(logical_cpus=16, cpu_busy=0.78, run_queue=44.0)
    result = rule_cpu(1.0, "GPU 0 busy 23 %", host, _waiting(0.7), DEFAULT_THRESHOLDS)
    score, text = result
    assert score == 1.0 and result.direct  # the workload's own stall, not a host-wide correlation (ties)
    assert ("its processes' main threads waited 70 % of their runnable time for a CPU: ≈ 40 runnable threads on the "
            "16 cores it may use (2.5 per core, of its 289 threads): its own threads outnumber its cores") in text
    assert "run queue 44 on 16 CPUs" in text


def test_a_busy_trainer_whose_threads_do_not_wait_is_not_oversubscribed():
    """Many threads busy on nearly every core, run queue below the cores, 3 % waits: no cpu score from the threads,
    and the host's busy CPUs (its own work) count only in proportion to that wait."""
    host = HostSignals(logical_cpus=16, cpu_busy=0.9, run_queue=15.0, psi={"cpu.some": 0.12})
    score, text = rule_cpu(1.0, "GPU 0 busy 60 %", host, _waiting(0.03, cores_used=12.0), DEFAULT_THRESHOLDS)
    assert score < 0.1, text
    assert "waited 3 % of their runnable time" in text and "outnumber" not in text


def test_a_neighbour_filling_the_run_queue_is_not_the_bottleneck_of_a_workload_whose_threads_get_their_cpus():
    """The own-use rule, measured: the host saturated by another job (PSI 60 %, 4 runnable tasks per CPU) counts for
    a workload using 2 cores only as much as its own threads wait (2 %)."""
    host = HostSignals(logical_cpus=32, cpu_busy=0.95, run_queue=128.0, psi={"cpu.some": 0.6})
    lean = _waiting(0.02, runnable=1.5, cores_used=2.0, cores_allowed=32.0, threads=40)
    score, text = rule_cpu(1.0, "GPU 0 busy 30 %", host, lean, DEFAULT_THRESHOLDS)
    assert score == pytest.approx(0.1) and "host-wide CPU counts 10 %: its threads waited only 2 % for a CPU" in text
    unmeasured = replace(lean, cpu_wait_share=None, runnable_main_threads=None)  # no schedstat: the host counts in full
    assert rule_cpu(1.0, "GPU 0 busy 30 %", host, unmeasured, DEFAULT_THRESHOLDS)[0] == 1.0


def test_waits_of_threads_that_are_mostly_asleep_are_not_judged():
    """300 threads asleep in idle pools: their main threads ran and waited 0.2 s a second together, too little to
    tell, however large the share."""
    sleepy = _waiting(0.6, runnable=0.2, cores_used=0.3, threads=300)
    score, text = rule_cpu(1.0, "GPU 0 busy 20 %", HostSignals(logical_cpus=32), sleepy, DEFAULT_THRESHOLDS)
    assert score == 0.0 and "waited" not in text


def test_an_oversubscribed_workload_is_told_to_cap_its_thread_pools_not_to_add_workers():
    case = next(c for c in ALL if c.name.startswith("OMP_NUM_THREADS unset in 16 DataLoader workers"))
    (wf,) = analyse(case.config, case.window()).workload_findings
    remedy = wf.verdict.remedies["cpu"].text
    assert wf.verdict.primary == "cpu"
    assert "`OMP_NUM_THREADS`" in remedy and "TOKENIZERS_PARALLELISM=false" in remedy
    assert "raise `num_workers`" not in remedy


def test_a_workload_that_waits_behind_other_processes_threads_counts_in_proportion_to_its_own_use():
    """Its threads wait 80 % of their runnable time, but its own runnable threads (≈ 1) do not outnumber its 2 cores:
    neighbours' threads make it wait, which counts as host-wide CPU does, by its own use (0.1 cores of own_cpu_cores)."""
    tiny = _waiting(0.8, runnable=0.6, cores_used=0.1, cores_allowed=2.0, threads=12)
    score, text = rule_cpu(1.0, "GPU 0 busy 30 %", HostSignals(logical_cpus=2), tiny, DEFAULT_THRESHOLDS)
    assert score == pytest.approx(0.2)
    assert "other processes' threads take the CPUs (counts 20 %: the workload itself uses 0.10 cores)" in text
    own = _waiting(0.8, runnable=0.6, cores_used=1.0, cores_allowed=2.0, threads=40)  # ≈ 5 runnable on 2 cores
    assert rule_cpu(1.0, "GPU 0 busy 30 %", HostSignals(logical_cpus=2), own, DEFAULT_THRESHOLDS)[0] == 1.0
