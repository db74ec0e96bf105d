"""Automatic workload identity: cgroup paths of every driver and runtime, container names from on-disk
state, the HPC job mapping directory, pods / jobs / containers / units as workloads end to end (the NVML
stand-in below pynvml, a real gRPC kubelet on a unix socket, fixture /proc and cgroup trees), churn and
the cardinality cap."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from headroom.analysis.pipeline import Analysis
from headroom.config import load_config
from headroom.exposition import render, status_api
from headroom.exposition.render import render as render_exposition
from headroom.exposition.render.collectors import _render_identity  # private: no public name
from headroom.exposition.render.findings import _render_workloads  # private: no public name
from headroom.sampler import Sampler
from headroom.samples import (
    GpuProcess,
    GpuSample,
    IdentityGroup,
    IdentitySample,
    IdentitySource,
    NvmlSample,
    PreviousTick,
    ProcessesSample,
    Sample,
    SourceResult,
    WorkloadProcesses,
)
from headroom.simulation import ManualClock, parse_scenario
from headroom.sources import Paths, SourceContext, procfs
from headroom.sources import identity as identity_module
from headroom.sources.identity import (
    IdentityCollector,
    container_meta,
    identity_of,
    parse_cgroup_path,
    read_job_mapping,
)
from headroom.sources.nvml import NvmlCollector
from headroom.workload import attribution

CGROUPS = Path(__file__).resolve().parent / "fixtures" / "cgroup"
UID = "8f1d5e2a-3b4c-4d5e-9f60-718293a4b5c6"
CID = "4a7c1e0f9b2d3c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6"
SYSTEMD_POD = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"

# case -> (kind, pod uid, container id, runtime, job, step, unit, cgroup used for stats ("" = none: v1 only))
CASES = {
    "k8s-v2-systemd-containerd": ("pod", UID, CID, "containerd", "", "", "", SYSTEMD_POD),
    "k8s-v2-systemd-crio-guaranteed": ("pod", UID, CID, "cri-o", "", "", "",
                                       f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice"),
    "k8s-v2-cgroupfs-containerd": ("pod", UID, CID, "", "", "", "", f"/kubepods/besteffort/pod{UID}"),
    "k8s-v2-containerd-in-unit": ("pod", UID, CID, "containerd", "", "", "", ""),
    "k8s-v1-cgroupfs-docker": ("pod", UID, CID, "", "", "", "", ""),
    "k8s-v1-systemd-docker": ("pod", UID, CID, "docker", "", "", "", ""),
    "k8s-hybrid-systemd-crio": ("pod", UID, CID, "cri-o", "", "", "", ""),
    # the systemd driver on a hybrid host: the container's own processes are in its scope on every line (figures
    # from the unified one) ...
    "k8s-hybrid-systemd-containerd": ("pod", UID, CID, "containerd", "", "", "", SYSTEMD_POD),
    # ... but a process `kubectl exec` started is put in the scope on the v1 lines only: runc exec leaves it in the
    # unified cgroup of the runtime that ran it (opencontainers/runc#2087), containerd.service
    "k8s-hybrid-systemd-containerd-exec": ("pod", UID, CID, "containerd", "", "", "", ""),
    "slurm-v2": ("job", "", "", "", "4242", "0", "", "/system.slice/slurmstepd.scope/job_4242"),
    "slurm-v1": ("job", "", "", "", "77", "batch", "", ""),
    # a systemd host where Slurm 22.05 uses cgroup v1 (proctrack/cgroup, task/cgroup, jobacct_gather/cgroup): the
    # unified and name=systemd lines (and the controllers Slurm leaves alone) still say slurmd.service; the job is
    # on the freezer, cpuset, devices, memory and cpuacct lines. Its figures are not the v2 slurmd.service's
    "slurm-v1-hybrid-systemd": ("job", "", "", "", "5", "batch", "", ""),
    # proctrack/cgroup alone (TaskPlugin=task/affinity): only the freezer names the job, memory comes first
    "slurm-v1-systemd-freezer": ("job", "", "", "", "6", "0", "", ""),
    "docker-v2-systemd": ("container", "", CID, "docker", "", "", "", f"/system.slice/docker-{CID}.scope"),
    "docker-v1-cgroupfs": ("container", "", CID, "docker", "", "", "", ""),
    # Docker's systemd driver on a hybrid host: its container, and a process `docker exec` started (as above)
    "docker-hybrid-systemd": ("container", "", CID, "docker", "", "", "", f"/system.slice/docker-{CID}.scope"),
    "docker-hybrid-systemd-exec": ("container", "", CID, "docker", "", "", "", ""),
    "podman-v2-rootful": ("container", "", CID, "podman", "", "", "", f"/machine.slice/libpod-{CID}.scope"),
    "podman-v2-rootless": ("container", "", CID, "podman", "", "", "",
                           f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope"),
    "unit-v2": ("unit", "", "", "", "", "", "vllm.service", "/system.slice/vllm.service"),
    "unit-v2-user": ("unit", "", "", "", "", "", "train.service",
                     "/user.slice/user-1000.slice/user@1000.service/app.slice/train.service"),
    "session-v2": None,
    "root-v2": None,
}


def test_every_fixture_has_an_expectation():
    assert {p.name for p in CGROUPS.iterdir() if p.name != "README.md"} == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_identity_from_proc_pid_cgroup(case):
    ident = identity_of(procfs.parse_pid_cgroup((CGROUPS / case).read_text()))
    expected = CASES[case]
    if expected is None:
        assert ident is None
        return
    assert ident is not None, case
    got = (ident.kind, ident.pod_uid, ident.container_id, ident.runtime, ident.job_id, ident.step, ident.unit,
           ident.cgroup)
    assert got == expected, case


def test_paths_that_only_look_like_identities_are_not():
    assert parse_cgroup_path(f"/system.slice/pod{UID}.service/x") is not None  # a unit, not a pod (no kubepods)
    assert parse_cgroup_path(f"/system.slice/pod{UID}.service/x").kind == "unit"
    assert parse_cgroup_path("/system.slice/myjob_12.service").kind == "unit"
    assert parse_cgroup_path("/user.slice/job_x/step_1") is None
    assert parse_cgroup_path("/user.slice/job_12/step_1") is None  # not under Slurm's cgroups
    assert parse_cgroup_path("/slurm_node07/uid_5/job_12/step_1").job_id == "12"  # multiple-slurmd
    assert parse_cgroup_path(f"/kubepods.slice/kubepods-besteffort.slice/crio-conmon-{CID}.scope") is None


# ------------------------------------------------------------------------------ on-disk container state
def _write_json(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_container_names_from_each_runtimes_on_disk_state(tmp_path):
    root = tmp_path
    _write_json(root / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{'a' * 64}/config.json",
                {"annotations": {"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": "chat-0",
                                 "io.kubernetes.cri.container-name": "vllm", "io.kubernetes.cri.sandbox-uid": UID}})
    _write_json(root / f"run/containers/storage/overlay-containers/{'b' * 64}/userdata/config.json",
                {"annotations": {"io.kubernetes.pod.namespace": "batch", "io.kubernetes.pod.name": "train-7",
                                 "io.kubernetes.container.name": "torch", "io.kubernetes.pod.uid": UID}})
    _write_json(root / f"var/lib/docker/containers/{'c' * 64}/config.v2.json",
                {"Name": "/sd-webui", "Config": {"Labels": {"com.docker.compose.service": "webui"}}})
    _write_json(root / "var/lib/containers/storage/overlay-containers/containers.json",
                [{"id": "d" * 64, "names": ["jupyter"]}, {"id": "e" * 64, "names": []}])
    (root / f"var/lib/docker/containers/{'f' * 64}").mkdir(parents=True)
    (root / f"var/lib/docker/containers/{'f' * 64}/config.v2.json").write_text("{not json")

    k8s = container_meta(root, "a" * 64, "containerd")
    assert (k8s.namespace, k8s.pod, k8s.container, k8s.pod_uid) == ("ml", "chat-0", "vllm", UID)
    crio = container_meta(root, "b" * 64, "cri-o")
    assert (crio.namespace, crio.pod, crio.container) == ("batch", "train-7", "torch")
    assert container_meta(root, "c" * 64, "docker").name == "sd-webui"
    assert container_meta(root, "d" * 64, "podman").name == "jupyter"
    assert container_meta(root, "e" * 64, "podman") is None
    assert container_meta(root, "f" * 64, "docker") is None  # garbled: no name, no exception
    assert container_meta(root, "9" * 64, "") is None


def test_a_fifo_or_device_in_place_of_a_runtime_record_neither_blocks_nor_is_read(tmp_path):
    """Before: the bundle's config.json was opened blocking, so a FIFO there held the tick forever."""
    bundle = tmp_path / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{'a' * 64}"
    bundle.mkdir(parents=True)
    os.mkfifo(bundle / "config.json")
    os.symlink("/dev/zero", tmp_path / "zero.json")
    docker = tmp_path / f"var/lib/docker/containers/{'c' * 64}"
    docker.mkdir(parents=True)
    os.symlink("/dev/zero", docker / "config.v2.json")
    result: list = []
    t = threading.Thread(target=lambda: result.extend((container_meta(tmp_path, "a" * 64, "containerd"),
                                                       container_meta(tmp_path, "c" * 64, "docker"))), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "blocked on the FIFO"
    assert result == [None, None]


# ----------------------------------------------------------------------------------- job mapping dir
def test_job_mapping_directory_in_dcgm_exporters_format(tmp_path):
    (tmp_path / "0").write_text("4242\n4242\n\n")
    (tmp_path / "1").write_text("77\n78\n")
    (tmp_path / "notes").write_text("ignored\n")
    (tmp_path / "2").mkdir()
    (tmp_path / "3").write_text("")
    assert read_job_mapping(tmp_path) == {0: ("4242",), 1: ("77", "78")}
    with pytest.raises(FileNotFoundError):
        read_job_mapping(tmp_path / "absent")


# ---------------------------------------------------------------------------------------- end to end
SCENARIO = """gpus:
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    processes:
      - {pid: 4242, used_memory: 20GiB, sm_utilization: 0.5}
      - {pid: 4343, used_memory: 10GiB, sm_utilization: 0.25}
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
    processes:
      - {pid: 4444, used_memory: 30GiB}
  - name: NVIDIA H100 80GB HBM3
    memory_total: 80GiB
    power_limit: 700
"""
POD_B = "0c0c0c0c-1111-2222-3333-444455556666"
CID_B = "b" * 64


def _proc(root: Path, pid: int, cgroup_line: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup_line + "\n")


def _cgroup(sysfs: Path, path: str, memory: int, pids: int) -> None:
    d = sysfs / "fs" / "cgroup" / path.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup.procs").write_text("")
    (d / "cpu.stat").write_text("usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\n")
    (d / "memory.current").write_text(f"{memory}\n")
    (d / "pids.current").write_text(f"{pids}\n")


def promtool_check(text: str) -> str:
    """promtool check metrics' complaints about an exposition ("" when it has none)."""
    assert shutil.which("promtool"), "promtool missing: `make test` installs Debian's prometheus package"
    r = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    return (r.stdout + r.stderr).decode().strip()


def _series(text: str, name: str) -> dict[str, str]:
    """{label text: value} of one metric family in an exposition."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_pods_and_jobs_holding_gpus_become_workloads_with_labels(tmp_path, kubelet):
    """Two pods time-slice GPU 0 (one named from containerd's annotations, one only by the kubelet), a Slurm
    job runs on GPU 1: per-pod GPU memory and utilization split by process, cgroup CPU and memory, pod
    labels on GPU 0's series, hpc_job on GPU 1's, and GPU 2 unlabelled."""
    sock, servicer = kubelet
    proc, sysfs, rootfs = tmp_path / "proc", tmp_path / "sys", tmp_path / "root"
    _proc(proc, 4242, f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope")
    _proc(proc, 4343, f"0::/kubepods/burstable/pod{POD_B}/{CID_B}")
    _proc(proc, 4444, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0")
    _cgroup(sysfs, SYSTEMD_POD, memory=3 * 2**30, pids=7)
    _cgroup(sysfs, "/system.slice/slurmstepd.scope/job_4242", memory=2**30, pids=3)
    _write_json(rootfs / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/config.json",
                {"annotations": {"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": "chat-0",
                                 "io.kubernetes.cri.container-name": "vllm"}})
    scenario = parse_scenario(SCENARIO)
    clock = ManualClock(1000.0)
    scenario.nvml_library(clock=lambda: clock() - 1000.0)
    paths = Paths(procfs=proc, sysfs=sysfs, rootfs=rootfs)
    holder = {}
    nvml = NvmlCollector(SourceContext(paths=paths, scenario=scenario, monotonic=clock,
                                       settings={"pcie_poll_interval": 60.0}))
    ident = IdentityCollector(SourceContext(
        paths=paths, previous=lambda: PreviousTick.of(holder["s"].snapshot.sample if holder["s"].snapshot else None),
        settings={"kubernetes": True, "pod_resources_socket": str(sock), "pod_resources_refresh": 0.05}))
    sampler = holder["s"] = Sampler(render=render_exposition, collectors=[nvml, ident], interval=1.0, collector_timeout=10.0,
                                    analyse=Analysis(load_config(None)), clock=clock)
    try:
        gpu0 = sampler.tick().sample.data("nvml").gpus[0].uuid
        servicer.pods = {("ml", "chat-0"): {"vllm": [("nvidia.com/gpu", [f"{gpu0}::0"])]},
                         ("ml", "embed-1"): {"tei": [("nvidia.com/gpu", [f"{gpu0}::1"])]}}
        text = ""
        for _ in range(200):
            clock.advance(1.0)
            text = sampler.tick().exposition.decode()
            if 'headroom_identity_source_up{source="kubelet"} 1' in text and "ml/embed-1" in text:
                break
            threading.Event().wait(0.02)
    finally:
        sampler.stop()
    info = _series(text, "headroom_workload_info")
    assert set(info) == {
        'workload="ml/chat-0",kind="pod",model="",precision="",runtime="",source="auto"',
        'workload="ml/embed-1",kind="pod",model="",precision="",runtime="",source="auto"',
        'workload="job_4242",kind="job",model="",precision="",runtime="",source="auto"',
    }
    used = _series(text, "headroom_workload_gpu_memory_used_bytes")
    assert used['workload="ml/chat-0",gpu="0"'] == str(20 * 2**30)
    assert used['workload="ml/embed-1",gpu="0"'] == str(10 * 2**30)
    assert used['workload="job_4242",gpu="1"'] == str(30 * 2**30)
    util = _series(text, "headroom_workload_gpu_utilization_ratio")
    assert util['workload="ml/chat-0",gpu="0"'] == "0.5" and util['workload="ml/embed-1",gpu="0"'] == "0.25"
    assert _series(text, "headroom_workload_cgroup_memory_bytes") == {
        'workload="ml/chat-0"': str(3 * 2**30), 'workload="job_4242"': str(2**30)}
    assert _series(text, "headroom_workload_processes") == {'workload="ml/chat-0"': "7",
                                                             'workload="ml/embed-1"': "1",
                                                             'workload="job_4242"': "3"}
    assert _series(text, "headroom_workload_cgroup_cpu_seconds_total")['workload="ml/chat-0",mode="user"'] == "4"
    total = _series(text, "headroom_gpu_memory_size_bytes")
    assert set(total) == {
        f'gpu="0",uuid="{gpu0}",namespace="ml",pod="chat-0,embed-1",container="vllm,tei"',
        next(k for k in total if k.startswith('gpu="1"') and k.endswith(',hpc_job="4242"')),
        next(k for k in total if k.startswith('gpu="2"') and k.endswith('"') and "hpc_job" not in k
             and "pod=" not in k),
    }
    assert 'headroom_workload_identities 3' in text
    assert 'headroom_identity_unknown_devices{source="kubelet"} 0' in text
    doc = status_api.status(sampler)["identity"]
    assert doc["sources"] == [{"name": "kubelet", "up": True, "error": None, "unknown_devices": [], "refused": []}]
    chat = next(w for w in doc["workloads"] if w["name"] == "ml/chat-0")
    assert (chat["kind"], chat["container"], chat["processes"], chat["gpu_memory_used_bytes"]) == (
        "pod", "vllm", 7, 20 * 2**30)
    assert promtool_check(text) == ""


def test_identity_samples_survive_record_and_replay():
    from headroom import record

    sample = Sample(1.0, 2.0, {"identity": SourceResult("identity", True, 0.1, IdentitySample(
        groups=(IdentityGroup("pod", "ml/a", pids=(1,), gpus=("GPU-x",), namespace="ml", pod="a"),),
        sources=(IdentitySource("kubelet", False, "socket missing", ("d",)),), dropped_total=2, max_groups=9))})
    assert record.decode_sample(json.loads(record.encode_sample(sample))) == sample


def test_flags_reach_the_identity_collector(tmp_path):
    # private: the CLI's flags-to-Options step: no public name gives the Options of an argv
    from headroom.cli import _options, build_parser
    from headroom.daemon import build_collectors

    args = build_parser().parse_args(["run", "--kubernetes", "--kubernetes.pod-resources-socket", "/k.sock",
                                      "--hpc-job-mapping-dir", str(tmp_path), "--workloads.auto=units,containers"])
    (c,) = [c for c in build_collectors(load_config(None), _options(args), None) if c.name == "identity"]
    assert (c.kubernetes, c.poller.client.socket_path, c.mapping_dir, c.auto) == (
        True, "/k.sock", tmp_path, frozenset({"units", "containers"}))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--workloads.auto=pods,vms"])
    (c,) = [c for c in build_collectors(load_config(None), _options(build_parser().parse_args(["run"])), None)
            if c.name == "identity"]
    assert (c.kubernetes, c.poller, c.auto) == (False, None, frozenset({"pods", "jobs", "launchers"}))


def _sample(gpus, identity=None, processes=None) -> Sample:
    sources = {"nvml": SourceResult("nvml", True, 0.0, NvmlSample(up=True, gpus=tuple(gpus)))}
    if identity is not None:
        sources["identity"] = SourceResult("identity", True, 0.0, identity)
    if processes is not None:
        sources["processes"] = SourceResult("processes", True, 0.0, processes)
    return Sample(1.0, 1.0, sources)


def test_a_declared_profile_matching_the_same_processes_wins():
    from headroom.workload.profiles import profile_from_dict

    gpu = GpuSample(0, "GPU-a", "x", "0", memory_total_bytes=80 * 2**30,
                    processes=(GpuProcess(10, 2**30), GpuProcess(11, 2**30)))
    identity = IdentitySample(groups=(IdentityGroup("unit", "vllm.service", pids=(10,), gpus=("GPU-a",)),
                                      IdentityGroup("container", "jupyter", pids=(11,), gpus=("GPU-a",))))
    declared = WorkloadProcesses("chat", pids=(10,), threads=1, cpu_user_seconds_total=0.0,
                                 cpu_system_seconds_total=0.0, resident_memory_bytes=0)
    profile = profile_from_dict({"name": "chat", "kind": "inference", "match": {"systemd_unit": "vllm"}})
    statuses = attribution.attribute(_sample([gpu], identity, ProcessesSample((declared,))), [profile])
    assert [(s.name, s.source) for s in statuses] == [("chat", "declared"), ("jupyter", "auto")]


def test_units_and_containers_only_when_asked(tmp_path):
    proc = tmp_path / "proc"
    _proc(proc, 10, "0::/system.slice/vllm.service")
    _proc(proc, 11, f"0::/system.slice/docker-{CID}.scope")
    previous = _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(10, 1), GpuProcess(11, 1)))])

    def names(**settings):
        c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                            settings=settings, previous=lambda: PreviousTick.of(previous)))
        return sorted((g.kind, g.name) for g in c.collect().groups)

    assert names() == []  # default: pods (with --kubernetes) and jobs only
    assert names(auto=["units", "containers"]) == [("container", CID[:12]), ("unit", "vllm.service")]


def test_precedence_holds_across_hierarchies_on_systemd_hosts(tmp_path):
    """pod > job > container > unit, whichever /proc/PID/cgroup line names each: a Slurm job on the v1 lines of a
    systemd host is that job (not `slurmd.service`, which its unified and name=systemd lines say), a process
    `kubectl exec` or `docker exec` started on a hybrid host is its pod's or container's (not `containerd.service`,
    where runc exec leaves it on the unified line), with every kind of workload on; and the v2 `slurmd.service`'s
    figures are not the job's."""
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    cases = {70: "slurm-v1-hybrid-systemd", 71: "slurm-v1-systemd-freezer", 72: "k8s-hybrid-systemd-containerd-exec",
             73: "docker-hybrid-systemd-exec", 74: "unit-v2"}
    for pid, case in cases.items():
        d = proc / str(pid)
        d.mkdir(parents=True)
        shutil.copy(CGROUPS / case, d / "cgroup")
    _cgroup(sysfs, "/system.slice/slurmd.service", memory=5 * 2**20, pids=3)  # slurmd's own cgroup (v2 files)
    c = _collector(tmp_path, _sample([GpuSample(0, "GPU-a", "x", "0", processes=tuple(
        GpuProcess(pid, 1) for pid in cases))]), auto=["pods", "jobs", "containers", "units"])
    got = sorted((g.kind, g.name, g.pids, g.cgroup) for g in c.collect().groups)
    c.close()
    assert got == [("container", CID[:12], (73,), None), ("job", "job_5", (70,), None), ("job", "job_6", (71,), None),
                   ("pod", UID, (72,), None), ("unit", "vllm.service", (74,), None)]


# ---------------------------------------------------------------------------------------- churn, cap
def test_churn_new_pods_every_tick_leave_no_series_or_state(tmp_path):
    """A new pod (new pid, new pod UID) on the GPU every tick for 600 ticks: each tick shows exactly the
    live pods, an ended pod's series are gone at once, and the collector's state stays bounded."""
    proc = tmp_path / "proc"
    current = {}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                        settings={"auto": ["jobs", "units"]},
                                        previous=lambda: PreviousTick.of(current.get("previous"))))
    widths = set()
    for tick in range(600):
        pids = (100_000 + tick, 100_000 + tick + 1)  # two live jobs, one replaced per tick
        for pid in pids:
            _proc(proc, pid, f"0::/system.slice/slurmstepd.scope/job_{pid}/step_0")
        gone = proc / str(100_000 + tick - 1)
        if gone.exists():
            shutil.rmtree(gone)
        current["previous"] = _sample([GpuSample(0, "GPU-a", "x", "0", processes=tuple(GpuProcess(p, 1) for p in pids))])
        identity = c.collect()
        sample = _sample(current["previous"].data("nvml").gpus, identity)
        statuses = attribution.attribute(sample, [])
        w = render.Writer()
        _render_identity(w, identity, sample)
        _render_workloads(w, statuses)
        text = w.render().decode()
        assert sorted(_series(text, "headroom_workload_info")) == sorted(
            f'workload="job_{p}",kind="job",model="",precision="",runtime="",source="auto"' for p in pids)
        widths.add(len(text.splitlines()))
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert len(c._pids) <= 2 and len(c._meta) == 0 and len(c._refused) == 0 and len(c._dirs) <= 2
        # what the collector keeps from tick to tick to work again only what changed: the live identities' only
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert max(len(x) for x in (c._members, c._member_of, c._parts, c._groups, c._built, c._made, c._shown,
                                    c._shown_names, c._kinds, c._by_name, c._part_ref, c._containers)) <= 2
    assert len(widths) == 1  # the same number of series every tick


def test_cap_drops_identities_beyond_it_and_counts_each_once(tmp_path):
    proc = tmp_path / "proc"
    current = {}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=tmp_path),
                                        settings={"max_workloads": 2}, previous=lambda: PreviousTick.of(current["previous"])))

    def tick(jobs):
        for j in jobs:
            _proc(proc, j, f"0::/slurm/job_{j}/step_0")
        current["previous"] = _sample([GpuSample(0, "GPU-a", "x", "0", processes=tuple(GpuProcess(j, 1) for j in jobs))])
        return c.collect()

    s = tick([1, 2, 3, 4])
    assert [g.name for g in s.groups] == ["job_1", "job_2"] and s.dropped_total == 2
    assert tick([1, 2, 3, 4]).dropped_total == 2  # the same identities: not counted again
    assert tick([1, 2, 3, 4, 5]).dropped_total == 3  # a new one beyond the cap
    s = tick([3, 4])  # 1 and 2 ended: 3 and 4 now fit
    assert [g.name for g in s.groups] == ["job_3", "job_4"] and s.dropped_total == 3
    s = tick([1, 3, 4])  # a newcomer that sorts first does not push out what is exported
    assert sorted(g.name for g in s.groups) == ["job_3", "job_4"] and s.dropped_total == 4
    s = tick([3, 4, 5])  # job 5 left and came back: a new refusal, counted again
    assert s.dropped_total == 5
    w = render.Writer()
    _render_identity(w, s, _sample([]))
    text = w.render().decode()
    assert "headroom_workload_identities_dropped_total 5" in text and "headroom_workload_identities_max 2" in text


def test_job_mapping_dir_labels_gpus_and_makes_job_workloads(tmp_path):
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "1").write_text("9001\n")
    (mapping / "7").write_text("9002\n")  # no GPU 7 here
    previous = _sample([GpuSample(0, "GPU-a", "x", "0"), GpuSample(1, "GPU-b", "x", "1")])
    c = IdentityCollector(SourceContext(paths=Paths(procfs=tmp_path, sysfs=tmp_path, rootfs=Path("/")),
                                        settings={"hpc_job_mapping_dir": str(mapping)}, previous=lambda: PreviousTick.of(previous)))
    s = c.collect()
    assert [(g.name, g.gpus) for g in s.groups] == [("job_9001", ("GPU-b",))]
    assert s.sources[0].up and s.sources[0].unknown_devices == ("7",)
    assert attribution.gpu_identity_labels(_sample(previous.data("nvml").gpus, s)) == {"GPU-b": ("", "", "", "9001")}
    shutil.rmtree(mapping)
    s = c.collect()
    assert s.groups == () and not s.sources[0].up and "cannot read" in s.sources[0].error


def test_headroom_run_with_kubernetes_flags_end_to_end(tmp_path, kubelet, agent_factory):
    """The agent as a real process: `headroom run --kubernetes --kubernetes.pod-resources-socket ...` with the
    NVML stand-in listing a pod's process (a fixture /proc) and a real gRPC kubelet: the pod is a workload,
    GPU 0's series carry its labels, /api/v1/status shows the kubelet up; then the kubelet stops answering
    (socket removed): the status says why, and the agent keeps ticking."""
    from conftest import http_get

    sock, servicer = kubelet
    proc = tmp_path / "proc"
    _proc(proc, 4242, f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope")
    scenario = tmp_path / "pods.yaml"
    scenario.write_text("gpus:\n  - name: NVIDIA H100 80GB HBM3\n    memory_total: 80GiB\n    power_limit: 700\n"
                        "    processes:\n      - {pid: 4242, used_memory: 20GiB}\n")
    config = tmp_path / "config.yaml"
    config.write_text("collectors:\n  identity:\n    pod_resources_refresh: 200ms\n")
    agent = agent_factory("--config.file", str(config), "--simulate", str(scenario), "--sample.interval", "200ms",
                          "--path.procfs", str(proc), "--kubernetes", "--kubernetes.pod-resources-socket", str(sock))
    status = json.loads(http_get(f"{agent.url}/api/v1/status")[2])
    gpu0 = status["gpus"][0]["uuid"]
    servicer.pods = {("ml", "chat-0"): {"vllm": [("nvidia.com/gpu", [gpu0])]}}
    text = ""
    for _ in range(200):
        text = http_get(f"{agent.url}/metrics")[2].decode()
        if 'workload="ml/chat-0"' in text:
            break
        threading.Event().wait(0.1)
    assert 'headroom_workload_info{workload="ml/chat-0",kind="pod",model="",precision="",runtime="",source="auto"} 1' \
        in text
    assert f'headroom_gpu_up{{gpu="0",uuid="{gpu0}",namespace="ml",pod="chat-0",container="vllm"}} 1' in text
    assert _series(text, "headroom_workload_gpu_memory_used_bytes") == {'workload="ml/chat-0",gpu="0"': str(20 * 2**30)}
    sock.unlink()  # the kubelet goes away
    for _ in range(200):
        doc = json.loads(http_get(f"{agent.url}/api/v1/status")[2])
        src = doc["identity"]["sources"][0]
        if not src["up"]:
            break
        threading.Event().wait(0.1)
    assert src["up"] is False and "not found" in src["error"]
    assert doc["healthy"] is True


def _open_on(path: Path) -> int:
    """File descriptors of this process open on files in directory ``path`` (other threads' own descriptors
    do not count)."""
    import os

    out = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            out += os.readlink(f"/proc/self/fd/{fd}").startswith(f"{path}/")
        except OSError:
            continue
    return out


def test_identity_cgroup_files_are_read_fresh_each_tick_and_released_when_it_ends(tmp_path):
    """The cgroup's files are opened once while the identity lives and read again every tick (new values each
    time); files of a controller not enabled there (a hybrid host's v2 tree has no memory or pids files) are
    not asked for; when the pod ends, nothing stays open."""
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    _proc(proc, 4242, f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope")
    d = sysfs / "fs/cgroup/unified" / SYSTEMD_POD.lstrip("/")  # hybrid: v2 under unified/, cpu only
    d.mkdir(parents=True)
    (d / "cgroup.procs").write_text("")
    current = {"previous": _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(4242, 1),))])}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=sysfs, rootfs=tmp_path / "root"),
                                        settings={"kubernetes": False}, previous=lambda: PreviousTick.of(current["previous"])))
    c.kubernetes = True  # pods from their cgroups alone, no kubelet thread
    # private: kept descriptors are a live kernel's rule; a fixture tree turns them off, no setting says it
    assert not c._keep_cgroup_files  # a fixture tree: files are opened by path each tick (procfs.ProcFile's rule)
    # private: kept descriptors are a live kernel's rule; a fixture tree turns them off, no setting says it
    c._keep_cgroup_files = True  # as on a live kernel's /proc and /sys (the files here are rewritten in place)
    try:
        seen = []
        for user in (4, 6, 9):
            (d / "cpu.stat").write_text(f"usage_usec {user + 1}000000\nuser_usec {user}000000\nsystem_usec 1000000\n")
            (g,) = c.collect().groups
            seen.append((g.cgroup.cpu_user_seconds_total, g.cgroup.cpu_system_seconds_total, g.cgroup.memory_bytes,
                         g.processes))
        assert seen == [(4.0, 1.0, None, None), (6.0, 1.0, None, None), (9.0, 1.0, None, None)]
        assert _open_on(d) == 1  # the pod's cpu.stat
        (d / "memory.current").write_text("123\n")  # a controller enabled later: read once the pod is seen anew
        assert c.collect().groups[0].cgroup.memory_bytes is None
        current["previous"] = _sample([GpuSample(0, "GPU-a", "x", "0", processes=())])  # the pod ended
        assert c.collect().groups == ()
        # private: the identity collector's bookkeeping: its bound (nothing left of gone processes) is what is tested, no public name shows it
        assert _open_on(d) == 0 and c._dirs == {}
        current["previous"] = _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(4242, 1),))])
        assert c.collect().groups[0].cgroup.memory_bytes == 123
        assert _open_on(d) == 2  # cpu.stat and memory.current
    finally:
        c.close()
    assert _open_on(d) == 0


def test_identity_cgroups_beyond_the_open_directories_are_read_by_path(tmp_path, monkeypatch):
    """Files are kept open for the first OPEN_CGROUP_DIRS identities only (the cap allows 10 000): the others'
    files are read by path, with the same values."""
    # OPEN_CGROUP_DIRS: patched in the module of the cgroup reads, which reads it
    from headroom.sources.identity import cgroup_files

    monkeypatch.setattr(cgroup_files, "OPEN_CGROUP_DIRS", 1)
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    jobs = {4242: "/system.slice/slurmstepd.scope/job_4242", 4343: "/system.slice/slurmstepd.scope/job_4343"}
    for pid, path in jobs.items():
        _proc(proc, pid, f"0::{path}/step_0")
        _cgroup(sysfs, path, memory=pid, pids=2)
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=sysfs, rootfs=tmp_path / "root"),
                                        previous=lambda: PreviousTick.of(_sample([GpuSample(0, "GPU-a", "x", "0", processes=(
                                            GpuProcess(4242, 1), GpuProcess(4343, 1)))]))))
    # private: kept descriptors are a live kernel's rule; a fixture tree turns them off, no setting says it
    c._keep_cgroup_files = True  # as on a live kernel's /sys (the pids here are a fixture's, not watched)
    try:
        for _ in range(2):
            groups = c.collect().groups
            assert [(g.name, g.cgroup.memory_bytes, g.cgroup.cpu_user_seconds_total, g.processes) for g in groups] \
                == [("job_4242", 4242, 4.0, 2), ("job_4343", 4343, 4.0, 2)]
        opened = [_open_on(sysfs / "fs/cgroup" / path.lstrip("/")) for path in jobs.values()]
        assert sorted(opened) == [0, 3]  # cpu.stat, memory.current, pids.current of one
    finally:
        c.close()


def test_the_kubelets_answer_is_read_again_when_it_or_the_gpus_change(tmp_path, kubelet):
    """What the collector reads from one kubelet answer is kept while the answer and the host's GPUs stay the
    same; a GPU that appears later makes its pod known, and a new answer replaces the old one."""
    sock, servicer = kubelet
    servicer.pods = {("ml", "a"): {"main": [("nvidia.com/gpu", ["GPU-b::0"])]}}
    current = {"gpus": [GpuSample(0, "GPU-a", "x", "0")]}
    c = IdentityCollector(SourceContext(paths=Paths(procfs=tmp_path / "proc", sysfs=tmp_path / "sys",
                                                    rootfs=tmp_path / "root"),
                                        settings={"kubernetes": True, "pod_resources_socket": str(sock),
                                                  "pod_resources_refresh": 3600.0},
                                        previous=lambda: PreviousTick.of(_sample(current["gpus"]))))

    def tick():
        s = c.collect()
        return [(g.name, g.gpus) for g in s.groups], s.sources[0].unknown_devices

    try:
        c.poller.poll_once()
        assert tick() == ([], ("GPU-b::0",)) == tick()  # GPU-b is not on this host (yet)
        current["gpus"] = [GpuSample(0, "GPU-a", "x", "0"), GpuSample(1, "GPU-b", "x", "1")]
        assert tick() == ([("ml/a", ("GPU-b",))], ())
        servicer.pods = {("ml", "b"): {"main": [("nvidia.com/gpu", ["GPU-a::1"])]}}
        assert tick() == ([("ml/a", ("GPU-b",))], ())  # the kubelet not asked again yet
        c.poller.poll_once()
        assert tick() == ([("ml/b", ("GPU-a",))], ())
    finally:
        c.close()


@pytest.mark.parametrize(("text", "expected"), [
    ("usage_usec 9\nuser_usec 5000000\nsystem_usec 2500000\nnice_usec 0\n", (5.0, 2.5)),  # the kernel's order
    ("system_usec 2000000\nuser_usec 1000000", (1.0, 2.0)),  # another order, no final newline
    ("usage_usec 1\nuser_usec x\nsystem_usec 3000000\n", (None, 3.0)),  # not a number: that field unknown
    ("nr_user_usec 4\nsystem_usec 1000000\n", (None, 1.0)),  # a longer key ending in user_usec is not it
    ("usage_usec 1\n", (None, None)),
    ("", (None, None)),
])
def test_cgroup_cpu_stat_user_and_system_seconds(text, expected):
    from headroom.sources.identity.cgroup_files import _cpu_seconds  # private: the module that owns it

    assert _cpu_seconds(text) == expected


# ------------------------------------------------------------------- who may name a job or a pod (issue 24, 9)
USER_MANAGER = "/user.slice/user-1001.slice/user@1001.service"
POSES = {  # a process of uid 1001 in her own delegated cgroup -> what it is (kind, name) with every kind on
    "slurm job below user@.service": (f"{USER_MANAGER}/slurm/job_4242/step_0", ("unit", "user@1001.service")),
    "slurm v2 job below user@.service": (f"{USER_MANAGER}/app.slice/slurmstepd.scope/job_4242/step_0",
                                         ("unit", "user@1001.service")),
    "slurm v1 job below user@.service": (f"{USER_MANAGER}/slurm/uid_0/job_4242/step_batch",
                                         ("unit", "user@1001.service")),
    "pod (systemd driver) below user@.service": (
        f"{USER_MANAGER}{SYSTEMD_POD}/cri-containerd-{CID}.scope", ("container", f"user@1001.service/{CID[:12]}")),
    "pod (cgroupfs driver) below user@.service": (
        f"{USER_MANAGER}/kubepods/besteffort/pod{UID}/{CID}", ("container", f"user@1001.service/{CID[:12]}")),
    "pod (colon form) below user@.service": (
        f"{USER_MANAGER}/app.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice:cri-containerd:{CID}",
        ("unit", "user@1001.service")),
    "a job named inside a real job": ("/system.slice/slurmstepd.scope/job_77/step_0/user/task_0/job_4242/step_0",
                                      ("job", "job_77")),
    "slurm's name below another unit": ("/system.slice/foo.service/slurm/job_4242/step_0", ("unit", "foo.service")),
}


def _collector(tmp_path: Path, previous, **settings) -> IdentityCollector:
    c = IdentityCollector(SourceContext(paths=Paths(procfs=tmp_path / "proc", sysfs=tmp_path / "sys",
                                                    rootfs=tmp_path / "root"),
                                        settings={"auto": ["pods", "jobs", "containers", "units"], **settings},
                                        previous=lambda: PreviousTick.of(previous)))
    c.kubernetes = True  # pods from their cgroups alone, no kubelet thread
    return c


@pytest.mark.parametrize("pose", sorted(POSES))
def test_a_user_cannot_pose_as_a_slurm_job_or_a_pod(tmp_path, pose):
    """A process in her own delegated subtree (user@1001.service: she may create any cgroup below it) names a
    Slurm job or a pod there: it is not that job or pod; it is what it honestly is (her user manager's unit,
    her own container), and the reason (logged at debug) is one line."""
    path, expected = POSES[pose]
    _proc(tmp_path / "proc", 4242, f"0::{path}")
    c = _collector(tmp_path, _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(4242, 1),))]))
    groups = c.collect().groups
    assert [(g.kind, g.name) for g in groups] == [expected], pose
    assert all(not g.job_id or g.job_id == "77" for g in groups) and all(not g.pod_uid for g in groups)
    why = identity_module.classify(procfs.parse_pid_cgroup(f"0::{path}\n"))[1]
    assert (why == "") == (pose == "a job named inside a real job") and "\n" not in why, why


def test_the_schedulers_own_layouts_are_still_jobs_and_pods(tmp_path):
    """What Slurm and the kubelet make keeps working, including a path relative to the agent's own cgroup
    namespace (a DaemonSet's: the kubelet's part above it is left out as ``..``) and, where every directory on
    the way is seen and the hierarchy's owner's, a kubelet tree below another root (--cgroup-root, the bench)."""
    classify = identity_module.classify_cgroup_path
    pod = f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope"
    for path in (f"/../../kubepods-besteffort.slice/{pod}", f"/../{pod}", f"/kubepods.slice/kubepods-besteffort.slice/{pod}",
                 f"/kubepods/pod{UID}/{CID}", f"/kubepods/burstable/pod{UID}/{CID}"):
        assert classify(path) == (identity_module.parse_cgroup_path(path), "") and classify(path)[0].kind == "pod", path
    for path in ("/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0", "/system.slice/n7_slurmstepd.scope/job_4242",
                 "/slurm/uid_1000/job_4242/step_batch", "/slurm_n7/uid_5/job_4242/step_1", "/slurm/job_4242/step_0"):
        assert classify(path)[0].job_id == "4242", path
    # a kubelet tree below a root of its own: a pod only where the directories on the way say who made them
    top = f"/headroom-bench/kubepods.slice/kubepods-besteffort.slice/{pod}"
    ident, why = classify(top)
    assert ident.kind == "container" and "not where the kubelet makes pods" in why
    (tmp_path / "sys/fs/cgroup" / top.lstrip("/")).mkdir(parents=True)
    groups = procfs.parse_pid_cgroup(f"0::{top}\n")
    assert identity_module.classify(groups, str(tmp_path / "sys"))[0].kind == "pod"


def test_a_users_own_units_and_containers_are_kept_apart_from_the_systems(tmp_path):
    """Her `vllm.service` (a user unit) and a rootless container named with a system container's ID are hers:
    not merged into the system's `vllm.service` or Docker's `sd-webui`, and not named from the system
    runtimes' records."""
    proc = tmp_path / "proc"
    _proc(proc, 10, "0::/system.slice/vllm.service")
    _proc(proc, 11, f"0::{USER_MANAGER}/app.slice/vllm.service")
    _proc(proc, 12, f"0::/system.slice/docker-{CID}.scope")
    _proc(proc, 13, f"0::{USER_MANAGER}/user.slice/libpod-{CID}.scope")
    _write_json(tmp_path / f"root/var/lib/docker/containers/{CID}/config.v2.json", {"Name": "/sd-webui"})
    c = _collector(tmp_path, _sample([GpuSample(0, "GPU-a", "x", "0", processes=tuple(
        GpuProcess(p, 1) for p in (10, 11, 12, 13)))]))
    assert sorted((g.kind, g.name, g.pids) for g in c.collect().groups) == [
        ("container", "sd-webui", (12,)), ("container", f"user@1001.service/{CID[:12]}", (13,)),
        ("unit", "user@1001.service/vllm.service", (11,)), ("unit", "vllm.service", (10,))]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a cgroup directory given to another uid (chown)")
def test_nothing_below_a_unit_delegated_to_a_user_is_a_pod_or_a_job(tmp_path):
    """Any unit with Delegate= and User= (not only user@.service) gives its cgroup to that user, who may create
    what she likes below it, named as containerd's own unit names pods: the directory's owner says so, and a
    pod there is not taken; the same layout below a directory the hierarchy's owner owns is a pod."""
    colon = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice:cri-containerd:{CID}"
    sysfs = tmp_path / "sys"
    for unit, owner in (("containerd.service", 0), ("alice.service", 1001)):
        d = sysfs / "fs/cgroup/system.slice" / unit / colon
        d.mkdir(parents=True)
        os.chown(d.parent, owner, owner)
        os.chown(d, owner, owner)
    proc = tmp_path / "proc"
    _proc(proc, 20, f"0::/system.slice/containerd.service/{colon}")
    _proc(proc, 21, f"0::/system.slice/alice.service/{colon}")
    previous = _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(20, 1), GpuProcess(21, 1)))])
    c = _collector(tmp_path, previous)
    assert sorted((g.kind, g.name, g.pids) for g in c.collect().groups) == [
        ("pod", UID, (20,)), ("unit", "alice.service", (21,))]
    _ident, why = identity_module.classify(procfs.parse_pid_cgroup(f"0::/system.slice/alice.service/{colon}\n"),
                                          str(sysfs))
    assert why == (f"pod {UID} is below alice.service (its cgroup is uid 1001's), a subtree delegated to its user: "
                   "not taken for a pod")
    _proc(proc, 22, "0::/system.slice/alice.service/vllm.service")  # her own unit below it: hers, apart
    _proc(proc, 23, "0::/system.slice/vllm.service")
    (sysfs / "fs/cgroup/system.slice/alice.service/vllm.service").mkdir()
    os.chown(sysfs / "fs/cgroup/system.slice/alice.service/vllm.service", 1001, 1001)
    c = _collector(tmp_path, _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(22, 1), GpuProcess(23, 1)))]))
    assert sorted((g.name, g.pids) for g in c.collect().groups) == [("alice.service/vllm.service", (22,)),
                                                                     ("vllm.service", (23,))]


def test_a_pod_the_kubelet_does_not_list_is_not_shown_as_that_pod(tmp_path, kubelet):
    """With the kubelet's answer, a pod UID from a cgroup path is a pod only when the kubelet confirms it: by
    the name its runtime's record gives it, or as the only pod holding its GPUs. A pod whose record names a pod
    the kubelet does not list, and one no record names on a GPU no listed pod holds, are not exported (their
    processes belong to no automatic workload), and the kubelet's status says why, one line each."""
    sock, servicer = kubelet
    proc, rootfs = tmp_path / "proc", tmp_path / "root"
    ghost, stray = "0c0c0c0c-1111-2222-3333-444455556666", "0d0d0d0d-1111-2222-3333-444455556666"
    _proc(proc, 30, f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope")  # named ml/chat-0 by containerd: listed
    _proc(proc, 31, f"0::/kubepods/burstable/pod{ghost}/{'b' * 64}")  # named ml/ghost: not listed
    _proc(proc, 32, f"0::/kubepods/burstable/pod{stray}/{'c' * 64}")  # no record, on GPU-b that no listed pod holds
    for cid, name in ((CID, "chat-0"), ("b" * 64, "ghost")):
        _write_json(rootfs / f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}/config.json",
                    {"annotations": {"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": name,
                                     "io.kubernetes.cri.container-name": "main"}})
    servicer.pods = {("ml", "chat-0"): {"main": [("nvidia.com/gpu", ["GPU-a::0"])]}, ("ml", "web"): {"nginx": []}}
    previous = _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(30, 1), GpuProcess(31, 1))),
                        GpuSample(1, "GPU-b", "x", "1", processes=(GpuProcess(32, 1),))])
    c = IdentityCollector(SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=rootfs),
                                        settings={"kubernetes": True, "pod_resources_socket": str(sock),
                                                  "pod_resources_refresh": 3600.0}, previous=lambda: PreviousTick.of(previous)))
    try:
        before = c.collect()  # no answer yet: pods from their cgroups alone
        assert sorted(g.name for g in before.groups) == [stray, "ml/chat-0", "ml/ghost"]
        c.poller.poll_once()
        s = c.collect()
        assert [(g.name, g.pids) for g in s.groups] == [("ml/chat-0", (30,))]
        assert s.sources[0].refused == (
            f"pod {ghost}: its runtime's record names it ml/ghost, which the kubelet does not list: not shown as a pod",
            f"pod {stray}: no pod the kubelet lists holds its GPUs alone, and no runtime record names it: not shown "
            "as a pod")
        assert attribution.gpu_identity_labels(_sample(previous.data("nvml").gpus, s)) == {
            "GPU-a": ("ml", "chat-0", "main", "")}
        servicer.pods[("ml", "ghost")] = {"main": []}  # the kubelet lists it now
        c.poller.poll_once()
        assert sorted(g.name for g in c.collect().groups) == ["ml/chat-0", "ml/ghost"]
    finally:
        c.close()


def test_a_runtime_record_of_another_pod_does_not_name_this_one(tmp_path):
    """The container ID in a cgroup path is the path's to say: a record whose pod UID is another pod's does not
    give this pod its name."""
    other = "0c0c0c0c-1111-2222-3333-444455556666"
    _proc(tmp_path / "proc", 40, f"0::{SYSTEMD_POD}/cri-containerd-{CID}.scope")
    _write_json(tmp_path / f"root/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/config.json",
                {"annotations": {"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": "chat-0",
                                 "io.kubernetes.cri.sandbox-uid": other}})
    c = _collector(tmp_path, _sample([GpuSample(0, "GPU-a", "x", "0", processes=(GpuProcess(40, 1),))]))
    assert [(g.kind, g.name) for g in c.collect().groups] == [("pod", UID)]


# ------------------------------------------------------------------- the job mapping directory, bounded (issue 24)
def _old(path: Path, seconds: float = 3600.0) -> None:
    """Set ``path``'s mtime an hour back: a file changed long ago (not within MAPPING_RACY_SECONDS)."""
    import time

    then = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(then, then))


def test_job_mapping_is_read_again_only_when_it_changed(tmp_path):
    """The directory and its files are looked at with a stat each a tick and read only when their inode, size or
    mtime changed: content replaced in place under the same mtime and size is not seen (it was not read again),
    the same replacement with the mtime moved on is."""
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").write_text("4242\n")
    _old(mapping / "0")
    _old(mapping)
    previous = _sample([GpuSample(0, "GPU-a", "x", "0")])
    c = IdentityCollector(SourceContext(paths=Paths(procfs=tmp_path, sysfs=tmp_path, rootfs=tmp_path),
                                        settings={"hpc_job_mapping_dir": str(mapping)}, previous=lambda: PreviousTick.of(previous)))
    assert [g.name for g in c.collect().groups] == ["job_4242"]
    mtime = (mapping / "0").stat().st_mtime_ns
    (mapping / "0").write_text("4343\n")  # same size
    os.utime(mapping / "0", ns=(mtime, mtime))
    assert [g.name for g in c.collect().groups] == ["job_4242"]  # not read again
    (mapping / "0").touch()
    assert [g.name for g in c.collect().groups] == ["job_4343"]
    (mapping / "0").write_text("4444\n")  # rewritten within the racy window, mtime kept: still seen
    os.utime(mapping / "0", ns=((mapping / "0").stat().st_mtime_ns,) * 2)
    assert [g.name for g in c.collect().groups] == ["job_4444"]
    (mapping / "1").write_text("77\n")  # a new file: the directory changed
    previous = _sample([GpuSample(0, "GPU-a", "x", "0"), GpuSample(1, "GPU-b", "x", "1")])
    assert sorted(g.name for g in c.collect().groups) == ["job_4444", "job_77"]


def test_a_huge_job_mapping_directory_is_bounded(tmp_path):
    """10 000 GPU files: at most MAPPING_ENTRIES entries are looked at and MAPPING_FILES read (and this host's
    GPUs' own files), said in the source's status; looking at it again unchanged reads none of them."""
    import time

    mapping = tmp_path / "map"
    mapping.mkdir()
    for i in range(10_000):
        (mapping / str(i)).write_text(f"{i}\n")
    previous = _sample([GpuSample(0, "GPU-a", "x", "0")])
    c = IdentityCollector(SourceContext(paths=Paths(procfs=tmp_path, sysfs=tmp_path, rootfs=tmp_path),
                                        settings={"hpc_job_mapping_dir": str(mapping)}, previous=lambda: PreviousTick.of(previous)))
    s = c.collect()
    src = s.sources[0]
    assert [g.name for g in s.groups] == ["job_0"]  # this host's GPU's file, wherever the listing stopped
    assert len(src.unknown_devices) <= identity_module.MAPPING_FILES
    assert any(f"more than {identity_module.MAPPING_ENTRIES} entries" in r for r in src.refused), src.refused
    _old(mapping)
    # private: the collector's mapping reader: the names it reads are what is tested
    for name in c._mapping_reader._names:
        _old(mapping / name)
    c.collect()
    started = time.perf_counter()
    for _ in range(10):
        c.collect()
    assert (time.perf_counter() - started) / 10 < 0.05  # 65 stats a tick (10 000 file reads before: ~0.3 s)


SPARSE_MAPPING = r"""
import os, resource, sys
sys.path[:0] = [{agent!r}]
from headroom.sources.identity import JobMappingReader
def hwm():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) // 1024
before = hwm()
mapping, refused = JobMappingReader({directory!r}).read()
print(hwm() - before, sorted(mapping), list(refused))
"""


def test_a_huge_file_a_fifo_and_a_device_in_the_job_mapping_are_refused(tmp_path):
    """A 512 MiB (sparse) GPU file is refused by its size without being read (the agent's peak RSS grows by
    less than 16 MiB; it took the whole file before), a FIFO does not block the read, a symlink to /dev/zero
    does not grow memory; each gets a one-line reason, and the good file is read."""
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").write_text("4242\n")
    with open(mapping / "1", "wb") as f:
        f.truncate(512 * 2**20)
    os.mkfifo(mapping / "2")
    os.symlink("/dev/zero", mapping / "3")
    (mapping / "4").write_text("ok_1\n$(rm -rf)\n" + "x" * 100 + "\n")
    script = SPARSE_MAPPING.format(agent=str(Path(identity_module.__file__).parents[3]), directory=str(mapping))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    grown, rest = r.stdout.split(" ", 1)
    assert int(grown) < 16, r.stdout
    assert "[0, 4]" in rest
    for reason in (f"1: is {512 * 2**20} bytes, more than the {identity_module.MAPPING_FILE_BYTES} allowed: not read",
                   "2: is a FIFO, not a regular file: not read", "3: is a character device, not a regular file: not read",
                   "4: 2 line(s) are not job IDs (letters, digits and _.+-, at most 64): ignored"):
        assert reason in rest, rest


CLOSED_MODEL = r"""
import sys
sys.path[:0] = [{agent!r}]
from pathlib import Path
from headroom.sources.identity import read_launcher_model
print(read_launcher_model(Path("/proc"), {pid}, "/models/Qwen3-0.6B").error)
print(read_launcher_model(Path("/proc"), {pid}, "Qwen/Qwen3-0.6B").error)
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv(1)")
def test_a_process_whose_files_are_closed_to_the_agent_says_so(tmp_path):
    """The DaemonSet's agent (uid 0, every capability dropped) cannot see /proc/PID/root or environ of a root
    process holding capabilities (a serving container's default set): the model config's reason says that, in
    one line, instead of a bare "Permission denied" on a path."""
    target = subprocess.Popen(["sleep", "60"])
    try:
        script = CLOSED_MODEL.format(agent=str(Path(identity_module.__file__).parents[3]), pid=target.pid)
        r = subprocess.run(["setpriv", "--reuid=0", "--regid=0", "--keep-groups", "--inh-caps=-all",
                            "--ambient-caps=-all", "--bounding-set=-all", sys.executable, "-c", script],
                           capture_output=True, text=True, timeout=60)
    finally:
        target.kill()
        target.wait()
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2 and all("closed to the agent" in line and "permission denied" in line for line in lines), lines
