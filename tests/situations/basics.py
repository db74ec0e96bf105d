"""The first situations (the single-workload basics of each resource)."""

from __future__ import annotations

from situations import GIB, SERVER, TRAINER, Gpu, Host, Situation, processes_source

SITUATIONS = [
    Situation("DataLoader starves the GPU", TRAINER, Host(cpus=16, cpu_busy=0.3, psi={"cpu.some": 0.42}),
              [Gpu(util=0.31, util_alternates=0.05)], "cpu", extra=processes_source("trainer", 3.97),
              source="https://mljourney.com/how-to-debug-slow-pytorch-dataloaders/"),
    # TGI reserves the card at its warm-up, so a full card alone is normal: what runs out is memory growing past
    # that reservation (the report's OOM after a successful warm-up)
    Situation("KV cache fills VRAM", SERVER, Host(),
              [Gpu(util=0.7, mem_used=int(78.5 * GIB), mem_growth=8 * 2**20)], "gpu_memory",
              source="https://github.com/huggingface/text-generation-inference/issues/2744"),
    Situation("thermal throttling under full load", SERVER, Host(),
              [Gpu(util=0.97, temperature=89, sm_clock_ratio=0.6, reasons=("hw_thermal_slowdown", "sw_thermal_slowdown"))],
              "gpu_thermal", source="https://matt.sh/cloud-gpu-thermal-throttling"),
    Situation("power cap holds the clocks down", SERVER, Host(),
              [Gpu(util=0.95, power=699, sm_clock_ratio=0.7, reasons=("sw_power_cap",))], "gpu_power",
              source="https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"),
    Situation("idle serving at night is not a bottleneck", SERVER, Host(cpu_busy=0.02), [Gpu(util=0.0, mem_used=70 * GIB)],
              "none", source="https://github.com/vllm-project/vllm/issues/7768"),
    Situation("iowait without a slow GPU is not disk_io", SERVER, Host(iowait=0.4, psi={"io.some": 0.1}), [Gpu(util=0.96)],
              "gpu_compute", source="https://sysdesign-wiki.pages.dev/concepts/io-wait/"),
    Situation("checkpoint writes while the GPU computes are not disk_io", TRAINER,
         Host(disk_busy=0.98, disk_queue=8, psi={"io.some": 0.6}), [Gpu(util=0.97)], "gpu_compute",
         source="https://github.com/pytorch/torchtitan/issues/1301"),
    Situation("a busy host CPU beside a busy GPU is not cpu", SERVER, Host(cpu_busy=0.99, psi={"cpu.some": 0.5}),
              [Gpu(util=0.97)], "gpu_compute", source="https://github.com/NVIDIA/nccl/issues/689"),
    Situation("a busy, well-fed GPU is compute bound", SERVER, Host(), [Gpu(util=0.99)], "gpu_compute",
              source="https://github.com/svc-develop-team/so-vits-svc/issues/101"),
    Situation("a full /dev/shm starves DataLoader workers", TRAINER, Host(shm_used=int(63.8 * GIB)), [Gpu(util=0.2)],
              "shared_memory", source="https://github.com/pytorch/pytorch/issues/5040"),
    Situation("slow storage starves the GPU", TRAINER, Host(disk_busy=0.98, disk_queue=12, psi={"io.some": 0.6}),
              [Gpu(util=0.25)], "disk_io",
              source="https://www.digitado.com.br/my-gpu-was-starving-how-i-broke-the-i-o-wall-for-3-7x-faster-training/"),
    Situation("memory pressure on the host", TRAINER,
         Host(mem_available=3 * GIB, psi={"memory.full": 0.25, "memory.some": 0.5}), [Gpu(util=0.4)], "host_memory",
         source="https://github.com/pytorch/pytorch/issues/5902"),
    Situation("host-to-GPU copies saturate PCIe", SERVER, Host(), [Gpu(util=0.5, pcie=28e9)], "pcie",
              source="https://github.com/rapidsai/rmm/issues/451"),
]


