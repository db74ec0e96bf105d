"""A busy GPU is not necessarily computing (issue 26, class 1): NVML's utilization counts a GPU as busy while its
kernels wait on a transfer or a collective. Where GPM's activity ratios (SMs, tensor cores, DRAM) are low while a
link carries steady traffic, that link is the bottleneck: ``pcie`` for host-device transfers (weights or KV cache
offloaded to host memory), ``nvlink`` for tensor-parallel collectives inside the host, ``network`` for collectives
over sockets or a NIC (judged against the traffic's own level: a TCP transport reaches a fraction of line rate).
Without GPM only a saturated link counts, and a busy GPU discounts PCIe only while it draws the power of a GPU
that computes. The look-alikes: busy SMs beside heavy PCIe or steady NCCL traffic are compute; an idle GPU beside
a checkpoint upload, and a hung collective that moves no bytes, name no link."""

from __future__ import annotations

from situations import DISTRIBUTED, Gpu, Host, Situation, chat
from situations.interconnect import TENSOR_PARALLEL

GB = 1e9
VLLM = "\nworkloads:\n" + chat("{name: vllm}")
TRAINER_ON_2 = {"trainer": (0, 1)}
A100 = dict(name="NVIDIA A100-SXM4-80GB", power_limit=400.0)
H100_WAITING = dict(util=0.97, power=260.0, sm_active=0.12, tensor_active=0.02, dram_active=0.08)

SITUATIONS = [
    # ------------------------------------------------------------------------------------------------- pcie
    Situation(
        "weights offloaded with --cpu-offload-gb cross PCIe every decode step while the SMs wait", VLLM,
        Host(), [Gpu(pcie=14 * GB, **H100_WAITING)], "pcie",
        source="https://github.com/vllm-project/vllm/issues/57771", tags=("busy-not-computing", "pcie"),
        evidence={"*": "busy, not computing"}),
    Situation(
        "ZeRO-Offload moves optimizer state over PCIe each step: the GPU looks busy, its SMs idle", DISTRIBUTED,
        Host(), [Gpu(pcie=16 * GB, util=0.92, power=240.0, sm_active=0.22, tensor_active=0.08, dram_active=0.1)],
        "pcie", source="https://github.com/deepspeedai/DeepSpeed/issues/6695", gpus_of={"trainer": (0,)},
        tags=("busy-not-computing", "pcie")),
    Situation(
        "ZeRO-Inference token generation streams offloaded weights at PCIe's limit on a GPU without GPM", VLLM,
        Host(), [Gpu(pcie=27.5 * GB, util=0.95, power=110.0, **A100)], "pcie",
        source="https://github.com/deepspeedai/DeepSpeed/issues/3764", tags=("busy-not-computing", "pcie", "no-gpm"),
        evidence={"*": "utilization alone"}, ties=("gpu_compute",)),
    Situation(
        "KV cache offloaded to host memory is fetched by the kernels themselves: busy, steady PCIe, idle SMs",
        VLLM, Host(), [Gpu(pcie=20 * GB, util=0.93, power=280.0, sm_active=0.25, tensor_active=0.05,
                           dram_active=0.12)], "pcie",
        source="https://github.com/LMCache/LMCache/issues/766", tags=("busy-not-computing", "pcie")),
    Situation(
        "tensor parallel without NVLink or a common PCIe bridge: both GPUs wait on copies through the CPU",
        TENSOR_PARALLEL, Host(), [Gpu(pcie=9 * GB, **H100_WAITING), Gpu(pcie=9 * GB, **H100_WAITING)], "pcie",
        source="https://github.com/vllm-project/vllm/issues/4238", tags=("busy-not-computing", "pcie")),
    # ---------------------------------------------------------------------------------------------- network
    Situation(
        "NCCL over 100 Gbit TCP reaches under half the link: every rank busy, SMs idle", DISTRIBUTED,
        Host(nic=(5 * GB, 12.5 * GB)), [Gpu(**H100_WAITING), Gpu(**H100_WAITING)], "network",
        source="https://github.com/NVIDIA/nccl/issues/450", gpus_of=TRAINER_ON_2,
        tags=("busy-not-computing", "network"), evidence={"trainer": "saturation is not the test"}),
    Situation(
        "NCCL over an Azure VM's TCP NIC without a known speed: collectives at 1.7 GB/s, GPUs busy, SMs idle",
        DISTRIBUTED, Host(nic=(1.7 * GB, None)), [Gpu(**H100_WAITING)], "network",
        source="https://github.com/NVIDIA/nccl-tests/issues/83", gpus_of={"trainer": (0,)},
        tags=("busy-not-computing", "network")),
    Situation(
        "a 10 Gbit link between one-GPU nodes: NCCL kernels fill the timeline on 2 SMs", DISTRIBUTED,
        Host(nic=(1.2 * GB, 1.25 * GB)), [Gpu(util=1.0, power=180.0, sm_active=0.03, dram_active=0.02)], "network",
        source="https://github.com/NVIDIA/nccl/issues/689", gpus_of={"trainer": (0,)},
        tags=("busy-not-computing", "network")),
    Situation(
        "NCCL over 32 Gbit TCP at 60 % of wire speed: a data-parallel trainer waits on its gradients", DISTRIBUTED,
        Host(nic=(2.4 * GB, 4 * GB)), [Gpu(util=0.95, power=250.0, sm_active=0.18, tensor_active=0.06,
                                           dram_active=0.1)] * 2, "network",
        source="https://github.com/NVIDIA/nccl/issues/209", gpus_of=TRAINER_ON_2,
        tags=("busy-not-computing", "network")),
    # ----------------------------------------------------------------------------------------------- nvlink
    Situation(
        "a custom all-reduce kernel keeps tensor-parallel GPUs busy on NVLink far below its bandwidth",
        TENSOR_PARALLEL, Host(), [Gpu(nvlink=150 * GB, **H100_WAITING), Gpu(nvlink=150 * GB, **H100_WAITING)],
        "nvlink", source="https://github.com/sgl-project/sglang/issues/6067", tags=("busy-not-computing", "nvlink")),
    Situation(
        "tensor parallel on A100s without GPM: saturated NVLink, not compute, bounds the busy GPUs",
        TENSOR_PARALLEL, Host(),
        [Gpu(nvlink=270 * GB, nvlink_links=12, util=0.99, power=330.0, **A100)] * 2, "nvlink",
        source="https://github.com/vllm-project/vllm/issues/16300", tags=("busy-not-computing", "nvlink", "no-gpm"),
        ties=("gpu_compute",)),
    Situation(
        "an NVLS all-reduce benchmark drives NVLink near its bandwidth on a few SMs", TENSOR_PARALLEL, Host(),
        [Gpu(nvlink=380 * GB, util=1.0, power=300.0, sm_active=0.1, dram_active=0.3)] * 2, "nvlink",
        source="https://github.com/NVIDIA/nccl/issues/2140", tags=("busy-not-computing", "nvlink")),
    Situation(
        "tensor-parallel decode: all-reduce time exceeds compute, NVLink steady at a third of its capacity",
        TENSOR_PARALLEL, Host(), [Gpu(nvlink=140 * GB, util=0.96, power=300.0, sm_active=0.2, tensor_active=0.05,
                                      dram_active=0.15)] * 2, "nvlink",
        source="https://github.com/meta-pytorch/gpt-fast/issues/111", tags=("busy-not-computing", "nvlink")),
    # ------------------------------------------------------------------------------------------- look-alikes
    Situation(
        "offloaded training overlapping its transfers with compute: busy SMs, heavy PCIe, compute-bound",
        DISTRIBUTED, Host(), [Gpu(pcie=24 * GB, util=0.98, power=620.0, sm_active=0.88, tensor_active=0.55,
                                  dram_active=0.4)], "gpu_compute",
        source="https://github.com/deepspeedai/DeepSpeed/pull/7463", gpus_of={"trainer": (0,)},
        tags=("busy-not-computing", "pcie", "lookalike")),
    Situation(
        "without GPM, a busy GPU drawing full power beside heavy PCIe computes: compute, not the link", VLLM, Host(),
        [Gpu(pcie=24 * GB, util=0.98, power=380.0, **A100)], "gpu_compute",
        source="https://github.com/deepspeedai/DeepSpeed/pull/6962", tags=("busy-not-computing", "pcie", "lookalike",
                                                                          "no-gpm")),
    Situation(
        "a compute-bound data-parallel trainer with steady NCCL traffic on its NIC is compute", DISTRIBUTED,
        Host(nic=(3 * GB, 12.5 * GB)), [Gpu(util=0.98, power=640.0, sm_active=0.9, tensor_active=0.6,
                                            dram_active=0.45)] * 2, "gpu_compute",
        source="https://github.com/NVIDIA/nccl/issues/403", gpus_of=TRAINER_ON_2,
        tags=("busy-not-computing", "network", "lookalike")),
    Situation(
        "an idle GPU while its rank uploads a checkpoint: steady NIC traffic is not its bottleneck", DISTRIBUTED,
        Host(nic=(1 * GB, 12.5 * GB)), [Gpu(util=0.02, power=90.0, sm_active=0.01, dram_active=0.01, pcie=2 * GB)],
        "none", source="https://github.com/marin-community/marin/issues/9209", gpus_of={"trainer": (0,)},
        tags=("busy-not-computing", "network", "pcie", "lookalike", "idle")),
    Situation(
        "a hung collective shows 100 % busy at idle power and moves no bytes: no link is named", DISTRIBUTED,
        Host(nic=(0.0, 12.5 * GB)), [Gpu(util=1.0, power=70.0, sm_active=0.01, dram_active=0.0, pcie=0.0,
                                         nvlink=0.0)] * 2, "none",
        source="https://github.com/NVIDIA/nccl/issues/968", gpus_of=TRAINER_ON_2,
        tags=("busy-not-computing", "network", "nvlink", "lookalike")),
    Situation(
        "async checkpoint staging into pinned memory: PCIe bursts beside a latency-bound trainer are not its bottleneck",
        DISTRIBUTED, Host(), [Gpu(pcie=20 * GB, pcie_duty=0.3, util=0.97, power=300.0, sm_active=0.35,
                                  tensor_active=0.2, dram_active=0.2)], "none",
        source="https://github.com/pytorch/torchtitan/pull/1287", gpus_of={"trainer": (0,)},
        tags=("busy-not-computing", "pcie", "lookalike")),
]
