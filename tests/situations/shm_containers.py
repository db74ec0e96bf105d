"""A container's small /dev/shm (Docker's default 64 MiB) filled by NCCL's shared-memory transport (issue 26,
corpus: every resource at least 5 situations)."""

from __future__ import annotations

from situations import SERVER, TRAINER, Gpu, Host, Situation

MIB = 2**20

TENSOR_PARALLEL = SERVER.replace("gpus: [0]", "gpus: [0, 1]\n    parallel: {tensor: 2}")

SITUATIONS = [
    Situation(
        "tensor-parallel vLLM in a container whose 64 MiB /dev/shm NCCL filled: both GPUs wait", TENSOR_PARALLEL,
        Host(cpu_busy=0.1, shm_size=64 * MIB, shm_used=int(63.8 * MIB)), [Gpu(util=0.2), Gpu(util=0.2)],
        "shared_memory", source="https://github.com/vllm-project/vllm/issues/1710", tags=("shared_memory",)),
    Situation(
        "a data-parallel trainer in a container with the default 64 MiB /dev/shm: NCCL's segments fill it",
        TRAINER, Host(cpu_busy=0.2, shm_size=64 * MIB, shm_used=int(63.9 * MIB)), [Gpu(util=0.15)],
        "shared_memory", source="https://github.com/NVIDIA/nccl/issues/342", tags=("shared_memory",)),
    Situation(
        "a half-used 64 MiB /dev/shm beside a busy GPU is not shared_memory", TRAINER,
        Host(cpu_busy=0.3, shm_size=64 * MIB, shm_used=32 * MIB), [Gpu(util=0.97)], "gpu_compute",
        source="https://github.com/NVIDIA/nccl/issues/290", tags=("shared_memory", "gpu_compute")),
]
