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

from headroom.samples import GpuSample, MigInstance, NvmlSample, Sample, SourceResult
from headroom.sources import Paths, SourceContext
from headroom.sources.identity import IdentityCollector
from headroom.sources.kubelet import KubeletError, PodResourcesClient, PodResourcesPoller, device_uuid
from headroom.sources.podresources import api_pb2, api_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "agent" / "headroom" / "sources" / "podresources"


class Lister(api_pb2_grpc.PodResourcesListerServicer):
    """The kubelet's v1 service: answers ``pods`` ({(namespace, pod): {container: [(resource, [ids])]}});
    ``hold``, when set, makes List wait on it (a hung kubelet)."""

    def __init__(self, pods=None) -> None:
        self.pods = pods or {}
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
                        previous=lambda: previous)
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
    from headroom.exposition import landing
    from headroom.exposition.render import render as render_exposition
    from headroom.sampler import Sampler

    holder = {}
    c = IdentityCollector(SourceContext(
        paths=Paths(procfs=tmp_path, sysfs=tmp_path, rootfs=Path("/")),
        settings={"kubernetes": True, "pod_resources_socket": str(tmp_path / "absent.sock"),
                  "pod_resources_refresh": 0.05},
        previous=lambda: holder["s"].snapshot.sample if holder["s"].snapshot else None))
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
    (src,) = landing.status(sampler)["identity"]["sources"]
    assert src["up"] is False and src["error"].startswith(f"socket {tmp_path / 'absent.sock'} not found")
    assert _logged(capsys, caplog, "kubelet_pod_resources_failed") == 1
