"""Links between GPUs and between hosts: the inter-node network and NVLink (issue 12: every resource)."""

from __future__ import annotations

from situations import DISTRIBUTED, SERVER, Gpu, Host, Situation

TENSOR_PARALLEL = SERVER.replace("gpus: [0]", "gpus: [0, 1]\n    parallel: {tensor: 2}")

SITUATIONS = [
    Situation(
        "a data-parallel trainer across hosts waits on a saturated inter-node link", DISTRIBUTED,
        Host(nic=(12.2e9, 12.5e9)), [Gpu(util=0.3, util_alternates=0.1)], "network",
        source="https://github.com/NVIDIA/nccl/issues/318",
        gpus_of={"trainer": (0,)}, tags=("network",)),
    Situation(
        "tensor-parallel all-reduce fills NVLink while the SMs mostly wait", TENSOR_PARALLEL,
        Host(), [Gpu(util=0.97, sm_active=0.15, nvlink=400e9), Gpu(util=0.97, sm_active=0.15, nvlink=400e9)],
        "nvlink", source="https://github.com/meta-pytorch/gpt-fast/issues/111", tags=("nvlink",)),
    Situation(
        "busy SMs beside moderate NVLink traffic are compute, not the interconnect", TENSOR_PARALLEL,
        Host(), [Gpu(util=0.98, sm_active=0.9, nvlink=150e9), Gpu(util=0.98, sm_active=0.9, nvlink=150e9)],
        "gpu_compute", source="https://github.com/NVIDIA/nccl/issues/491", tags=("nvlink", "gpu_compute")),
]
