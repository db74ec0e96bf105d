"""Container state: a container's names from its runtime's on-disk state under the host's root, read once per
container (no daemon API): the OCI bundle's annotations (containerd, CRI-O: namespace, pod, container), Docker's
``config.v2.json``, Podman's ``containers.json`` (``container_meta``). Each record is opened non-blocking, regular
files only, at most JSON_BYTES.
"""

from __future__ import annotations

import json
import os
import stat as stat_module
from dataclasses import dataclass
from pathlib import Path

from headroom.jsontypes import JsonDoc, JsonMapping, JsonValue


@dataclass(frozen=True, slots=True)
class ContainerMeta:
    name: str = ""  # Docker / Podman container name
    namespace: str = ""  # Kubernetes pod namespace
    pod: str = ""
    container: str = ""  # Kubernetes container name
    pod_uid: str = ""


_CRI_KEYS = (  # (namespace, pod, container, pod uid) annotations: containerd's CRI plugin, then CRI-O / Docker labels
    ("io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.container-name",
     "io.kubernetes.cri.sandbox-uid"),
    ("io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name", "io.kubernetes.pod.uid"),
)


def _from_annotations(annotations: JsonMapping, name: str = "") -> ContainerMeta:
    for ns, pod, container, uid in _CRI_KEYS:
        if annotations.get(pod):
            return ContainerMeta(name=name, namespace=str(annotations.get(ns, "")), pod=str(annotations[pod]),
                                 container=str(annotations.get(container, "")), pod_uid=str(annotations.get(uid, "")))
    return ContainerMeta(name=name)


JSON_BYTES = 4 * 2**20  # of a runtime's state file: a larger one is cut there (and fails to parse)


def _load_json(path: Path | str) -> JsonValue:
    try:
        # no Python file object: once per new container, in the tick; O_NONBLOCK: a FIFO put there cannot block it
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat_module.S_ISREG(st.st_mode):  # a FIFO, a device, a directory: not a runtime's record
            return None
        size = st.st_size  # read(4 MiB) would allocate 4 MiB for a 1 KiB bundle config
        want = min(size, JSON_BYTES) if size else JSON_BYTES
        chunks, got = [], 0
        while got < want:
            chunk = os.read(fd, want - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return json.loads(b"".join(chunks))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def container_meta(rootfs: Path, container_id: str, runtime: str) -> ContainerMeta | None:
    """Names of a container from its runtime's on-disk state under ``rootfs``; None when none is readable."""
    root = str(rootfs).rstrip("/")  # strings, not Paths: this runs in the tick for each new container
    candidates: list[tuple[str, str]] = []
    if runtime in ("containerd", ""):
        for ns in ("k8s.io", "moby", "default"):
            candidates.append(("oci", f"{root}/run/containerd/io.containerd.runtime.v2.task/{ns}/{container_id}"
                                      "/config.json"))
    if runtime in ("cri-o", "podman", ""):
        for base in ("run/containers/storage", "var/lib/containers/storage"):
            candidates.append(("oci", f"{root}/{base}/overlay-containers/{container_id}/userdata/config.json"))
    if runtime in ("docker", ""):
        candidates.append(("docker", f"{root}/var/lib/docker/containers/{container_id}/config.v2.json"))
    for kind, path in candidates:
        doc = _load_json(path)
        if not isinstance(doc, dict):
            continue
        if kind == "docker":
            # the runtime's state file: JSON, untyped until each value is checked
            found = doc.get("Config")
            config: JsonDoc = found if isinstance(found, dict) else {}
            found = config.get("Labels")
            labels: JsonDoc = found if isinstance(found, dict) else {}
            return _from_annotations(labels, str(doc.get("Name", "")).lstrip("/"))
        found = doc.get("annotations")
        annotations: JsonDoc = found if isinstance(found, dict) else {}
        meta = _from_annotations(annotations)
        if runtime == "podman" or (not meta.pod and runtime == ""):
            name = _podman_name(Path(rootfs), container_id)
            if name:
                meta = ContainerMeta(name, meta.namespace, meta.pod, meta.container, meta.pod_uid)
        return meta
    if runtime == "podman":
        name = _podman_name(Path(rootfs), container_id)
        return ContainerMeta(name=name) if name else None
    return None


def _podman_name(rootfs: Path, container_id: str) -> str:
    for base in ("var/lib/containers/storage", "run/containers/storage"):
        doc = _load_json(rootfs / base / "overlay-containers/containers.json")
        if isinstance(doc, list):
            for c in doc:
                if isinstance(c, dict) and c.get("id") == container_id and c.get("names"):
                    return str(c["names"][0])
    return ""
