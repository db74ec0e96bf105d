"""Inference without a GPU (issue 26, class 5): cpu-inference profiles and serving runtimes on GPU-less hosts, where
the CPU is the compute and the work itself (its requests, its cores) plays the part of "the GPU waits"."""

from __future__ import annotations

from situations import GIB, Host, Situation, processes_source, serving_source, together

MIB = 2**20


def _cpu_server(runtime: str, extra: str = "", kind: str = "cpu-inference") -> str:
    lines = "".join(f"    {line}\n" for line in extra.splitlines() if line)
    return f"""
workloads:
  - name: chat
    kind: {kind}
    runtime: {{name: {runtime}}}
    match: {{cmdline: serve}}
{lines}"""


VLLM_CPU = _cpu_server("vllm", "endpoint: http://127.0.0.1:8000/metrics")
LLAMA_CPP = _cpu_server("llama.cpp")
OLLAMA = _cpu_server("ollama")
# a runtime declared as plain inference on a host without GPUs (no gpus:, none attributed)
VLLM_NO_GPU = _cpu_server("vllm", "endpoint: http://127.0.0.1:8000/metrics", kind="inference")

SITUATIONS = [
    Situation(
        # the real case of issue 26: vLLM CPU on 2 cores with a tiny KV cache, driven past it; cpu scores as high (its
        # own 1.95 of 2 cores), but the cores recompute what the full cache preempts: more cache is the remedy
        "vLLM on CPU with its KV cache full preempts while requests queue on its 2 saturated cores", VLLM_CPU,
        Host(cpus=2, cpu_busy=0.98), [], "kv_cache",
        source="https://github.com/vllm-project/vllm/issues/29233",
        extra=together(processes_source("chat", 1.95, io=0.0, per_process={300: 0.05, 301: 1.9}, main_pid=300),
                       serving_source(usage=0.97, running=2, waiting=9, preemptions_per_second=0.5)),
        seconds=30, tags=("class-5", "kv_cache"), ties=("cpu",),
        evidence={"*": "kv_cache precedes cpu for work without a GPU"}),
    Situation(
        "a llama.cpp server on CPU uses every core it may while it generates", LLAMA_CPP,
        Host(cpus=16, cpu_busy=0.99, psi={"cpu.some": 0.3}), [], "cpu",
        source="https://github.com/ollama/ollama/issues/2993",
        extra=processes_source("chat", 15.8, io=0.0, per_process={300: 15.8}, main_pid=300),
        tags=("class-5", "cpu"), evidence={"*": "used 15.80 cores, of the 16 it may use"}),
    Situation(
        "vLLM serving on a GPU-less host (declared inference, no GPU) saturates its cores with KV room", VLLM_NO_GPU,
        Host(cpus=8, cpu_busy=0.97), [], "cpu",
        source="https://github.com/vllm-project/vllm/pull/6212",
        extra=together(processes_source("chat", 7.8, io=0.0, per_process={300: 0.3, 301: 7.5}, main_pid=300),
                       serving_source(usage=0.35, running=8, waiting=4)),
        seconds=30, tags=("class-5", "cpu")),
    Situation(
        "an Ollama model on a GPU-less host swaps: memory stalls, its cores wait on page-ins", OLLAMA,
        Host(cpus=16, cpu_busy=0.15, mem_total=32 * GIB, mem_available=int(0.3 * GIB),
             psi={"memory.full": 0.35, "io.some": 0.5}, disk_busy=0.9, disk_bytes=200e6), [], "host_memory",
        source="https://github.com/ollama/ollama/issues/7686",
        extra=processes_source("chat", 1.2, io=0.0, per_process={300: 1.2}, main_pid=300),
        tags=("class-5", "host_memory")),
    Situation(
        "vLLM CPU with tensor parallel 2 in a container whose 64 MiB /dev/shm is full", VLLM_CPU,
        Host(cpus=16, cpu_busy=0.5, shm_size=64 * MIB, shm_used=63 * MIB), [], "shared_memory",
        source="https://github.com/llm-d/llm-d/pull/673",
        extra=together(processes_source("chat", 8.0, io=0.0, per_process={300: 0.2, 301: 3.9, 302: 3.9}, main_pid=300),
                       serving_source(usage=0.3, running=4, waiting=0)),
        seconds=30, tags=("class-5", "shared_memory")),
    # healthy and idle look-alikes: what must NOT be named
    Situation(
        "an idle llama.cpp server on CPU beside another job's full /dev/shm and a busy disk is none", LLAMA_CPP,
        Host(cpus=16, cpu_busy=0.3, shm_size=8 * GIB, shm_used=int(7.9 * GIB), disk_busy=0.95,
             psi={"io.some": 0.7}), [], "none",
        source="https://github.com/ollama/ollama/issues/976",
        extra=processes_source("chat", 0.01, io=0.0, per_process={300: 0.01}, main_pid=300),
        tags=("class-5", "healthy"), evidence={"*": "idle for lack of work"}),
    Situation(
        "vLLM on CPU with KV room, no queue and half its cores while a backup fills the disk is none", VLLM_CPU,
        Host(cpus=16, cpu_busy=0.5, disk_busy=0.95, psi={"io.some": 0.7}, disk_bytes=400e6), [], "none",
        source="https://github.com/ggml-org/llama.cpp/issues/7812",
        extra=together(processes_source("chat", 8.0, io=0.0, per_process={300: 0.3, 301: 7.7}, main_pid=300),
                       serving_source(usage=0.4, running=3, waiting=0)),
        seconds=30, tags=("class-5", "healthy")),
]
