"""The processes collector against fixture /proc trees: who belongs to which workload, and what they cost.

tests/fixtures/proc/workloads: init, kthreadd and a kworker; a trainer (1000, train.py in a login session)
with two spawned DataLoader workers (1001, 1002) and a grandchild (1003, ffmpeg); vLLM under
system.slice/vllm.service (2000) with an engine core child (2001); a docker container process (3000);
llama-server (4000); a java proxy (5000); 6000 is listed but its files are gone (it exited mid-scan).
workloads.sysfs holds the cgroup v2 files of the vLLM unit and the container.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from headroom.sources import Paths, SourceContext, procfs
from headroom.sources.processes import PAGE_SIZE, ProcessesCollector, parse_cpu_max, parse_io_stat
from headroom.workload.profiles import profile_from_dict

from conftest import FIXTURES

PROC = FIXTURES / "proc" / "workloads"
SYS = FIXTURES / "proc" / "workloads.sysfs"
DOCKER = "9f2c4e1a7b3d5f6081a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708"


def profile(name: str, **match):
    return profile_from_dict({"name": name, "kind": "inference", "match": match})


def collector(*profiles, procfs_root: Path = PROC, rootfs: Path = Path("/")) -> ProcessesCollector:
    paths = Paths(procfs=procfs_root, sysfs=SYS, rootfs=rootfs)
    return ProcessesCollector(SourceContext(paths=paths, workloads=tuple(profiles)))


def by_name(sample):
    return {w.name: w for w in sample.workloads}


def write_proc(root: Path, pid: int, comm: str, ppid: int, argv: list[str], cgroup: str, *, utime: int = 0,
               stime: int = 0, starttime: int = 900_000, threads: int = 1, rss_pages: int = 0) -> None:
    """A /proc/PID directory the way the kernel lays it out (stat fields in ticks, NUL-separated argv)."""
    d = root / str(pid)
    tmp = root / f".new-{pid}"  # built aside and renamed in, so the directory gets a fresh inode like a new process
    tmp.mkdir()
    (tmp / "stat").write_text(
        f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 10 0 0 0 {utime} {stime} 0 0 20 0 {threads} 0 "
        f"{starttime} 1000000 {rss_pages} 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
    (tmp / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (tmp / "cgroup").write_text(f"0::{cgroup}\n")
    (tmp / "io").write_text("rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: 0\nwrite_bytes: 0\n"
                            "cancelled_write_bytes: 0\n")
    if d.exists():
        old = root / f".old-{pid}"
        d.rename(old)
        tmp.rename(d)
        shutil.rmtree(old)
    else:
        tmp.rename(d)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the workloads fixture tree."""
    root = tmp_path / "proc"
    shutil.copytree(PROC, root)
    return root


# ----------------------------------------------------------------------------------------- matching
@pytest.mark.parametrize(("situation", "match", "pids"), [
    ("a trainer's DataLoader workers and their child follow the trainer", {"cmdline": r"train\.py"},
     (1000, 1001, 1002, 1003)),
    ("a systemd unit named without .service takes the unit's processes", {"systemd_unit": "vllm"}, (2000, 2001)),
    ("a systemd unit named in full", {"systemd_unit": "vllm.service"}, (2000, 2001)),
    ("a short container id finds the docker scope", {"container_id": DOCKER[:12]}, (3000,)),
    ("an executable name matches comm", {"exe": "llama-server"}, (4000,)),
    ("an executable name longer than comm's 15 bytes", {"exe": "VLLM::EngineCore"}, (2001,)),
    ("a cgroup glob over the session scope", {"cgroup": "/user.slice/user-*.slice/session-*.scope"},
     (1000, 1001, 1002, 1003)),
    ("a regex that matches nothing", {"cmdline": "sglang"}, ()),
    ("kernel threads have no command line to match", {"cmdline": "^$"}, ()),
])
def test_matching_rules(situation, match, pids):
    (w,) = collector(profile("w", **match)).collect().workloads
    assert w.pids == pids, situation
    assert w.processes == len(pids)


def test_trainer_members_sum_threads_rss_cpu_and_io_and_find_its_dataloader_workers():
    (w,) = collector(profile("trainer", cmdline=r"train\.py")).collect().workloads
    assert w.main_pid == 1000
    # the main process is the rank; its two named workers count, the ffmpeg one of them runs does not
    assert dict(w.ranks) == {1000: (1001, 1002)} and w.dataloader_workers == 2
    assert w.threads == 64 + 4 + 4 + 8
    assert w.resident_memory_bytes == (2_621_440 + 262_144 * 2 + 25_600) * PAGE_SIZE
    assert w.cpu_user_seconds_total == pytest.approx((50_000 + 20_000 + 19_000 + 700) / 100)
    assert w.cpu_system_seconds_total == pytest.approx((4_000 + 3_000 + 2_500 + 100) / 100)
    assert w.read_bytes_total == (8 << 30) + 2 * (4 << 30) + (1 << 20)
    assert w.written_bytes_total == 1 << 30
    assert w.cgroup is None  # a cmdline rule does not map it to a cgroup


def test_systemd_unit_reads_its_cgroup_v2_files():
    (w,) = collector(profile("chat", systemd_unit="vllm")).collect().workloads
    cg = w.cgroup
    assert cg is not None and cg.path == "/system.slice/vllm.service"
    assert (cg.cpu_user_seconds_total, cg.cpu_system_seconds_total) == (4900.0, 420.0)
    assert cg.memory_bytes == 12 << 30
    assert (cg.read_bytes_total, cg.written_bytes_total) == (16 << 30, 1 << 30)
    assert dict(cg.pressure_some_avg10) == {"cpu": 0.125, "memory": 0.0, "io": 0.0325}
    assert cg.cpu_quota_cores == 4.0


def test_container_cgroup_has_no_cpu_limit():
    (w,) = collector(profile("qwen", container_id=DOCKER[:16])).collect().workloads
    assert w.cgroup.path == f"/system.slice/docker-{DOCKER}.scope"
    assert w.cgroup.cpu_quota_cores is None  # cpu.max says "max"


def test_unit_without_processes_still_reads_its_cgroup_when_it_exists():
    (w,) = collector(profile("idle", systemd_unit="vllm", cmdline="never-matches")).collect().workloads
    assert w.cgroup is not None  # found through its processes, which the unit rule matched
    (w,) = collector(profile("gone", systemd_unit="absent.service")).collect().workloads
    assert w.pids == () and w.cgroup is None


def test_first_declared_workload_wins_and_children_follow_it():
    c = collector(profile("session", cgroup="/user.slice/*"), profile("trainer", cmdline=r"train\.py"))
    w = by_name(c.collect())
    assert w["session"].pids == (1000, 1001, 1002, 1003)  # below /user.slice, not in it
    assert w["trainer"].pids == ()


def test_pid_file_names_the_process_and_its_children(tmp_path: Path, tree: Path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "run").mkdir(parents=True)
    c = collector(profile("proxy", pid_file="/run/proxy.pid"), procfs_root=tree, rootfs=rootfs)
    assert c.collect().workloads[0].pids == ()  # no pid file yet: nothing, no error
    (rootfs / "run" / "proxy.pid").write_text("5000\n")
    write_proc(tree, 5001, "java", 5000, ["java", "-cp", "worker.jar"], "/user.slice", starttime=900_000)
    assert c.collect().workloads[0].pids == (5000, 5001)
    (rootfs / "run" / "proxy.pid").write_text("garbage\n")
    assert c.collect().workloads[0].pids == (5001,)  # the child keeps its inherited workload


def test_no_declared_workloads_costs_nothing(tmp_path: Path):
    c = collector(procfs_root=tmp_path / "does-not-exist")
    assert c.collect().workloads == ()


# ------------------------------------------------------------------------ ranks and DataLoader workers
PY = "/venv/bin/python3"
SPAWN = [PY, "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=12, pipe_handle=16)",
         "--multiprocessing-fork"]
TRACKER = [PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(11)"]
FORKSERVER = [PY, "-B", "-c", "from multiprocessing.forkserver import main; main(14, 15, ['__main__'])"]
SESSION = "/user.slice/user-1000.slice/session-4.scope"


def torchrun_tree(root: Path, rank_children: dict[int, list[tuple[int, str, list[str]]]],
                  script: str = "train_ddp.py") -> None:
    """torchrun (7000, comm pt_elastic as torch names it) -> ranks (7001, 7002: `python3 -u SCRIPT`) -> the given
    children of each rank, {rank: [(pid, comm, argv)]}, as torch 2.13 lays them out (docs/workload-identity.md)."""
    write_proc(root, 7000, "pt_elastic", 1, [PY, "/venv/bin/torchrun", "--standalone", "--nproc_per_node=2", script],
               SESSION, starttime=950_000)
    for rank in (7001, 7002):
        write_proc(root, rank, "python3", 7000, [PY, "-u", script], SESSION, starttime=950_100)
        for pid, comm, argv in rank_children.get(rank, []):
            parent = rank if not isinstance(argv, tuple) else argv[0]  # (ppid, argv): a grandchild
            write_proc(root, pid, comm, parent, list(argv[1] if isinstance(argv, tuple) else argv), SESSION,
                       starttime=950_200 + pid)


def test_under_torchrun_the_ranks_are_the_launchers_children_and_each_counts_its_own_workers(tree: Path):
    """Issue 25: the old count was the main process's children, i.e. torchrun's 2 ranks; the workers are the ranks'
    children that torch names pt_data_worker (fork: the rank's own argv), counted per rank."""
    fork = [PY, "-u", "train_ddp.py"]
    torchrun_tree(tree, {7001: [(7010, "pt_data_worker", fork), (7011, "pt_data_worker", fork),
                                (7012, "pt_data_worker", fork)],
                         7002: [(7020, "ffmpeg", ["ffmpeg", "-i", "clip.mp4", "-f", "rawvideo", "-"])]})
    (w,) = collector(profile("ddp", cmdline=r"train_ddp\.py"), procfs_root=tree).collect().workloads
    assert w.main_pid == 7000
    assert dict(w.ranks) == {7001: (7010, 7011, 7012), 7002: ()}  # rank 7002 runs a decoder, no worker
    assert w.dataloader_workers == 3


def test_unnamed_spawn_and_forkserver_workers_count_the_tracker_and_the_forkserver_do_not(tree: Path):
    """A spawned worker reads `python3` for seconds while it imports torch; a forkserver's fork is a grandchild of
    the rank; multiprocessing's resource tracker and the forkserver itself are no workers."""
    torchrun_tree(tree, {
        7001: [(7010, "python3", TRACKER), (7011, "python3", SPAWN), (7012, "pt_data_worker", SPAWN)],
        7002: [(7020, "python3", TRACKER), (7021, "python3", FORKSERVER), (7022, "python3", (7021, FORKSERVER)),
               (7023, "pt_data_worker", (7021, FORKSERVER))],
    })
    (w,) = collector(profile("ddp", cmdline=r"train_ddp\.py"), procfs_root=tree).collect().workloads
    assert dict(w.ranks) == {7001: (7011, 7012), 7002: (7022, 7023)}


def test_without_a_launcher_the_main_process_is_the_rank_and_an_unnamed_fork_of_it_is_a_worker(tree: Path):
    """PyTorch before 2.5 never names its workers: a fork of the rank that did not exec (its Python argv and comm)
    is one; a fork of a shell is not (not Python), nor a child that exec'd another program."""
    argv = [PY, "train_plain.py", "--epochs", "3"]
    write_proc(tree, 7100, "python3", 1, argv, SESSION, starttime=950_000)
    write_proc(tree, 7101, "python3", 7100, argv, SESSION, starttime=950_100)
    write_proc(tree, 7102, "python3", 7100, argv, SESSION, starttime=950_101)
    write_proc(tree, 7103, "sh", 7100, ["/bin/sh", "-c", "nvidia-smi"], SESSION, starttime=950_102)
    write_proc(tree, 7200, "bash", 1, ["/bin/bash", "run_plain.sh"], SESSION, starttime=950_000)
    write_proc(tree, 7201, "bash", 7200, ["/bin/bash", "run_plain.sh"], SESSION, starttime=950_100)
    c = collector(profile("plain", cmdline=r"train_plain\.py"), profile("shell", cmdline=r"run_plain\.sh"),
                  procfs_root=tree)
    plain, shell = c.collect().workloads
    assert dict(plain.ranks) == {7100: (7101, 7102)} and plain.dataloader_workers == 2
    assert dict(shell.ranks) == {7200: ()}  # a subshell is a fork with the same argv, but not a Python one


def test_a_main_process_without_workers_is_a_rank_with_zero():
    (w,) = collector(profile("llama", exe="llama-server")).collect().workloads
    assert dict(w.ranks) == {4000: ()} and w.dataloader_workers == 0


def test_a_worker_seen_before_its_rank_execs_is_read_again_until_its_argv_settles(tree: Path):
    """A command line read in a process's first ARGV_SETTLE_SECONDS is read again on the next tick: a fork that had
    not exec'd yet (here: the rank still reads like torchrun's fork) is then seen as what it became."""
    from headroom.simulation import ManualClock
    from headroom.sources.processes import ARGV_SETTLE_SECONDS

    clock = ManualClock(100.0)
    c = ProcessesCollector(SourceContext(paths=Paths(procfs=tree, sysfs=SYS, rootfs=Path("/")),
                                         workloads=(profile("ddp", cmdline=r"train_ddp\.py"),), monotonic=clock))
    c.collect()  # the first scan: the fixture's old processes
    torchrun_tree(tree, {7001: [(7010, "python3", [PY, "-u", "train_ddp.py"])]})
    write_proc(tree, 7010, "python3", 7001, [PY, "/venv/bin/torchrun", "train_ddp.py"], SESSION, starttime=957_210)
    clock.advance(1.0)
    assert dict(c.collect().workloads[0].ranks)[7001] == ()  # its argv is not (yet) the rank's
    write_proc(tree, 7010, "python3", 7001, [PY, "-u", "train_ddp.py"], SESSION, starttime=957_210)
    clock.advance(1.0)
    assert dict(c.collect().workloads[0].ranks)[7001] == (7010,)  # the fork of the rank, read again: a worker
    write_proc(tree, 7010, "python3", 7001, ["/usr/bin/other"], SESSION, starttime=957_210)
    clock.advance(ARGV_SETTLE_SECONDS)
    c.collect()
    clock.advance(1.0)
    assert dict(c.collect().workloads[0].ranks)[7001] == (7010,)  # settled: its argv is not read again


# --------------------------------------------------------------------------- vanishing, reuse, denial
def test_a_process_listed_but_gone_is_skipped_without_error():
    assert (PROC / "6000").is_dir() and not (PROC / "6000" / "stat").exists()
    w = by_name(collector(profile("all", cgroup="/*")).collect())["all"]
    assert 6000 not in w.pids and 1000 in w.pids


def test_each_members_own_cpu_seconds_are_reported_beside_the_sum(tree: Path):
    """Per-process saturation (one member pinned at a core) needs each member's own counter, not only the sum."""
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    first = c.collect().workloads[0]
    assert dict(first.process_cpu_seconds) == pytest.approx(
        {1000: 540.0, 1001: 230.0, 1002: 215.0, 1003: 8.0})  # (utime + stime) / 100 of each fixture process
    assert sum(first.process_cpu_seconds.values()) == pytest.approx(
        first.cpu_user_seconds_total + first.cpu_system_seconds_total)
    stat = tree / "1000" / "stat"
    fields = stat.read_text().split(" ")
    fields[13] = str(int(fields[13]) + 100)  # the main process: utime + 1 s
    stat.write_text(" ".join(fields))
    second = c.collect().workloads[0]
    assert second.process_cpu_seconds[1000] == pytest.approx(541.0)
    assert second.process_cpu_seconds[1001] == first.process_cpu_seconds[1001]


def test_members_main_thread_run_queue_waits_are_summed_from_schedstat(tree: Path):
    """Oversubscribed CPUs (issue 26, class 2): each member's /proc/PID/schedstat (its main thread's seconds on a CPU
    and waiting runnable for one) is summed into the workload's counters, each member counted from its first
    read; a member without the file (a kernel without CONFIG_SCHED_INFO, a fixture) stays a member, unread."""
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    first = c.collect().workloads[0]
    assert first.sched_run_seconds_total is None and first.sched_wait_seconds_total is None  # the fixture has none
    assert 1000 in first.pids
    for pid, (ran, waited) in {1000: (5.0, 1.0), 1001: (2.0, 3.0)}.items():
        (tree / str(pid) / "schedstat").write_text(f"{int(ran * 1e9)} {int(waited * 1e9)} 40\n")
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    w = c.collect().workloads[0]
    assert (w.sched_run_seconds_total, w.sched_wait_seconds_total) == (0.0, 0.0)  # counted from the first read
    (tree / "1000" / "schedstat").write_text(f"{int(5.5e9)} {int(1.25e9)} 41\n")
    (tree / "1001" / "schedstat").write_text(f"{int(2.5e9)} {int(4.5e9)} 50\n")
    assert c.collect().workloads[0].sched_wait_seconds_total == 0.0  # their CPU seconds did not grow: not read
    for pid in (1000, 1001):  # they ran: their schedstat is read, and holds what they did since
        stat = tree / str(pid) / "stat"
        fields = stat.read_text().split(" ")
        fields[13] = str(int(fields[13]) + 100)
        stat.write_text(" ".join(fields))
    w = c.collect().workloads[0]
    assert w.sched_run_seconds_total == pytest.approx(1.0) and w.sched_wait_seconds_total == pytest.approx(1.75)
    assert set(w.pids) >= {1000, 1001, 1002, 1003}  # 1002 and 1003 have no schedstat: still members
    (tree / "1001" / "schedstat").write_text("garbage\n")  # unparsable: that member is not read again, no error
    stat = tree / "1001" / "stat"
    fields = stat.read_text().split(" ")
    fields[13] = str(int(fields[13]) + 100)
    stat.write_text(" ".join(fields))
    w = c.collect().workloads[0]
    assert w.sched_run_seconds_total == pytest.approx(1.0) and 1001 in w.pids


def test_the_cpus_a_workload_may_use_include_its_main_process_cpu_affinity():
    """A cpuset (Slurm, Kubernetes' static CPU manager, taskset) limits the cores without a quota: the main process's
    affinity (one sched_getaffinity, no file) is reported; unknown on a fixture tree (not this machine's processes)."""
    import subprocess
    import sys
    import time
    import uuid

    token = f"headroom-test-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen([sys.executable, "-c", "import os, time; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
                              " time.sleep(60)", token])
    try:
        c = ProcessesCollector(SourceContext(paths=Paths(), workloads=(profile("t", cmdline=token),)))
        deadline = time.monotonic() + 10
        while True:
            w = c.collect().workloads[0]
            if (w.pids and w.cpus_allowed == 1) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert w.pids == (child.pid,) and w.cpus_allowed == 1
        c.close()
    finally:
        child.kill()
        child.wait()
    assert collector(profile("trainer", cmdline=r"train\.py")).collect().workloads[0].cpus_allowed is None


def test_what_did_not_change_since_the_last_tick_is_the_last_ticks_object(tree: Path):
    """An idle member's CPU seconds, the pids and the children are kept once in the window, not once per sample;
    the sample still equals what a collector that never saw the previous tick reads."""
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    first = c.collect().workloads[0]
    second = c.collect().workloads[0]
    assert second.process_cpu_seconds is first.process_cpu_seconds
    assert second.pids is first.pids and second.ranks is first.ranks
    stat = tree / "1001" / "stat"
    fields = stat.read_text().split(" ")
    fields[13] = str(int(fields[13]) + 100)  # a worker: utime + 1 s
    stat.write_text(" ".join(fields))
    third = c.collect().workloads[0]
    assert third.process_cpu_seconds is not second.process_cpu_seconds
    assert dict(third.process_cpu_seconds) == dict(first.process_cpu_seconds) | {1001: 231.0}
    assert dict(second.process_cpu_seconds) == dict(first.process_cpu_seconds)  # the earlier sample is unchanged
    fresh = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree).collect().workloads[0]
    assert dict(third.process_cpu_seconds) == dict(fresh.process_cpu_seconds) and third.pids == fresh.pids


def test_a_hot_rank_gets_its_threads_read_a_calm_one_does_not(tree: Path):
    """Per-thread saturation where cheap: a rank's (here the main process's) /proc/PID/task/TID/stat are read only on
    a tick where it ran at HOT_CORES or more since the previous one (a few dozen reads then, none on a calm tick)."""
    from headroom.simulation import ManualClock

    task = tree / "1000" / "task"
    for tid, utime in ((1000, 30_000), (1010, 5_000)):  # the GIL thread and a helper, in clock ticks
        (task / str(tid)).mkdir(parents=True)
        (task / str(tid) / "stat").write_text(
            f"{tid} (python3) R 1 1000 1000 0 -1 4194560 10 0 0 0 {utime} 100 0 0 20 0 1 0 "
            "900000 1000000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
    clock = ManualClock(10.0)
    c = ProcessesCollector(SourceContext(paths=Paths(procfs=tree, sysfs=SYS, rootfs=Path("/")),
                                         workloads=(profile("trainer", cmdline=r"train\.py"),), monotonic=clock))
    assert dict(c.collect().workloads[0].rank_thread_cpu_seconds) == {}  # no previous tick: no rate yet

    def advance(seconds: float, cpu_ticks: int) -> dict:
        stat = tree / "1000" / "stat"
        fields = stat.read_text().split(" ")
        fields[13] = str(int(fields[13]) + cpu_ticks)
        stat.write_text(" ".join(fields))
        clock.advance(seconds)
        return {r: dict(tids) for r, tids in c.collect().workloads[0].rank_thread_cpu_seconds.items()}

    assert advance(1.0, 50) == {}  # 0.5 cores: calm, its threads are not read
    assert advance(1.0, 95) == {1000: {1000: 301.0, 1010: 51.0}}  # 0.95 cores: hot, each thread's utime + stime


def test_a_simulations_real_stand_ins_have_unknown_io_a_simulated_proc_has_its_own():
    """Stand-ins that are real processes of this machine burn real CPU but perform none of the I/O they model:
    their /proc/PID/io must not say 'reads nothing' (that would rule their disk out), so it is None; a
    simulated /proc (a synthetic host's, here the fixture tree) says what its processes read, and counts."""
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    marker = f"headroom-test-standin-{os.getpid()}"
    standin = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        real = Paths(procfs=Path("/proc"), sysfs=SYS, rootfs=Path("/"))
        rule = profile("w", cmdline=marker)
        deadline = time.monotonic() + 10
        seen = {}
        while time.monotonic() < deadline and len(seen) < 2:
            for name, scenario in (("simulated", SimpleNamespace()), ("real", None)):
                (w,) = ProcessesCollector(SourceContext(paths=real, workloads=(rule,), scenario=scenario)).collect().workloads
                if w.pids:
                    seen[name] = w
        assert seen["simulated"].read_bytes_total is None  # a real stand-in under a simulation: unknown
        assert seen["real"].read_bytes_total is not None  # the same process outside one: our own, readable
        # its run-queue waits are this machine's (a CPU hog beside the tests), not the simulated host's: unknown too
        assert seen["simulated"].sched_wait_seconds_total is None and seen["real"].sched_wait_seconds_total == 0.0
    finally:
        standin.kill()
        standin.wait()
    fixture = Paths(procfs=PROC, sysfs=SYS, rootfs=Path("/"))
    (w,) = ProcessesCollector(SourceContext(paths=fixture, workloads=(profile("trainer", cmdline=r"train\.py"),),
                                            scenario=SimpleNamespace())).collect().workloads
    assert w.read_bytes_total == (8 << 30) + 2 * (4 << 30) + (1 << 20)  # a simulated /proc: what it declares


def test_a_worker_that_exits_leaves_its_cpu_time_in_the_counter(tree: Path):
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    first = c.collect().workloads[0]
    shutil.rmtree(tree / "1002")
    second = c.collect().workloads[0]
    assert second.pids == (1000, 1001, 1003)
    assert second.cpu_user_seconds_total == first.cpu_user_seconds_total
    assert second.resident_memory_bytes < first.resident_memory_bytes


def test_cpu_counter_adds_each_members_growth(tree: Path):
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    first = c.collect().workloads[0]
    stat = tree / "1001" / "stat"
    fields = stat.read_text().split(" ")
    fields[13] = str(int(fields[13]) + 250)  # utime + 2.5 s
    stat.write_text(" ".join(fields))
    second = c.collect().workloads[0]
    assert second.cpu_user_seconds_total == pytest.approx(first.cpu_user_seconds_total + 2.5)


def test_a_members_pid_reused_by_another_program_leaves_the_workload(tree: Path):
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    first = c.collect().workloads[0]
    write_proc(tree, 1001, "bash", 1, ["bash", "-l"], "/user.slice", utime=5, starttime=950_000)
    second = c.collect().workloads[0]
    assert second.pids == (1000, 1002, 1003)
    assert second.cpu_user_seconds_total >= first.cpu_user_seconds_total


def test_pid_reuse_seen_through_the_start_time_even_when_the_inode_stays(tree: Path):
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    c.collect()
    stat = tree / "1002" / "stat"  # rewritten in place: same directory, same inode, new process
    stat.write_text(stat.read_text().replace(" 500301 ", " 990000 ").replace(" 1000 1000 1000 ", " 1 1 1 "))
    (tree / "1002" / "cmdline").write_bytes(b"sshd\0")
    assert 1002 not in c.collect().workloads[0].pids
    assert 1002 not in c.collect().workloads[0].pids  # and stays out when examined again


def test_an_unmatched_pid_reused_by_a_matching_program_joins(tree: Path):
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    c.collect()
    write_proc(tree, 5000, "python3", 1, ["python3", "train.py", "--resume"], "/user.slice", starttime=990_000)
    assert 5000 in c.collect().workloads[0].pids


def test_a_process_that_execs_after_discovery_is_matched_on_the_next_tick(tree: Path):
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    write_proc(tree, 7000, "bash", 1, ["bash", "-c", "exec python3 train.py"], "/user.slice", starttime=990_000)
    assert 7000 in c.collect().workloads[0].pids  # "train.py" is in bash -c's argument already
    write_proc(tree, 7001, "bash", 1, ["bash"], "/user.slice", starttime=990_100)
    assert 7001 not in c.collect().workloads[0].pids
    (tree / "7001" / "cmdline").write_bytes(b"python3\0train.py\0")  # exec: same process, new argv
    assert 7001 in c.collect().workloads[0].pids


def test_permission_denied_entries_are_skipped_and_io_is_none_when_no_member_is_readable(monkeypatch):
    real_open = os.open  # what the pid readers open with

    def denying_open(path, *args, **kwargs):
        p = str(path)
        if p.endswith(("/io", f"{os.sep}4000{os.sep}stat")):
            raise PermissionError(13, "Permission denied", p)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying_open)
    w = by_name(collector(profile("chat", systemd_unit="vllm"), profile("llama", exe="llama-server")).collect())
    assert w["chat"].pids == (2000, 2001)
    assert w["chat"].read_bytes_total is None and w["chat"].written_bytes_total is None
    assert w["chat"].cpu_user_seconds_total == pytest.approx(4900.0)
    assert w["llama"].pids == ()  # its stat is unreadable (hidepid): not counted, no error


def test_steady_state_reads_only_members(monkeypatch, tree: Path):
    c = collector(profile("chat", systemd_unit="vllm"), procfs_root=tree)
    c.collect()
    reads: list[tuple[str, int]] = []
    for name in ("read_pid_stat", "read_pid_cmdline", "read_pid_cgroup", "read_pid_io"):
        real = getattr(procfs, name)

        def spy(root, pid, *args, _real=real, _name=name):
            reads.append((_name, pid))
            return _real(root, pid, *args)

        monkeypatch.setattr(procfs, name, spy)
    c.collect()
    assert sorted(reads) == [("read_pid_io", 2000), ("read_pid_io", 2001), ("read_pid_stat", 2000),
                             ("read_pid_stat", 2001)]


# -------------------------------------------------------------------------------------------- parsers
@pytest.mark.parametrize(("text", "cores"), [("400000 100000\n", 4.0), ("50000 100000", 0.5), ("max 100000\n", None),
                                         ("", None), ("x y", None)])
def test_cpu_max(text, cores):
    assert parse_cpu_max(text) == cores


def test_io_stat_sums_devices_and_ignores_other_keys():
    text = "259:0 rbytes=100 wbytes=10 rios=1 wios=1 dbytes=5 dios=1\n8:0 rbytes=1 wbytes=2\n"
    assert parse_io_stat(text) == (101, 12)


# ------------------------------------------------------------------ discovery without listing /proc
def live(tree: Path, last_pid: int) -> None:
    """Make a fixture tree read as a live procfs of this pid namespace (``self`` names our pid) whose
    kernel allocated ``last_pid`` last (/proc/loadavg's last field)."""
    if not (tree / "self").is_symlink():
        os.symlink(str(os.getpid()), tree / "self")
    (tree / "loadavg").write_text(f"0.10 0.20 0.30 2/345 {last_pid}\n")


def test_new_processes_are_found_from_the_pids_allocated_since_the_last_tick(tree: Path):
    """On a live procfs /proc is listed once; afterwards a tick stats only the pids allocated since the
    previous one (a thread's id is skipped), until the pid counter wraps or jumps, or 30 s pass."""
    from headroom.simulation import ManualClock
    from headroom.sources.processes import FULL_SCAN_SECONDS

    clock = ManualClock(100.0)
    live(tree, 6000)
    c = ProcessesCollector(SourceContext(paths=Paths(procfs=tree, sysfs=SYS), monotonic=clock,
                                         workloads=(profile("trainer", cmdline=r"train\.py"),)))
    assert c.collect().workloads[0].pids == (1000, 1001, 1002, 1003) and c.listings == 1
    clock.advance(1.0)
    assert c.collect().workloads[0].pids == (1000, 1001, 1002, 1003) and c.listings == 1  # nothing new: no listing
    write_proc(tree, 6001, "python3", 1, ["python3", "train.py", "--seed", "2"], "/user.slice", starttime=990_000)
    write_proc(tree, 6002, "python3", 1, ["python3", "train.py", "--seed", "2"], "/user.slice", starttime=990_000)
    (tree / "6002" / "status").write_text("Name:\tpython3\nTgid:\t6001\nPid:\t6002\n")  # a thread of 6001
    live(tree, 6002)
    clock.advance(1.0)
    assert c.collect().workloads[0].pids == (1000, 1001, 1002, 1003, 6001) and c.listings == 1
    write_proc(tree, 900, "python3", 1, ["python3", "train.py"], "/user.slice", starttime=995_000)
    live(tree, 901)  # the counter wrapped: everything is listed again
    clock.advance(1.0)
    assert 900 in c.collect().workloads[0].pids and c.listings == 2
    write_proc(tree, 9000, "python3", 1, ["python3", "train.py"], "/user.slice", starttime=996_000)
    live(tree, 9000)  # a jump further than stat-ing pid by pid is worth
    clock.advance(1.0)
    assert 9000 in c.collect().workloads[0].pids and c.listings == 3
    shutil.rmtree(tree / "5000")  # a non-member exits: forgotten at the next listing, at the latest 30 s on
    clock.advance(1.0)
    c.collect()
    # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
    assert c.listings == 3 and 5000 in c._procs
    clock.advance(FULL_SCAN_SECONDS)
    c.collect()
    # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
    assert c.listings == 4 and 5000 not in c._procs


def test_a_newcomer_that_exits_before_its_next_look_is_forgotten_there_not_statted_every_tick(tree: Path, monkeypatch):
    """An unmatched newcomer is due more looks; when one finds /proc/PID gone (a short-lived process, a pod
    replaced), it is forgotten then: not stat-ed again on every tick until the 30 s listing (with a pod
    replaced every second, that was dozens of failing stats a tick)."""
    from headroom.simulation import ManualClock

    clock = ManualClock(100.0)
    live(tree, 6000)
    c = ProcessesCollector(SourceContext(paths=Paths(procfs=tree, sysfs=SYS), monotonic=clock,
                                         workloads=(profile("trainer", cmdline=r"train\.py"),)))
    c.collect()
    for pid in (6001, 6002):
        write_proc(tree, pid, "sleep", 1, ["sleep", "60"], "/user.slice", starttime=990_000)
    live(tree, 6002)
    clock.advance(1.0)
    c.collect()
    # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
    assert {6001, 6002} <= set(c._recheck) and {6001, 6002} <= set(c._procs)
    shutil.rmtree(tree / "6001")
    statted: list[str] = []
    real = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: statted.append(str(path)) or real(path, *a, **k))
    clock.advance(1.0)
    c.collect()  # 6001's look is due: gone, forgotten; 6002 is looked at and stays due later looks
    # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
    assert 6001 not in c._recheck and 6001 not in c._procs and 6002 in c._recheck and 6002 in c._procs
    statted.clear()
    for _ in range(10):
        clock.advance(1.0)
        c.collect()
    assert f"{tree}/6001" not in statted and c.listings == 1
    assert f"{tree}/6002" in statted  # its own later looks go on


def _newcomer_looks(tree: Path, monkeypatch, match: dict, become: tuple[str, list[str]]) -> tuple[list[int], bool]:
    """An unmatched newcomer (6001) on a live tree, changed to (comm, argv) ``become`` after its discovery:
    (the pids whose stat was read on its later looks, whether it was found)."""
    from headroom.simulation import ManualClock

    clock = ManualClock(100.0)
    live(tree, 6000)
    c = ProcessesCollector(SourceContext(paths=Paths(procfs=tree, sysfs=SYS), monotonic=clock,
                                         workloads=(profile("trainer", **match),)))
    c.collect()
    write_proc(tree, 6001, "bash", 1, ["bash", "launch.sh"], "/user.slice", starttime=990_000)
    live(tree, 6001)
    clock.advance(1.0)
    assert 6001 not in c.collect().workloads[0].pids
    comm, argv = become
    stat = (tree / "6001" / "stat").read_text()
    (tree / "6001" / "stat").write_text(stat.replace("(bash)", f"({comm})"))  # in place: the same inode
    (tree / "6001" / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    statted: list[int] = []
    real = procfs.read_pid_stat
    monkeypatch.setattr(procfs, "read_pid_stat", lambda root, pid, *a: statted.append(pid) or real(root, pid, *a))
    clock.advance(1.0)
    found = 6001 in c.collect().workloads[0].pids
    return [pid for pid in statted if pid == 6001], found


def test_another_look_at_a_newcomer_reads_its_argv_not_its_stat_again(tree: Path, monkeypatch):
    """The same /proc/PID inode is the same process: another look (for an exec after discovery) needs its
    argv, cgroup or uid, not the stat read at discovery (its start time is known); the exec is found."""
    statted, found = _newcomer_looks(tree, monkeypatch, {"cmdline": r"train\.py"}, ("bash", ["python3", "train.py"]))
    assert found and statted == []


def test_with_an_exe_rule_another_look_reads_the_stat_again_for_a_new_comm(tree: Path, monkeypatch):
    """An exe rule matches comm, which an exec (or a rename) changes: then the look reads the stat again."""
    statted, found = _newcomer_looks(tree, monkeypatch, {"exe": "trainer"}, ("trainer", ["bash", "launch.sh"]))
    assert found and statted == [6001]


def test_a_tree_that_is_not_our_live_procfs_is_listed_every_tick(tree: Path):
    (tree / "loadavg").write_text("0.10 0.20 0.30 2/345 6000\n")
    os.symlink("1", tree / "self")  # another pid namespace's procfs (or a fixture): its counter is not ours
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    c.collect()
    write_proc(tree, 7000, "python3", 1, ["python3", "train.py"], "/user.slice", starttime=990_000)
    assert 7000 in c.collect().workloads[0].pids and c.listings == 2


def test_the_real_proc_finds_a_new_process_and_not_its_threads():
    """A real process with three extra threads, started after the first tick, is one member."""
    import subprocess
    import sys
    import time
    import uuid

    token = f"headroom-test-{uuid.uuid4().hex[:8]}"
    c = ProcessesCollector(SourceContext(paths=Paths(), workloads=(profile("t", cmdline=token),)))
    # private: whether the collector reads a live /proc (keeps descriptors): no public name says it
    assert c._live  # the agent's own /proc
    c.collect()
    code = ("import threading, time\n[threading.Thread(target=time.sleep, args=(60,)).start() for _ in range(3)]\n"
            "print('up', flush=True)\ntime.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, token], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"up\n"
        w = c.collect().workloads[0]
        deadline = time.monotonic() + 10
        while w.pids != (proc.pid,) and time.monotonic() < deadline:  # a recheck tick may be needed
            w = c.collect().workloads[0]
        assert w.pids == (proc.pid,) and w.threads == 4
    finally:
        proc.kill()
        proc.wait()


def test_members_stat_and_io_stay_open_on_the_live_proc_and_close_when_they_exit(monkeypatch):
    """On the agent's own /proc a member's stat, io and schedstat are opened once and read again every tick (an open and
    a close less per file and tick); past OPEN_MEMBER_FILES members the others are read by path; a member
    that exits is forgotten and its descriptors closed."""
    import subprocess
    import sys
    import time
    import uuid

    # OPEN_MEMBER_FILES: patched in the module whose collector reads it
    from headroom.sources.processes import collector as processes

    monkeypatch.setattr(processes, "OPEN_MEMBER_FILES", 1)
    token = f"headroom-test-{uuid.uuid4().hex[:8]}"
    c = ProcessesCollector(SourceContext(paths=Paths(), workloads=(profile("t", cmdline=token),)))
    # private: whether the collector reads a live /proc (keeps descriptors): no public name says it
    assert c._live
    c.collect()
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", token]) for _ in range(2)]
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    try:
        deadline = time.monotonic() + 10
        while len(c.collect().workloads[0].pids) < 2:  # found within a tick or two (a recheck may be needed)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
        kept, = c._kept
        by_path = next(p.pid for p in procs if p.pid != kept)
        opened.clear()
        for _ in range(3):
            w = c.collect().workloads[0]
            assert w.pids == tuple(sorted(p.pid for p in procs)) and w.threads == 2
        assert not {f"/proc/{kept}/{name}" for name in ("stat", "io", "schedstat")} & set(opened)  # its descriptors
        assert opened.count(f"/proc/{by_path}/stat") == 3  # past the cap: by path, every tick
        # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
        files = c._procs[kept].files
        assert files is not None and files.open_descriptors == 3
        procs[[p.pid for p in procs].index(kept)].kill()
        procs[[p.pid for p in procs].index(kept)].wait()
        assert c.collect().workloads[0].pids == (by_path,)
        # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
        assert files.open_descriptors == 0 and kept not in c._procs
        # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
        assert c._kept == {by_path}  # the freed place is taken at the next member's read
    finally:
        for p in procs:
            p.kill()
            p.wait()
        c.close()
    # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
    assert c._kept == set()


def test_a_fixture_tree_keeps_no_member_file_open(tree: Path):
    """Files of a tree of plain files are read by path: a process directory replaced by another is read anew."""
    c = collector(profile("trainer", cmdline=r"train\.py"), procfs_root=tree)
    c.collect()
    before = c.collect().workloads[0]
    assert before.pids == (1000, 1001, 1002, 1003)
    # private: the processes collector's bookkeeping: its bound and what it keeps open are what is tested
    assert c._kept == set() and all(p.files is None for p in c._procs.values())
    threads = procfs.read_pid_stat(tree, 1001).num_threads
    write_proc(tree, 1001, "python3", 1000, ["python3", "train.py"], "/user.slice", starttime=900_000,
               threads=threads + 8)
    assert c.collect().workloads[0].threads == before.threads + 8


def test_a_process_that_execs_seconds_after_discovery_is_still_found_and_rechecks_end(tree: Path, monkeypatch):
    """A launcher script (or a loaded host) may exec the workload's program seconds after the fork: the
    unmatched newcomer is looked at again at doubling intervals, then left to the 30 s listing."""
    from headroom.simulation import ManualClock
    from headroom.sources.processes import RECHECKS

    clock = ManualClock(100.0)
    live(tree, 6000)
    c = ProcessesCollector(SourceContext(paths=Paths(procfs=tree, sysfs=SYS), monotonic=clock,
                                         workloads=(profile("trainer", cmdline=r"train\.py"),)))
    c.collect()
    write_proc(tree, 6001, "bash", 1, ["bash", "launch.sh"], "/user.slice", starttime=990_000)
    write_proc(tree, 6002, "bash", 1, ["bash", "other.sh"], "/user.slice", starttime=990_000)
    live(tree, 6002)
    for _ in range(4):  # discovered, then 3 s pass: the one next-tick look of old would be spent
        clock.advance(1.0)
        assert 6001 not in c.collect().workloads[0].pids
    (tree / "6001" / "cmdline").write_bytes(b"python3\0train.py\0")  # the exec, 4 s after the fork
    found_after = None
    for second in range(1, 12):
        clock.advance(1.0)
        if 6001 in c.collect().workloads[0].pids:
            found_after = second
            break
    assert found_after is not None and found_after <= 4, found_after  # the look due 7 s after discovery
    reads: list[int] = []
    real = procfs.read_pid_cmdline

    def spy(root, pid, *args, **kwargs):
        reads.append(pid)
        return real(root, pid, *args, **kwargs)

    monkeypatch.setattr(procfs, "read_pid_cmdline", spy)
    for _ in range(20):  # 6002 never matches: its looks end (before the 30 s listing)
        clock.advance(1.0)
        c.collect()
    assert reads.count(6002) <= RECHECKS - 2, reads
