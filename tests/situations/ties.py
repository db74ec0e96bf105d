"""Issue 12, class 6: ties are decided by causal evidence, not by the order resources are listed in.

Scores within tie_margin of the top one tie; a cause beats the effect it explains (memory pressure burns
CPU in reclaim and turns into disk I/O; throttling slows compute), then direct evidence (the workload's
own consumption) beats a host-wide correlation.
"""

from __future__ import annotations

from situations import GIB, TRAINER, Gpu, Host, Situation, processes_source

SITUATIONS = [
    Situation(
        "reclaim burning the DataLoader workers' CPU under memory pressure is host_memory", TRAINER,
        Host(mem_available=4 * GIB, psi={"memory.full": 0.3, "memory.some": 0.6, "cpu.some": 0.45}),
        [Gpu(util=0.25, util_alternates=0.05)], "host_memory",
        source="https://www.suse.com/zh-cn/support/kb/doc/?id=000018698",
        extra=processes_source("trainer", 3.98, io=0.0), tags=("class-6",), ties=("cpu",),
        evidence={"*": "a tie decided by causal evidence: host_memory explains cpu"}),
    Situation(
        "a full /dev/shm beside host CPUs saturated by others is shared_memory", TRAINER,
        Host(cpu_busy=0.99, psi={"cpu.some": 0.6}, shm_used=int(63.9 * GIB)), [Gpu(util=0.2)], "shared_memory",
        source="https://github.com/pytorch/pytorch/issues/5040",
        extra=processes_source("trainer", 0.02, io=0.0), tags=("class-6", "class-1")),
    Situation(
        "a swap storm of the workload's own page faults is host_memory, not disk_io", TRAINER,
        Host(mem_available=2 * GIB, disk_busy=0.99, disk_queue=30, disk_bytes=300e6,
             psi={"memory.full": 0.4, "io.some": 0.7}), [Gpu(util=0.2)], "host_memory",
        source="https://github.com/pytorch/pytorch/issues/5902",
        extra=processes_source("trainer", 1.0, io=250e6), tags=("class-6",), ties=("disk_io",)),
    Situation(
        "busy host CPUs the trainer shares tie a full /dev/shm its workers need: direct evidence decides",
        TRAINER, Host(cpu_busy=0.99, psi={"cpu.some": 0.6}, shm_used=int(63.9 * GIB)), [Gpu(util=0.2)],
        "shared_memory", source="https://github.com/nianticlabs/simplerecon/issues/3",
        extra=processes_source("trainer", 0.6, io=0.0, per_process={500: 0.2, 501: 0.1, 502: 0.1, 503: 0.1, 504: 0.1},
                               main_pid=500, ranks={500: (501, 502, 503, 504)}), tags=("class-6",), ties=("cpu",),
        evidence={"*": "direct evidence for shared_memory"}),
]
