"""Pods churning on the bench host, as a Kubernetes GPU node has them, for ``ticks.measure(pods=N)``.

Each pod is a real process (``sleep``, argv[0] ``headroom-bench-pod``) moved into a real cgroup v2 cgroup
named as the kubelet's systemd driver and containerd name them
(``<base>/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``),
so the identity collector reads the kernel's own /proc/PID/cgroup and cgroup files. There is no containerd
here: its on-disk state (the bundle's ``config.json`` with the CRI annotations naming namespace, pod and
container) is written under a temporary root that only the identity collector reads as ``--path.rootfs``.
The kubelet is a real gRPC server implementing the pod-resources v1 service on a unix socket (the
kubelet's published proto, ``sources/podresources``); the product's poller asks it ``List`` every
``refresh_ticks`` ticks (5 s at 1 Hz, the default refresh), so its answer lags the churn as a real
kubelet's does. Each pod's process is a GPU process: the GPU driver stand-in lists it on its GPU, pods
time-sliced over every GPU (on a MIG GPU in one of its instances; device IDs are ``UUID::N`` replicas).

The pods' cgroups have the pids controller, as a kubelet's do (cgroup v2's ``subtree_control`` in the bench's own
cgroups, where the host's root hands it down; on a hybrid host
whose unified tree has none, the v1 pids hierarchy at the same paths), so ``pids.current`` is there for the identity
collector's refresh rule (an idle pod's tree is not walked).

``step()`` ends the oldest pod (its process killed, its cgroups and bundle removed) and starts a new one
(a new pid, a new pod UID, a new container ID). ``close()`` removes everything it made.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import threading
import uuid
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.host import SLEEP, _stop

NAMESPACE = "bench"
POD_ARGV0 = "headroom-bench-pod"
GPU_MEMORY = 4 * 2**30  # per pod process
GPU_UTILIZATION = 0.12


def cgroup_v2_base(sysfs: Path = Path("/sys")) -> tuple[Path | None, str]:
    """(the writable cgroup v2 hierarchy, "") or (None, why not): the unified root, or fs/cgroup/unified
    on a hybrid v1 host (as ``processes.cgroup_root`` looks for it)."""
    for base in (sysfs / "fs/cgroup", sysfs / "fs/cgroup/unified"):
        if (base / "cgroup.procs").exists() and (base / "cgroup.subtree_control").exists():
            if not os.access(base, os.W_OK):
                return None, f"cgroup v2 at {base} is not writable (the pods bench needs root)"
            return base, ""
    return None, f"no cgroup v2 hierarchy under {sysfs}/fs/cgroup"


@dataclass
class _Pod:
    name: str
    uid: str
    container_id: str
    gpu: int
    mig: int | None
    device: str  # the device ID the kubelet reports
    process: subprocess.Popen
    pod_dir: Path
    scope_dir: Path
    bundle: Path


class PodChurn:
    """``pods`` pods on ``gpus`` (the scenario's GPU specs), one replaced per ``step()``."""

    def __init__(self, pods: int, gpus: Any, workdir: Path, refresh_ticks: int = 5) -> None:
        base, why = cgroup_v2_base()
        if base is None:
            raise RuntimeError(why)
        self.count, self.refresh_ticks = pods, refresh_ticks
        self.gpus = tuple(gpus)
        self.rootfs = workdir / "rootfs"
        self.socket = workdir / "pod-resources" / "kubelet.sock"
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        # a top cgroup of its own (concurrent runs never meet); everything below is named as the kubelet does
        self.top = base / f"headroom-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.kubepods = self.top / "kubepods.slice" / "kubepods-burstable.slice"
        self.kubepods.mkdir(parents=True)
        # a kubelet's pod cgroups have the pids controller (it limits each pod's processes): pids.current is what
        # tells the identity collector that a process joined or left an idle pod (sources/identity/cgroup_files.py
        # _CgroupDir.refresh); without it every refresh lists the pod's tree. Enabled as the kubelet has it where the
        # host allows: in cgroup v2's subtree_control down to the pods, or, on a hybrid host whose unified tree has
        # no pids controller, in the v1 pids hierarchy at the same paths (where the collector reads it then)
        self.pids_v1 = _pids_v1(base, self.top)
        self.pids_controller = "v1" if self.pids_v1 is not None else ("v2" if _enable_pids(base, self.kubepods) else "")
        atexit.register(self.close)  # a bench stopped midway (SIGTERM: host.ProcessFarm exits) leaves nothing
        self._scenarios: list[Any] = []
        self._pods: list[_Pod] = []
        self._serial = 0
        self.started = self.ended = 0
        self.lister = Lister()
        self.server = _serve(self.lister, self.socket)
        try:
            for _ in range(pods):
                self._pods.append(self._start())
            self._publish()
            self.lister.set(self._pods)
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [p.process.pid for p in self._pods]

    def attach(self, scenario: Any) -> None:
        """List the pods' processes on ``scenario``'s GPUs (its driver stand-in), now and after every step."""
        self._scenarios.append(scenario)
        scenario.attach_processes(self._attached())

    def settings(self) -> dict[str, Any]:
        """The identity collector's settings for these pods (what ``--kubernetes`` and its flags set)."""
        # the poller's own thread would ask every 5 s of real time, dozens of the bench's compressed ticks:
        # the bench asks instead (``kubelet_due``), every refresh_ticks ticks, through the same poll_once
        return {"kubernetes": True, "pod_resources_socket": str(self.socket), "pod_resources_refresh": 3600.0}

    def kubelet_due(self, tick: int) -> bool:
        return tick % self.refresh_ticks == 0

    def step(self) -> None:
        """The oldest pod ends, a new one starts on its GPU slot (new pid, pod UID, container ID)."""
        old = self._pods.pop(0)
        self._end(old)
        self._pods.append(self._start(slot=(old.gpu, old.mig)))
        self._publish()
        self.lister.set(self._pods)  # what the kubelet answers from now; the poller sees it at its next List

    def close(self) -> None:
        """Kill the pods' processes, remove their cgroups, bundles and the kubelet. Idempotent."""
        atexit.unregister(self.close)
        pods, self._pods = self._pods, []
        for p in pods:
            self._end(p)
        for s in self._scenarios:
            s.attach_processes(())
        if getattr(self, "server", None) is not None:
            self.server.stop(0)
            self.server = None
        for top in (self.top, self.pids_v1) if getattr(self, "pids_v1", None) is not None else (self.top,):
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                _rmdir(d)
            _rmdir(top)
        shutil.rmtree(self.rootfs, ignore_errors=True)

    # -- one pod
    def _start(self, slot: tuple[int, int | None] | None = None) -> _Pod:
        self._serial += 1
        if slot is None:  # spread over every GPU; on a MIG GPU alternate between its instances
            gpu = self.gpus[(self._serial - 1) % len(self.gpus)]
            mig = ((self._serial - 1) // len(self.gpus)) % len(gpu.mig_instances) if gpu.mig_instances else None
            slot = (gpu.index, mig)
        index, mig = slot
        spec = next(g for g in self.gpus if g.index == index)
        target = spec.mig_instances[mig].uuid if mig is not None else spec.uuid
        uid, cid = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
        name = f"job-{self._serial:05d}"
        pod_dir = self.kubepods / f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        scope = pod_dir / f"cri-containerd-{cid}.scope"
        scope.mkdir(parents=True)
        if self.pids_controller == "v2":
            _write(pod_dir / "cgroup.subtree_control", "+pids")
        bundle = self.rootfs / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / cid
        bundle.mkdir(parents=True)
        (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.1.0", "annotations": {
            "io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.container-name": "main",
            "io.kubernetes.cri.sandbox-namespace": NAMESPACE, "io.kubernetes.cri.sandbox-name": name,
            "io.kubernetes.cri.sandbox-uid": uid}}))
        process = subprocess.Popen([POD_ARGV0, "86400"], executable=SLEEP, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
        try:
            (scope / "cgroup.procs").write_text(f"{process.pid}\n")
            if self.pids_v1 is not None:
                v1_scope = self.pids_v1 / scope.relative_to(self.top)
                v1_scope.mkdir(parents=True)
                (v1_scope / "cgroup.procs").write_text(f"{process.pid}\n")
        except OSError:
            _stop([process])
            raise
        self.started += 1
        return _Pod(name, uid, cid, index, mig, f"{target}::{self._serial % 16}", process, pod_dir, scope, bundle)

    def _end(self, p: _Pod) -> None:
        _stop([p.process])
        _rmdir(p.scope_dir)
        _rmdir(p.pod_dir)
        if self.pids_v1 is not None:
            _rmdir(self.pids_v1 / p.scope_dir.relative_to(self.top))
            _rmdir(self.pids_v1 / p.pod_dir.relative_to(self.top))
        shutil.rmtree(p.bundle, ignore_errors=True)
        self.ended += 1

    def _attached(self) -> tuple:
        from headroom.simulation.scenario import StandInGpu, constant

        use = {p.process.pid: StandInGpu(p.gpu, constant(GPU_MEMORY), constant(GPU_UTILIZATION)) for p in self._pods}
        return tuple((p.process.pid, use[p.process.pid], p.mig) for p in self._pods)

    def _publish(self) -> None:
        attached = self._attached()
        for s in self._scenarios:
            s.attach_processes(attached)


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
    except OSError:
        return False
    return True


def _enable_pids(base: Path, kubepods: Path) -> bool:
    """Enable cgroup v2's pids controller in the bench's own cgroups, from its top cgroup down to ``kubepods``
    (whose pod cgroups then have pids.current); False where the hierarchy's root does not already hand it down
    (a hybrid host's unified tree has none; the host's root is never changed) or it cannot be enabled."""
    try:
        if "pids" not in (base / "cgroup.subtree_control").read_text().split():
            return False
    except OSError:
        return False
    rel = kubepods.relative_to(base)
    chain = [*(base / d for d in reversed(rel.parents[:-1])), kubepods]  # the bench's top first, the pods' parent last
    return all(_write(d / "cgroup.subtree_control", "+pids") for d in chain)


def _pids_v1(base: Path, top: Path) -> Path | None:
    """On a hybrid host (``base`` is fs/cgroup/unified and its tree has no pids controller): ``top``'s place in
    the v1 pids hierarchy, made; None elsewhere or where it cannot be made."""
    if base.name != "unified":
        return None
    try:
        if "pids" in (base / "cgroup.controllers").read_text().split():
            return None
    except OSError:
        pass
    hierarchy = base.parent / "pids"
    if not (hierarchy / "cgroup.procs").exists():
        return None
    mirror = hierarchy / top.relative_to(base)
    try:
        mirror.mkdir()
    except OSError:
        return None
    return mirror


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:  # a process still inside: it was killed and reaped, the kernel lets go a moment later
        import time

        for _ in range(50):
            time.sleep(0.01)
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                continue


class Lister:
    """The kubelet's pod-resources v1 ``List``: the bench pods' containers and their GPU device IDs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answer: tuple[tuple[str, str, str], ...] = ()  # (namespace, pod, device ID)
        self.calls = 0

    def set(self, pods: list[_Pod]) -> None:
        with self._lock:
            self._answer = tuple((NAMESPACE, p.name, p.device) for p in pods)

    def List(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method's name
        from headroom.sources.podresources import api_pb2

        with self._lock:
            answer = self._answer
            self.calls += 1
        out = api_pb2.ListPodResourcesResponse()
        for ns, name, device in answer:
            pod = out.pod_resources.add(name=name, namespace=ns)
            c = pod.containers.add(name="main")
            c.devices.add(resource_name="nvidia.com/gpu", device_ids=[device])
        return out


def _serve(lister: Lister, socket: Path) -> Any:
    """A real gRPC server for ``lister`` on the unix socket ``socket``."""
    import grpc

    from headroom.sources.podresources import api_pb2_grpc

    servicer = type("PodResourcesLister", (api_pb2_grpc.PodResourcesListerServicer,), {"List": lister.List})()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server
