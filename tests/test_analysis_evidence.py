"""Issue 12, classes 5, 7 and 9: clock-event reasons as distinct causes judged against the GPU's own limits,
VRAM trends that must be sustained, and wording (plural, throttled share, per-GPU power margin, embedding).

Each test builds the window a user's host would give (situations.build_window) and runs the same Analysis
the agent runs; the evidence sentences are what /api/v1/status and the landing page show."""

from __future__ import annotations

import math

import pytest

from headroom.analysis.bottleneck import (
    DEFAULT_THRESHOLDS,
    plural,
    rule_gpu_memory,
    rule_gpu_power,
    rule_gpu_thermal,
)
from headroom.analysis.signals import GpuSignals
from headroom.analysis.window import sustained_growth, trend

from situations import (
    GIB,
    SERVER,
    TRAINER,
    Gpu,
    Host,
    analyse,
    build_window,
    processes_source,
)

MIB = 2**20
H100_LIMITS = (87, 89, 92, 95)


def _workload(config, gpus, host=None, extra=None, seconds=20):
    (wf,) = analyse(config, build_window(host or Host(), gpus, seconds=seconds, extra=extra)).workload_findings
    return wf


# ------------------------------------------------------------------------- class 5: clock-event reasons
def test_hardware_slowdown_on_a_cool_gpu_is_power_and_the_evidence_says_why():
    wf = _workload(TRAINER, [Gpu(util=0.97, temperature=44, power=310, reasons=("hw_slowdown",), thresholds=H100_LIMITS)])
    assert wf.verdict.primary == "gpu_power"
    power = wf.verdict.evidence["gpu_power"]
    assert "hardware slowdown active 100 % of the window" in power
    assert "; the GPU is at 44 °C, 43 °C below its 87 °C max operating temperature" in power
    assert "a power problem, not heat" in power
    thermal = wf.verdict.evidence["gpu_thermal"]
    assert wf.verdict.scores["gpu_thermal"] == 0.0
    assert "slowed for heat 0 %" in thermal and "hardware slowdown" not in thermal


def test_hardware_slowdown_near_the_limit_is_heat_and_never_called_power():
    wf = _workload(TRAINER, [Gpu(util=0.97, temperature=88, reasons=("hw_slowdown",), thresholds=H100_LIMITS)])
    assert wf.verdict.primary == "gpu_thermal"
    assert "hardware slowdown active 100 %" in wf.verdict.evidence["gpu_thermal"]
    assert "at or over its 87 °C max operating temperature" in wf.verdict.evidence["gpu_thermal"]
    assert wf.verdict.scores["gpu_power"] == 0.0
    assert "power problem" not in wf.verdict.evidence["gpu_power"]


@pytest.mark.parametrize(("thresholds", "expected"), [
    ((83, 90, 95, None), "gpu_thermal"),  # this card's own limit is 83 degC: 80 is near it
    (None, "gpu_power"),  # no threshold from NVML: analysis.gpu_slowdown_celsius (87) decides, 80 is not near
])
def test_the_gpus_own_thermal_limit_decides_what_a_hardware_slowdown_is(thresholds, expected):
    wf = _workload(SERVER, [Gpu(util=0.97, temperature=80, reasons=("hw_slowdown",), thresholds=thresholds)])
    assert wf.verdict.primary == expected, wf.verdict.evidence


def test_a_configured_limit_stands_in_where_nvml_gives_none():
    window = build_window(Host(), [Gpu(util=0.97, temperature=80, reasons=("hw_slowdown",))])
    (wf,) = analyse(SERVER, window, analysis="  gpu_slowdown_celsius: 83\n").workload_findings
    assert wf.verdict.primary == "gpu_thermal"
    assert "83 °C slowdown temperature (analysis.gpu_slowdown_celsius)" in wf.verdict.evidence["gpu_thermal"]


def test_each_reason_is_reported_with_its_own_share():
    g = GpuSignals(index=2, uuid="GPU-2", name="H100", up=True, busy=0.95, power_cap_share=0.8, power_watts=700,
                   power_limit_watts=700, temperature_celsius=60, thermal_limit_celsius=87,
                   thermal_limit_source="max operating",
                   reason_shares={"sw_power_cap": 0.8, "hw_power_brake_slowdown": 0.3, "gpu_idle": 0.0})
    score, text = rule_gpu_power(g, DEFAULT_THRESHOLDS)
    assert score > 0.5
    assert text.startswith("GPU 2 slowed for power 80 % of the window (software power cap active 80 %, "
                           "hardware power brake active 30 %), drawing 700 of 700 W")
    assert "external power brake" in text


def test_thermal_reasons_on_a_cool_core_point_at_the_rest_of_the_board():
    """The sensor that tripped is not the core's: say so instead of 'thermal slowdown at 44 degC'."""
    wf = _workload(SERVER, [Gpu(util=0.96, temperature=44, reasons=("hw_thermal_slowdown",), thresholds=H100_LIMITS)])
    text = wf.verdict.evidence["gpu_thermal"]
    assert wf.verdict.primary == "gpu_thermal"
    assert "at 44 °C, 43 °C below its 87 °C max operating temperature" in text
    assert "the sensor that tripped is elsewhere on the board" in text


def test_hot_memory_is_named_in_the_thermal_evidence():
    wf = _workload(SERVER, [Gpu(util=0.96, temperature=62, memory_temperature=94, reasons=("hw_thermal_slowdown",),
                                thresholds=H100_LIMITS)])
    text = wf.verdict.evidence["gpu_thermal"]
    assert "memory at 94 °C (its limit 95 °C)" in text and "elsewhere on the board" not in text


def test_a_throttled_gpu_in_mig_mode_counts_as_working_by_its_power_draw():
    """MIG mode: NVML has no utilization for the GPU, so busy is unknown; the draw says it works."""
    g = dict(temperature=89, reasons=("hw_thermal_slowdown",), thresholds=H100_LIMITS, mig=True)
    assert _workload(SERVER, [Gpu(power=380, power_limit=400, **g)]).verdict.primary == "gpu_thermal"
    assert _workload(SERVER, [Gpu(power=60, power_limit=400, **g)]).verdict.primary == "none"  # idle
    compute = _workload(SERVER, [Gpu(power=60, power_limit=400, **g)]).verdict.evidence["gpu_compute"]
    assert compute.startswith("GPU 0 busy unknown (MIG mode: NVML reports no utilization for the GPU)")


def test_the_thermal_margin_uses_each_gpus_own_limit():
    """GPU 0 at 80 of its 83 degC limit has less room than GPU 1 at 84 of the configured 87."""
    config = SERVER.replace("gpus: [0]", "gpus: [0, 1]")
    wf = _workload(config, [Gpu(util=0.9, temperature=80, thresholds=(83, 90, 95, None)), Gpu(util=0.9, temperature=84)])
    assert wf.headroom.thermal_celsius == 3


# --------------------------------------------------------------------------------- class 7: VRAM trends
def test_a_least_squares_trend_of_a_straight_line_is_exact():
    slope, t_stat, r2 = trend([(t, 5.0 + 2.0 * t) for t in range(10)])
    assert (slope, t_stat, r2) == (2.0, math.inf, 1.0)
    assert trend([(1.0, 3.0)]) is None and trend([(1.0, 3.0), (1.0, 4.0)]) is None


@pytest.mark.parametrize(("points", "growth"), [
    ([(t, 10 * GIB + (64 * MIB if t % 2 else -64 * MIB)) for t in range(16)], 0.0),  # jitter: no growth
    ([(t, 10 * GIB + 40 * MIB * t + (16 * MIB if t % 2 else -16 * MIB)) for t in range(16)], pytest.approx(40 * MIB, rel=0.05)),
    ([(t, 10 * GIB + 0.5 * MIB * t) for t in range(16)], 0.0),  # steady but below 1 MiB/s
    ([(t, 10 * GIB + 40 * MIB * t) for t in range(4)], None),  # too few samples to tell
    ([(t, 10 * GIB + 40 * MIB * t + (64 * MIB if t % 2 else 0)) for t in range(300)],  # the long window,
     pytest.approx(40 * MIB, rel=0.01)),  # thinned to 60 points
    ([(t, 10 * GIB + (64 * MIB if t % 2 else -64 * MIB)) for t in range(301)], 0.0),
])
def test_growth_needs_a_sustained_significant_slope(points, growth):
    assert sustained_growth(points)[0] == growth


def test_jitter_on_a_nearly_full_gpu_does_not_score_gpu_memory():
    """92 % of an L4's 24 GiB with +-64 MiB of allocator jitter: the end points alone would read as
    8 MiB/s, full in 4 minutes; the fit reads no trend."""
    wf = _workload(SERVER, [Gpu(util=0.6, mem_total=24 * GIB, mem_used=int(0.92 * 24 * GIB), mem_jitter=64 * MIB)])
    assert wf.verdict.scores["gpu_memory"] < 0.5
    assert "growing" not in wf.verdict.evidence["gpu_memory"]


def test_a_sustained_leak_is_growth_and_the_evidence_says_how_steady():
    wf = _workload(TRAINER, [Gpu(util=0.7, mem_used=int(0.91 * 80 * GIB), mem_growth=40 * MIB, mem_jitter=16 * MIB)])
    assert wf.verdict.primary == "gpu_memory"
    assert "growing 40 MiB/s, a steady trend: R² 0.9" in wf.verdict.evidence["gpu_memory"]


def test_the_rule_reads_growth_the_signals_found():
    g = GpuSignals(index=0, uuid="GPU-0", name="H100", up=True, memory_used_bytes=91, memory_total_bytes=100,
                   memory_used_ratio=0.91, memory_growth_bytes_per_second=0.0)
    assert rule_gpu_memory(g, DEFAULT_THRESHOLDS)[0] == pytest.approx(0.125)


# ------------------------------------------------------------------------------------ class 9: wording
@pytest.mark.parametrize(("n", "word", "text"), [
    (1, "DataLoader worker", "1 DataLoader worker"), (4, "DataLoader worker", "4 DataLoader workers"),
    (1, "process", "1 process"), (3, "process", "3 processes"), (None, "process", "? processes"),
])
def test_plural(n, word, text):
    assert plural(n, word) == text


def test_one_dataloader_worker_is_singular_in_the_evidence():
    """The worker found under the rank, and its own cores (not the workload's total, its main process's too)."""
    config = TRAINER.replace("dataloader_workers: 4", "dataloader_workers: 1")
    wf = _workload(config, [Gpu(util=0.3)], host=Host(cpu_busy=0.1), extra=processes_source(
        "trainer", 1.04, per_process={500: 0.05, 501: 0.99}, main_pid=500, ranks={500: (501,)}))
    assert ("its main process (pid 500)'s 1 DataLoader worker used 0.99 of the 1 core it can use: it cannot keep up"
            ) in wf.verdict.evidence["cpu"]
    assert wf.verdict.primary == "cpu"


def test_compute_evidence_says_how_long_it_was_throttled_not_how_long_it_was_not():
    wf = _workload(SERVER, [Gpu(util=0.99, power=690, reasons=("sw_power_cap",), reasons_share=0.2)], seconds=10)
    text = wf.verdict.evidence["gpu_compute"]
    assert "throttled 20 % of the window" in text and "not throttled" not in text
    calm = _workload(SERVER, [Gpu(util=0.99)]).verdict.evidence["gpu_compute"]
    assert calm.endswith("not throttled")


def test_the_power_margin_is_given_per_gpu_beside_the_sum():
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    from headroom.exposition.landing import _power_margin
    from headroom.samples import to_jsonable

    config = SERVER.replace("gpus: [0]", "gpus: [0, 1]")
    wf = _workload(config, [Gpu(util=0.9, power=695, power_limit=700), Gpu(util=0.9, power=300, power_limit=700)])
    assert wf.headroom.power_watts == 405
    assert wf.headroom.power_watts_by_gpu == {0: 5, 1: 400}
    # per GPU first (issue 29): the card at its cap is read before the sum that hides it
    assert _power_margin(to_jsonable(wf.headroom)) == "GPU 0: 5 W, GPU 1: 400 W (405 W summed)"
    single = _workload(SERVER, [Gpu(util=0.9, power=600, power_limit=700)])
    assert _power_margin(to_jsonable(single.headroom)) == "100 W"


EMBEDDER = """
workloads:
  - name: embed
    kind: embedding
    params: 8B
    precision: bf16
    runtime: {name: tgi}
    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128}
    context: {max: 8192}
    concurrency: 8
    gpus: [0]
"""


def test_an_embedding_workload_expects_no_kv_cache_and_gets_no_sequence_headroom():
    """An encoder answers each request in one forward pass: no KV cache in its expected memory, and no
    'more sequences at max context', which only a KV cache bounds."""
    from headroom.analysis.headroom import workload_headroom
    from headroom.analysis.signals import HostSignals, WorkloadSignals
    from headroom.config import check_config_text
    from headroom.workload import sizing

    embed = check_config_text(EMBEDDER, "c.yaml").workloads[0]
    chat = check_config_text(EMBEDDER.replace("kind: embedding", "kind: inference"), "c.yaml").workloads[0]
    e, c = (sizing.estimate(p, gpu_memory_bytes=80 * GIB, gpus=1) for p in (embed, chat))
    assert e.component("kv_cache") == 0 < c.component("kv_cache")
    assert "kv_cache" not in {x.name for x in e.components if x.bytes}
    gpu = GpuSignals(index=0, uuid="GPU-0", name="H100", up=True, memory_total_bytes=80 * GIB,
                     memory_used_bytes=20 * GIB)
    room = workload_headroom(embed, WorkloadSignals(name="embed"), [gpu], HostSignals(), e, 87.0)
    assert room.sequences is None and room.context_tokens is None
    assert workload_headroom(chat, WorkloadSignals(name="chat"), [gpu], HostSignals(), c, 87.0).sequences > 0


def test_thermal_rule_without_reason_shares_still_reads_the_share():
    """Rules take GpuSignals built by hand too (tests, replay of older recordings): no reason_shares."""
    g = GpuSignals(index=0, uuid="GPU-0", name="H100", up=True, busy=1.0, thermal_share=1.0)
    score, text = rule_gpu_thermal(g, DEFAULT_THRESHOLDS)
    assert score == 1.0 and text == "GPU 0 slowed for heat 100 % of the window"


def test_the_status_api_gives_each_reasons_share_and_the_power_margin_per_gpu():
    """/api/v1/status: per GPU, every clock-event reason with its share of the window; per workload, the
    power margin per GPU beside the sum."""
    from types import SimpleNamespace

    from headroom.exposition.status_api import status

    config = SERVER.replace("gpus: [0]", "gpus: [0, 1]")
    window = build_window(Host(), [Gpu(util=0.97, temperature=44, power=310, reasons=("hw_slowdown",), thresholds=H100_LIMITS),
                                   Gpu(util=0.9, power=500)], seconds=10)
    findings = analyse(config, window)
    snap = SimpleNamespace(sample=window[-1], findings=findings, interval=1.0, scenario=None)
    doc = status(SimpleNamespace(snapshot=snap, healthy=lambda: (True, "ok")))
    g0, g1 = doc["gpus"]
    assert g0["clock_event_shares"]["hw_slowdown"] == 1.0 and g0["clock_event_shares"]["sw_power_cap"] == 0.0
    assert g0["primary_bottleneck"] == "gpu_power" and set(g1["clock_event_shares"].values()) == {0.0}
    assert g0["temperature_thresholds_celsius"] == {"max_operating": 87, "slowdown": 89, "shutdown": 92,
                                                    "memory_max_operating": 95}
    assert g1["temperature_thresholds_celsius"] == {}  # NVML gave none: the configured limit stands in
    (w,) = doc["workloads"]
    assert w["headroom"]["power_watts_by_gpu"] == {"0": 390.0, "1": 200.0} and w["headroom"]["power_watts"] == 590.0
