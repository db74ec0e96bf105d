"""The identity collector with pods and processes churning: work follows what changed (docs/workload-identity.md,
"Cost"), and what it delivers stays what a collector reading everything anew delivers. Real processes where the
kernel is the point (pidfds, a pid reused in a private pid namespace), fixture trees and a real gRPC kubelet
elsewhere."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from headroom.samples import GpuProcess, GpuSample, NvmlSample, PreviousTick, Sample, SourceResult
from headroom.sources import Paths, SourceContext

# launcher_step: patched where the collector looks it up; CGROUP_EVERY_TICK: in the module of the cgroup reads
from headroom.sources.identity import IdentityCollector, cgroup_files
from headroom.sources.identity import collector as identity_module
from headroom.sources.identity import watch as watch_module

UNSHARE = shutil.which("unshare")


def _sample(listed: dict[str, tuple[int, ...]]) -> Sample:
    """A tick whose NVML sample lists ``listed`` (GPU UUID -> pids), GPUs indexed in order."""
    gpus = tuple(GpuSample(i, uuid, "H100", f"0000:{i:02x}:00.0", memory_total_bytes=80 * 2**30,
                           processes=tuple(GpuProcess(p, 2**30) for p in pids))
                 for i, (uuid, pids) in enumerate(listed.items()))
    return Sample(1.0, 1.0, {"nvml": SourceResult("nvml", True, 0.0, NvmlSample(True, gpus))})


def _torchrun(tag: str, code: str = "import time; time.sleep(120)", **kw) -> subprocess.Popen:
    """A real process whose command line names a torchrun launcher (its own workload, no cgroup needed), once
    its /proc/PID/cmdline says so (the kernel sets it a moment after exec: a GPU process is long past that)."""
    p = subprocess.Popen(["torchrun", "-c", f"{code}  # {tag}"], executable=sys.executable,
                         stdin=subprocess.DEVNULL, **kw)
    for _ in range(10_000):
        with open(f"/proc/{p.pid}/cmdline", "rb") as f:
            if f.read().startswith(b"torchrun"):
                return p
        threading.Event().wait(0.001)
    raise AssertionError(f"pid {p.pid}: its command line never showed")


def _stop(*processes: subprocess.Popen) -> None:
    for p in processes:
        p.kill()
        p.wait()


# ------------------------------------------------------------------------------- real processes, pidfds
def test_a_gpu_process_that_exits_leaves_at_once_though_nvml_still_lists_it(tmp_path):
    """On the live /proc each GPU process is watched through a pidfd: one poll a tick says which exited. One that
    exited is gone in the same tick although the NVML listing the collector follows (the previous tick's) still
    has it, and its descriptor is closed."""
    listed: dict[str, Sample] = {}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=tmp_path, rootfs=tmp_path),
                                        previous=lambda: PreviousTick.of(listed["s"])))
    # private: the launcher scan: its reads (or its absence) are what is tested, no public name shows it
    c._scan = None  # GPU processes only: this machine's launchers without a GPU (other users' CPU servers) are not
    # what this test counts
    a, b = _torchrun("a"), _torchrun("b")
    try:
        listed["s"] = _sample({"GPU-a": (a.pid, b.pid)})
        assert sorted(g.pids for g in c.collect().groups) == [(a.pid,), (b.pid,)]
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert set(c._watched) == {a.pid, b.pid}
        _stop(a)
        assert [g.pids for g in c.collect().groups] == [(b.pid,)]  # a is still listed, but gone
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert set(c._watched) == {b.pid} and len(c._by_fd) == 1
    finally:
        _stop(a, b)
        c.close()
    # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
    assert not c._by_fd and not c._ancestors


PID_REUSE = r"""
import json, os, subprocess, sys
from pathlib import Path
sys.path[:0] = [{tests!r}]
from test_identity_churn import _sample, _torchrun, _stop
from headroom.samples import PreviousTick
from headroom.sources import Paths, SourceContext
from headroom.sources.identity import IdentityCollector

listed = {{}}
c = IdentityCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=Path({tmp!r}), rootfs=Path({tmp!r})),
                                    previous=lambda: PreviousTick.of(listed["s"])))
first = _torchrun("first")
listed["s"] = _sample({{"GPU-a": (first.pid,)}})
out = {{"before": [g.name for g in c.collect().groups]}}
_stop(first)
with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the next process of this pid namespace gets first's pid
    f.write(str(first.pid - 1))
second = _torchrun("second")
out["same_pid"] = second.pid == first.pid
out["after"] = [g.name for g in c.collect().groups]
_stop(second)
c.close()
print(json.dumps(out))
"""


@pytest.mark.skipif(UNSHARE is None or os.geteuid() != 0, reason="needs root and unshare(1): a private pid namespace")
def test_a_pid_reused_by_another_process_is_read_again(tmp_path):
    """The collector remembers a GPU process's identity while its pidfd says it runs. In a private pid namespace
    (its own /proc) the pid of a process that exited is given to the next process on purpose (ns_last_pid): the
    new process is read anew, not taken for the old one."""
    script = PID_REUSE.format(tests=str(Path(__file__).resolve().parent), tmp=str(tmp_path))
    r = subprocess.run([UNSHARE, "--pid", "--fork", "--mount-proc", sys.executable, "-c", script],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["same_pid"] is True
    assert out["before"] == ["torchrun/import time; time.sleep(120)  # first"]
    assert out["after"] == ["torchrun/import time; time.sleep(120)  # second"]


LAUNCHER = ("import subprocess, time\n"  # (its sys.executable is empty: argv[0] is torchrun)
            f"ps = [subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(120)']) for _ in range(2)]\n"
            "print(' '.join(str(p.pid) for p in ps), flush=True)\n"
            "time.sleep(120)\n")


def test_a_launchers_ancestors_are_read_once_while_they_live(tmp_path, monkeypatch):
    """Two workers of one torchrun reach the GPUs a tick apart: the launcher (their parent) is read for the first
    and remembered for the second, both are its workload; when the launcher exits it is forgotten."""
    steps: list[int] = []
    real_step = identity_module.launcher_step

    def counted(root, pid):
        steps.append(pid)
        return real_step(root, pid)

    monkeypatch.setattr(identity_module, "launcher_step", counted)
    monkeypatch.setattr(watch_module, "launcher_step", counted)  # the ancestors are read by the pid watch
    launcher = _torchrun("workers", LAUNCHER, stdout=subprocess.PIPE, text=True, start_new_session=True)
    listed: dict[str, Sample] = {}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=Path("/proc"), sysfs=tmp_path, rootfs=tmp_path),
                                        previous=lambda: PreviousTick.of(listed["s"])))
    try:
        assert launcher.stdout is not None
        one, two = (int(p) for p in launcher.stdout.readline().split())
        mine = {one, two}  # (this machine's other launchers, with or without a GPU, are workloads too: not counted)
        listed["s"] = _sample({"GPU-a": (one,)})
        (g,) = [g for g in c.collect().groups if mine & set(g.pids)]
        assert (g.kind, g.pids) == ("launcher", (one,))
        listed["s"] = _sample({"GPU-a": (one,), "GPU-b": (two,)})
        (g,) = [g for g in c.collect().groups if mine & set(g.pids)]
        assert g.pids == (one, two) and g.gpus == ("GPU-a", "GPU-b")
        assert steps.count(launcher.pid) == 1  # read for the first worker, remembered for the second
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert launcher.pid in c._ancestors
        launcher.kill()
        launcher.wait()
        c.collect()
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert launcher.pid not in c._ancestors
    finally:
        os.killpg(launcher.pid, 9)
        launcher.wait()
        c.close()


# ----------------------------------------------------------------------------------------- fixture trees
def _job(proc: Path, sysfs: Path, pid: int, job: int, memory: int) -> None:
    path = f"/system.slice/slurmstepd.scope/job_{job}"
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "cgroup").write_text(f"0::{path}/step_0\n")
    d = sysfs / "fs/cgroup" / path.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup.procs").write_text("")
    (d / "memory.current").write_text(f"{memory}\n")


def test_cgroup_figures_of_many_identities_are_read_within_the_refresh_bound(tmp_path, monkeypatch):
    """Beyond CGROUP_EVERY_TICK identities, each tick reads the cgroups read longest ago, enough of them that each
    one's figures are at most refresh_ticks - 1 ticks old (CGROUP_REFRESH_SECONDS at the sampling interval); a
    new identity's are read at once."""
    monkeypatch.setattr(cgroup_files, "CGROUP_EVERY_TICK", 2)
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    jobs = list(range(1, 13))
    for j in jobs:
        _job(proc, sysfs, 1000 + j, j, 0)
    listed: dict[str, Sample] = {"s": _sample({"GPU-a": tuple(1000 + j for j in jobs)})}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=sysfs, rootfs=tmp_path), interval=2.5,
                                        settings={"auto": ["jobs"]}, previous=lambda: PreviousTick.of(listed["s"])))
    assert c.refresh_ticks == 4  # 10 s at 2.5 s a tick
    ages = []
    for tick in range(1, 13):
        for j in jobs:  # every cgroup's memory.current says the tick it was written at
            (sysfs / f"fs/cgroup/system.slice/slurmstepd.scope/job_{j}/memory.current").write_text(f"{tick}\n")
        if tick == 6:
            jobs.append(13)
            _job(proc, sysfs, 1013, 13, tick)
            listed["s"] = _sample({"GPU-a": tuple(1000 + j for j in jobs)})
        groups = c.collect().groups
        age = {g.job_id: tick - g.cgroup.memory_bytes for g in groups}
        if tick == 6:
            assert age["13"] == 0  # new: read at once
        ages.append(sorted(age.values()))
    assert max(max(a) for a in ages) <= c.refresh_ticks - 1
    # 12 identities: 3 read a tick (12 / 4), 13: 4; after the first tick most figures are from earlier ticks
    assert ages[1].count(0) == 3 and ages[-1].count(0) == 4


def test_an_unchanged_identity_is_last_ticks_object(tmp_path):
    """An identity whose processes, GPUs and cgroup figures did not change is the previous tick's IdentityGroup
    (nothing is made again for it, and the window keeps it once); one that changed is made anew."""
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    _job(proc, sysfs, 1001, 1, 100)
    _job(proc, sysfs, 1002, 2, 200)
    listed = {"s": _sample({"GPU-a": (1001, 1002)})}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=sysfs, rootfs=tmp_path),
                                        previous=lambda: PreviousTick.of(listed["s"])))
    one, two = c.collect().groups
    again = c.collect().groups
    assert again[0] is one and again[1] is two
    (sysfs / "fs/cgroup/system.slice/slurmstepd.scope/job_2/memory.current").write_text("300\n")
    listed["s"] = _sample({"GPU-a": (1001, 1002), "GPU-b": (1001,)})
    moved, grown = c.collect().groups
    assert moved is not one and moved.gpus == ("GPU-a", "GPU-b") and moved.cgroup is one.cgroup
    assert grown is not two and grown.cgroup.memory_bytes == 300


def _values(sample) -> list[tuple]:
    return sorted((g.kind, g.name, g.pids, g.gpus, g.namespace, g.pod, g.container, g.pod_uid, g.job_id, g.processes,
                   g.cgroup) for g in sample.groups)


def test_what_changed_is_worked_again_and_the_rest_kept_equals_reading_everything_anew(tmp_path, kubelet):
    """200 ticks of random churn (pods with and without on-disk names, a second process in a pod, processes moving
    GPUs or exiting while NVML still lists them, Slurm jobs, the kubelet's answer changing every few ticks with
    pods it alone knows, some named by it before their process reaches a GPU): each tick the collector, which works again only what changed, delivers what a new
    collector reading everything anew delivers."""
    sock, servicer = kubelet
    proc, sysfs, rootfs = tmp_path / "proc", tmp_path / "sys", tmp_path / "root"
    rng = random.Random(1509)
    gpus = ("GPU-0", "GPU-1", "GPU-2")
    pods: dict[int, tuple[str, str, str]] = {}  # pid -> (uid, name or "", pod cgroup)
    on: dict[int, str] = {}  # pid -> GPU
    pending: list[int] = []  # started, not on a GPU yet
    serial = 0

    def new_pod(named: bool) -> None:
        nonlocal serial
        serial += 1
        pid, uid = 5000 + serial, f"{serial:08x}-0000-4000-8000-{serial:012x}"
        cid = f"{serial:064x}"
        cgroup = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::{cgroup}/cri-containerd-{cid}.scope\n")
        d = sysfs / "fs/cgroup" / cgroup.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.procs").write_text("")
        (d / "memory.current").write_text(f"{serial}\n")
        name = f"pod-{serial}" if named else ""
        if named:
            bundle = rootfs / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}"
            bundle.mkdir(parents=True)
            (bundle / "config.json").write_text(json.dumps({"annotations": {
                "io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": name,
                "io.kubernetes.cri.container-name": "main"}}))
        pods[pid] = (uid, name, cgroup)
        if rng.random() < 0.3:
            pending.append(pid)  # the kubelet may name it before NVML lists its process
        else:
            on[pid] = rng.choice(gpus)

    def second_process(of: int) -> None:
        nonlocal serial
        serial += 1
        pid = 5000 + serial
        (proc / str(pid)).mkdir(parents=True)
        shutil.copy(proc / str(of) / "cgroup", proc / str(pid) / "cgroup")
        pods[pid] = pods[of]
        on[pid] = rng.choice(gpus)

    for _ in range(6):
        new_pod(named=True)
    for j in (7, 8):
        _job(proc, sysfs, 4000 + j, j, j)
        on[4000 + j] = rng.choice(gpus)
    listed: dict[str, Sample] = {}
    settings = {"kubernetes": True, "pod_resources_socket": str(sock), "pod_resources_refresh": 3600.0,
                "max_workloads": 1000}
    ctx = SourceContext(paths=Paths(procfs=proc, sysfs=sysfs, rootfs=rootfs), settings=settings,
                        previous=lambda: PreviousTick.of(listed["s"]))
    c = IdentityCollector(ctx)
    try:
        for tick in range(200):
            action = rng.random()
            if action < 0.3:
                new_pod(named=tick < 100 or rng.random() < 0.7)  # all named first: the kubelet's cheap path
            elif action < 0.45 and pods:
                second_process(rng.choice(sorted(pods)))
            elif action < 0.6 and on:
                on[rng.choice(sorted(on))] = rng.choice(gpus)  # moved to another GPU
            elif action < 0.85 and on:
                gone = rng.choice(sorted(on))
                shutil.rmtree(proc / str(gone), ignore_errors=True)  # exited; NVML may still list it this tick
                if rng.random() < 0.5:
                    del on[gone]
                pods.pop(gone, None)
            on = {pid: gpu for pid, gpu in on.items() if (proc / str(pid)).exists() or rng.random() < 0.5}
            if pending and rng.random() < 0.5:
                on[pending.pop(0)] = rng.choice(gpus)
            listed["s"] = _sample({g: tuple(sorted(p for p, x in on.items() if x == g)) for g in gpus})
            if tick % 7 == 0:  # the kubelet's answer: the named pods still running, one of its own, some devices
                answer = {("ml", name): {"main": [("nvidia.com/gpu", [f"{on.get(pid, 'GPU-0')}::{tick % 3}"])]}
                          for pid, (_, name, _) in sorted(pods.items()) if name and rng.random() < 0.8}
                answer[("ml", f"waiting-{tick}")] = {"main": [("nvidia.com/gpu", [f"{rng.choice(gpus)}::0"])]}
                servicer.pods = answer
                c.poller.poll_once()
            fresh = IdentityCollector(ctx)
            fresh.poller.close()
            fresh.poller = c.poller  # the same answer (the poller's thread is not started for it)
            assert _values(c.collect()) == _values(fresh.collect()), f"tick {tick}"
        # everything ends: nothing is left of what the collector kept from tick to tick
        servicer.pods = {}
        c.poller.poll_once()
        listed["s"] = _sample(dict.fromkeys(gpus, ()))
        assert c.collect().groups == ()
        kept = {name: getattr(c, name) for name in (
            "_pids", "_meta", "_containers", "_members", "_member_of", "_parts", "_groups", "_built", "_made",
            "_shown", "_shown_names", "_kinds", "_by_name", "_ref_keys", "_part_ref", "_unnamed", "_dirs",
            "_refused", "_exported", "_touched", "_unassembled")}
        assert {name: len(x) for name, x in kept.items() if x} == {}
    finally:
        c.close()


def test_a_tick_that_fails_midway_leaves_no_stale_identity(tmp_path, monkeypatch):
    """The groups of processes that came in a tick whose collect() failed after reading them (a fault in a later
    step) are made in the next tick, though nothing changes by then."""
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    _job(proc, sysfs, 1001, 1, 100)
    _job(proc, sysfs, 1002, 2, 200)
    listed = {"s": _sample({"GPU-a": (1001,)})}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=sysfs, rootfs=tmp_path),
                                        previous=lambda: PreviousTick.of(listed["s"])))
    assert [g.name for g in c.collect().groups] == ["job_1"]
    listed["s"] = _sample({"GPU-a": (1001, 1002)})

    def fault():
        raise RuntimeError("planted")

    # private: a fault injected into the launcher step, which has no public seam
    monkeypatch.setattr(c, "_launcher_names", fault)
    with pytest.raises(RuntimeError):
        c.collect()
    monkeypatch.undo()
    assert [g.name for g in c.collect().groups] == ["job_1", "job_2"]
