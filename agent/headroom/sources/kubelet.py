"""The kubelet's pod-resources API (gRPC over a unix socket): which pod and container hold which device.

``List`` (v1) answers, for every pod on the node, its containers and the device IDs the device plugins
gave them (``nvidia.com/gpu``: GPU UUIDs, ``GPU-...::N`` replicas under time-slicing; MIG strategies:
MIG UUIDs), and the devices of their Dynamic Resource Allocation claims (``dynamic_resources``: claim
namespace and name, and per device its driver, pool, device name and CDI device names; ``dra_device``
turns the NVIDIA DRA driver's names into what to look the GPU up by). It never blocks the tick: ``PodResourcesPoller`` calls it in its own thread every ``refresh``
seconds with a deadline (``timeout``), and the identity collector reads the newest answer. A failing
call (socket missing, permission denied, no answer within the deadline, an old kubelet without v1)
turns into a one-line reason that the collector exports (``headroom_identity_source_up{source="kubelet"}``
0), logs once per change and shows in /api/v1/status; the last good answer is kept for ``keep`` seconds
so that a kubelet restart does not make labels flap.

grpcio and the generated code (``sources/podresources``) are imported only when --kubernetes is on.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger("headroom.sources.kubelet")

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    namespace: str
    pod: str
    container: str
    resource: str  # e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb; a DRA claim's: its driver (gpu.nvidia.com)
    device_ids: tuple[str, ...]  # a DRA claim's: the driver's device names (gpu-0), else its CDI device names
    claim: str | None = None  # the DRA resource claim they came from: "namespace/name" (None: a device plugin's)


class KubeletError(Exception):
    """The pod-resources API could not answer; the message says why, for users."""


def device_uuid(device_id: str) -> str:
    """The GPU or MIG UUID in a device plugin's ID: time-slicing and MPS replicas are ``UUID::N``."""
    return device_id.split("::", 1)[0]


# The NVIDIA DRA driver (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin): its driver name (main.go
# DriverName), its device names (GpuInfo.CanonicalName in deviceinfo.go: "gpu-<minor>", the /dev/nvidiaN number;
# MigSpecTuple.ToCanonicalName in mig.go: "gpu-<parent minor>-mig-<profile>-<GPU instance profile id>-<placement
# start>"; VfioDeviceInfo: "gpu-vfio-<index>", a GPU handed to a VM) and its CDI device names (GetClaimDeviceName
# in cdi.go: "k8s.gpu.nvidia.com/claim=<claim UID>-<device name>"). docs/workload-identity.md.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
_NVIDIA_CDI_PREFIX = "k8s.gpu.nvidia.com/claim="
_CLAIM_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-")
_DRA_GPU = re.compile(r"gpu-(\d+)")
_DRA_MIG = re.compile(r"gpu-(\d+)-mig-[a-z0-9-]+?-(\d+)-(\d+)")


@dataclass(frozen=True, slots=True)
class DraDevice:
    """What identifies one device of the NVIDIA DRA driver: a whole GPU by its minor number, a MIG device by its
    parent's minor number, GPU instance profile id and placement start; ``kind`` "vfio"/"unknown" cannot be."""

    kind: str  # "gpu" | "mig" | "vfio" | "unknown"
    minor: int | None = None
    profile_id: int | None = None
    placement_start: int | None = None


def dra_device(name: str) -> DraDevice:
    """The NVIDIA DRA driver's device name ("gpu-0", "gpu-0-mig-1g10gb-19-0"), or one of its CDI device names
    ("k8s.gpu.nvidia.com/claim=<claim UID>-gpu-0"), as what it identifies."""
    if name.startswith(_NVIDIA_CDI_PREFIX):
        name = name[len(_NVIDIA_CDI_PREFIX):]
        uid = _CLAIM_UID.match(name)
        if uid is None:
            return DraDevice("unknown")
        name = name[uid.end():]
    if m := _DRA_GPU.fullmatch(name):
        return DraDevice("gpu", int(m[1]))
    if m := _DRA_MIG.fullmatch(name):
        return DraDevice("mig", int(m[1]), int(m[2]), int(m[3]))
    if name.startswith("gpu-vfio-"):
        return DraDevice("vfio")
    return DraDevice("unknown")


class PodResourcesClient:
    """One gRPC channel to the kubelet's socket; ``list`` raises KubeletError with a specific reason."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        # grpc and the code protoc generates carry no types: the channel and stub are Any
        self._channel: Any = None
        self._stub: Any = None  # Any: protoc's generated stub, untyped
        self._grpc: Any = None  # Any: the grpc module, imported on first use (untyped)

    def _connect(self) -> Any:  # Any: the stub (protoc's code carries no types)
        if self._stub is None:
            try:
                import grpc

                from headroom.sources.podresources import api_pb2_grpc
            except ImportError as exc:  # pragma: no cover - grpcio is a dependency
                raise KubeletError(f"grpcio is not installed ({exc}); pip install grpcio protobuf") from None
            self._grpc = grpc
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def _check_socket(self) -> None:
        """A clear reason before gRPC's generic "failed to connect" (missing, not a socket, no access)."""
        try:
            st = os.stat(self.socket_path)
        except FileNotFoundError:
            raise KubeletError(f"socket {self.socket_path} not found: not a Kubernetes node, or the "
                               "pod-resources directory is not mounted into the agent") from None
        except PermissionError:
            raise KubeletError(f"permission denied reaching {self.socket_path}: the agent needs read and write "
                               "access to the kubelet's pod-resources socket (root, or a matching group)") from None
        except OSError as exc:
            raise KubeletError(f"cannot reach {self.socket_path}: {exc.strerror or exc}") from None
        if not stat.S_ISSOCK(st.st_mode):
            raise KubeletError(f"{self.socket_path} is not a unix socket")
        if not os.access(self.socket_path, os.R_OK | os.W_OK):
            raise KubeletError(f"permission denied on {self.socket_path}: the agent needs read and write access "
                               "to the kubelet's pod-resources socket (root, or a matching group)")

    def list(self) -> tuple[ContainerDevices, ...]:
        """Every container's devices, as the kubelet reports them now."""
        return self.answer()[0]

    def answer(self) -> tuple[tuple[ContainerDevices, ...], frozenset[tuple[str, str]]]:
        """(every container's devices, every pod the kubelet lists: (namespace, name), with devices or not)."""
        self._check_socket()
        stub = self._connect()
        from headroom.sources.podresources import api_pb2

        grpc = self._grpc
        try:
            answer = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = (exc.details() if hasattr(exc, "details") else "") or ""
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise KubeletError(f"the kubelet did not answer List within {self.timeout:g}s "
                                   f"({self.socket_path})") from None
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise KubeletError("the kubelet does not serve pod-resources v1 List (Kubernetes older than "
                                   "1.20, or the endpoint is disabled)") from None
            if "ermission denied" in details:
                raise KubeletError(f"permission denied on {self.socket_path}: the agent needs read and write "
                                   "access to the kubelet's pod-resources socket") from None
            name = code.name if code is not None else "error"
            raise KubeletError(f"pod-resources List failed: {name}: {details or 'no details'}") from None
        out = []
        pods = set()
        for pod in answer.pod_resources:
            pods.add((pod.namespace, pod.name))
            for c in pod.containers:
                for d in c.devices:
                    out.append(ContainerDevices(pod.namespace, pod.name, c.name, d.resource_name,
                                                tuple(d.device_ids)))
                for claim in c.dynamic_resources:
                    by_driver: dict[str, list[str]] = {}
                    for r in claim.claim_resources:
                        # the device name; a driver that gives none is known by its CDI device names
                        names = [r.device_name] if r.device_name else [cdi.name for cdi in r.cdi_devices]
                        by_driver.setdefault(r.driver_name, []).extend(names)
                    for driver, names in by_driver.items():
                        out.append(ContainerDevices(pod.namespace, pod.name, c.name, driver, tuple(names),
                                                    claim=f"{claim.claim_namespace}/{claim.claim_name}"))
        return tuple(out), frozenset(pods)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._stub = None


@dataclass(frozen=True, slots=True)
class PodResourcesState:
    devices: tuple[ContainerDevices, ...] | None  # None: no usable answer
    error: str | None  # why the last call failed (None: it succeeded)
    answered_at: float | None  # monotonic time of the last good answer
    pods: frozenset[tuple[str, str]] | None = None  # every pod of that answer (namespace, name); None with devices


class PodResourcesPoller:
    """Calls List every ``refresh`` seconds in a daemon thread; ``state()`` never blocks on the kubelet."""

    def __init__(self, socket_path: str, timeout: float = 2.0, refresh: float = 5.0, keep: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = PodResourcesClient(socket_path, timeout)
        self.refresh = refresh
        self.keep = keep
        self._clock = clock
        self._lock = threading.Lock()
        self._devices: tuple[ContainerDevices, ...] | None = None
        self._pods: frozenset[tuple[str, str]] | None = None
        self._answered_at: float | None = None
        self._error: str | None = "no answer yet"
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.calls = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kubelet-pod-resources", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._wake.wait(self.refresh)
            self._wake.clear()

    def poll_once(self) -> None:
        self.calls += 1
        try:
            devices, pods = self.client.answer()
        except KubeletError as exc:
            error = str(exc)
            with self._lock:
                changed = error != self._error
                self._error = error
            if changed:
                log.warning("kubelet_pod_resources_failed", socket=self.client.socket_path, error=error)
            return
        except Exception as exc:  # never let the poller thread die
            with self._lock:
                self._error = f"pod-resources List failed: {exc!r}"
            return
        with self._lock:
            recovered = self._error is not None and self._answered_at is not None
            self._devices, self._pods, self._answered_at, self._error = devices, pods, self._clock(), None
        if recovered:
            log.info("kubelet_pod_resources_recovered", socket=self.client.socket_path)

    def state(self) -> PodResourcesState:
        with self._lock:
            devices, pods = self._devices, self._pods
            if devices is not None and self._answered_at is not None and self._clock() - self._answered_at > self.keep:
                devices = pods = None  # too old to trust: pods may have ended
            return PodResourcesState(devices, self._error, self._answered_at, pods)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.client.timeout + 1.0)
        self.client.close()
