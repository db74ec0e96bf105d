"""VRAM trends (issue 12, class 7): a sustained least-squares slope is growth, allocator jitter is not."""

from __future__ import annotations

from situations import GIB, SERVER, TRAINER, Gpu, Host, Situation

MIB = 2**20

SITUATIONS = [
    Situation(
        "allocator jitter on a nearly full L4 is not growth", SERVER, Host(),
        [Gpu(util=0.6, mem_total=24 * GIB, mem_used=int(0.92 * 24 * GIB), mem_jitter=64 * MIB, power=50,
             power_limit=72, name="NVIDIA L4")],
        "none", tags=("class-7", "distractor"),
        # DALI grows and shrinks its buffers with the data it loads: memory moves without leaking
        source="https://github.com/NVIDIA/DALI/issues/328",
    ),
    Situation(
        "a steady leak on a nearly full GPU", TRAINER, Host(),
        [Gpu(util=0.7, mem_used=int(0.91 * 80 * GIB), mem_growth=40 * MIB, mem_jitter=16 * MIB)],
        "gpu_memory", tags=("class-7",),
        source="https://github.com/NVlabs/MambaVision/issues/55",  # ~254 MB more every epoch
    ),
    Situation(
        "slow growth far from full is not a bottleneck", TRAINER, Host(),
        [Gpu(util=0.97, mem_used=20 * GIB, mem_growth=3 * MIB, mem_jitter=64 * MIB)],
        "gpu_compute", tags=("class-7", "distractor"),
        source="https://github.com/dingo-gw/dingo/issues/60",  # ~100 MB per epoch, with nvidia-smi -l 1
    ),
]
