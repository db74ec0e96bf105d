"""Serving evidence judged per scrape (issue 26 class 4): a KV cache that just filled, a window that mixes idle and
loaded scrapes, an endpoint that restarts, and the look-alikes that must not be named kv_cache (a full cache with
no queue, a queue held back by max-num-seqs, an endpoint that restarted and is healthy).

Each situation's runtime follows a timeline: ``phase(t)`` gives what one scrape at second ``t`` says (KV usage,
requests running and waiting, preemptions per second, which run of the runtime answers), or a string: the scrape
failed with that error. Counters (preemptions, generated tokens) grow within a run and restart from 0 with the
next one, as a real runtime's do. ``host_cpu(t)`` makes the host's CPU follow the timeline too (a restart loads
weights and compiles on the CPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headroom.samples import CpuSample, CpuTimes, ServingEndpoint, ServingSample, SourceResult

from situations import GIB, Gpu, Host, Situation, chat

URL = "http://127.0.0.1:8000/metrics"
VLLM = "\nworkloads:\n" + chat("{name: vllm, gpu_memory_utilization: 0.9}", extra=f"endpoint: {URL}")
RESERVED = Gpu(util=0.6, mem_used=72 * GIB, mem_total=80 * GIB)  # vLLM's reservation: NVML looks full either way
REFUSED = "cannot connect: Connection refused"
TAGS = ("kv_cache", "class-4")


def timeline(phase: Callable[[int], dict[str, Any] | str], host_cpu: Callable[[int], float] | None = None,
             cpus: int = 16) -> Callable[[int], dict[str, SourceResult]]:
    """The ``extra`` sources of a situation whose serving endpoint (and optionally host CPU) follow ``phase``."""
    def extra(t: int) -> dict[str, SourceResult]:
        run, preempted, generated = None, 0.0, 0.0
        for k in range(t + 1):
            p = phase(k)
            if isinstance(p, str):
                continue
            if p.get("run", 0) != run:  # a new run of the runtime: its counters start again
                run, preempted, generated = p.get("run", 0), 0.0, 0.0
            preempted += p.get("preempt", 0.0)
            generated += 20.0 * p.get("running", 0.0)
        p = phase(t)
        if isinstance(p, str):  # a failed scrape; one that names the scrape deadline connected and timed out
            e = ServingEndpoint("chat", URL, up=False, error=p, timed_out="(collectors.serving.timeout)" in p)
        else:
            e = ServingEndpoint("chat", URL, up=True, runtime="vllm", kv_cache_usage_ratio=p.get("usage"),
                                requests_running=p.get("running"), requests_waiting=p.get("waiting"),
                                preemptions_total=preempted, generation_tokens_total=generated,
                                kv_cache_capacity_tokens=p.get("capacity", 65536.0))
        out = {"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}
        if host_cpu is not None:
            busy = sum(host_cpu(k) for k in range(t)) * cpus
            total = float(cpus * t)
            cpu = CpuSample(times=CpuTimes(user=busy, nice=0.0, system=0.0, idle=total - busy, iowait=0.0),
                            logical_cpus=cpus, load1=1, load5=1, load15=1, pressure={})
            out["cpu"] = SourceResult("cpu", True, 0.001, cpu)
        return out
    return extra


def _just_filled(t: int) -> dict[str, Any]:
    """Half full and serving for 12 s, then a burst fills the cache: requests wait and sequences are preempted."""
    if t < 12:
        return {"usage": 0.6, "running": 6, "waiting": 0}
    return {"usage": 1.0, "running": 4, "waiting": 9, "preempt": 2.0}


def _idle_then_loaded(t: int) -> dict[str, Any]:
    """Idle, then a batch of requests arrives and fills the cache (n > 1 sampling: many sequences per request)."""
    if t < 8:
        return {"usage": 0.0, "running": 0, "waiting": 0}
    return {"usage": 0.99, "running": 12, "waiting": 20, "preempt": 1.0}


def _full_and_preempting(t: int) -> dict[str, Any]:
    """Out of KV cache for the whole window: every step preempts, the queue never empties (usage swings 96-100 %)."""
    return {"usage": 1.0 if t % 2 else 0.96, "running": 8, "waiting": 3 + t % 3, "preempt": 0.5}


def _full_and_waiting(t: int) -> dict[str, Any]:
    """A long-context server whose two sequences hold the whole cache: the rest wait (no preemption counted)."""
    return {"usage": 1.0, "running": 2, "waiting": 18, "preempt": 0.0}


def _restarting(t: int) -> dict[str, Any] | str:
    """Serving with room until it dies at 30 s; refused while it reloads its weights; answering again from 38 s
    with its counters back at 0 and nearly nothing in the cache."""
    if t < 30:
        return {"usage": 0.5, "running": 8, "waiting": 0, "preempt": 0.2, "run": 0}
    if t < 38:
        return REFUSED
    return {"usage": 0.02, "running": 1, "waiting": 0, "run": 1}


def _restart_cpu(t: int) -> float:
    return 0.98 if t >= 30 else 0.2  # loading weights, compiling, warming up: every core busy


def _restarted_healthy(t: int) -> dict[str, Any] | str:
    """Restarted at 10 s (a deploy), serving with room since, a request waiting now and then (admitted at once)."""
    if t < 10:
        return {"usage": 0.55, "running": 8, "waiting": 0, "run": 0}
    if t < 12:
        return REFUSED
    return {"usage": 0.35, "running": 6, "waiting": 1 if t % 7 == 0 else 0, "run": 1, "capacity": 98304.0}


def _healthy_restart_cpu(t: int) -> float:
    return 0.95 if 10 <= t < 20 else 0.2


def _full_no_queue(t: int) -> dict[str, Any]:
    """A cache kept 94-97 % full by 16 long decodes, nothing waiting but a request now and then admitted at once."""
    return {"usage": 0.97 if t % 2 else 0.94, "running": 16, "waiting": 1 if t % 10 == 5 else 0}


def _max_num_seqs(t: int) -> dict[str, Any]:
    """max-num-seqs 64 reached: 64 running, a queue of 30, the cache a quarter full (low pressure, low GPU)."""
    return {"usage": 0.25 + 0.02 * (t % 3), "running": 64, "waiting": 30}


SITUATIONS = [
    Situation(
        "a KV cache that just filled is kv_cache within the hold, not the runtime's limits", VLLM, Host(), [RESERVED],
        "kv_cache", source="https://github.com/vllm-project/vllm/issues/546",  # 73.8 % -> 86.1 % -> preempted
        extra=timeline(_just_filled), seconds=16, tags=TAGS,
        evidence={"*": "in 4 of 16 scrapes the KV cache was >= 95 % full while requests waited or sequences were "
                       "preempted, 3 of the latest 3 scrapes"}),
    Situation(
        "an idle server that a batch of n>1 requests fills is kv_cache, and the window says it mixes both", VLLM,
        Host(), [RESERVED], "kv_cache", source="https://github.com/vllm-project/vllm/issues/5578",
        extra=timeline(_idle_then_loaded), seconds=20, tags=TAGS,
        evidence={"*": "the window mixes 4 idle scrapes (nothing running or waiting) with 12 loaded ones"}),
    Situation(
        "a vLLM V1 server out of KV cache preempts every step while its queue never empties", VLLM, Host(),
        [RESERVED], "kv_cache", source="https://github.com/vllm-project/vllm/issues/18115",
        extra=timeline(_full_and_preempting), seconds=30, tags=TAGS,
        evidence={"*": "in 16 of 16 scrapes the KV cache was >= 95 % full while requests waited"}),
    Situation(
        "two long sequences hold the whole KV cache while the rest wait", VLLM, Host(), [RESERVED], "kv_cache",
        source="https://github.com/vllm-project/vllm/issues/14412",  # KV 100 % with two requests, max-num-seqs 20
        extra=timeline(_full_and_waiting), seconds=30, tags=TAGS),
    Situation(
        "a vLLM that restarts under load is reported restarting, not cpu from its reload", VLLM, Host(),
        [Gpu(util=0.3, mem_used=72 * GIB, mem_total=80 * GIB)], "none",
        source="https://github.com/vllm-project/vllm/issues/14675",  # restarts randomly under subsequent requests
        extra=timeline(_restarting, _restart_cpu), seconds=45, tags=TAGS,
        evidence={"*": "serving endpoint restarting: its counters went down (preemptions 6 -> 0), after 8 failed scrapes"}),
    # healthy or idle look-alikes
    Situation(
        "a KV cache 94-97 % full with nothing waiting is no bottleneck", VLLM, Host(), [Gpu(util=0.7, mem_used=72 * GIB,
                                                                                            mem_total=80 * GIB)],
        "none", source="https://github.com/tenstorrent/vllm/issues/55",  # Running 16, Pending 0, KV 92-95 %
        extra=timeline(_full_no_queue), seconds=30, tags=TAGS),
    Situation(
        "requests queue at max-num-seqs while the KV cache has room: the runtime's own limits, not kv_cache", VLLM,
        Host(), [Gpu(util=0.4, mem_used=72 * GIB, mem_total=80 * GIB)], "none",
        source="https://github.com/vllm-project/vllm/issues/13508",  # low KV usage, few running, many pending
        extra=timeline(_max_num_seqs), seconds=30, tags=TAGS,
        evidence={"*": "the runtime's own limits (max_num_seqs / max_num_batched_tokens) hold them back"}),
    Situation(
        "a vLLM restarted by its supervisor and serving with room since is none, judged from its new run", VLLM,
        Host(), [Gpu(util=0.3, mem_used=72 * GIB, mem_total=80 * GIB)], "none",
        source="https://github.com/vllm-project/vllm/issues/7633",  # docker auto-restart to recover from failures
        extra=timeline(_restarted_healthy, _healthy_restart_cpu), seconds=45, tags=TAGS),
]
