"""Issue 12, class 2: one saturated thread is a CPU bottleneck.

Data loading in the main process (a DataLoader with 0 workers), a single-threaded decoder or tokenizer, a
serving runtime's Python scheduler: one process pinned at one core while the host looks idle. The
processes collector reports each member's own CPU seconds; one at a full core is `cpu`.
"""

from __future__ import annotations

from situations import TRAINER, Gpu, Host, Situation, processes_source

NO_WORKERS = """
workloads:
  - name: trainer
    kind: training
    params: 350M
    precision: bf16
    training: {optimizer: adamw, batch_size: 64}
    gpus: [0]
"""
VLLM = """
workloads:
  - name: chat
    kind: inference
    params: 7B
    precision: bf16
    runtime: {name: vllm, gpu_memory_utilization: 0.9}
    architecture: {layers: 32, heads: 32, kv_heads: 32, head_dim: 128}
    context: {max: 4096}
    concurrency: 128
    gpus: [0]
"""
RESERVED = dict(mem_used=int(77.5 * 2**30), mem_total=80 * 2**30)  # 97 %: the reservation plus CUDA graphs

SITUATIONS = [
    Situation(
        "a DataLoader with 0 workers pins the main process at one core on an idle 64-core host", NO_WORKERS,
        Host(cpus=64, cpu_busy=0.03), [Gpu(util=0.3, util_alternates=0.02)], "cpu",
        source="https://github.com/runa91/barc_release/issues/9",
        extra=processes_source("trainer", 1.05, io=0.0, per_process={4100: 0.99, 4150: 0.06}, main_pid=4100),
        tags=("class-2",), evidence={"*": "its main process (pid 4100) used 0.99 cores: one core saturated"}),
    Situation(
        "a single-threaded post-processing step in the trainer caps the GPU", NO_WORKERS,
        Host(cpus=8, cpu_busy=0.15), [Gpu(util=0.45, util_alternates=0.2)], "cpu",
        source="https://github.com/AntonMu/TrainYourOwnYOLO/issues/226",
        extra=processes_source("trainer", 1.1, io=0.0, per_process={900: 0.98, 901: 0.12}, main_pid=900),
        tags=("class-2",)),
    Situation(
        "vLLM's scheduler pinned at one core under high concurrency leaves the GPU at 60 %", VLLM,
        Host(cpus=32, cpu_busy=0.05), [Gpu(util=0.6, **RESERVED)], "cpu",
        source="https://github.com/vllm-project/vllm/issues/4806",
        extra=processes_source("chat", 1.3, io=0.0, per_process={300: 1.0, 301: 0.3}, main_pid=300),
        tags=("class-2",), gpu_expected={0: "none"}),
    Situation(
        "an idle vLLM spinning one core is idle for lack of demand", VLLM,
        Host(cpus=48, cpu_busy=0.03), [Gpu(util=0.0, **RESERVED)], "none",
        source="https://github.com/vllm-project/vllm/issues/16968",
        extra=processes_source("chat", 1.0, io=0.0, per_process={300: 1.0}, main_pid=300),
        tags=("class-2", "none-distracted"), gpu_expected={0: "none"}),
    Situation(
        "the main process pinned at one core while its 4 DataLoader workers idle is cpu", TRAINER,
        Host(cpus=32, cpu_busy=0.05), [Gpu(util=0.3, util_alternates=0.05)], "cpu",
        source="https://github.com/pytorch/pytorch/issues/5040",
        extra=processes_source("trainer", 1.4, io=0.0, per_process={500: 0.97, 501: 0.1, 502: 0.1, 503: 0.1, 504: 0.1},
                               main_pid=500, ranks={500: (501, 502, 503, 504)}), tags=("class-2",),
        evidence={"*": "its main process (pid 500)"}),
    Situation(
        "one busy DataLoader worker among idle ones is not the limit", TRAINER,
        Host(cpus=32, cpu_busy=0.05), [Gpu(util=0.3, util_alternates=0.05)], "none",
        source="https://github.com/facebookresearch/deit/issues/81",
        extra=processes_source("trainer", 1.4, io=0.0, per_process={500: 0.1, 501: 0.97, 502: 0.1, 503: 0.1, 504: 0.1},
                               main_pid=500, ranks={500: (501, 502, 503, 504)}), tags=("class-2", "none-distracted")),
    Situation(
        "a main process at one core spread over four busy threads has no saturated thread", NO_WORKERS,
        Host(cpus=64, cpu_busy=0.03), [Gpu(util=0.3, util_alternates=0.02)], "none",
        source="https://github.com/THU-DA-6D-Pose-Group/GDR-Net/issues/36",
        extra=processes_source("trainer", 1.05, io=0.0, per_process={4100: 1.0, 4150: 0.05}, main_pid=4100,
                               main_threads={4100: 0.25, 4101: 0.25, 4102: 0.25, 4103: 0.25}),
        tags=("class-2", "none-distracted")),
    Situation(
        "the GIL thread of a main process pinned at one core, its other threads idle, is cpu", NO_WORKERS,
        Host(cpus=64, cpu_busy=0.03), [Gpu(util=0.3, util_alternates=0.02)], "cpu",
        source="https://github.com/vllm-project/vllm/issues/14538",
        extra=processes_source("trainer", 1.05, io=0.0, per_process={4100: 1.0, 4150: 0.05}, main_pid=4100,
                               main_threads={4100: 0.97, 4101: 0.02, 4102: 0.01}),
        tags=("class-2",), evidence={"*": "its busiest thread (tid 4100) 0.97: one thread saturated"}),
    Situation(
        "one core saturated beside a fully busy GPU is not cpu", NO_WORKERS,
        Host(cpus=16, cpu_busy=0.1), [Gpu(util=0.98)], "gpu_compute",
        source="https://github.com/NVIDIA/nccl/issues/689",
        extra=processes_source("trainer", 1.0, io=0.0, per_process={77: 1.0}, main_pid=77), tags=("class-2",)),
]
