"""Pressure from outside the workload (issue 12, class 8): the verdict is the workload's, and the evidence
names the neighbours (sources/neighbours.py) that press on the host's CPU, disks or memory."""

from __future__ import annotations

from types import SimpleNamespace

from headroom.samples import SourceResult

from situations import GIB, TRAINER, Gpu, Host, Situation, neighbour


def trainer_processes(cores: float, read_bytes_per_second: float = 0.0):
    """The trainer's own processes: ``cores`` of CPU and ``read_bytes_per_second`` read from disk."""
    def make(t: int):
        w = SimpleNamespace(name="trainer", processes=5, pids=(1000,), cpu_user_seconds_total=cores * t,
                            cpu_system_seconds_total=0.0, read_bytes_total=int(read_bytes_per_second * t),
                            written_bytes_total=0, resident_memory_bytes=8 * GIB, main_pid=1000,
                            ranks={1000: (1001, 1002, 1003, 1004)}, dataloader_workers=4)  # its main process and 4 workers
        return {"processes": SourceResult("processes", True, 0.001, SimpleNamespace(workloads=(w,)))}
    return make


SITUATIONS = [
    Situation(
        "a neighbour's CPU burn starves the DataLoader", TRAINER,
        Host(cpus=16, cpu_busy=0.99, psi={"cpu.some": 0.55},
             neighbours=(neighbour(4242, "stress-ng", "bob", cores=11.8), neighbour(1001, "pt_data_worker", "alice",
                                                                                     cores=0.9, workload="trainer"))),
        [Gpu(util=0.35)], "cpu", extra=trainer_processes(3.4), tags=("class-8", "cpu"),
        source="https://facebookresearch.github.io/spdl/main/performance_analysis/noisy_neighbour.html",
    ),
    Situation(
        "a backup saturates the disk the trainer reads from", TRAINER,
        Host(disk_busy=0.99, disk_queue=14, psi={"io.some": 0.7},
             neighbours=(neighbour(777, "borg", "backup", cores=0.6, io=420e6, io_share=0.84),)),
        [Gpu(util=0.3)], "disk_io", extra=trainer_processes(1.0, 80e6), tags=("class-8", "disk_io"),
        source="https://github.com/borgbackup/borg/issues/711",  # high I/O delay during a borg backup
    ),
    Situation(
        "a neighbour's job fills the host's memory", TRAINER,
        Host(mem_available=4 * GIB, psi={"memory.full": 0.3, "memory.some": 0.6},
             neighbours=(neighbour(5150, "java", "etl", cores=2.0, rss=190 * GIB),
                         neighbour(5151, "python3", "carol", rss=40 * GIB))),
        [Gpu(util=0.4)], "host_memory", extra=trainer_processes(2.0), tags=("class-8", "host_memory"),
        source="https://github.com/NordicHPC/sonar/issues/135",  # oversubscribed interactive nodes, paging
    ),
]
