"""Automatic workloads are measured and judged as declared ones (issue 25).

One membership model: an automatic workload's processes are its cgroup's (v2 ``cgroup.procs`` of its cgroup and
every cgroup below; v1 the same in the hierarchy whose path names it), its GPU processes, and their descendants;
the processes collector measures them with the code that measures declared workloads. The real-cgroup tests
create cgroups on this machine (root, a v1 or hybrid host for the v1 one) and real processes, and compare with
/proc; they skip, saying why, where the machine cannot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

import pytest

from headroom.samples import (
    CgroupStats,
    GpuProcess,
    GpuSample,
    IdentityGroup,
    IdentitySample,
    Launcher,
    NvmlSample,
    PreviousTick,
    ProcessesSample,
    Sample,
    SourceResult,
    WorkloadProcesses,
)
from headroom.sources import Paths, SourceContext
from headroom.sources.identity import IdentityCollector
from headroom.sources.processes import PAGE_SIZE, ProcessesCollector

SYS = Path("/sys")
NO_PROFILE = "automatic workload: no profile to size it"  # attribution.NO_PROFILE, as docs/workload-identity.md says
V1 = SYS / "fs/cgroup"
V1_CONTROLLERS = ("freezer", "memory", "cpuacct", "pids")

# a parent that forks three children (one burning CPU, two asleep), prints their pids, and forks one more
# sleeper on SIGUSR1 (a process that joins after the cgroup was listed)
FAMILY = r"""
import os, signal, sys, time

def sleeper():
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)

signal.signal(signal.SIGUSR1, lambda *_: (sleeper(), print("forked", flush=True)))
kids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        if i == 0:
            end = time.time() + 120
            while time.time() < end:
                pass
        else:
            time.sleep(120)
        os._exit(0)
    kids.append(pid)
print(" ".join(map(str, kids)), flush=True)
while True:
    time.sleep(1)
"""


def _sample(**data) -> Sample:
    return Sample(timestamp=1e9, monotonic=0.0,
                  sources={k: SourceResult(k, True, 0.0, v) for k, v in data.items()})


def _nvml(*pids: int) -> NvmlSample:
    return NvmlSample(up=True, gpus=(GpuSample(0, "GPU-0", "x", "0", memory_total_bytes=80 << 30,
                                               processes=tuple(GpuProcess(p, 1 << 30) for p in pids)),))


@contextmanager
def _family(dirs: list[Path]):
    """The FAMILY process tree, its parent moved into each of ``dirs`` (cgroup directories) before it starts;
    yields (the Popen, the children's pids)."""

    def enter() -> None:
        for d in dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    proc = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True,
                            preexec_fn=enter if dirs else None)
    try:
        kids = [int(x) for x in proc.stdout.readline().split()]
        assert len(kids) == 3, "the family did not start"
        yield proc, kids
    finally:
        for pid in _tree(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        for d in dirs:  # the kill is asynchronous: wait until the cgroup is empty before it is removed
            for _ in range(100):
                try:
                    if not (d / "cgroup.procs").read_text().split():
                        break
                except OSError:
                    break
                time.sleep(0.02)


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc."""
    parent = {}
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                parent[int(e.name)] = int(Path(f"/proc/{e.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(p for p, pp in parent.items() if pp == pid)
    return out


@contextmanager
def _cgroups(paths: list[Path]):
    """Create the cgroup directories ``paths`` (and the parents missing on the way); remove what was created."""
    made = []
    try:
        for p in paths:
            missing = []
            q = p
            while not q.exists():
                missing.append(q)
                q = q.parent
            for d in reversed(missing):
                d.mkdir()
                made.append(d)
        yield
    finally:
        for d in sorted(made, key=lambda x: -len(x.parts)):
            try:
                d.rmdir()
            except OSError:
                pass


def _proc_figures(pids) -> tuple[int, int, float]:
    """(threads, RSS bytes, user+system CPU seconds) of ``pids`` as /proc says now."""
    hz = os.sysconf("SC_CLK_TCK")
    threads = rss = 0
    cpu = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu += (int(fields[11]) + int(fields[12])) / hz
        threads += int(fields[17])
        rss += int(fields[21]) * PAGE_SIZE
    return threads, rss, cpu


def _wait_cpu_above(pid: int, seconds: float, after: float = 0.0, timeout: float = 15.0) -> None:
    """Sleep ``after`` seconds, then until /proc says ``pid`` used more than ``seconds`` of CPU (a clock tick more)."""
    time.sleep(after)
    end = time.monotonic() + timeout
    while _proc_figures([pid])[2] <= seconds:
        assert time.monotonic() < end, f"pid {pid} did not run for {timeout:g} s"
        time.sleep(0.02)


def _v1_writable() -> str:
    for c in V1_CONTROLLERS:
        d = V1 / c
        if not (d / "tasks").exists():
            return f"no cgroup v1 {c} hierarchy at {d}"
        if not os.access(d, os.W_OK):
            return f"cgroup v1 {c} hierarchy at {d} is not writable (needs root)"
    return ""


def _processes(previous) -> ProcessesCollector:
    return ProcessesCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=SYS), previous=lambda: PreviousTick.of(previous)))


def _check_entry(entry: WorkloadProcesses, parent: int, kids: list[int]) -> None:
    """The entry matches /proc for the family (one tick of drift: CPU within what it burns in the reads)."""
    assert sorted(entry.pids) == sorted([parent, *kids])
    threads, rss, cpu = _proc_figures(entry.pids)
    assert entry.threads == threads
    assert abs(entry.resident_memory_bytes - rss) <= max(64 * PAGE_SIZE, rss // 10)  # a new fork's pages still grow
    measured = entry.cpu_user_seconds_total + entry.cpu_system_seconds_total
    assert cpu - 0.5 <= measured <= cpu + 0.02, (measured, cpu)
    assert entry.main_pid == parent
    assert set(entry.process_cpu_seconds) == set(entry.pids)


# --------------------------------------------------------------------------------- real cgroups
def test_a_slurm_job_on_cgroup_v1_has_every_process_of_its_cgroup_measured_as_proc_says(tmp_path):
    """Issue 25: "on cgroup v1 its process count is only its GPU processes (a Slurm job with 5 processes read 2)".
    A job in Slurm's v1 layout (freezer, memory, cpuacct, pids at /slurm/uid_0/job_N/step_0/task_0): every
    process of its cgroup tree is a member, measured as /proc says, with its v1 cgroup figures."""
    why = _v1_writable()
    if why:
        pytest.skip(why)
    job = f"job_{900000 + os.getpid() % 90000}"
    rel = f"slurm/uid_0/{job}/step_0/task_0"
    dirs = [V1 / c / rel for c in V1_CONTROLLERS]
    with _cgroups(dirs), _family(dirs) as (proc, kids):
        time.sleep(0.3)
        ident = IdentityCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=SYS, rootfs=tmp_path),
                                                settings={"auto": ["jobs"]}, previous=lambda: PreviousTick.of(_sample(nvml=_nvml(proc.pid)))))
        (g,) = ident.collect().groups
        assert (g.kind, g.name, g.pids) == ("job", job, (proc.pid,))
        assert sorted(g.members) == sorted([proc.pid, *kids])  # freezer's cgroup.procs of the job and below
        assert g.cgroup is not None and g.cgroup.path == f"/slurm/uid_0/{job}"
        assert g.cgroup.cpu_user_seconds_total is not None and g.cgroup.memory_bytes  # cpuacct.stat, memory usage
        assert g.processes == 4  # pids.current: its tasks
        previous = _sample(identity=IdentitySample(groups=(g,)))
        c = _processes(previous)
        (entry,) = c.collect().workloads
        assert entry.name == job and entry.cgroup is g.cgroup
        _check_entry(entry, proc.pid, kids)
        # a process that joins after the cgroup was listed (a fork of a member) is counted at the next tick
        proc.send_signal(signal.SIGUSR1)
        assert proc.stdout.readline().strip() == "forked"
        (entry,) = c.collect().workloads
        new = set(_tree(proc.pid)) - {proc.pid, *kids}
        assert len(new) == 1
        _check_entry(entry, proc.pid, [*kids, *new])
        ident.close()
        c.close()


def test_a_slurm_job_on_cgroup_v2_lists_its_steps_and_tasks(tmp_path):
    """A job in Slurm's cgroup v2 layout (/system.slice/slurmstepd.scope/job_N/step_0/user/task_0): the members
    are listed from the job's cgroup and every cgroup below it, and its v2 cpu.stat is read."""
    from bench.pods import cgroup_v2_base

    base, why = cgroup_v2_base(SYS)
    if base is None:
        pytest.skip(why)
    job = f"job_{900000 + os.getpid() % 90000}"
    task = base / f"system.slice/slurmstepd.scope/{job}/step_0/user/task_0"
    with _cgroups([task]), _family([task]) as (proc, kids):
        ident = IdentityCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=SYS, rootfs=tmp_path),
                                                settings={"auto": ["jobs"]}, previous=lambda: PreviousTick.of(_sample(nvml=_nvml(kids[1])))))
        (g,) = ident.collect().groups
        assert (g.name, g.pids) == (job, (kids[1],))
        assert sorted(g.members) == sorted([proc.pid, *kids])
        assert g.cgroup is not None and g.cgroup.cpu_user_seconds_total is not None
        (entry,) = _processes(_sample(identity=IdentitySample(groups=(g,)))).collect().workloads
        _check_entry(entry, proc.pid, kids)
        ident.close()


def test_list_members_walks_the_cgroup_tree_and_reads_tasks_where_there_is_no_cgroup_procs(tmp_path):
    from headroom.sources.identity import list_members

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "cgroup.procs").write_text("7\n")
    (tmp_path / "a" / "cgroup.procs").write_text("")
    (tmp_path / "a" / "b" / "tasks").write_text("12\n3\n")
    assert list_members(str(tmp_path)) == (3, 7, 12)
    assert list_members(str(tmp_path / "gone")) == ()


# ------------------------------------------------------------------------ no cgroup: a launcher's tree
def test_a_launcher_outside_any_cgroup_has_its_process_tree():
    """A launcher of its own (no pod, job, container or unit): its members are the launcher, its GPU processes
    and their descendants (parent pids from /proc), nothing else."""
    with _family([]) as (proc, kids):
        time.sleep(0.2)
        g = IdentityGroup("launcher", "torchrun/train.py", pids=(kids[2],), gpus=("GPU-0",), members=(proc.pid,),
                          launcher=Launcher("torchrun", "training", script="train.py"))
        (entry,) = _processes(_sample(identity=IdentitySample(groups=(g,)))).collect().workloads
        assert entry.name == "torchrun/train.py"
        _check_entry(entry, proc.pid, kids)


def test_a_declared_profile_keeps_its_processes_and_takes_the_place_of_an_identity_it_claims():
    from headroom.workload.profiles import profile_from_dict

    with _family([]) as (proc, kids):
        mine = profile_from_dict({"name": "trainer", "kind": "inference", "match": {"pid_file": "/nonexistent"},
                                  "params": 1e9, "precision": "bf16"})
        me = os.getpid()
        other = IdentityGroup("pod", "ns/other", pids=(kids[0],), members=(proc.pid,))
        same = IdentityGroup("pod", "trainer", pids=(kids[1],))  # a declared profile's name: not an automatic one
        previous = _sample(identity=IdentitySample(groups=(other, same)))
        c = ProcessesCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=SYS), workloads=(mine,),
                                             previous=lambda: PreviousTick.of(previous)))
        out = c.collect().workloads
        assert [w.name for w in out] == ["trainer", "ns/other"]
        assert sorted(out[1].pids) == sorted([proc.pid, *kids]) and me not in out[1].pids


def test_automatic_entries_follow_their_identities_and_leave_nothing_behind():
    with _family([]) as (_proc, kids):
        groups = [IdentityGroup("pod", f"ns/p{i}", pids=(k,)) for i, k in enumerate(kids)]
        current = {"groups": tuple(groups)}
        c = ProcessesCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=SYS),
                                             previous=lambda: PreviousTick.of(_sample(identity=IdentitySample(groups=current["groups"])))))
        assert [(w.name, w.pids) for w in c.collect().workloads] == [(f"ns/p{i}", (k,)) for i, k in enumerate(kids)]
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert len(c._auto) == 3 and c._auto_pids == set(kids)
        current["groups"] = (groups[1],)
        assert [w.name for w in c.collect().workloads] == ["ns/p1"]
        current["groups"] = ()
        assert c.collect() == ProcessesSample()
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it; the processes collector's bookkeeping: its bound and what it keeps open are what is tested
        assert c._auto == {} and c._auto_pids == set() and c._kept == set()


# idle until SIGUSR1, then burns a core for 0.3 s each time
WAKER = r"""
import signal, sys, time

def burn(*_):
    end = time.time() + 0.3
    while time.time() < end:
        pass
    print("burnt", flush=True)

signal.signal(signal.SIGUSR1, burn)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_an_idle_automatic_workload_is_read_again_when_its_cgroup_moves_and_a_busy_one_every_tick():
    """An idle automatic workload (its CPU did not grow at its last measurement) whose cgroup figures have not moved
    keeps its entry (the same object, no /proc reads: 50 idle pods, about 6 measurements a tick); new figures (the
    identity collector read its cgroup again and something changed) and it is measured again, as /proc says. A
    busy one, and one without cgroup figures, is measured every tick."""
    def cpu(entry):
        return entry.cpu_user_seconds_total + entry.cpu_system_seconds_total

    def cgroup(user):
        return CgroupStats("/kubepods.slice/pod-a", cpu_user_seconds_total=user)

    waker = subprocess.Popen([sys.executable, "-c", WAKER], stdout=subprocess.PIPE, text=True)
    try:
        assert waker.stdout.readline().strip() == "ready"
        with _family([]) as (proc, kids):
            groups = {"idle": IdentityGroup("pod", "ns/idle", pids=(waker.pid,), cgroup=cgroup(1.0)),
                      "busy": IdentityGroup("pod", "ns/busy", pids=(kids[0],), members=(proc.pid,), cgroup=cgroup(2.0))}
            c = _processes(None)
            c.ctx = SourceContext(paths=c.ctx.paths, previous=lambda: PreviousTick.of(_sample(identity=IdentitySample(
                groups=tuple(groups.values())))))
            # kids[0] has run before the first measurement, so that one finds it busy (CPU since its start): one
            # found idle is measured again only when its cgroup figures move, which these fixed ones never do (on
            # a loaded machine, 4 test workers on 2 cores, the new child had not run yet and read 0.0 throughout)
            _wait_cpu_above(kids[0], 0.0)
            c.collect()
            # a tick apart, and kids[0] (burning all along) has run since
            _wait_cpu_above(kids[0], _proc_figures([kids[0]])[2], after=0.2)
            idle, busy = c.collect().workloads  # the idle one's CPU did not grow since the first
            _check_entry(busy, proc.pid, kids)
            waker.send_signal(signal.SIGUSR1)
            assert waker.stdout.readline().strip() == "burnt"  # 0.3 s, while kids[0] burns on
            _wait_cpu_above(kids[0], _proc_figures([kids[0]])[2])  # it ran since the measurement of busy
            idle_again, busy_again = c.collect().workloads
            assert idle_again is idle  # idle at its last measurement, its cgroup not read since: its entry stands
            assert cpu(busy_again) > cpu(busy)  # busy (kids[0] burns all along): measured although its cgroup is the same
            _check_entry(busy_again, proc.pid, kids)
            groups["idle"] = IdentityGroup("pod", "ns/idle", pids=(waker.pid,), cgroup=cgroup(1.3))
            moved, _ = c.collect().workloads
            assert moved is not idle and moved.cgroup is groups["idle"].cgroup
            assert cpu(moved) > cpu(idle)  # what it burnt (0.3 s of wall time: less CPU on a busy machine)
            _check_entry(moved, waker.pid, [])

            groups["idle"] = IdentityGroup("launcher", "vllm/model", pids=(kids[0],))  # no cgroup figures
            groups.pop("busy")
            (bare,) = c.collect().workloads
            time.sleep(0.3)
            (bare_again,) = c.collect().workloads
            assert cpu(bare_again) > cpu(bare)
    finally:
        waker.kill()
        waker.wait()


# ------------------------------------------------------------------------------------- analysis
def _auto_window(group: IdentityGroup, own_cores: float, host_busy: float = 0.99, neighbours=(), psi: float = 0.5):
    """A window where the host's CPUs are ``host_busy`` and its PSI cpu 50 %, the GPU 35 % busy, and the automatic
    workload ``group`` (its process pid 500 on GPU 0) uses ``own_cores``."""
    from situations import Gpu, Host, build_window

    def extra(t):
        entry = WorkloadProcesses(name=group.name, pids=(500,), threads=4, cpu_user_seconds_total=own_cores * t,
                                  cpu_system_seconds_total=0.0, resident_memory_bytes=1 << 30, main_pid=500,
                                  process_cpu_seconds={500: own_cores * t})
        return {"identity": SourceResult("identity", True, 0.0, IdentitySample(groups=(group,))),
                "processes": SourceResult("processes", True, 0.0, ProcessesSample(workloads=(entry,)))}

    host = Host(cpu_busy=host_busy, psi={"cpu.some": psi}, neighbours=tuple(neighbours))
    return build_window(host, [Gpu(util=0.35, processes=(GpuProcess(500, 4 << 30),))], extra=extra)


def _analyse(window):
    from headroom.analysis.pipeline import Analysis
    from headroom.config import check_config_text

    analysis = Analysis(check_config_text("analysis:\n  hold: 0s\n", "c.yaml"))
    findings = None
    for i in range(1, len(window) + 1):
        findings = analysis(window[:i])[1]
    return findings


@pytest.mark.parametrize("group", [
    IdentityGroup("launcher", "torchrun/train.py", pids=(500,), gpus=("GPU-0",),
                  launcher=Launcher("torchrun", "training", script="train.py", nproc_per_node=1)),
    IdentityGroup("pod", "ml/trainer-0", pids=(500,), gpus=("GPU-0",), pod="trainer-0", namespace="ml"),
], ids=["launcher", "pod"])
def test_an_automatic_workload_is_not_blamed_for_its_neighbours_cpu(group):
    """Issue 25: "Its cpu score reached 1.0 from host-wide pressure caused by other users while the job itself
    used 0.005 cores". With its own CPU measured, host-wide CPU counts only in proportion to it, and the
    evidence names who presses."""
    from situations import neighbour

    burn = neighbour(4242, "stress-ng", "bob", cores=15.0)
    findings = _analyse(_auto_window(group, own_cores=0.005, neighbours=(burn,)))
    (wf,) = findings.workload_findings
    assert wf.name == group.name
    assert wf.verdict.scores["cpu"] < 0.1, wf.verdict.evidence["cpu"]
    text = wf.verdict.evidence["cpu"]
    assert "the workload itself uses 0.01 cores" in text or "the workload itself uses 0.00 cores" in text, text
    assert "outside the workload: stress-ng (user bob, pid 4242) 15.00 cores" in text, text
    assert [n.pid for n in wf.neighbours["cpu"]] == [4242]
    # its own saturation still counts: the same workload using all 16 cores scores cpu high
    busy = _analyse(_auto_window(group, own_cores=16.0)).workload_findings[0]
    assert busy.verdict.scores["cpu"] > 0.8


def test_every_automatic_workload_gets_verdicts_and_says_why_it_has_no_expected_memory():
    """Issue 25: "The promised estimate_error ... appears nowhere in the status": a pod no launcher describes gets
    the verdicts that need no memory model, and its estimate_error in /api/v1/status and on the page."""
    # private: one card or line of the landing page; status()/page() need a whole agent's state (server.health, the window)
    from headroom.exposition.landing import _workload_card

    # private: the status API's entry of one workload; status() needs a whole agent's state
    from headroom.exposition.status_api import _identity_status, _workload_status

    group = IdentityGroup("pod", "ml/trainer-0", pids=(500,), gpus=("GPU-0",), pod="trainer-0", namespace="ml")
    findings = _analyse(_auto_window(group, own_cores=0.2, host_busy=0.1))
    (wf,) = findings.workload_findings
    (st,) = findings.workloads
    assert (st.source, st.kind, st.estimate_error, st.processes) == ("auto", "pod", NO_PROFILE, 1)
    assert st.measured is not None and st.measured.name == "ml/trainer-0"
    assert set(wf.verdict.scores) >= {"cpu", "host_memory", "shared_memory", "disk_io", "network", "gpu_compute"}
    status = _workload_status(wf, st)
    assert status["expected"]["estimate_error"] == NO_PROFILE
    assert status["measured"]["processes"] == 1 and status["measured"]["resident_memory_bytes"] == 1 << 30
    (listed,) = _identity_status(IdentitySample(groups=(group,)), findings.workloads)["workloads"]
    assert listed["estimate_error"] == NO_PROFILE
    assert f"No estimate: {NO_PROFILE}" in _workload_card(status)


def test_workload_identities_counts_the_automatic_workloads_exported():
    """Issue 25: "headroom_workload_identities read 3 while 2 were exported": an identity a declared profile takes
    the place of is not an exported automatic workload."""
    from headroom.exposition.render import Writer
    from headroom.exposition.render.collectors import _render_identity  # private: no public name
    from headroom.workload.attribution import attribute
    from headroom.workload.profiles import profile_from_dict

    chat = profile_from_dict({"name": "chat", "kind": "inference", "match": {"exe": "vllm"},
                              "params": 1e9, "precision": "bf16"})
    groups = (IdentityGroup("pod", "ml/a", pids=(10,)), IdentityGroup("pod", "ml/b", pids=(11,)),
              IdentityGroup("pod", "ml/chat-0", pids=(12,)))  # chat's processes: the declared profile wins
    procs = ProcessesSample(workloads=(WorkloadProcesses("chat", (12,), 1, 0.0, 0.0, 0),))
    sample = _sample(identity=IdentitySample(groups=groups), processes=procs, nvml=_nvml(10, 11, 12))
    statuses = attribute(sample, (chat,))
    assert [s.name for s in statuses if s.source == "auto"] == ["ml/a", "ml/b"]
    w = Writer()
    _render_identity(w, sample.data("identity"), sample, statuses)
    assert "headroom_workload_identities 2\n" in w.render().decode()


def test_an_automatic_status_carries_its_measured_entry_and_keeps_its_object_while_nothing_changes():
    from headroom.workload.attribution import AutoStatuses, attribute

    g = IdentityGroup("pod", "ml/a", pids=(10,), cgroup=CgroupStats("/a", 1.0, 0.5))
    entry = WorkloadProcesses("ml/a", (10, 13), 3, 1.0, 0.5, 4096)
    memo = AutoStatuses()
    sample = _sample(identity=IdentitySample(groups=(g,)), processes=ProcessesSample(workloads=(entry,)),
                     nvml=_nvml(10))
    (st,) = attribute(sample, (), memo=memo)
    assert st.measured is entry and st.processes == 2
    (again,) = attribute(sample, (), memo=memo)
    assert again is st
    busier = WorkloadProcesses("ml/a", (10, 13, 14), 4, 2.0, 0.5, 8192)
    (moved,) = attribute(_sample(identity=IdentitySample(groups=(g,)), processes=ProcessesSample(workloads=(busier,)),
                                 nvml=_nvml(10)), (), memo=memo)
    assert moved.measured is busier and moved.processes == 3 and moved.gpus == st.gpus


def test_v1_cgroup_figures_are_read_from_each_controllers_hierarchy(tmp_path):
    """cgroup v1 has no cpu.stat or io.stat: cpuacct.stat (USER_HZ ticks), memory.usage_in_bytes, pids.current,
    cpu.cfs_quota_us / cfs_period_us and blkio.throttle.io_service_bytes, each in its own hierarchy."""
    from headroom.sources.identity import IdentityCollector

    rel = "/docker/" + "a" * 64
    files = {"cpuacct/cpuacct.stat": "user 250\nsystem 50\n", "memory/memory.usage_in_bytes": "4096\n",
             "pids/pids.current": "3\n", "cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n",
             "blkio/blkio.throttle.io_service_bytes": "8:0 Read 100\n8:0 Write 20\n8:0 Total 120\nTotal 120\n",
             "freezer/cgroup.procs": "5\n"}
    for name, text in files.items():
        hierarchy, _, leaf = name.partition("/")
        d = tmp_path / "fs/cgroup" / hierarchy / rel.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / leaf).write_text(text)
    c = IdentityCollector(SourceContext(paths=Paths(procfs=tmp_path / "proc", sysfs=tmp_path, rootfs=tmp_path)))
    # private: the collector's cgroup opener: the directory it keeps is what is tested, no public name returns it
    directory = c._open_cgroup(f"freezer:{rel}")
    assert directory is not None and directory.refresh(1)
    hz = os.sysconf("SC_CLK_TCK")
    assert directory.stats == CgroupStats(path=rel, cpu_user_seconds_total=250 / hz, cpu_system_seconds_total=50 / hz,
                                          memory_bytes=4096, read_bytes_total=100, written_bytes_total=20,
                                          cpu_quota_cores=1.5)
    assert (directory.processes, directory.members) == (3, (5,))
    # private: the collector's cgroup opener: the directory it keeps is what is tested, no public name returns it
    assert c._open_cgroup("freezer:/docker/gone") is None


def test_an_idle_cgroups_members_are_listed_again_only_when_its_cpu_or_process_count_moves(tmp_path):
    """A process cannot join or leave a cgroup without its CPU or pids.current moving: an idle pod's refresh reads
    its files and does not walk its tree (a fixture tree can show the difference: its cgroup.procs changed alone)."""
    from headroom.sources.identity.cgroup_files import _CgroupDir  # private: the module that owns it

    d = tmp_path / "kubepods.slice" / "pod-a"
    (d / "cri-containerd-1.scope").mkdir(parents=True)
    files = {"cpu.stat": "usage_usec 100\nuser_usec 60\nsystem_usec 40\n", "pids.current": "1\n",
             "cgroup.procs": "", "cri-containerd-1.scope/cgroup.procs": "5\n"}
    for name, text in files.items():
        (d / name).write_text(text)
    directory = _CgroupDir.open(str(d), False, "/kubepods.slice/pod-a")
    assert directory.refresh(1) and directory.members == (5,)
    (d / "cri-containerd-1.scope/cgroup.procs").write_text("5\n6\n")  # a fixture's change: no CPU, no pids.current
    assert not directory.refresh(2) and directory.members == (5,)  # not walked
    (d / "pids.current").write_text("2\n")
    assert directory.refresh(3) and directory.members == (5, 6)
    (d / "cri-containerd-1.scope/cgroup.procs").write_text("6\n")
    (d / "cpu.stat").write_text("usage_usec 200\nuser_usec 120\nsystem_usec 80\n")
    assert directory.refresh(4) and directory.members == (6,)


def test_automatic_workloads_are_scored_within_the_refresh_and_forgotten_when_they_end():
    """50 pods cost 5 verdicts a tick, not 50: each automatic workload is scored when it appears, then within
    AUTO_REFRESH_SECONDS (its last finding, the same object, in between); one that ends leaves no state."""
    from headroom.analysis import pipeline
    from headroom.config import check_config_text

    from situations import Gpu, Host, build_window

    n = 12
    groups = tuple(IdentityGroup("pod", f"ns/p{i}", pids=(1000 + i,), gpus=(f"GPU-{i % 2}",)) for i in range(n))
    live = {"groups": groups}

    def extra(t):
        entries = tuple(WorkloadProcesses(g.name, g.pids, 1, 0.1 * t, 0.0, 1 << 20) for g in live["groups"])
        return {"identity": SourceResult("identity", True, 0.0, IdentitySample(groups=live["groups"])),
                "processes": SourceResult("processes", True, 0.0, ProcessesSample(workloads=entries))}

    gpus = [Gpu(util=0.35, processes=tuple(GpuProcess(1000 + i, 1 << 30) for i in range(n) if i % 2 == k))
            for k in range(2)]
    window = build_window(Host(), gpus, seconds=40, extra=extra)
    analysis = pipeline.Analysis(check_config_text("analysis:\n  hold: 0s\n", "c.yaml"))
    last: dict[str, object] = {}
    scored_at: dict[str, list[int]] = {g.name: [] for g in groups}
    for i in range(1, 30):
        findings = analysis(window[:i])[1]
        now = {wf.name: wf for wf in findings.workload_findings}
        assert set(now) == {g.name for g in groups}  # every one has a verdict every tick
        fresh = [name for name, wf in now.items() if last.get(name) is not wf]
        assert len(fresh) == (n if i == 1 else pipeline.AUTO_EVERY_TICK)
        for name in fresh:
            scored_at[name].append(i)
        last = now
    for name, ticks in scored_at.items():
        gaps = [b - a for a, b in pairwise(ticks)]
        assert ticks[0] == 1 and max(gaps) <= pipeline.AUTO_REFRESH_SECONDS, name
    # private: the analysis's per-workload state: its bound is what is tested, no public name shows it
    assert set(analysis._auto_long_at) == {g.name for g in groups}  # long scores made for all (at refreshes)
    live["groups"] = groups[:2]
    window = build_window(Host(), gpus, seconds=45, extra=extra)
    findings = analysis(window)[1]
    assert [wf.name for wf in findings.workload_findings] == ["ns/p0", "ns/p1"]
    # private: the analysis's per-workload state: its bound is what is tested, no public name shows it
    assert set(analysis._auto_findings) <= {"ns/p0", "ns/p1"} and set(analysis._auto_long_at) <= {"ns/p0", "ns/p1"}
    # private: the analysis's hold state: its bound is what is tested, no public name shows it
    assert {k for k in analysis._hysteresis if k.startswith("workload/")} <= {"workload/ns/p0", "workload/ns/p1"}


def test_a_steady_automatic_workload_keeps_its_finding_and_one_that_moves_is_scored_at_once():
    """Pods whose processes, cgroup and GPUs do not move keep their findings without using the per-tick budget
    (re-scored within AUTO_STEADY_SECONDS); the tick one starts burning CPU it is scored again."""
    from headroom.analysis import pipeline
    from headroom.config import check_config_text

    from situations import Gpu, Host, build_window

    n = 12
    groups = tuple(IdentityGroup("pod", f"ns/p{i}", pids=(1000 + i,), gpus=(f"GPU-{i % 2}",)) for i in range(n))
    moving = {"from": 10**9}

    def extra(t):
        entries = tuple(WorkloadProcesses(g.name, g.pids, 1, 1.0 + (max(0, t - moving["from"]) if i == 3 else 0),
                                          0.0, 1 << 20) for i, g in enumerate(groups))
        return {"identity": SourceResult("identity", True, 0.0, IdentitySample(groups=groups)),
                "processes": SourceResult("processes", True, 0.0, ProcessesSample(workloads=entries))}

    gpus = [Gpu(util=0.35, processes=tuple(GpuProcess(1000 + i, 1 << 30) for i in range(n) if i % 2 == k))
            for k in range(2)]
    analysis = pipeline.Analysis(check_config_text("analysis:\n  hold: 0s\n", "c.yaml"))
    window = build_window(Host(), gpus, seconds=40, extra=extra)
    last: dict[str, object] = {}
    counts = []
    for i in range(16, 30):  # the short window full of steady samples from the first tick on
        now = {wf.name: wf for wf in analysis(window[:i])[1].workload_findings}
        counts.append(sum(last.get(name) is not wf for name, wf in now.items()))
        last = now
    assert counts[0] == n and max(counts[1:]) == 0, counts  # all new at first, then nobody moved
    assert pipeline.AUTO_STEADY_SECONDS > len(counts)  # (so none was due on age alone above)
    moving["from"] = window[29].monotonic - window[0].monotonic  # p3 burns a core from there on
    window = build_window(Host(), gpus, seconds=40, extra=extra)
    fresh = set()
    for i in range(30, 33):
        now = {wf.name: wf for wf in analysis(window[:i])[1].workload_findings}
        fresh |= {name for name, wf in now.items() if last.get(name) is not wf}
        last = now
    assert fresh == {"ns/p3"}


def test_on_a_hybrid_host_what_the_unified_tree_lacks_comes_from_the_v1_hierarchies(tmp_path):
    """Rootful Podman on a hybrid host (cgroupfs): its container is named on the unified line, whose tree has no
    memory controller; its memory is in the v1 memory hierarchy at the same path (issue 25's Podman case)."""
    rel = "/libpod_parent/libpod-" + "b" * 64
    v2 = tmp_path / "fs/cgroup/unified" / rel.lstrip("/")
    v2.mkdir(parents=True)
    (v2 / "cgroup.procs").write_text("7\n8\n")
    (v2 / "cpu.stat").write_text("usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\n")
    mem = tmp_path / "fs/cgroup/memory" / rel.lstrip("/")
    mem.mkdir(parents=True)
    (mem / "memory.usage_in_bytes").write_text("790528\n")
    c = IdentityCollector(SourceContext(paths=Paths(procfs=tmp_path / "proc", sysfs=tmp_path, rootfs=tmp_path)))
    # private: the collector's cgroup opener: the directory it keeps is what is tested, no public name returns it
    directory = c._open_cgroup(rel)
    assert directory is not None and directory.refresh(1)
    assert (directory.stats.cpu_user_seconds_total, directory.stats.cpu_system_seconds_total,
            directory.stats.memory_bytes) == (2.0, 1.0, 790528)
    assert directory.members == (7, 8)


def test_neighbours_are_looked_for_under_host_pressure_that_the_workloads_own_use_discounts():
    """An idle job on a saturated host scores cpu ~0 (not blamed), yet who saturates it must still be named: the
    neighbour scan runs when the analysis found host-wide pressure, not only when a workload scored it."""
    from headroom.daemon import previous_tick
    from headroom.sources.neighbours import scored

    group = IdentityGroup("pod", "ml/trainer-0", pids=(500,), gpus=("GPU-0",), pod="trainer-0", namespace="ml")
    idle = _analyse(_auto_window(group, own_cores=0.005))
    assert idle.workload_findings[0].verdict.scores["cpu"] < 0.1
    assert idle.host.host_pressure["cpu"] > 0.9
    assert scored(previous_tick(Sample(0.0, 0.0), idle)) is True
    calm = _analyse(_auto_window(group, own_cores=0.005, host_busy=0.1, psi=0.0))
    assert scored(previous_tick(Sample(0.0, 0.0), calm)) is False


def test_a_tick_the_identity_collector_failed_measures_the_automatic_workloads_it_named_before():
    """The processes collector measures the members the identity collector named at the previous tick. On a host
    saturated by the very load being diagnosed that collector misses a deadline now and then: the automatic
    workloads went unmeasured for a tick (absent, their figures a gap). They are unknown, not gone: the members
    named before are measured again; an answer that names none ends them."""
    me = IdentityGroup("pod", "ns/me", pids=(os.getpid(),))
    current = {"s": _sample(identity=IdentitySample(groups=(me,)))}
    c = ProcessesCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=SYS),
                                         previous=lambda: PreviousTick.of(current["s"])))
    try:
        assert [(w.name, w.pids) for w in c.collect().workloads] == [("ns/me", (os.getpid(),))]
        current["s"] = Sample(timestamp=1e9, monotonic=1.0, sources={"identity": SourceResult(
            "identity", False, 0.6, None, "stuck: collect() has not returned for 0.6s")})
        (entry,) = c.collect().workloads
        assert entry.name == "ns/me" and entry.pids == (os.getpid(),) and entry.threads >= 1
        current["s"] = _sample(identity=IdentitySample(groups=()))
        assert c.collect() == ProcessesSample()
    finally:
        c.close()
