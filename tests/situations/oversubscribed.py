"""Issue 26, class 2: oversubscribed CPUs starve the work with no thread saturated.

OpenMP, MKL, OpenCV or tokenizer thread pools sized to the whole machine, times DataLoader workers or ranks,
put far more runnable threads than cores on the run queue: each thread gets a slice, no process or thread sits
at a full core, and threads that meet at barriers leave cores idle, so neither "all its cores used" nor "one
thread saturated" fires. On a kernel without PSI (RHEL 8 and its rebuilds boot with psi=0) nothing else says
the threads wait. What does: the run-queue wait of the workload's processes' main threads (/proc/PID/schedstat)
and the host's run queue (/proc/stat procs_running); against the cores it may use (its quota, or its cpuset's
CPUs). The look-alikes: a busy trainer whose many threads do not wait, threads that wait while the GPU stays
busy (wasted CPU, not the limit), many threads asleep, and a neighbour that oversubscribes the host while this
workload's threads get their CPUs (its host-wide busy CPUs, PSI and run queue are not this workload's bottleneck).
"""

from __future__ import annotations

from situations import (
    DISTRIBUTED,
    TRAINER,
    Gpu,
    Host,
    Situation,
    neighbour,
    processes_source,
)

NO_PSI: dict = {}  # /proc/pressure absent: a kernel booted with psi=0
MAIN = 500
WORKERS16 = tuple(range(501, 517))

SCIENCE = """
workloads:
  - name: designer
    kind: inference
    params: 1B
    precision: bf16
    gpus: [0]
"""

SITUATIONS = [
    Situation(
        "OMP_NUM_THREADS unset in 16 DataLoader workers oversubscribes a 16-core host without PSI", TRAINER,
        Host(cpus=16, cpu_busy=0.78, psi=NO_PSI, run_queue=44), [Gpu(util=0.35, util_alternates=0.1)], "cpu",
        source="https://github.com/eduardoAcunaEspinoza/Hy2DL/issues/48",
        extra=processes_source("trainer", 12.2, io=0.0, main_pid=MAIN, ranks={MAIN: WORKERS16},
                               per_process={MAIN: 0.5, **dict.fromkeys(WORKERS16, 0.73)},
                               waits=(4.0, 9.4), threads=17 * 17),
        tags=("issue-26", "class-2"),
        evidence={"*": "its own threads outnumber its cores"}),
    Situation(
        "4 DDP ranks, each with DataLoader workers running intra-op thread pools, oversubscribe a shared node",
        DISTRIBUTED, Host(cpus=16, cpu_busy=0.74, psi=NO_PSI, run_queue=30),
        [Gpu(util=0.3, util_alternates=0.15) for _ in range(4)], "cpu",
        source="https://github.com/pytorch/pytorch/issues/82219",
        extra=processes_source("trainer", 11.2, io=0.0, main_pid=600,
                               ranks={600 + 10 * r: tuple(601 + 10 * r + k for k in range(4)) for r in range(4)},
                               per_process={**{600 + 10 * r: 0.6 for r in range(4)},
                                            **{601 + 10 * r + k: 0.55 for r in range(4) for k in range(4)}},
                               waits=(6.0, 9.0), threads=20 * 18),
        gpus_of={"trainer": (0, 1, 2, 3)}, tags=("issue-26", "class-2"),
        evidence={"*": "runnable threads on the 16 cores it may use"}),
    Situation(
        "tokenizers' parallelism inside 8 DataLoader workers competes with them for 32 cores", TRAINER,
        Host(cpus=32, cpu_busy=0.77, psi=NO_PSI, run_queue=70), [Gpu(util=0.4, util_alternates=0.2)], "cpu",
        source="https://github.com/huggingface/tokenizers/issues/810",
        extra=processes_source("trainer", 24.0, io=0.0, main_pid=MAIN, ranks={MAIN: tuple(range(501, 509))},
                               per_process={MAIN: 0.4, **dict.fromkeys(range(501, 509), 0.6)},
                               waits=(2.4, 3.3), threads=9 * 33),
        tags=("issue-26", "class-2"),
        evidence={"*": "its processes' main threads waited 58 % of their runnable time for a CPU"}),
    Situation(
        "MKL's threads in each of 32 analysis processes oversubscribe the host while the GPU waits", SCIENCE,
        Host(cpus=32, cpu_busy=0.66, psi=NO_PSI, run_queue=96), [Gpu(util=0.2, util_alternates=0.05)], "cpu",
        source="https://github.com/HannesStark/boltzgen/pull/97",
        extra=processes_source("designer", 19.7, io=0.0, main_pid=700,
                               per_process={700: 0.5, **{701 + k: 0.6 for k in range(32)}},
                               waits=(6.6, 16.5), threads=33 * 9),
        tags=("issue-26", "class-2"),
        evidence={"*": "its own threads outnumber its cores"}),
    Situation(
        "a trainer's thread pool sized to the host inside a 4-core CPU quota waits for its CPUs", TRAINER,
        Host(cpus=64, cpu_busy=0.2, psi={"cpu.some": 0.04}), [Gpu(util=0.3, util_alternates=0.1)], "cpu",
        source="https://github.com/springfall2008/batpred/pull/4771",
        extra=processes_source("trainer", 3.9, io=0.0, main_pid=MAIN, per_process={MAIN: 3.9}, cpu_quota=4.0,
                               main_threads={MAIN + k: 3.9 / 64 for k in range(64)}, waits=(0.06, 0.8), threads=70),
        tags=("issue-26", "class-2"),
        evidence={"*": "runnable threads on the 4 cores it may use"}),
    Situation(
        "a Slurm job's 8-CPU cpuset runs a trainer whose thread pools are sized to the node's 64 CPUs", TRAINER,
        Host(cpus=64, cpu_busy=0.14, psi=NO_PSI, run_queue=60), [Gpu(util=0.3, util_alternates=0.1)], "cpu",
        source="https://github.com/pytorch/pytorch/issues/125547",
        extra=processes_source("trainer", 7.8, io=0.0, main_pid=MAIN, ranks={MAIN: tuple(range(501, 509))},
                               per_process={MAIN: 1.4, **dict.fromkeys(range(501, 509), 0.8)},
                               main_threads={MAIN + k: 1.4 / 32 for k in range(32)}, cpus_allowed=8,
                               waits=(1.3, 5.2), threads=9 * 65),
        tags=("issue-26", "class-2"),
        evidence={"*": "runnable threads on the 8 cores it may use"}),
    Situation(
        "another job's threads fill the run queue and starve a lean trainer that needs its CPUs", TRAINER,
        Host(cpus=16, cpu_busy=0.8, psi=NO_PSI, run_queue=50,
             neighbours=(neighbour(4242, "python", "bob", cores=11.0, cpus=16),)),
        [Gpu(util=0.3, util_alternates=0.1)], "cpu",
        source="https://github.com/numpy/numpy/issues/10145",
        extra=processes_source("trainer", 2.0, io=0.0, main_pid=MAIN, ranks={MAIN: (501, 502)},
                               per_process={MAIN: 0.6, 501: 0.7, 502: 0.7}, waits=(1.0, 1.5), threads=12),
        tags=("issue-26", "class-2"),
        evidence={"*": "other processes' threads take the CPUs"}),
    # ---- look-alikes: what must not be named
    Situation(
        "a busy trainer whose 60 threads get their cores (no wait, run queue below the cores) is gpu_compute",
        TRAINER, Host(cpus=16, cpu_busy=0.9, psi={"cpu.some": 0.12}, run_queue=15), [Gpu(util=0.93)],
        "gpu_compute", source="https://github.com/pytorch/pytorch/pull/103229",
        extra=processes_source("trainer", 14.0, io=0.0, main_pid=MAIN, ranks={MAIN: (501, 502, 503, 504)},
                               per_process={MAIN: 2.0, 501: 3.0, 502: 3.0, 503: 3.0, 504: 3.0},
                               waits=(3.5, 0.1), threads=60),
        tags=("issue-26", "class-2", "none-distracted")),
    Situation(
        "OpenCV's threads in 12 DataLoader workers wait for CPUs while the GPU stays busy: gpu_compute, not cpu",
        TRAINER, Host(cpus=16, cpu_busy=0.97, psi={"cpu.some": 0.6}, run_queue=60), [Gpu(util=0.95)], "gpu_compute",
        source="https://github.com/liebharc/homr/pull/128",
        extra=processes_source("trainer", 15.5, io=0.0, main_pid=MAIN, ranks={MAIN: tuple(range(501, 513))},
                               per_process={MAIN: 1.1, **dict.fromkeys(range(501, 513), 1.2)},
                               main_threads={MAIN + k: 1.1 / 8 for k in range(8)}, waits=(4.0, 4.5), threads=13 * 17),
        tags=("issue-26", "class-2", "none-distracted")),
    Situation(
        "a trainer with 300 threads asleep in idle pools is not oversubscribed", TRAINER,
        Host(cpus=32, cpu_busy=0.05, psi=NO_PSI, run_queue=3), [Gpu(util=0.3, util_alternates=0.1)], "none",
        source="https://github.com/pytorch/pytorch/issues/22535",
        extra=processes_source("trainer", 0.3, io=0.0, main_pid=MAIN, ranks={MAIN: (501, 502)},
                               per_process={MAIN: 0.2, 501: 0.05, 502: 0.05}, waits=(0.1, 0.08), threads=300),
        tags=("issue-26", "class-2", "none-distracted")),
    Situation(
        "a neighbour's MKL threads oversubscribe the host while the trainer on its own cores waits for none",
        TRAINER, Host(cpus=32, cpu_busy=0.92, psi={"cpu.some": 0.45}, run_queue=110,
                      neighbours=(neighbour(4242, "python", "bob", cores=27.0, cpus=32),)),
        [Gpu(util=0.4, util_alternates=0.2)], "none",
        source="https://github.com/HannesStark/boltzgen/pull/97",
        extra=processes_source("trainer", 2.0, io=0.0, main_pid=MAIN, ranks={MAIN: (501, 502)},
                               per_process={MAIN: 0.7, 501: 0.65, 502: 0.65}, waits=(1.2, 0.03), threads=40),
        tags=("issue-26", "class-2", "none-distracted")),
]
