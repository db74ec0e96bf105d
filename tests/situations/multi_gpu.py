"""Issue 12, classes 3 and 4: GPU verdicts that know what runs on the GPU, and multi-GPU stragglers.

A serving runtime that reserves the card up front (vLLM's gpu_memory_utilization, SGLang's
mem_fraction_static) makes a full card normal for the GPU's own verdict too. Synchronous multi-GPU work
runs at the pace of its slowest rank: the waiting ranks look busy (NCCL spins in its kernels), so the
straggler's cause is the workload's, and the evidence names the straggler.
"""

from __future__ import annotations

from situations import GIB, Gpu, Host, Situation, chat

DDP4 = """
workloads:
  - name: trainer
    kind: training
    params: 7B
    precision: bf16
    training: {optimizer: adamw, batch_size: 256}
    parallel: {data: 4}
    gpus: [0, 1, 2, 3]
"""
TP8 = DDP4.replace("parallel: {data: 4}", "parallel: {tensor: 8}").replace("gpus: [0, 1, 2, 3]",
                                                                          "gpus: [0, 1, 2, 3, 4, 5, 6, 7]")
VLLM_TP2 = """
workloads:
  - name: chat
    kind: inference
    params: 70B
    precision: fp8
    runtime: {name: vllm, gpu_memory_utilization: 0.92}
    architecture: {layers: 80, heads: 64, kv_heads: 8, head_dim: 128}
    context: {max: 8192}
    concurrency: 32
    parallel: {tensor: 2}
    gpus: [0, 1]
"""
SGLANG = "\nworkloads:\n" + chat("{name: sglang, mem_fraction_static: 0.88}", concurrency=16)
WAITING = Gpu(util=0.97, temperature=70, sm_clock_ratio=0.98, power=520)  # a rank spinning in a collective
HOT = Gpu(util=0.98, temperature=88, sm_clock_ratio=0.62, power=430,
          reasons=("hw_thermal_slowdown", "sw_thermal_slowdown"))
CAPPED = Gpu(util=0.98, temperature=66, sm_clock_ratio=0.7, power=699, reasons=("sw_power_cap",))
LOW_CLOCKS = Gpu(util=0.99, temperature=58, sm_clock_ratio=0.55, power=300)
FULL = dict(mem_used=int(77.6 * GIB), mem_total=80 * GIB)  # 97 %: the reservation plus CUDA graphs

SITUATIONS = [
    Situation(
        "one thermally throttled rank paces a 4-GPU data-parallel job", DDP4, Host(),
        [WAITING, WAITING, HOT, WAITING], "gpu_thermal",
        source="https://jingchaozhang.github.io/Thermal-Throttling-Impact-on-Multi-Node-Training",
        tags=("class-4",), evidence={"*": "GPU 2 is the straggler: GPUs 0, 1, 3"}),
    Situation(
        "one power-capped rank paces an 8-GPU tensor-parallel job", TP8, Host(),
        [WAITING] * 5 + [CAPPED] + [WAITING] * 2, "gpu_power",
        source="https://arxiv.org/html/2511.09861v2", tags=("class-4",),
        evidence={"*": "GPU 5 is the straggler"}),
    Situation(
        "a rank whose clocks are held low paces the job, named in the evidence", DDP4, Host(),
        [WAITING, LOW_CLOCKS, WAITING, WAITING], "gpu_compute",
        source="https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html", tags=("class-4",),
        evidence={"*": "GPU 1 is the straggler"}),
    Situation(
        "every rank power capped alike has no straggler: gpu_power without naming one", DDP4, Host(),
        [CAPPED] * 4, "gpu_power", source="https://www.alloclabs.com/blog/training-performance-stragglers",
        tags=("class-4",)),
    Situation(
        "ranks waiting in NCCL look busy but a healthy job is compute bound", DDP4, Host(),
        [Gpu(util=0.97)] * 4, "gpu_compute", source="https://github.com/cupy/cupy/issues/3557",
        tags=("class-4",)),
    Situation(
        "a tensor-parallel vLLM reserving 97 % of both cards is normal for each GPU", VLLM_TP2, Host(),
        [Gpu(util=0.55, **FULL), Gpu(util=0.55, **FULL)], "none",
        source="https://github.com/vllm-project/vllm/issues/7553", tags=("class-3",),
        gpu_expected={0: "none", 1: "none"}),
    Situation(
        "SGLang's static pool fills the card, which is normal for the GPU", SGLANG, Host(),
        [Gpu(util=0.4, **FULL)], "none", source="https://github.com/sgl-project/sglang/pull/9083",
        tags=("class-3",), gpu_expected={0: "none"}),
]
