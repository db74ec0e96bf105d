"""Issue 26 class 3: every runtime that reserves GPU memory up front makes a full card its normal state.

TGI's warm-up, TensorRT-LLM's kv_cache_free_gpu_mem_fraction, llama.cpp's context allocated at load and Ollama's
resident model (keep_alive) fill the card whatever the load, as vLLM and SGLang do (workload/runtimes.py says how
each reserves). Which runtime runs there is found from its serving metrics or its profile (or its launcher's
command line: tests/test_reservations.py), not from a name list. What a reservation does not excuse, and must
still be named gpu_memory: memory growing past it, and a workload that shares the card with it and finds no room.
"""

from __future__ import annotations

from headroom.samples import ServingEndpoint, ServingSample, SourceResult

from situations import GIB, Gpu, Host, Situation, chat

ARCH = """    architecture: {layers: 32, heads: 32, kv_heads: 8, head_dim: 128}
    context: {max: 8192}
    concurrency: 8
    gpus: [0]
"""
# a serving workload whose profile names no runtime: what runs it is found from its /metrics
UNNAMED = "\nworkloads:\n  - name: chat\n    kind: inference\n    params: 8B\n    precision: bf16\n" + ARCH
LLAMA_CPP = "\nworkloads:\n" + chat("{name: llama.cpp}")
OLLAMA = "\nworkloads:\n" + chat("{name: ollama}").replace("  - name: chat", "  - name: ollama")
COMFYUI = "  - name: comfyui\n    kind: inference\n    params: 3B\n    precision: fp16\n    gpus: [0]\n"
TWO_VLLM = ("\nworkloads:\n" + chat("{name: vllm, gpu_memory_utilization: 0.45}")
            + chat("{name: vllm, gpu_memory_utilization: 0.45}").replace("  - name: chat", "  - name: code"))
H100 = dict(mem_total=80 * GIB)
RTX4090 = dict(name="NVIDIA GeForce RTX 4090", mem_total=24 * GIB, power=250, power_limit=450)


def endpoint(runtime: str, usage: float | None = None, running: float = 4.0, waiting: float = 0.0,
             capacity: float | None = None):
    """The serving source of ``chat``: its runtime's /metrics as the collector normalizes them (``usage``,
    ``capacity``: its KV cache, None where that runtime does not export it)."""
    def extra(t: int):
        e = ServingEndpoint("chat", "http://127.0.0.1:9000/metrics", up=True, runtime=runtime,
                            kv_cache_usage_ratio=usage, requests_running=running, requests_waiting=waiting,
                            kv_cache_capacity_tokens=capacity)
        return {"serving": SourceResult("serving", True, 0.0, ServingSample((e,)))}
    return extra


SITUATIONS = [
    Situation(
        "TGI, found from its serving metrics, fills the card at warm-up: normal for the GPU", UNNAMED, Host(),
        [Gpu(util=0.6, mem_used=78 * GIB, **H100)], "none", extra=endpoint("tgi", usage=0.3, capacity=120_000),
        source="https://github.com/huggingface/text-generation-inference/issues/1982",
        tags=("issue-26-class-3",), gpu_expected={0: "none"}),
    Situation(
        "a Triton TensorRT-LLM server keeps 90 % of the free memory for its KV cache: normal", UNNAMED, Host(),
        [Gpu(util=0.5, mem_used=int(76.5 * GIB), **H100)], "none",
        extra=endpoint("triton", usage=0.2, capacity=132_608),
        source="https://github.com/NVIDIA/TensorRT-LLM/issues/1400", tags=("issue-26-class-3",),
        gpu_expected={0: "none"}),
    Situation(
        "llama-server with every layer offloaded and its whole context allocated at load", LLAMA_CPP, Host(),
        [Gpu(util=0.55, mem_used=int(23.2 * GIB), **RTX4090)], "none", extra=endpoint("llama.cpp", running=1.0),
        source="https://github.com/ggml-org/llama.cpp/issues/10283", tags=("issue-26-class-3",),
        gpu_expected={0: "none"}),
    Situation(
        "Ollama keeps its model resident between requests (keep_alive): an idle full card is normal", OLLAMA,
        Host(cpu_busy=0.03), [Gpu(util=0.0, mem_used=int(22.8 * GIB), **RTX4090)], "none",
        source="https://github.com/ollama/ollama/issues/2974", tags=("issue-26-class-3",),
        gpu_expected={0: "none"}),
    Situation(
        "two vLLM servers sized to share one card (0.45 each) fill it between them: normal", TWO_VLLM, Host(),
        [Gpu(util=0.7, mem_used=int(74.5 * GIB), **H100)], {"chat": "none", "code": "none"},
        source="https://github.com/vllm-project/vllm/issues/7155", tags=("issue-26-class-3",),
        gpu_expected={0: "none"}),
    Situation(
        "llama-server's VRAM grows past its load-time allocation each run until it runs out", LLAMA_CPP, Host(),
        [Gpu(util=0.6, mem_used=int(22.5 * GIB), mem_growth=4 * 2**20, **RTX4090)], "gpu_memory",
        source="https://github.com/ggml-org/llama.cpp/issues/23446", tags=("issue-26-class-3",),
        gpu_expected={0: "gpu_memory"}, evidence={"*": "growing past the reservation"}),
    Situation(
        "Ollama's resident model leaves ComfyUI no room on the card it shares", OLLAMA + COMFYUI, Host(),
        [Gpu(util=0.35, mem_used=int(23.6 * GIB), **RTX4090)], {"ollama": "none", "comfyui": "gpu_memory"},
        source="https://github.com/if-ai/ComfyUI-IF_AI_tools/issues/17", tags=("issue-26-class-3",),
        gpu_expected={0: "gpu_memory"}),
]
