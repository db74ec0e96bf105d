"""Serving runtimes that report their own KV cache and queue (vLLM's /metrics): kv_cache and its look-alikes."""

from __future__ import annotations

from situations import GIB, Gpu, Host, Situation, chat, serving_source

VLLM = "\nworkloads:\n" + chat("{name: vllm, gpu_memory_utilization: 0.9}",
                                extra="endpoint: http://127.0.0.1:8000/metrics")
RESERVED = Gpu(util=0.6, mem_used=72 * GIB, mem_total=80 * GIB)  # the reservation: NVML looks full either way

SITUATIONS = [
    Situation(
        "a full KV cache preempts sequences while requests queue", VLLM, Host(), [RESERVED], "kv_cache",
        source="https://github.com/vllm-project/vllm/issues/546",
        extra=serving_source(usage=0.97, waiting=6, preemptions_per_second=0.05), seconds=30, tags=("kv_cache",)),
    Situation(
        "a vLLM card that looks full to NVML with a half-empty KV cache and no queue is none", VLLM,
        Host(cpu_busy=0.05), [Gpu(util=0.02, mem_used=72 * GIB, mem_total=80 * GIB)], "none",
        source="https://github.com/vllm-project/vllm/issues/4723",
        extra=serving_source(usage=0.4, running=0.0, waiting=0.0), seconds=30, tags=("kv_cache", "class-3")),
]
