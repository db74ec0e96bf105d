"""MIG slices: a workload on a MIG instance has that instance's memory, not the GPU's. NVML's device-level
memory figure of a GPU in MIG mode sums every slice, so a full slice on a mostly empty GPU reads "12 % used",
and a roomy slice on a GPU whose other slices are full reads "95 % used". Verdicts and VRAM headroom of the
workload come from its own instances (analysis/signals.py: mig_memory); the GPU's own verdict stays the
whole GPU's."""

from __future__ import annotations

from situations import GIB, Gpu, Host, Situation

# an A100 80GB split 1g.10gb x 7 (nvidia-smi mig -lgip: 9.75 GiB each); the workload's slice is MIG-a. Its runtime
# (Transformers) allocates as it goes: under one that reserves up front (TGI, vLLM) a full slice would be normal
SLICE = int(9.75 * GIB)
SLICE_SERVER = """
workloads:
  - name: chat
    kind: inference
    params: 1B
    precision: bf16
    runtime: {name: transformers}
    architecture: {layers: 16, heads: 32, kv_heads: 8, head_dim: 64}
    context: {max: 8192}
    concurrency: 8
    gpus: [MIG-a]
"""


def _a100(own_used: float, others_used: float) -> Gpu:
    slices = (("MIG-a", int(own_used), SLICE),) + tuple((f"MIG-{k}", int(others_used), SLICE) for k in "bcdefg")
    return Gpu(mig=True, name="NVIDIA A100-SXM4-80GB", mem_total=80 * GIB, power=180, power_limit=400,
               mem_used=sum(s[1] for s in slices), mig_slices=slices)


SOURCE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"  # memory is partitioned per GPU instance

SITUATIONS = [
    Situation(
        "a full MIG slice on a mostly empty GPU", SLICE_SERVER, Host(),
        [_a100(own_used=9.6 * GIB, others_used=0.5 * GIB)],  # its slice 98 % used, the whole GPU 17 %
        "gpu_memory", tags=("mig", "memory"), source=SOURCE,
        evidence={"*": "MIG instance MIG-a"}, gpu_expected={0: "none"},
    ),
]
