"""The kubelet pod-resources client against a real gRPC server implementing the v1 service on a real unix
socket: answers, a missing socket, permission denied, a hung server (deadline), an old kubelet without
v1, devices no GPU here has; and the checked-in generated code equals what grpcio-tools generates."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from headroom.samples import GpuSample, MigInstance, NvmlSample, PreviousTick, Sample, SourceResult
from headroom.sources import Paths, SourceContext
from headroom.sources.identity import IdentityCollector
from headroom.sources.kubelet import (
    DraDevice,
    KubeletError,
    PodResourcesClient,
    PodResourcesPoller,
    device_uuid,
    dra_device,
)
from headroom.sources.podresources import api_pb2, api_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "agent" / "headroom" / "sources" / "podresources"


class Lister(api_pb2_grpc.PodResourcesListerServicer):
    """The kubelet's v1 service: answers ``pods`` ({(namespace, pod): {container: [(resource, [ids])]}}) and
    ``claims``, their DRA claims ({(namespace, pod, container): [(claim namespace, claim name, [(driver, pool,
    device name, [CDI device names])])]}); ``hold``, when set, makes List wait on it (a hung kubelet)."""

    def __init__(self, pods=None) -> None:
        self.pods = pods or {}
        self.claims = {}
        self.hold: threading.Event | None = None
        self.entered = threading.Event()

    def List(self, request, context):  # noqa: N802 - gRPC method name
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(30)
        out = api_pb2.ListPodResourcesResponse()
        for (ns, name), containers in self.pods.items():
            pod = out.pod_resources.add(name=name, namespace=ns)
            for cname, devices in containers.items():
                c = pod.containers.add(name=cname)
                for resource, ids in devices:
                    c.devices.add(resource_name=resource, device_ids=ids)
                for claim_ns, claim_name, resources in self.claims.get((ns, name, cname), ()):
                    d = c.dynamic_resources.add(claim_name=claim_name, claim_namespace=claim_ns)
                    for driver, pool, device, cdi in resources:
                        r = d.claim_resources.add(driver_name=driver, pool_name=pool, device_name=device)
                        for cdi_name in cdi:
                            r.cdi_devices.add(name=cdi_name)
        return out


@pytest.fixture
def kubelet(tmp_path):
    """A real gRPC server on a unix socket in a temp dir; yields (socket path, servicer, server)."""
    sock = tmp_path / "pod-resources" / "kubelet.sock"
    sock.parent.mkdir()
    servicer = Lister()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    yield sock, servicer, server
    if servicer.hold is not None:
        servicer.hold.set()
    server.stop(0)


GPU0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU1 = "GPU-11111111-1111-1111-1111-111111111111"
MIG = "MIG-22222222-2222-2222-2222-222222222222"


def test_list_returns_each_containers_devices(kubelet):
    sock, servicer, _ = kubelet
    servicer.pods = {("ml", "trainer-0"): {"main": [("nvidia.com/gpu", [GPU0, GPU1])], "sidecar": []},
                     ("web", "frontend"): {"nginx": [("example.com/nic", ["eth9"])]}}
    client = PodResourcesClient(str(sock), timeout=5.0)
    try:
        got = client.list()
    finally:
        client.close()
    assert [(c.namespace, c.pod, c.container, c.resource, c.device_ids) for c in got] == [
        ("ml", "trainer-0", "main", "nvidia.com/gpu", (GPU0, GPU1)),
        ("web", "frontend", "nginx", "example.com/nic", ("eth9",)),
    ]


CLAIM_UID = "dab5ab50-d59a-42a6-af16-cfd4628c0f7a"


def test_dra_claims_come_with_their_pod_beside_device_plugin_devices(kubelet):
    """dynamic_resources, with the kubelet's field numbers: one entry per claim and driver, the driver's device
    names (or, where a driver gives none, its CDI device names), next to the device plugins' devices."""
    sock, servicer, _ = kubelet
    servicer.pods = {("ml", "trainer-0"): {"main": [("nvidia.com/gpu", [GPU0])], "side": []}}
    servicer.claims = {("ml", "trainer-0", "main"): [
        ("ml", "two-gpus", [("gpu.nvidia.com", "node-a", "gpu-0", [f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-0"]),
                            ("gpu.nvidia.com", "node-a", "gpu-3", [f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-3"]),
                            ("nic.example.com", "node-a", "", ["example.com/nic=eth3"])])],
        ("ml", "trainer-0", "side"): [("shared", "one-gpu", [("gpu.nvidia.com", "node-a", "gpu-1", [])])]}
    client = PodResourcesClient(str(sock), timeout=5.0)
    try:
        got = client.list()
    finally:
        client.close()
    assert [(c.container, c.resource, c.device_ids, c.claim) for c in got] == [
        ("main", "nvidia.com/gpu", (GPU0,), None),
        ("main", "gpu.nvidia.com", ("gpu-0", "gpu-3"), "ml/two-gpus"),
        ("main", "nic.example.com", ("example.com/nic=eth3",), "ml/two-gpus"),
        ("side", "gpu.nvidia.com", ("gpu-1",), "shared/one-gpu"),
    ]


def test_proto_field_numbers_are_the_kubelets():
    """The DRA messages as k8s.io/kubelet pkg/apis/podresources/v1/api.proto numbers them (a wrong number reads
    another field, or nothing, from a real kubelet)."""
    fields = {(m, f.name): f.number for m in ("ContainerResources", "DynamicResource", "ClaimResource", "CDIDevice")
              for f in api_pb2.DESCRIPTOR.message_types_by_name[m].fields}
    assert fields == {("ContainerResources", "name"): 1, ("ContainerResources", "devices"): 2,
                      ("ContainerResources", "dynamic_resources"): 5,
                      ("DynamicResource", "claim_name"): 2, ("DynamicResource", "claim_namespace"): 3,
                      ("DynamicResource", "claim_resources"): 4,
                      ("ClaimResource", "cdi_devices"): 1, ("ClaimResource", "driver_name"): 2,
                      ("ClaimResource", "pool_name"): 3, ("ClaimResource", "device_name"): 4,
                      ("CDIDevice", "name"): 1}


@pytest.mark.parametrize(("name", "device"), [
    ("gpu-0", DraDevice("gpu", 0)),
    ("gpu-12", DraDevice("gpu", 12)),
    ("gpu-1-mig-1g10gb-19-0", DraDevice("mig", 1, 19, 0)),
    ("gpu-0-mig-1g10gb-me-20-6", DraDevice("mig", 0, 20, 6)),
    (f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-5", DraDevice("gpu", 5)),
    (f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-2-mig-3g40gb-9-4", DraDevice("mig", 2, 9, 4)),
    ("gpu-vfio-0", DraDevice("vfio")),
    ("k8s.gpu.nvidia.com/claim=not-a-uid-gpu-0", DraDevice("unknown")),
    ("gpu-x", DraDevice("unknown")),
    (GPU0, DraDevice("unknown")),
])
def test_nvidia_dra_driver_names(name, device):
    assert dra_device(name) == device


def test_time_slicing_replica_ids_name_their_gpu():
    assert device_uuid(f"{GPU0}::3") == GPU0
    assert device_uuid(MIG) == MIG


def test_missing_socket_is_a_clear_error(tmp_path):
    client = PodResourcesClient(str(tmp_path / "nope.sock"), timeout=1.0)
    with pytest.raises(KubeletError, match="not found: not a Kubernetes node"):
        client.list()


def test_a_file_that_is_not_a_socket_is_named(tmp_path):
    path = tmp_path / "kubelet.sock"
    path.write_text("")
    with pytest.raises(KubeletError, match="is not a unix socket"):
        PodResourcesClient(str(path), timeout=1.0).list()


def test_hung_kubelet_hits_the_deadline(kubelet):
    sock, servicer, _ = kubelet
    servicer.hold = threading.Event()
    client = PodResourcesClient(str(sock), timeout=0.3)
    try:
        with pytest.raises(KubeletError, match=r"did not answer List within 0.3s"):
            client.list()
    finally:
        servicer.hold.set()
        client.close()


def test_kubelet_without_v1_is_named(tmp_path):
    sock = tmp_path / "kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))  # serves nothing: UNIMPLEMENTED
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        with pytest.raises(KubeletError, match="does not serve pod-resources v1"):
            PodResourcesClient(str(sock), timeout=5.0).list()
    finally:
        server.stop(0)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_permission_denied_is_named(kubelet):
    """The socket is root's and mode 0600: an unprivileged agent gets a clear reason, not a gRPC dump.
    The check runs in a forked child that drops to nobody (the real kernel decides the access)."""
    sock, _, _ = kubelet
    os.chmod(sock, 0o600)
    os.chmod(sock.parent, 0o755)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                PodResourcesClient(str(sock), timeout=2.0).list()
                msg = "no error"
            except KubeletError as exc:
                msg = str(exc)
            except BaseException as exc:  # noqa: B036 - report anything to the parent
                msg = f"unexpected {exc!r}"
            os.write(write, msg.encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        message = f.read()
    assert message.startswith("permission denied"), message


def _nvml_sample(gpus) -> Sample:
    return Sample(1.0, 1.0, {"nvml": SourceResult("nvml", True, 0.0, NvmlSample(up=True, gpus=tuple(gpus)))})


def _collector(tmp_path, sock, previous, **settings) -> IdentityCollector:
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    ctx = SourceContext(paths=Paths(procfs=proc, sysfs=tmp_path / "sys", rootfs=Path("/")),
                        settings={"kubernetes": True, "pod_resources_socket": str(sock), "pod_resources_refresh": 0.05,
                                  **settings},
                        previous=lambda: PreviousTick.of(previous))
    return IdentityCollector(ctx)


def _wait(pred, what: str):
    done = threading.Event()
    for _ in range(400):
        value = pred()
        if value:
            return value
        done.wait(0.025)
    raise AssertionError(f"timed out waiting for {what}")


def _logged(capsys, caplog, event: str) -> int:
    """How many times ``event`` was logged (structlog prints, or goes through logging, by configuration)."""
    out = capsys.readouterr()
    return max((out.out + out.err).count(event), caplog.text.count(event))


def test_pods_holding_gpus_become_workloads_and_unknown_devices_are_counted(kubelet, tmp_path, capsys, caplog):
    sock, servicer, _ = kubelet
    servicer.pods = {("ml", "trainer-0"): {"main": [("nvidia.com/gpu", [f"{GPU0}::0"])]},
                     ("ml", "tiny"): {"c": [("nvidia.com/mig-1g.10gb", [MIG])]},
                     ("ml", "ghost"): {"c": [("nvidia.com/gpu", ["GPU-not-on-this-host"])]}}
    previous = _nvml_sample([GpuSample(0, GPU0, "H100", "0000:01:00.0"),
                             GpuSample(1, GPU1, "H100", "0000:02:00.0",
                                       mig_instances=(MigInstance(1, 0, MIG, 0, 10 * 2**30),))])
    c = _collector(tmp_path, sock, previous)
    try:
        sample = _wait(lambda: (s := c.collect()).sources[0].up and s, "a kubelet answer")
    finally:
        c.close()
    src = sample.sources[0]
    assert src.name == "kubelet" and src.error is None
    assert src.unknown_devices == ("GPU-not-on-this-host",)
    by_name = {g.name: g for g in sample.groups}
    assert set(by_name) == {"ml/trainer-0", "ml/tiny"}
    assert by_name["ml/trainer-0"].gpus == (GPU0,) and by_name["ml/trainer-0"].container == "main"
    assert by_name["ml/tiny"].gpus == (MIG,) and by_name["ml/tiny"].kind == "pod"
    assert _logged(capsys, caplog, "identity_unknown_devices") == 1  # once, not every tick


def test_dra_claims_attribute_gpus_by_minor_number_and_unmapped_ones_are_reported(kubelet, tmp_path):
    """A pod holding GPUs through DRA claims is a workload with those GPUs (the driver's gpu-N is /dev/nvidiaN:
    the minor number, not the index), beside a pod of the device plugin; devices that name no GPU here, MIG
    devices and VM passthrough GPUs are listed in the source's status with why; other drivers' devices are not
    GPUs and are left alone. A MIG device is found by its parent's minor number, GPU instance profile id and
    placement start."""
    sock, servicer, _ = kubelet
    servicer.pods = {("ml", "plugin-pod"): {"main": [("nvidia.com/gpu", [GPU0])]},
                     ("ml", "dra-pod"): {"main": [], "helper": []},
                     ("ml", "cdi-only"): {"c": []},
                     ("ml", "mig-pod"): {"c": []},
                     ("ml", "slice-pod"): {"c": []}}
    servicer.claims = {
        ("ml", "dra-pod", "main"): [("ml", "train", [("gpu.nvidia.com", "node-a", "gpu-7", []),
                                                      ("nic.example.com", "node-a", "eth3", [])])],
        ("ml", "dra-pod", "helper"): [("ml", "train", [("gpu.nvidia.com", "node-a", "gpu-7", [])])],
        ("ml", "cdi-only", "c"): [("ml", "old", [("gpu.nvidia.com", "node-a", "",
                                                   [f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-4"])])],
        ("ml", "slice-pod", "c"): [("ml", "mine", [("gpu.nvidia.com", "node-a", "gpu-9-mig-1g10gb-19-6", [])])],
        ("ml", "mig-pod", "c"): [("ml", "slice", [("gpu.nvidia.com", "node-a", "gpu-9-mig-1g10gb-19-0", []),
                                                   ("gpu.nvidia.com", "node-a", "gpu-7-mig-1g10gb-19-0", []),
                                                   ("gpu.nvidia.com", "node-a", "gpu-11-mig-1g10gb-19-0", []),
                                                   ("gpu.nvidia.com", "node-a", "gpu-3", []),
                                                   ("gpu.nvidia.com", "node-a", "gpu-vfio-0", [])])]}
    mig_gpu = "GPU-33333333-3333-3333-3333-333333333333"
    unknown_layout = "GPU-44444444-4444-4444-4444-444444444444"
    previous = _nvml_sample([
        GpuSample(0, GPU0, "H100", "0000:01:00.0", minor_number=4),
        GpuSample(1, GPU1, "H100", "0000:02:00.0", minor_number=7),
        GpuSample(2, mig_gpu, "H100", "0000:03:00.0", minor_number=9, mig_enabled=True, mig_instances=(
            MigInstance(9, 0, "MIG-99999999-0000-0000-0000-000000000000", 0, 10 * 2**30, profile_id=19,
                        placement_start=4),
            MigInstance(7, 0, MIG, 0, 10 * 2**30, profile_id=19, placement_start=6))),
        GpuSample(3, unknown_layout, "H100", "0000:04:00.0", minor_number=11, mig_enabled=True,
                  mig_instances=(MigInstance(1, 0, "MIG-11111111-0000-0000-0000-000000000000", 0, 10 * 2**30),))])
    c = _collector(tmp_path, sock, previous)
    try:
        sample = _wait(lambda: (s := c.collect()).sources[0].up and s, "a kubelet answer")
    finally:
        c.close()
    by_name = {g.name: g for g in sample.groups}
    assert set(by_name) == {"ml/plugin-pod", "ml/dra-pod", "ml/cdi-only", "ml/slice-pod"}
    assert by_name["ml/slice-pod"].gpus == (MIG,)
    assert by_name["ml/plugin-pod"].gpus == (GPU0,)
    assert by_name["ml/dra-pod"].gpus == (GPU1,) and by_name["ml/dra-pod"].container == "main,helper"
    assert by_name["ml/cdi-only"].gpus == (GPU0,)
    assert sample.sources[0].unknown_devices == (
        "gpu-9-mig-1g10gb-19-0 (claim ml/slice: no MIG device with GPU instance profile 19 at placement 0 on the GPU "
        "with minor number 9)",
        "gpu-7-mig-1g10gb-19-0 (claim ml/slice: no MIG device with GPU instance profile 19 at placement 0 on the GPU "
        "with minor number 7)",
        "gpu-11-mig-1g10gb-19-0 (claim ml/slice: NVML did not describe the MIG instances of its GPU "
        "(nvmlGpuInstanceGetInfo, which NVML documents as needing a privileged user))",
        "gpu-3 (claim ml/slice: no GPU with minor number 3 here)",
        "gpu-vfio-0 (claim ml/slice: a GPU passed through to a virtual machine (vfio): NVML does not see it)",
    )


def test_hung_kubelet_never_stalls_the_tick(kubelet, tmp_path):
    """While the kubelet sits on a List call, collect() answers from the cache (here: nothing yet, with why)."""
    sock, servicer, _ = kubelet
    servicer.hold = threading.Event()
    c = _collector(tmp_path, sock, _nvml_sample([GpuSample(0, GPU0, "H100", "0000:01:00.0")]),
                   pod_resources_timeout=30.0)
    try:
        c.collect()  # starts the poller thread
        assert servicer.entered.wait(20), "the poller never called List"
        sample = c.collect()  # the List call is still held by the server: this must not wait for it
        assert servicer.hold.is_set() is False
        assert sample.sources[0].up is False and sample.sources[0].error == "no answer yet"
        assert sample.groups == ()
    finally:
        servicer.hold.set()
        c.close()


def test_missing_socket_reports_status_and_the_tick_goes_on(tmp_path):
    c = _collector(tmp_path, tmp_path / "absent.sock", _nvml_sample([]))
    try:
        sample = _wait(lambda: (s := c.collect()).sources[0].error != "no answer yet" and s, "the first failure")
    finally:
        c.close()
    assert sample.sources[0].up is False
    assert "not found" in sample.sources[0].error


def test_last_answer_kept_only_for_keep_seconds(kubelet):
    sock, servicer, _ = kubelet
    servicer.pods = {("a", "p"): {"c": [("nvidia.com/gpu", [GPU0])]}}
    now = [100.0]
    poller = PodResourcesPoller(str(sock), timeout=5.0, refresh=60.0, keep=30.0, clock=lambda: now[0])
    try:
        poller.poll_once()
        assert poller.state().devices is not None
        servicer.hold = threading.Event()
        poller.client.timeout = 0.2
        poller.poll_once()  # fails: deadline
        st = poller.state()
        assert st.devices is not None and "did not answer" in st.error
        now[0] += 31
        assert poller.state().devices is None  # too old: pods may have ended
    finally:
        if servicer.hold is not None:
            servicer.hold.set()
        poller.close()


def test_checked_in_code_matches_the_proto(tmp_path):
    """The generated modules equal what the installed grpcio-tools makes from api.proto (make podresources)."""
    pytest.importorskip("grpc_tools")
    out = tmp_path / "gen"
    out.mkdir()
    rel = "headroom/sources/podresources/api.proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'agent'}", f"--python_out={out}",
                    f"--grpc_python_out={out}", str(ROOT / "agent" / rel)], check=True, timeout=120)
    for name in ("api_pb2.py", "api_pb2_grpc.py"):
        assert (out / "headroom/sources/podresources" / name).read_text() == (PKG / name).read_text(), name


def test_unreachable_kubelet_shows_in_metrics_status_and_log(tmp_path, capsys, caplog):
    """Socket missing: the metric says 0, /api/v1/status says why, the log says it once; the tick goes on."""
    from headroom.exposition import status_api
    from headroom.exposition.render import render as render_exposition
    from headroom.sampler import Sampler

    holder = {}
    c = IdentityCollector(SourceContext(
        paths=Paths(procfs=tmp_path, sysfs=tmp_path, rootfs=Path("/")),
        settings={"kubernetes": True, "pod_resources_socket": str(tmp_path / "absent.sock"),
                  "pod_resources_refresh": 0.05},
        previous=lambda: PreviousTick.of(holder["s"].snapshot.sample if holder["s"].snapshot else None)))
    sampler = holder["s"] = Sampler(render=render_exposition, collectors=[c], interval=1.0, collector_timeout=10.0)
    try:
        for _ in range(400):
            snap = sampler.tick()
            if c.poller.calls >= 2 and "not found" in (c.poller.state().error or ""):
                snap = sampler.tick()
                break
            threading.Event().wait(0.025)
    finally:
        sampler.stop()
    text = snap.exposition.decode()
    assert 'headroom_identity_source_up{source="kubelet"} 0' in text
    assert 'headroom_collector_success{collector="identity"} 1' in text
    (src,) = status_api.status(sampler)["identity"]["sources"]
    assert src["up"] is False and src["error"].startswith(f"socket {tmp_path / 'absent.sock'} not found")
    assert _logged(capsys, caplog, "kubelet_pod_resources_failed") == 1
