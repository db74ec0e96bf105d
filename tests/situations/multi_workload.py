"""Several workloads on one host: each verdict reads its own GPUs and its own consumption, so one
workload's saturation is never another's bottleneck (issue 12, classes 1 and 3)."""

from __future__ import annotations

from situations import (
    GIB,
    TRAINER,
    Gpu,
    Host,
    Situation,
    chat,
    processes_source,
    together,
)

TRAINER_AND_CHAT = TRAINER + chat("{name: vllm, gpu_memory_utilization: 0.92}", gpus="[1]")
RESERVED = Gpu(util=0.0, mem_used=int(77.6 * GIB))

SITUATIONS = [
    Situation(
        "a CPU-starved trainer beside an idle vLLM server", TRAINER_AND_CHAT,
        Host(cpus=16, cpu_busy=0.35, psi={"cpu.some": 0.3}), [Gpu(util=0.3, util_alternates=0.05), RESERVED],
        {"trainer": "cpu", "chat": "none"},
        source="https://mljourney.com/how-to-debug-slow-pytorch-dataloaders/",
        extra=together(processes_source("trainer", 3.95, io=0.0), processes_source("chat", 0.4, io=0.0)),
        tags=("multi-workload", "class-3"), gpu_expected={1: "none"}),
    Situation(
        "a compile job saturating the host: the busy trainer computes, the idle server is none", TRAINER_AND_CHAT,
        Host(cpus=32, cpu_busy=0.99, psi={"cpu.some": 0.6}), [Gpu(util=0.97), RESERVED],
        {"trainer": "gpu_compute", "chat": "none"},
        source="https://github.com/vllm-project/vllm/issues/16968",
        extra=together(processes_source("trainer", 3.0, io=0.0), processes_source("chat", 1.0, io=0.0)),
        tags=("multi-workload", "class-1", "none-distracted"), gpu_expected={1: "none"}),
    Situation(
        "a disk-bound trainer does not make its neighbour server disk-bound", TRAINER_AND_CHAT,
        Host(disk_busy=0.97, disk_queue=20, disk_bytes=420e6, psi={"io.some": 0.5}),
        [Gpu(util=0.25, util_alternates=0.05), Gpu(util=0.6, mem_used=int(77.6 * GIB))],
        {"trainer": "disk_io", "chat": "none"},
        source="https://ibee.ai/blogs/ai-gpu-infrastructure/gpu-training-storage-bottleneck-fix-india",
        extra=together(processes_source("trainer", 1.5, io=410e6), processes_source("chat", 0.8, io=0.0)),
        tags=("multi-workload", "class-1")),
]
