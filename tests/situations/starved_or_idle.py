"""Issue 12, class 1: a host-wide signal is not the workload's bottleneck unless the workload uses that resource.

A busy disk, iowait, busy CPUs or a busy NIC corroborate "the GPU is starved" only in proportion to the
workload's own use of them (its cores, its block I/O); a GPU idle for lack of work is `none` whatever the
rest of the host does.
"""

from __future__ import annotations

from situations import DISTRIBUTED, TRAINER, Gpu, Host, Situation, processes_source

MIB = 2**20

SITUATIONS = [
    Situation(
        "an idle GPU beside a compile job saturating every core is none", TRAINER,
        Host(cpus=64, cpu_busy=0.99, psi={"cpu.some": 0.7}), [Gpu(util=0.0, mem_used=20 * 2**30)], "none",
        source="https://github.com/vllm-project/vllm-project.github.io/pull/300",
        extra=processes_source("trainer", 0.02, io=0.0), tags=("class-1", "none-distracted"),
        evidence={"*": "idle for lack of work"}),
    Situation(
        "a backup saturating the disk does not starve a trainer whose data sits in RAM", TRAINER,
        Host(disk_busy=0.99, disk_queue=24, disk_bytes=900e6, psi={"io.some": 0.55}, iowait=0.2),
        [Gpu(util=0.35, util_alternates=0.9)], "none",
        source="https://aidailypost.com/news/gpu-utilization-masks-storage-io-bottlenecks-slowing-modern-ai",
        extra=processes_source("trainer", 1.2, io=0.0), tags=("class-1", "none-distracted")),
    Situation(
        "a trainer reading its dataset from the saturated disk is disk_io", TRAINER,
        Host(disk_busy=0.98, disk_queue=14, disk_bytes=480e6, psi={"io.some": 0.6}),
        [Gpu(util=0.25, util_alternates=0.05)], "disk_io",
        source="https://www.digitado.com.br/my-gpu-was-starving-how-i-broke-the-i-o-wall-for-3-7x-faster-training/",
        extra=processes_source("trainer", 1.0, io=470e6), tags=("class-1",),
        evidence={"*": "the workload's own I/O 470.0 MB/s"}),
    Situation(
        "iowait and PSI io from another tenant beside an idle GPU are none", TRAINER,
        Host(iowait=0.45, disk_busy=0.9, disk_bytes=300e6, psi={"io.some": 0.7}), [Gpu(util=0.01)], "none",
        source="https://sysdesign-wiki.pages.dev/concepts/io-wait/",
        extra=processes_source("trainer", 0.05, io=0.0), tags=("class-1", "none-distracted")),
    Situation(
        "a busy NIC beside a distributed trainer with no work is none", DISTRIBUTED,
        Host(nic=(12e9, 12.5e9)), [Gpu(util=0.0)], "none",
        source="https://dev.to/zubairakbar/why-ai-clusters-fail-even-when-gpus-are-idle-5hdb",
        gpus_of={"trainer": (0,)}, tags=("class-1", "none-distracted")),
    Situation(
        "noisy neighbours saturating the CPUs starve an active trainer that needs them", TRAINER,
        Host(cpus=32, cpu_busy=0.99, psi={"cpu.some": 0.5}), [Gpu(util=0.3, util_alternates=0.1)], "cpu",
        source="https://github.com/vllm-project/vllm-project.github.io/pull/300",
        extra=processes_source("trainer", 2.4, io=0.0), tags=("class-1",)),
    Situation(
        "a trainer in a CPU-throttled container stalls while the host looks calm: its cgroup's PSI says cpu",
        TRAINER, Host(cpus=64, cpu_busy=0.2, psi={"cpu.some": 0.02}), [Gpu(util=0.3, util_alternates=0.1)], "cpu",
        source="https://github.com/NVIDIA/nvidia-docker/issues/757",
        extra=processes_source("trainer", 1.9, io=0.0, cgroup_pressure={"cpu": 0.55, "io": 0.0}),
        tags=("class-1",), evidence={"*": "its cgroup's PSI cpu some avg10 55 %"}),
    Situation(
        "a container whose cgroup waits on I/O is disk_io though the host's disks look moderate", TRAINER,
        Host(disk_busy=0.5, disk_bytes=200e6, psi={"io.some": 0.1}), [Gpu(util=0.25, util_alternates=0.05)],
        "disk_io",
        source="https://git.cephaspad.com/AuxXxilium/linux_dsm_epyc7002/blame/commit/"
               "da73f9b898b26fadb278a7538e5a9ceb24ea031f/Documentation/accounting/psi.rst",
        extra=processes_source("trainer", 0.8, cgroup_pressure={"cpu": 0.0, "io": 0.6}), tags=("class-1",),
        evidence={"*": "its cgroup's PSI io some avg10 60 %"}),
    Situation(
        "a saturated host CPU counts little for a trainer that barely uses it", TRAINER,
        Host(cpus=32, cpu_busy=0.99, psi={"cpu.some": 0.5}), [Gpu(util=0.3, util_alternates=0.1)], "none",
        source="https://serverfault.com/questions/645541/evaluating-the-cpu-i-o-wait-on-linux/645544",
        extra=processes_source("trainer", 0.1, io=0.0), tags=("class-1", "none-distracted")),
]
