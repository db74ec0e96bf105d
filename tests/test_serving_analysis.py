"""Serving verdicts from the runtime's own metrics: kv_cache, demand (none), compute, the runtime's limits,
headroom in users and latency quantiles from histogram buckets. Windows are built like test_analysis's."""

from __future__ import annotations

import math

import pytest

from headroom.analysis.latency import histogram_quantile, window_delta
from headroom.samples import Histogram, ServingEndpoint

from situations import Gpu, Host, analyse, build_window
from situations import serving_source as serving
from situations.serving import RESERVED, VLLM

VLLM_GPU = RESERVED  # the reservation: NVML looks full


def finding(host: Host, gpu: Gpu, extra, config: str = VLLM):
    f = analyse(config, build_window(host, [gpu], seconds=30, extra=extra))
    return f.workload_findings[0]


def test_kv_cache_full_with_requests_waiting_and_preemptions_is_kv_cache():
    wf = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=6, preemptions_per_second=0.05))
    assert wf.verdict.primary == "kv_cache"
    assert wf.verdict.scores["gpu_memory"] == 0.0  # NVML sees only the reservation
    text = wf.verdict.evidence["kv_cache"]
    # the newest scrape's figures, and how many scrapes had the cache full while requests waited (issue 26)
    assert ("KV cache 97 % used of 65,536 tokens, 6 requests waiting and 8 running in the newest scrape, "
            "3.0 preemptions/min") in text
    assert "in 16 of 16 scrapes the KV cache was >= 95 % full while requests waited or sequences were preempted" in text
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
    """The control for the test above: the demand signal is what turns cpu into none. Without it (a profile
    without endpoint), a GPU that still shows work (20 % busy) beside a saturated host reads as cpu; one below
    demand_busy (2 %) is idle for lack of work on its own showing."""
    busy_host = Host(cpu_busy=0.99, psi={"cpu.some": 0.6})
    no_endpoint = VLLM.replace("    endpoint: http://127.0.0.1:8000/metrics\n", "")
    assert "endpoint" not in no_endpoint
    wf = finding(busy_host, Gpu(util=0.2), None, config=no_endpoint)
    assert wf.verdict.primary == "cpu"
    idle = finding(busy_host, Gpu(util=0.02), None, config=no_endpoint)
    assert idle.verdict.primary == "none" and "idle for lack of work" in idle.verdict.evidence["none"]


def test_an_endpoint_that_is_down_is_reported_down_never_another_resources_bottleneck():
    """Issue 26: a serving endpoint that does not answer (crashed, restarting, reloading its weights) leaves the
    host busy with its own recovery; the verdict says it is down, and scores nothing from that."""
    busy_host = Host(cpu_busy=0.99, psi={"cpu.some": 0.6})
    wf = finding(busy_host, Gpu(util=0.2), serving(up=False))
    assert wf.serving.state == "down"
    assert wf.verdict.primary == "none" and max(wf.verdict.scores.values()) == 0.0
    assert wf.verdict.evidence["none"].startswith("serving endpoint down: cannot connect: Connection refused")
    assert "not judged: serving endpoint down" in wf.verdict.evidence["cpu"]


def test_queueing_with_free_kv_and_a_busy_gpu_is_gpu_compute():
    wf = finding(Host(), Gpu(util=0.99), serving(usage=0.4, waiting=8))
    assert wf.verdict.primary == "gpu_compute" and wf.verdict.scores["kv_cache"] == 0.0
    assert "KV cache 40 % used of 65,536 tokens, 8 requests waiting and 8 running in the newest scrape" in \
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
    from headroom.exposition.render import Writer
    from headroom.exposition.render.findings import _render_serving_findings  # private: no public name

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


# ------------------------------------------------------------------ issue 26 class 4: judged per scrape, same scrapes
def _run(phase, seconds, gpu=VLLM_GPU, host_cpu=None, hold=0.0):
    """The workload's finding at every tick of a window whose endpoint follows ``phase`` (serving_scrapes.timeline)."""
    from headroom.analysis.pipeline import Analysis
    from headroom.config import check_config_text

    from situations.serving_scrapes import timeline

    window = build_window(Host(), [gpu], seconds=seconds, extra=timeline(phase, host_cpu))
    analysis = Analysis(check_config_text(VLLM + f"\nanalysis:\n  hold: {hold}s\n", "c.yaml"))
    return [analysis(window[:i])[1].workload_findings[0] for i in range(1, len(window) + 1)]


def test_a_cache_that_just_filled_is_named_kv_cache_within_the_hold_and_never_blamed_on_the_runtime_limits():
    """The real vLLM 0.32 case: half full and serving, then the cache fills with 9 waiting and preemptions. The
    window's means (usage 69 %) said 'requests wait while the KV cache has room: the runtime's own limits' for 13 s
    after the cache filled, and kv_cache scored 0.36, so nothing was named."""
    fill = 12

    def phase(t):
        return {"usage": 0.6, "running": 6, "waiting": 0} if t < fill else \
            {"usage": 1.0, "running": 4, "waiting": 9, "preempt": 2.0}

    findings = _run(phase, 60, hold=20.0)
    named = next(t for t, wf in enumerate(findings) if wf.verdict.primary == "kv_cache")
    assert named <= fill + 20 + 3  # the hold plus the latest kv_recent_scrapes
    for wf in findings[fill:]:
        assert "the runtime's own limits" not in wf.verdict.evidence.get("none", "")
        assert "the runtime's own limits" not in wf.verdict.evidence["kv_cache"]
    first = findings[fill + 2]  # three scrapes into the fill: a candidate at once
    assert first.verdict.candidate == "kv_cache" and first.verdict.scores["kv_cache"] == 1.0
    text = first.verdict.evidence["kv_cache"]
    assert ("in 3 of 15 scrapes the KV cache was >= 95 % full while requests waited or sequences were preempted, "
            "3 of the latest 3 scrapes") in text
    assert "KV cache 100 % used of 65,536 tokens, 9 requests waiting and 4 running in the newest scrape" in text


def test_waiting_during_full_scrapes_is_not_waiting_while_the_cache_has_room():
    """Alternating scrapes: the cache full with a queue, then nearly empty with none. Means say 'usage 65 %, 2.5
    waiting': waiting while the cache had room. Per scrape, requests waited only while it was full."""
    def phase(t):
        return {"usage": 1.0, "running": 4, "waiting": 5} if t % 2 else {"usage": 0.3, "running": 4, "waiting": 0}

    wf = _run(phase, 20)[-1]
    text = wf.verdict.evidence["kv_cache"]
    assert "the runtime's own limits" not in text and "the runtime's own limits" not in wf.verdict.evidence.get(
        "none", "")
    assert "in 8 of 16 scrapes the KV cache was >= 95 % full while requests waited" in text
    assert "requests waited while the cache had room" not in text
    assert wf.verdict.scores["kv_cache"] >= 0.5  # half the window and 2 of the latest 3 scrapes


def test_waiting_while_the_cache_has_room_in_the_same_scrapes_points_at_the_runtime_limits():
    def phase(t):
        return {"usage": 0.2, "running": 64, "waiting": 12}

    wf = _run(phase, 20, gpu=Gpu(util=0.4))[-1]
    assert wf.verdict.primary == "none" and wf.verdict.scores["kv_cache"] == 0.0
    assert "in 16 requests waited while the cache had room" in wf.verdict.evidence["none"]
    assert "the runtime's own limits (max_num_seqs / max_num_batched_tokens) hold them back" in \
        wf.verdict.evidence["none"]


def test_a_window_of_idle_and_loaded_scrapes_says_so():
    def phase(t):
        return {"usage": 0.0, "running": 0, "waiting": 0} if t < 10 else \
            {"usage": 0.99, "running": 12, "waiting": 20, "preempt": 1.0}

    wf = _run(phase, 20)[-1]
    assert wf.verdict.primary == "kv_cache"
    assert "the window mixes 6 idle scrapes (nothing running or waiting) with 10 loaded ones" in \
        wf.verdict.evidence["kv_cache"]


def test_a_full_cache_with_a_queue_blip_is_not_kv_cache():
    """One request waits for one scrape now and then while the cache is 97 % full: no share of the window, nor of
    the latest scrapes, is pressed enough."""
    def phase(t):
        return {"usage": 0.97, "running": 16, "waiting": 1 if t % 10 == 5 else 0}

    for wf in _run(phase, 40):
        assert wf.verdict.scores["kv_cache"] < 0.5, wf.verdict.evidence["kv_cache"]


def test_counters_going_down_is_a_restart_reported_as_restarting_and_then_judged_from_the_new_run():
    """Full and queueing until it restarts (no failed scrape seen: it came back between two scrapes); the
    restart's first scrapes are not judged; after serving_restart_seconds the new run's scrapes alone are."""
    def phase(t):
        if t < 20:
            return {"usage": 1.0, "running": 4, "waiting": 9, "preempt": 2.0, "run": 0}
        return {"usage": 0.1, "running": 2, "waiting": 0, "run": 1}

    busy_cpu = lambda t: 0.98 if 20 <= t < 30 else 0.2  # noqa: E731 - the restart loads and compiles on the CPU
    findings = _run(phase, 60, gpu=Gpu(util=0.3, mem_used=72 * 2**30, mem_total=80 * 2**30), host_cpu=busy_cpu)
    assert findings[19].verdict.primary == "kv_cache"
    for wf in findings[20:35]:
        assert wf.serving.state == "restarting", wf.serving
        assert wf.verdict.candidate == "none" and max(wf.verdict.scores.values()) == 0.0
        assert wf.verdict.evidence["none"].startswith("serving endpoint restarting: its counters went down "
                                                      "(preemptions 40 -> 0)")
    later = findings[40]
    assert later.serving.state == "up" and later.verdict.candidate == "none"
    assert later.serving.restarted_seconds_ago is None  # the restart left the window with the old run's scrapes
    assert len(later.serving.scrapes) == 16 and all(x.usage == 0.1 for x in later.serving.scrapes)


def test_a_kv_capacity_that_changed_is_a_restart():
    def phase(t):
        return {"usage": 0.5, "running": 4, "waiting": 0, "capacity": 65536.0 if t < 10 else 131072.0}

    wf = _run(phase, 15)[-1]
    assert wf.serving.state == "restarting"
    assert "its KV cache capacity changed from 65,536 to 131,072 tokens" in wf.verdict.evidence["none"]


def test_one_failed_scrape_under_load_is_not_a_restart():
    """A scrape that timed out while the runtime was busy, its counters going on after it: still up, judged."""
    def phase(t):
        if t == 10:
            return "timed out within 500 ms (collectors.serving.timeout)"
        return {"usage": 1.0, "running": 4, "waiting": 9, "preempt": 2.0}

    wf = _run(phase, 16)[-1]
    assert wf.serving.state == "up" and wf.verdict.primary == "kv_cache"
    assert wf.serving.failed_scrapes == 1 and "1 of 16 scrapes of the window failed" in wf.serving.state_reason


def test_the_serving_state_is_in_the_status_api_and_the_page():
    from headroom.exposition import landing, status_api

    def phase(t):
        return "cannot connect: Connection refused" if t >= 10 else {"usage": 0.5, "running": 4, "waiting": 0}

    wf = _run(phase, 15)[-1]
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    serving_status = status_api._workload_status(wf, None)["serving"]
    assert "scrapes" not in serving_status  # the counts are in the evidence, not 15 scrapes per workload
    assert serving_status["state"] == "down"
    assert serving_status["state_reason"].startswith("serving endpoint down: cannot connect")
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    page = landing._serving_line(serving_status)
    assert "down" in page and "5 of 15 scrapes of the window failed" in page


def test_a_process_start_time_that_moved_is_a_restart_read_from_the_exposition():
    """A runtime restarted between two scrapes with nothing counted yet in either run (no counter went down): the
    process start time prometheus-client exposes beside the runtime's series says it is a new process."""
    from pathlib import Path

    from headroom.analysis.serving import serving_signals
    from headroom.samples import Sample, ServingSample, SourceResult
    from headroom.sources.serving import read_exposition

    body = (Path(__file__).parent / "fixtures" / "serving" / "vllm-v1.prom").read_bytes()
    window = []
    for t in range(16):
        started = 1.7e9 if t < 12 else 1.7e9 + 300.0
        text = body + f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {started}\n".encode()
        runtime, fields = read_exposition(text, "text/plain", None, {})
        assert fields["process_start_time_seconds"] == started
        e = ServingEndpoint("chat", "http://127.0.0.1:8000/metrics", up=True, runtime=runtime, **fields)
        window.append(Sample(timestamp=1e9 + t, monotonic=float(t),
                             sources={"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}))
    s = serving_signals(window, 15.0, "chat")
    assert s.state == "restarting" and "its process start time moved by 300 s" in s.state_reason
    assert len(s.scrapes) == 4  # the new process's scrapes alone
    same = serving_signals(window[:12], 15.0, "chat")
    assert same.state == "up" and same.restarted_seconds_ago is None


def test_scrapes_that_time_out_under_load_neither_report_it_down_nor_restart_the_hold():
    """The real vLLM on 2 busy cores: with the cache full a scrape now and then misses the 500 ms deadline. Failing
    for less than serving_down_seconds since its last answer, the endpoint is up and judged from its answers: the
    kv_cache candidate holds through them and becomes the primary after the hold, not a hold after the last miss."""
    def phase(t):
        if t in (8, 9):
            return "timed out within 500 ms (collectors.serving.timeout)"
        return {"usage": 1.0, "running": 4, "waiting": 9, "preempt": 2.0}

    findings = _run(phase, 16, hold=10.0)
    for wf in findings[8:10]:
        assert wf.serving.state == "up" and wf.verdict.candidate == "kv_cache", wf.serving
        assert "its newest scrape failed (timed out within 500 ms" in wf.serving.state_reason
    assert findings[12].verdict.primary == "kv_cache"  # held since the third scrape, through the misses
    refused = _run(lambda t: "cannot connect: Connection refused" if t >= 8 else phase(0), 16)
    assert [wf.serving.state for wf in refused[8:12]] == ["up", "up", "down", "down"]  # 1, 2, 3, 4 s since


def test_a_runtime_that_answers_late_for_seconds_is_slow_not_down_until_serving_unresponsive_seconds():
    """A real CPU vLLM driven past its KV cache on 2 cores answered /metrics later than the 2 s scrape timeout for
    over 3 s now and then: it was reported down (serving_down_seconds), which blanked the verdict and restarted the
    hold. Scrapes that connect and then time out are a saturated runtime, not an outage: it stays up, judged from
    its answers, until that lasts serving_unresponsive_seconds (30 s); refused connections are down after 3 s."""
    late = "no answer within 2000 ms (collectors.serving.timeout)"
    full = {"usage": 1.0, "running": 4, "waiting": 9, "preempt": 2.0}
    slow = _run(lambda t: late if t >= 8 else full, 45)
    assert [wf.serving.state for wf in slow[8:20]] == ["up"] * 12
    assert "its newest scrape failed (no answer within 2000 ms" in slow[19].serving.state_reason
    assert slow[19].verdict.candidate == "kv_cache"  # still judged from the answers before
    states = [wf.serving.state for wf in slow]
    assert states.index("down") == 7 + 30  # serving_unresponsive_seconds after its last answer (t=7)
    refused = _run(lambda t: "cannot connect: Connection refused" if t >= 8 else full, 16)
    assert [wf.serving.state for wf in refused[8:12]] == ["up", "up", "down", "down"]
    mixed = _run(lambda t: ("cannot connect: Connection refused" if t == 9 else late) if t >= 8 else full, 16)
    assert mixed[12].serving.state == "down"  # not every failure a timeout: the 3 s rule


def test_a_window_that_slides_past_the_answers_before_a_failure_is_no_restart():
    """The same run: a 30 s window whose oldest scrapes are the failed ones of a slow spell, the answers before them
    out of the window, read "it answers again after N failed scrapes" and reported a restart that never happened
    (for 15 s, unjudged). The last answer before the window is compared instead: counters go on, no restart."""
    def phase(t):
        if 20 <= t < 23:
            return "no answer within 2000 ms (collectors.serving.timeout)"
        return {"usage": 1.0, "running": 4, "waiting": 9, "preempt": 2.0}

    findings = _run(phase, 70)
    assert all(wf.serving.state == "up" for wf in findings), [(t, wf.serving.state, wf.serving.state_reason)
                                                             for t, wf in enumerate(findings) if wf.serving.state != "up"]
    assert all(wf.serving.restarted_seconds_ago is None for wf in findings)

    def restarted(t):  # the same spell, and the runtime's counters start again after it: a restart, seen once
        p = phase(t)
        return p if isinstance(p, str) or t < 20 else {**p, "run": 1}

    again = _run(restarted, 70)
    assert again[23].serving.state == "restarting" and "its counters went down" in again[23].serving.state_reason
    assert again[23 + 16].serving.state == "up" and again[-1].serving.state == "up"


# ------------------------------------------------ vLLM 0.2x families (vllm/v1/metrics/loggers.py of vllm 0.32)
def test_requests_deferred_for_a_lora_slot_or_a_kv_transfer_are_not_kv_pressure():
    """vllm:num_requests_waiting_by_reason: "capacity" is the scheduler's waiting queue, "deferred" the requests it
    skipped for a LoRA budget, an async KV transfer or a blocked request (loggers.py 547-566, 1150-1160). A full
    cache with 6 waiting, all deferred, is not the KV cache's doing; the same 6 waiting for capacity are."""
    deferred = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=6, deferred=6))
    assert deferred.verdict.scores["kv_cache"] == 0.0 and deferred.verdict.primary != "kv_cache"
    text = deferred.verdict.evidence["kv_cache"]
    assert ("6 requests waiting (6 of them deferred by a LoRA budget, a KV transfer or a blocked request, not for "
            "capacity) and 8 running in the newest scrape") in text
    assert deferred.serving.deferred == 6
    capacity = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=6, deferred=0))
    assert capacity.verdict.primary == "kv_cache" and capacity.verdict.scores["kv_cache"] > 0.5


def test_a_sleeping_engine_is_idle_not_broken():
    """vllm:engine_sleep_state{sleep_state="awake"} 0 (sleep mode, POST /sleep?level=1): the engine holds no
    requests on purpose; the verdict says it sleeps, every score 0, and the endpoint is up."""
    busy_host = Host(cpu_busy=0.99, psi={"cpu.some": 0.6})
    wf = finding(busy_host, Gpu(util=0.0), serving(usage=0.0, running=0, waiting=0, sleep_level=1))
    assert wf.serving.state == "up" and wf.serving.sleep_level == 1
    assert wf.verdict.primary == "none" and max(wf.verdict.scores.values()) == 0.0
    assert wf.verdict.evidence["none"] == (
        "the engine at http://127.0.0.1:8000/metrics (vllm) is asleep (sleep level 1: its weights offloaded to CPU "
        "memory, its KV cache discarded; vllm:engine_sleep_state): idle, not broken, until it is woken up "
        "(POST /wake_up)")
    awake = finding(busy_host, Gpu(util=0.0), serving(usage=0.0, running=0, waiting=0, sleep_level=0))
    assert "idle for lack of demand" in awake.verdict.evidence["none"]
    # a request sent while it sleeps waits in its queue (vllm#45326): still asleep, not a KV cache or a compute limit
    parked = finding(busy_host, Gpu(util=0.0), serving(usage=0.0, running=0, waiting=2, sleep_level=1))
    assert parked.verdict.primary == "none" and max(parked.verdict.scores.values()) == 0.0
    assert parked.verdict.evidence["none"].endswith(
        "; 2 requests wait for it to wake (a request that arrives while it sleeps is parked in its queue, vllm#45326)")


def test_requests_refused_at_admission_are_demand_and_evidence():
    """vllm:admission_rejections_total (max_num_queued_reqs / max_num_queued_tokens, loggers.py 843-859): a server
    that refuses requests for a full queue is not idle even when nothing runs in its scrapes, and the kv_cache
    evidence says how many it refuses."""
    wf = finding(Host(), Gpu(util=0.02), serving(usage=0.0, running=0, waiting=0, rejections_per_second=0.5))
    assert wf.serving.rejections_per_minute == pytest.approx(30.0)
    assert not wf.serving.idle and "idle for lack of demand" not in (wf.verdict.evidence.get("none") or "")
    assert "30.0 requests/min refused by its queue limit (admission rejections)" in wf.verdict.evidence["kv_cache"]


def test_queue_time_is_queueing_evidence():
    """vllm:request_queue_time_seconds: its p95 over the window is in the evidence and the percentiles."""
    bounds = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, math.inf)

    def queue(t):  # every request of the window waited 0.6-0.8 s
        return Histogram(bounds, (0, 0, 10 * t, 10 * t, 10 * t, 10 * t, 10 * t, 10 * t, 10 * t), 0.7 * 10 * t, 10 * t)

    wf = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=6, queue_time=queue))
    p = wf.serving.percentiles["queue_p95"]
    assert (p.lower, p.upper, p.bounded) == (0.5, 0.8, False) and p.value == pytest.approx(0.785)
    assert "queue time p95 785 ms" in wf.verdict.evidence["kv_cache"]


def test_an_ollama_cards_memory_is_its_resident_models_in_the_verdict():
    """Ollama keeps a loaded model resident (weights and the KV cache of its context) until keep_alive expires: a
    full card is its normal state, and its /api/ps says which models hold it (the real answer of
    nirmato-ollama#13: gemma3:latest, 5964735424 bytes, all in VRAM)."""
    from headroom.samples import ServingSample

    from situations import SourceResult, chat

    config = "\nworkloads:\n" + chat("{name: ollama}", extra="endpoint: http://127.0.0.1:11434/api/ps")

    def extra(t):
        e = ServingEndpoint("chat", "http://127.0.0.1:11434/api/ps", up=True, runtime="ollama",
                            resident_models=("gemma3:latest",), resident_bytes=5964735424.0,
                            resident_vram_bytes=5964735424.0)
        return {"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}

    wf = finding(Host(), VLLM_GPU, extra, config=config)
    assert wf.serving.runtime == "ollama" and wf.serving.resident_models == ("gemma3:latest",)
    text = wf.verdict.evidence["gpu_memory"]
    assert "reserved up front by Ollama (found from its serving metrics; OLLAMA_KEEP_ALIVE, default 5 minutes)" in text
    assert "its /api/ps lists 1 model loaded: gemma3:latest, 5.56 GiB, all of it in GPU memory" in text
    assert wf.verdict.scores["gpu_memory"] == 0.0
    assert not wf.serving.idle  # Ollama says nothing of requests: never called idle from its endpoint
    from headroom.exposition import landing, status_api

    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    status = status_api._workload_status(wf, None)["serving"]
    assert status["resident_models"] == ["gemma3:latest"] and status["resident_vram_bytes"] == 5964735424.0
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    assert landing._serving_line(status) == ('<p class="serving">ollama: <b>1</b> model loaded (gemma3:latest), '
                                             '5.56 GiB, 5.56 GiB in GPU memory</p>')


def test_the_newer_families_are_in_the_status_api_and_the_page():
    """What the runtime said of its queue and its sleep is in /api/v1/status (workloads[].serving) and on the page."""
    from headroom.exposition import landing, status_api

    wf = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=6, deferred=2, rejections_per_second=0.5,
                                           sleep_level=0))
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    status = status_api._workload_status(wf, None)["serving"]
    assert (status["deferred"], status["rejections_per_minute"], status["sleep_level"]) == (2.0, 30.0, 0)
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    page = landing._serving_line(status)
    assert "(2 deferred, not for capacity)" in page and "<b>30.0</b>/min refused at admission" in page
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    asleep = landing._serving_line(status_api._workload_status(
        finding(Host(), Gpu(util=0.0), serving(usage=0.0, running=0, waiting=0, sleep_level=2)), None)["serving"])
    assert "asleep (sleep level 2): idle, not broken" in asleep


def test_a_profile_with_only_an_endpoint_is_judged_from_its_runtime():
    """docs/analysis.md, "Serving runtimes": no match rule, no gpus, only `endpoint:` (a server in a pod the agent
    cannot attribute): its runtime's view still names kv_cache, and its idleness, with no process or GPU behind it."""
    config = "\nworkloads:\n  - name: chat\n    kind: inference\n    params: 8B\n    endpoint: http://127.0.0.1:8000/metrics\n"
    wf = finding(Host(), VLLM_GPU, serving(usage=0.97, waiting=6, preemptions_per_second=0.05), config=config)
    assert wf.verdict.primary == "kv_cache" and wf.verdict.scores["kv_cache"] == 1.0
    idle = finding(Host(), Gpu(util=0.6), serving(usage=0.0, running=0, waiting=0), config=config)
    assert idle.verdict.primary == "none" and "idle for lack of demand" in idle.verdict.evidence["none"]
