"""Serving verdicts from the runtime's own metrics: kv_cache, demand (none), compute, the runtime's limits,
headroom in users and latency quantiles from histogram buckets. Windows are built like test_analysis's."""

from __future__ import annotations

import math

import pytest

from headroom.analysis.serving import histogram_quantile, window_delta
from headroom.samples import Histogram
from headroom.simulation.situations import Gpu, Host, analyse, build_window
from headroom.simulation.situations import serving_source as serving
from headroom.simulation.situations.serving import RESERVED, VLLM

VLLM_GPU = RESERVED  # the reservation: NVML looks full


def finding(host: Host, gpu: Gpu, extra, config: str = VLLM):
    f = analyse(config, build_window(host, [gpu], seconds=30, extra=extra))
    return f.workload_findings[0]


def test_kv_cache_full_with_requests_waiting_and_preemptions_is_kv_cache():
    wf = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=6, preemptions_per_second=0.05))
    assert wf.verdict.primary == "kv_cache"
    assert wf.verdict.scores["gpu_memory"] == 0.0  # NVML sees only the reservation
    text = wf.verdict.evidence["kv_cache"]
    # a mean, and said to be one (issue 29: "14.1 requests waiting" read as a count)
    assert ("KV cache 97 % used of 65,536 tokens, on average over the window 6.0 requests waiting and 8.0 running, "
            "3.0 preemptions/min") in text
    # what the memory model says more room would give, as ratios of the measured capacity
    assert "headroom estimate: gpu_memory_utilization 0.95:" in text and "fp8 KV cache:" in text
    assert "one more GPU (tensor 2):" in text


def test_kv_cache_full_but_nothing_waits_is_not_a_bottleneck():
    wf = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=0, preemptions_per_second=0.0))
    assert wf.verdict.scores["kv_cache"] == 0.0 and wf.verdict.primary == "none"


def test_no_requests_is_idle_for_lack_of_demand_whatever_the_host_does():
    busy_host = Host(cpu_busy=0.99, psi={"cpu.some": 0.6})  # would read as cpu-starved
    wf = finding(busy_host, Gpu(util=0.02), serving(usage=0.0, running=0, waiting=0))
    assert wf.verdict.primary == "none"
    assert max(wf.verdict.scores.values()) == 0.0
    assert wf.verdict.evidence["none"] == ("no requests running or waiting at http://127.0.0.1:8000/metrics "
                                           "(vllm): idle for lack of demand")
    assert "not limiting: no requests running" in wf.verdict.evidence["cpu"]


def test_without_the_serving_signal_the_same_host_reads_as_cpu():
    """The control for the test above: the demand signal is what turns cpu into none. Without it, a GPU that
    still shows work (20 % busy) beside a saturated host reads as cpu; one below demand_busy (2 %) is idle for
    lack of work on its own showing."""
    busy_host = Host(cpu_busy=0.99, psi={"cpu.some": 0.6})
    wf = finding(busy_host, Gpu(util=0.2), serving(up=False))
    assert wf.verdict.primary == "cpu"
    assert wf.verdict.evidence["kv_cache"] == "serving endpoint down: cannot connect: Connection refused"
    idle = finding(busy_host, Gpu(util=0.02), serving(up=False))
    assert idle.verdict.primary == "none" and "idle for lack of work" in idle.verdict.evidence["none"]


def test_queueing_with_free_kv_and_a_busy_gpu_is_gpu_compute():
    wf = finding(Host(), Gpu(util=0.99), serving(usage=0.4, waiting=8))
    assert wf.verdict.primary == "gpu_compute" and wf.verdict.scores["kv_cache"] == 0.0
    assert "KV cache 40 % used of 65,536 tokens, on average over the window 8.0 requests waiting" in \
        wf.verdict.evidence["gpu_compute"]


def test_queueing_with_free_kv_and_a_free_gpu_points_at_the_runtime_limits():
    wf = finding(Host(), Gpu(util=0.4), serving(usage=0.3, waiting=5))
    assert wf.verdict.primary == "none"
    assert "the runtime's own limits (max_num_seqs / max_num_batched_tokens) hold them back" in \
        wf.verdict.evidence["none"]


def test_headroom_in_sequences_and_capacity_runtime_against_estimate():
    wf = finding(Host(), VLLM_GPU, serving(usage=0.5, running=8, capacity=65536))
    room = wf.serving_headroom
    assert room.kv_capacity_runtime_tokens == 65536
    assert room.sequences_observed == 8  # 32768 free tokens / 4096 tokens per running sequence
    assert room.sequences_max_context == 4  # 32768 / 8192
    assert room.kv_capacity_estimate_tokens and room.kv_capacity_estimate_tokens > 0


def _hist(bounds, counts, total=0.0):
    return Histogram(tuple(bounds), tuple(float(c) for c in counts), total, float(counts[-1]))


@pytest.mark.parametrize(("q", "expected"), [(0.5, 0.42), (0.99, 0.9875), (0.05, 0.05)])
def test_histogram_quantile_interpolates_like_prometheus(q, expected):
    h = _hist((0.1, 0.5, 1.0, math.inf), (10, 60, 100, 100))
    assert histogram_quantile(q, h) == pytest.approx(expected)


def test_a_rank_in_the_inf_bucket_answers_the_highest_finite_bound_and_empty_is_none():
    assert histogram_quantile(0.95, _hist((0.1, 0.5, 1.0, math.inf), (10, 10, 10, 20))) == 1.0
    assert histogram_quantile(0.5, _hist((0.1, math.inf), (0, 0))) is None


def test_window_delta_counts_only_the_windows_observations_and_restarts_after_a_reset():
    a = _hist((0.1, 1.0, math.inf), (100, 200, 200), 50.0)
    b = _hist((0.1, 1.0, math.inf), (100, 260, 260), 80.0)
    d = window_delta(a, b)
    assert d.counts == (0.0, 60.0, 60.0) and d.sum == 30.0 and d.count == 60.0
    restarted = _hist((0.1, 1.0, math.inf), (1, 2, 2), 0.5)
    assert window_delta(b, restarted) is restarted


def test_ttft_quantiles_describe_the_short_window_not_the_whole_life():
    """Old observations were fast; the last 15 s are slow: the window's p50 is slow."""
    bounds = (0.1, 0.5, 1.0, 2.5, math.inf)

    def ttft(t):
        fast = 1000.0  # long ago, all under 0.1 s
        slow = 10.0 * t  # ten new requests a second, between 1 and 2.5 s
        return _hist(bounds, (fast, fast, fast, fast + slow, fast + slow), fast * 0.05 + slow * 2.0)

    wf = finding(Host(), VLLM_GPU, serving(ttft=ttft))
    p50 = wf.serving.ttft[0.5]
    assert 1.0 < p50 <= 2.5


def test_slo_met_and_missed_from_the_windows_percentiles():
    from headroom.exposition.render import Writer, _render_serving_findings

    config = VLLM + "    slo: {ttft_p95: 1s, ttft_p50: 3s, itl_p95: 50ms}\n"
    bounds = (0.1, 0.5, 1.0, 2.5, math.inf)

    def ttft(t):  # ten requests a second between 1 and 2.5 s
        return _hist(bounds, (0, 0, 0, 10.0 * t, 10.0 * t), 2.0 * 10 * t)

    wf = finding(Host(), VLLM_GPU, serving(ttft=ttft), config=config)
    by = {s.objective: s for s in wf.slos}
    assert by["ttft_p95"].met is False and by["ttft_p95"].observed_seconds == pytest.approx(2.425)
    assert by["ttft_p50"].met is True
    assert by["itl_p95"].met is None and by["itl_p95"].observed_seconds is None  # no ITL observed
    w = Writer()
    _render_serving_findings(w, wf)
    text = w.render().decode()
    assert 'headroom_workload_slo_met{workload="chat",objective="ttft_p95"} 0' in text
    assert 'headroom_workload_slo_met{workload="chat",objective="ttft_p50"} 1' in text
    assert 'headroom_workload_slo_met{workload="chat",objective="itl_p95"}' not in text  # unknown: absent
    assert 'headroom_workload_slo_target_seconds{workload="chat",objective="itl_p95"} 0.05' in text


def test_a_runtime_that_does_not_say_what_runs_is_never_called_idle():
    """Triton without the TensorRT-LLM backend reports pending requests only: 0 pending is not 'no demand'."""
    busy_host = Host(cpu_busy=0.99, psi={"cpu.some": 0.6})
    # the GPU still shows work (20 %: above demand_busy), so the verdict rests on what the runtime says
    wf = finding(busy_host, Gpu(util=0.2), serving(usage=None, running=None, waiting=0, capacity=None))
    assert wf.serving.idle is False and "none" not in wf.verdict.evidence
    assert wf.verdict.primary == "cpu"
