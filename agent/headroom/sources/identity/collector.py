"""The identity collector: automatic workloads for the pods, Slurm jobs, containers, systemd units and
serving or training launchers that hold a GPU, without a hand-written profile.

Per tick (docs/workload-identity.md):

1. the GPU processes are the pids NVML listed in the previous tick (``SourceContext.previous``; this
   collector never calls NVML, so an identity appears one tick after its first process on a GPU); with
   ``launchers`` on, launchers that hold no GPU (found among new processes, ``_LauncherScan``) are taken as
   processes on no GPU;
2. each one's /proc/PID/cgroup is read once, when it is new to the collector, and ``parse_cgroup_path`` turns
   the path into an identity: Kubernetes pod UID + container ID (cgroup v1
   and v2, cgroupfs and systemd drivers, containerd / CRI-O / Docker naming), Slurm job and step
   (``/slurm/uid_U/job_J/step_S`` in v1, ``.../job_J/step_S/...`` in v2), Docker / Podman container
   ID, or the innermost systemd unit;
3. names come from on-disk state only, read once per container (no daemon API): the OCI bundle's
   annotations (containerd, CRI-O: namespace, pod, container), Docker's ``config.v2.json``, Podman's
   ``containers.json``; and, with --kubernetes, from the kubelet's pod-resources API
   (``sources/kubelet.py``, polled in its own thread), which also says which GPU or MIG device each
   pod holds (pods with a GPU but no process on it yet are workloads too);
4. ``--hpc-job-mapping-dir`` (dcgm-exporter's format: a file per GPU index listing job IDs, one a line)
   assigns jobs to GPUs for sites whose prolog writes those files;
5. each identity's cgroup files (v2 cpu.stat, memory.current, pids.current, cpu.max, io.stat, PSI; their v1
   equivalents for an identity named by a v1 path) are read, and its member processes listed (cgroup.procs of
   its cgroup and every cgroup below: ``list_members``, for the processes collector to measure), when it
   appears, then again within CGROUP_REFRESH_SECONDS (10 s) of ticks, the ones read longest ago first: every
   tick while there are no more than CGROUP_EVERY_TICK (5) identities, a tenth of them a tick at 1 Hz beyond that;
6. the command lines of each new GPU process and its ancestors name its serving or training launcher
   (``vllm serve``, ``torchrun`` ...: workload/launchers.py), once per process (an ancestor is read once
   while it lives: the workers of one launcher, or the pods of one parent, share it): a launcher outside the
   identities above is a workload of its own, and its model's config.json, found as the process sees it
   (a path, or its Hugging Face cache, through /proc/PID/root) and read in a worker thread, lets
   attribution size it like a declared profile (``read_launcher_model``).

Work follows what changed, so that 50 pods churning cost little more per tick than the new pod
(docs/workload-identity.md, "Cost"): on the live /proc of the agent's pid namespace each GPU process is watched
through a pidfd (one poll a tick says which exited, so a process that ended leaves at once and a reused pid is
a new process, read anew; elsewhere /proc/PID's inode is compared each tick); the groups of the processes
that came, went or moved are rebuilt, what the kubelet and the job mapping add is merged again only where it
changed, and an identity whose group, cgroup figures and model are unchanged is last tick's IdentityGroup.

Identities beyond ``max_workloads`` are not exported (``headroom_workload_identities_dropped_total``
counts each one once); the collector keeps state only for live GPU processes and live identities, so
pods and jobs that end leave nothing behind.
"""

from __future__ import annotations

import errno
import json
import operator
import os
import re
import select
import stat as stat_module
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import structlog

from headroom.safeio import Credentials, Tree
from headroom.samples import (
    EMPTY,
    CgroupIdentity,
    CgroupStats,
    IdentityGroup,
    IdentitySample,
    IdentitySource,
    Launcher,
    ModelInfo,
    NvmlSample,
    share_unchanged,
)
from headroom.sources import Collector, SourceContext, procfs, register
from headroom.sources.cpu import clock_ticks_per_second
from headroom.sources.processes import parse_cpu_max, parse_io_stat
from headroom.workload.attribution import claimed_by_declared
from headroom.workload.launchers import display_name, ollama_status_url
from headroom.workload.launchers import parse as parse_launcher
from headroom.workload.modelconfig import ModelConfigError

log = structlog.get_logger("headroom.sources.identity")

KINDS = ("pods", "jobs", "containers", "units", "launchers")  # --workloads.auto values
DEFAULT_AUTO = ("pods", "jobs", "launchers")  # pods need --kubernetes too
LAUNCHER_DEPTH = 6  # ancestors of a GPU process searched for a launcher (vLLM engine cores, torchrun workers)
DEFAULT_MAX_WORKLOADS = 100

# ------------------------------------------------------------------------------------------ parsing
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# cgroupfs: "pod<uid>"; systemd: "kubepods-pod<uid>.slice", "kubepods-burstable-pod<uid_with_underscores>.slice";
# containerd's systemd driver inside its own unit: "kubepods-burstable-pod<uid>.slice:cri-containerd:<id>"
_POD = re.compile(rf"^(?:kubepods-(?:besteffort-|burstable-|guaranteed-)?)?pod({_UID})(?:\.slice)?"
                  r"(?::([a-z-]+):([0-9a-f]{64}))?$")
# "<id>" (cgroupfs), "cri-containerd-<id>.scope", "crio-<id>.scope", "docker-<id>.scope", "libpod-<id>.scope"
_CONTAINER = re.compile(r"^(?:(cri-containerd|crio|docker|libpod)-)?([0-9a-f]{64})(?:\.scope)?$")
_RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker", "libpod": "podman", None: ""}
_JOB = re.compile(r"^job_(\d+)$")
_STEP = re.compile(r"^step_([A-Za-z0-9_.-]+)$")

# Who may name a cgroup. A process can move itself into any cgroup it can write, and a user can write below her
# own delegated subtree (systemd's user@UID.service, or any unit with Delegate= and User=): there she can create
# `slurm/job_4242/step_0` or `kubepods/pod<uid>/...`. Job and pod names are taken only where the scheduler puts
# them, never at or below a user's part of the tree (docs/workload-identity.md, "Who may name a workload").
_USER_TERRITORY = re.compile(r"^(?:user\.slice|user-\d+\.slice|user@\d+\.service)$")  # jobs and pods never here
_USER_MANAGER = re.compile(r"^user@\d+\.service$")  # systemd delegates this unit's subtree to its user
_SLURM_V1 = re.compile(r"^slurm(?:_[^/]+)?$")  # /slurm, or /slurm_<node> with multiple slurmd
_SLURM_UID = re.compile(r"^uid_\d+$")
_SLURM_V2 = re.compile(r"^(?:[^/]+_)?slurmstepd\.scope$")  # slurmstepd.scope, <node>_slurmstepd.scope
_KUBEPODS = frozenset(("kubepods", "kubepods.slice"))
_QOS = frozenset(("besteffort", "burstable", "kubepods-besteffort.slice", "kubepods-burstable.slice"))


def _is(value: str) -> Callable[[str], bool]:
    return value.__eq__


# the cgroups above a job or a pod, from the hierarchy's root, as Slurm and the kubelet make them
_JOB_LAYOUTS: tuple[tuple[Callable[[str], bool], ...], ...] = (
    (_is("system.slice"), _SLURM_V2.match),  # cgroup v2: /system.slice/slurmstepd.scope/job_N
    (_SLURM_V1.match, _SLURM_UID.match),  # cgroup v1: /slurm/uid_N/job_N
    (_SLURM_V1.match,),
)
_POD_LAYOUTS: tuple[tuple[Callable[[str], bool], ...], ...] = (
    (_KUBEPODS.__contains__, _QOS.__contains__),  # /kubepods.slice/kubepods-burstable.slice/..., /kubepods/besteffort
    (_KUBEPODS.__contains__,),  # guaranteed pods
)
_COLON_LAYOUTS: tuple[tuple[Callable[[str], bool], ...], ...] = (
    (_is("system.slice"), lambda c: c.endswith(".service")),  # containerd's own unit, systemd driver names
)


def _laid_out(above: list[str], layouts: tuple[tuple[Callable[[str], bool], ...], ...], verified: bool) -> bool:
    """True when the cgroups ``above`` a job or pod component (from the hierarchy's root) are one of ``layouts``:
    exactly, from the root; or, for a path relative to the agent's own cgroup namespace (leading ``..``: the
    part left out is the agent's own ancestors), the end of one; or, when ``verified`` (every directory on the
    way was seen, owned by the hierarchy's owner), ending with one (the kubelet's --cgroup-root, a bench's own
    top cgroup)."""
    n = 0
    while n < len(above) and above[n] == "..":
        n += 1
    rest = above[n:]
    for layout in layouts:
        if len(rest) == len(layout) or (n and len(rest) < len(layout)):
            if all(test(c) for test, c in zip(layout[len(layout) - len(rest):], rest, strict=True)):
                return True
        elif verified and not n and len(rest) > len(layout):
            if all(test(c) for test, c in zip(layout, rest[-len(layout):], strict=True)):
                return True
    return False


@dataclass(frozen=True, slots=True)
class Owners:
    """What the cgroup directories on a path say about who made them (``cgroup_owners``): ``delegated``, the
    index of the first component whose directory another uid than the hierarchy's own owns (-1: none seen);
    ``seen``, how many components' directories were seen (from the first), up to that one."""

    delegated: int = -1
    seen: int = 0
    uid: int = -1  # the owner of the ``delegated`` component


def cgroup_owners(hierarchy: str, path: str) -> Owners:
    """Walk ``path`` down the cgroup hierarchy mounted at ``hierarchy`` while its directories exist: where a
    delegated subtree begins (systemd gives a delegated unit's directory to its user; everything she makes
    below it is hers). Relative paths (``..``, another cgroup namespace) are not followed."""
    try:
        root_uid = os.lstat(hierarchy).st_uid
    except OSError:
        return Owners()
    parts = path.split("/")
    d = hierarchy
    for i in range(1, len(parts)):
        comp = parts[i]
        if comp in ("", ".", ".."):
            return Owners(seen=i - 1)
        d = f"{d}/{comp}"
        try:
            st = os.lstat(d)
        except OSError:
            return Owners(seen=i - 1)
        if not stat_module.S_ISDIR(st.st_mode):
            return Owners(seen=i - 1)
        if st.st_uid != root_uid:
            return Owners(delegated=i, seen=i, uid=st.st_uid)
    return Owners(seen=len(parts) - 1)


def parse_cgroup_path(path: str, owners: Owners | None = None) -> CgroupIdentity | None:
    """The identity a cgroup path names (pod > Slurm job > container > systemd unit), or None."""
    return classify_cgroup_path(path, owners)[0]


def classify_cgroup_path(path: str, owners: Owners | None = None) -> tuple[CgroupIdentity | None, str]:
    """(the identity a cgroup path names, or None; "" or the one-line reason a job or pod it names was not
    taken). A job or pod is taken only in Slurm's and the kubelet's own layouts (``_JOB_LAYOUTS``,
    ``_POD_LAYOUTS``), never at or below ``user.slice``, ``user-UID.slice`` or ``user@UID.service``, nor below a
    delegated subtree (``owners``: what the hierarchy's directories say, ``cgroup_owners``). A container or
    unit below a delegated subtree is that user's (``CgroupIdentity.delegated``): named and kept apart from
    the system's."""
    parts = path.split("/")
    pod_uid = container = runtime = job = step = unit = ""
    pod_at = container_at = job_at = unit_at = user_at = manager_at = -1
    colon_form = False
    for i, comp in enumerate(parts):
        if not comp:
            continue
        if user_at < 0 and comp.startswith("user") and _USER_TERRITORY.match(comp):
            user_at = i
            if comp.endswith(".service"):
                manager_at = i
        m = _POD.match(comp) if "pod" in comp and pod_at < 0 else None  # (a cheap test first: it runs per component)
        if m is not None and "kubepods" in path:
            pod_uid, pod_at = m.group(1).replace("_", "-"), i
            if m.group(3):
                colon_form = True
                container, container_at = m.group(3), i
                runtime = _RUNTIMES.get(m.group(2), m.group(2))
            continue
        m = _CONTAINER.match(comp) if len(comp) >= 64 else None
        if m is not None:
            container, container_at, runtime = m.group(2), i, _RUNTIMES[m.group(1)]
            if runtime == "" and parts[i - 1] == "docker":  # cgroupfs Docker: /docker/<id>
                runtime = "docker"
            continue
        m = _JOB.match(comp) if comp.startswith("job_") and job_at < 0 else None
        if m is not None and "slurm" in path:  # slurmstepd.scope (v2), /slurm or /slurm_<node> (v1)
            job, job_at = m.group(1), i
            continue
        m = _STEP.match(comp) if comp.startswith("step_") else None
        if m is not None and job and i == job_at + 1:
            step = m.group(1)
            continue
        if comp.endswith(".service"):
            unit, unit_at = comp, i
        if manager_at < 0 and user_at >= 0 and _USER_MANAGER.match(comp):
            manager_at = i  # user.slice/user-1000.slice/user@1000.service
    owners = owners or Owners()
    delegated_at = min((x for x in (manager_at, owners.delegated) if x >= 0), default=-1)
    why = ""
    if pod_uid:
        why = _untrusted(parts, pod_at, user_at, delegated_at, owners, _COLON_LAYOUTS if colon_form else _POD_LAYOUTS,
                         f"pod {pod_uid}", "a pod")
        if not why:
            cgroup = "" if colon_form else "/".join(parts[: pod_at + 1])
            return CgroupIdentity("pod", cgroup, pod_uid=pod_uid, container_id=container, runtime=runtime), ""
        if colon_form:
            container = ""  # the container ID came with the pod's name: neither is taken
    if job:
        reason = _untrusted(parts, job_at, user_at, delegated_at, owners, _JOB_LAYOUTS, f"job_{job}", "a Slurm job")
        if not reason:
            return CgroupIdentity("job", "/".join(parts[: job_at + 1]), job_id=job, step=step), why
        why = why or reason
    below = _delegation(parts, delegated_at)
    if container:
        mine = below if 0 <= delegated_at < container_at else ""
        return CgroupIdentity("container", "/".join(parts[: container_at + 1]), container_id=container,
                              runtime=runtime, delegated=mine), why
    if unit and unit_at > 0:
        mine = below if 0 <= delegated_at < unit_at else ""
        return CgroupIdentity("unit", "/".join(parts[: unit_at + 1]), unit=unit, delegated=mine), why
    return None, why


def _delegation(parts: list[str], at: int) -> str:
    """How a delegated subtree is named in a user's identities: its cgroup's name (``user@1000.service``,
    ``alice.service``: unit names are unique on a host), cut and escaped when it is not a plain one."""
    if at < 0:
        return ""
    comp = parts[at]
    return comp if len(comp) <= 64 and comp.isprintable() else f"{comp[:48].encode('unicode_escape').decode()}..."


def _untrusted(parts: list[str], at: int, user_at: int, delegated_at: int, owners: Owners,
               layouts: tuple[tuple[Callable[[str], bool], ...], ...], what: str, kind: str) -> str:
    """Why the job or pod component at ``at`` is not taken for one ("" when it is)."""
    if 0 <= delegated_at <= at:
        owner = f" (its cgroup is uid {owners.uid}'s)" if owners.delegated == delegated_at else ""
        return (f"{what} is below {_delegation(parts, delegated_at)}{owner}, a subtree delegated to its user: "
                f"not taken for {kind}")
    if 0 <= user_at <= at:
        return f"{what} is below {parts[user_at]}, a user's part of the cgroup tree: not taken for {kind}"
    if not _laid_out(parts[1:at], layouts, owners.seen >= at):
        where = "Slurm makes jobs" if "job" in kind else "the kubelet makes pods"
        return f"{what} is not where {where}: not taken for {kind}"
    return ""


_V1_ORDER = ("memory", "cpu,cpuacct", "cpuacct,cpu", "cpu", "pids", "name=systemd")
# what a cgroup path names, highest first (docs/workload-identity.md, "Precedence"): a pod's or a job's processes also
# sit in the units and containers that run them (a kubelet's containerd scope, slurmd.service on a hybrid host)
RANK = {"pod": 0, "job": 1, "container": 2, "unit": 3}


def identity_of(groups: procfs.PidCgroups, sysfs: str | None = None) -> CgroupIdentity | None:
    """The identity of a process from its /proc/PID/cgroup: what its lines name, pod > job > container > unit."""
    return classify(groups, sysfs)[0]


def classify(groups: procfs.PidCgroups, sysfs: str | None = None) -> tuple[CgroupIdentity | None, str]:
    """(``identity_of``, "" or why a job or pod its cgroup names was not taken). Every line is read (the v2 path,
    then the v1 controllers in ``_V1_ORDER``, then the others) and the highest-ranking identity any of them names
    is taken (``RANK``; of equals, the first line's): on a systemd host where Slurm uses cgroup v1, the v2 and
    ``name=systemd`` lines name ``slurmd.service`` and the memory, cpuacct and freezer lines the job, which wins.
    Its cgroup figures come from the hierarchy that names it: a v2 path's, none for a v1 path (a job named only on
    v1 lines gets no figures from the v2 ``slurmd.service``). With ``sysfs``, the owners of the cgroup directories on
    the way are checked (``cgroup_owners``) for paths that name an identity."""
    paths: list[tuple[str, str | None]] = []
    if groups.unified not in (None, "", "/"):
        paths.append((groups.unified, None))
    controllers = groups.controllers
    paths += [(controllers[c], c) for c in _V1_ORDER if c in controllers]
    paths += [(p, c) for c, p in sorted(controllers.items()) if c not in _V1_ORDER]
    first_why = ""
    best: CgroupIdentity | None = None
    best_rank = len(RANK)
    seen: dict[str, tuple[CgroupIdentity | None, str]] = {}  # v1 controllers mostly share one path: read once
    for path, controller in paths:
        if path in ("", "/"):
            continue
        plain = seen.get(path)
        if plain is None:
            plain = seen[path] = classify_cgroup_path(path)
        ident, why = plain
        # the directories' owners only refuse a pod or job (or name a user's own container or unit), except that a
        # refused one may be confirmed where every directory on the way is seen: nothing here can outrank ``best``
        if (RANK["pod"] if why else RANK[ident.kind] if ident is not None else len(RANK)) >= best_rank:
            first_why = first_why or why
            continue
        if (ident is not None or why) and sysfs is not None and path.startswith("/") \
                and not path.startswith("/..") and not (ident is not None and not why and _rooted(ident)):
            owners = cgroup_owners(_hierarchy(sysfs, controller, path), path)
            if owners.delegated >= 0 or (why and owners.seen):  # else the same answer
                ident, why = classify_cgroup_path(path, owners)
        first_why = first_why or why
        if ident is not None and RANK[ident.kind] < best_rank:
            # the v1 path of a v1-only or hybrid host is not a cgroup v2 path: no stats from it
            best, best_rank = (ident if controller is None else _no_stats(ident)), RANK[ident.kind]
            if best_rank == 0:
                break  # nothing outranks a pod
    return best, first_why


def _rooted(ident: CgroupIdentity) -> bool:
    """A job or pod in Slurm's or the kubelet's layout from the hierarchy's root (`/kubepods.slice/...`,
    `/slurm/...`, `/system.slice/slurmstepd.scope/...`): only root makes those, nothing there is delegated to
    a user, so the owners need not be looked at."""
    if ident.kind not in ("pod", "job") or not ident.cgroup:
        return False
    parts = ident.cgroup.split("/", 3)
    return len(parts) > 2 and (parts[1] in _KUBEPODS or bool(_SLURM_V1.match(parts[1]))
                               or (parts[1] == "system.slice" and bool(_SLURM_V2.match(parts[2]))))


def _hierarchy(sysfs: str, controller: str | None, path: str) -> str:
    """Where the hierarchy a /proc/PID/cgroup line names is mounted under ``sysfs``: cgroup v2 at fs/cgroup, or
    fs/cgroup/unified on a hybrid host (where the path's first directory is); a v1 controller at
    fs/cgroup/CONTROLLER (``name=systemd``: fs/cgroup/systemd)."""
    if controller is not None:
        return f"{sysfs}/fs/cgroup/{controller.removeprefix('name=')}"
    first = path.strip("/").split("/", 1)[0]
    unified = f"{sysfs}/fs/cgroup/unified"
    return unified if first and os.path.isdir(f"{unified}/{first}") else f"{sysfs}/fs/cgroup"


def _no_stats(ident: CgroupIdentity) -> CgroupIdentity:
    from dataclasses import replace

    return replace(ident, cgroup="")


# ------------------------------------------------------------------------- container on-disk state
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


def _from_annotations(annotations: Mapping[str, Any], name: str = "") -> ContainerMeta:
    for ns, pod, container, uid in _CRI_KEYS:
        if annotations.get(pod):
            return ContainerMeta(name=name, namespace=str(annotations.get(ns, "")), pod=str(annotations[pod]),
                                 container=str(annotations.get(container, "")), pod_uid=str(annotations.get(uid, "")))
    return ContainerMeta(name=name)


JSON_BYTES = 4 * 2**20  # of a runtime's state file: a larger one is cut there (and fails to parse)


def _load_json(path: Path | str) -> Any:
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
            config = doc.get("Config") if isinstance(doc.get("Config"), dict) else {}
            labels = config.get("Labels") if isinstance(config.get("Labels"), dict) else {}
            return _from_annotations(labels, str(doc.get("Name", "")).lstrip("/"))
        annotations = doc.get("annotations") if isinstance(doc.get("annotations"), dict) else {}
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


# --------------------------------------------------------------------------------- job mapping dir
# the job mapping directory is read when it changed (its mtime; each GPU file's inode, size and mtime), within these
# bounds; a file or the directory changed less than MAPPING_RACY_SECONDS before it was looked at is looked at again
# at the next tick (a rewrite within the clock's granularity keeps the mtime)
MAPPING_ENTRIES = 1024  # directory entries looked at per listing (a GPU's file is named by its index: a few)
MAPPING_FILES = 64  # GPU files read (the lowest indices), besides this host's GPUs' own
MAPPING_FILE_BYTES = 4096  # of one GPU file (job IDs, one a line: hundreds fit); a larger one is refused
MAPPING_RACY_SECONDS = 2.0
_JOB_ID = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")  # Slurm's 4242, 4242_7 (array), 4242+1 (heterogeneous), PBS's 12.host


class JobMappingReader:
    """dcgm-exporter's HPC job mapping directory: a file per GPU index (its name) listing job IDs, one a line.
    ``read()`` answers {GPU index: job IDs} and one-line reasons for what it refused (a FIFO, a device, a file
    over MAPPING_FILE_BYTES, lines that are not job IDs, entries beyond the bounds); it lists the directory
    only when the directory changed and reads a file only when it changed, through ``safeio.read_config_bytes``
    (non-blocking open, regular files only, bounded). Other names and sub-directories are ignored; raises
    OSError when the directory cannot be read."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = str(directory)
        self._listed: tuple[int, int] | None = None  # (inode, mtime) of the directory at the last listing
        self._names: list[str] = []
        self._notes: list[str] = []  # what the listing left out
        self._files: dict[str, tuple[tuple[int, int, int, int], tuple[str, ...], str]] = {}  # name -> (stat, jobs, why)
        self._answer: tuple[dict[int, tuple[str, ...]], tuple[str, ...]] = ({}, ())

    def read(self, indices: tuple[int, ...] = ()) -> tuple[dict[int, tuple[str, ...]], tuple[str, ...]]:
        """``indices``: this host's GPUs, whose files are looked at whatever the listing found (a directory
        filled with other files does not hide them)."""
        import time

        from headroom import safeio

        st = os.stat(self.directory)
        if not stat_module.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        racy = time.time_ns() - int(MAPPING_RACY_SECONDS * 1e9)
        changed = False
        if (st.st_ino, st.st_mtime_ns) != self._listed:
            self._list()
            self._listed = (st.st_ino, st.st_mtime_ns) if st.st_mtime_ns < racy else None
            changed = True
        files = self._files
        names = self._names
        if indices:
            listed = set(names)
            names = names + [str(i) for i in indices if str(i) not in listed]
        for name in [n for n in files if n not in names]:
            del files[name]
            changed = True
        for name in names:
            path = f"{self.directory}/{name}"
            try:
                fst = os.stat(path)  # a FIFO or a device is only stat()ed here: read_config_bytes refuses it
            except OSError:
                if files.pop(name, None) is not None:
                    changed = True
                continue  # removed by the epilog meanwhile: no job there
            key = (fst.st_ino, fst.st_size, fst.st_mtime_ns, fst.st_mode)
            known = files.get(name)
            if known is not None and known[0] == key and fst.st_mtime_ns < racy:
                continue
            if stat_module.S_ISDIR(fst.st_mode):
                jobs, why = (), ""
            else:
                try:
                    text = safeio.read_config_bytes(path, MAPPING_FILE_BYTES).decode("utf-8", "replace")
                    jobs, why = _jobs_of(name, text)
                except OSError as exc:
                    jobs, why = (), f"{name}: {exc.strerror or type(exc).__name__}: not read"
            if known is None or known[1:] != (jobs, why):
                changed = True
            files[name] = (key, jobs, why)
        if changed:
            mapping = {int(n): f[1] for n, f in sorted(files.items(), key=lambda item: int(item[0])) if f[1]}
            self._answer = (mapping, (*self._notes, *(f[2] for _, f in sorted(files.items(), key=lambda item: int(item[0]))
                                                      if f[2])))
        return self._answer

    def _list(self) -> None:
        names, notes = [], []
        with os.scandir(self.directory) as entries:
            for n, entry in enumerate(entries):
                if n >= MAPPING_ENTRIES:
                    notes.append(f"more than {MAPPING_ENTRIES} entries: the rest are not looked at")
                    break
                name = entry.name
                if name.isascii() and name.isdigit() and len(name) <= 4:
                    names.append(name)
        names.sort(key=int)
        if len(names) > MAPPING_FILES:
            notes.append(f"{len(names)} GPU files: only the first {MAPPING_FILES} (by index) are read")
            del names[MAPPING_FILES:]
        self._names, self._notes = names, notes


def _jobs_of(name: str, text: str) -> tuple[tuple[str, ...], str]:
    """The job IDs of one GPU file, and why lines were refused ("" when none were)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    jobs = tuple(dict.fromkeys(line for line in lines if _JOB_ID.match(line)))
    bad = sum(1 for line in lines if not _JOB_ID.match(line))
    why = f"{name}: {bad} line(s) are not job IDs (letters, digits and _.+-, at most 64): ignored" if bad else ""
    return jobs, why


def read_job_mapping(directory: Path) -> dict[int, tuple[str, ...]]:
    """The job mapping directory's {GPU index: job IDs} (``JobMappingReader``, read once)."""
    return JobMappingReader(directory).read()[0]


# ------------------------------------------------------------------------------ launchers without a GPU
# A serving or training launcher that holds no GPU (CPU serving, a model still loading, CPU training) is found among
# the processes that start, as the processes collector finds its newcomers (docs/workload-identity.md, "Launchers
# without a GPU"): the command line of each new process is read once, and once more the next tick (a fork that had
# not exec'd yet), never every process every tick
LAUNCHERS_WITHOUT_GPU = 16  # launchers holding no GPU followed at once (a pidfd each); more are not workloads
LAUNCHER_READS = 64  # command lines read per tick at most (the first listing of a busy host, a fork storm's
# newcomers: the rest over the next ticks; 20 us to 0.15 ms each, by the host's load)
LAUNCHER_RECHECKS = 1  # looks again at a newcomer that named no launcher (the next tick: fork, then exec)


class _LauncherScan:
    """The processes that started since the last tick whose command line names a launcher (workload/launchers.py).

    On a live procfs of the agent's own pid namespace, /proc/loadavg's last field says which pids the kernel
    allocated since the last tick: only those are looked at (a thread's id is skipped), and /proc is listed on the
    first tick, every FULL_SCAN_SECONDS, and when more than MIN_LISTING_WORTH pids were allocated since (each
    listed process not looked at before has its command line read). Elsewhere (a fixture tree, another
    namespace's /proc) /proc is listed every tick, as the processes collector does; in a simulation only its
    stand-ins are looked at (``allowed``: no listing). A newcomer that names no launcher is looked at
    LAUNCHER_RECHECKS more times, at the next tick; at most LAUNCHER_READS command lines a tick. ``found()``
    answers each launcher's pid once."""

    def __init__(self, root: Path, live: bool) -> None:
        self.root = root
        self.live = live
        self._last_pid: int | None = None
        self._listed_at: float | None = None
        self._seen: dict[int, int] = {}  # pid -> /proc/PID inode of the processes looked at
        self._pending: dict[int, int] = {}  # pid -> inode, still to look at (over LAUNCHER_READS)
        self._recheck: dict[int, tuple[float, int]] = {}  # pid -> (when it is due another look, looks so far)
        self.reads = 0  # command lines read so far

    def found(self, now: float, allowed: frozenset[int] | None = None) -> list[int]:
        """The pids found to name a launcher since the last call (``allowed``: only these may)."""
        from headroom.sources.processes import FULL_SCAN_SECONDS, MIN_LISTING_WORTH, read_last_pid

        root, seen, pending = self.root, self._seen, self._pending
        last = read_last_pid(root) if self.live and allowed is None else None
        previous, self._last_pid = self._last_pid, last
        if allowed is not None:  # a simulation's stand-ins: nothing else to look for
            for pid in [p for p in seen if p not in allowed]:
                del seen[pid]
            pending.update((pid, -1) for pid in allowed if pid not in seen)
        elif (last is not None and previous is not None and self._listed_at is not None
                and 0 <= now - self._listed_at < FULL_SCAN_SECONDS and 0 <= last - previous <= MIN_LISTING_WORTH):
            from headroom.sources.processes import is_thread_group_leader

            for pid in range(previous + 1, last + 1):
                try:
                    inode = os.stat(f"{root}/{pid}").st_ino
                except OSError:
                    continue  # exited already, or never a process of ours to see
                if is_thread_group_leader(root, pid):
                    pending[pid] = inode
        else:
            try:
                listing = {int(e.name): e.inode() for e in os.scandir(root) if e.name.isdigit()}
            except OSError:
                return []  # the identity collector's own reads say what is wrong with /proc
            self._listed_at = now
            for pid in [p for p in seen if p not in listing]:
                del seen[pid]
                self._recheck.pop(pid, None)
            for pid in [p for p in pending if p not in listing]:
                del pending[pid]
            pending.update((pid, inode) for pid, inode in listing.items() if seen.get(pid) != inode)
        due = [pid for pid, (at, _) in self._recheck.items() if at <= now and pid not in pending]
        out = []
        budget = LAUNCHER_READS
        for pid in [*sorted(pending), *due]:  # the rest wait for the next tick
            if budget <= 0:
                break
            if pid in pending:  # new (or a new process under a reused pid)
                inode, looks = pending.pop(pid), 0
                self._recheck.pop(pid, None)
            else:
                inode, looks = seen.get(pid, -1), self._recheck.pop(pid)[1]
            seen[pid] = inode
            budget -= 1
            self.reads += 1
            try:
                argv = procfs.read_pid_cmdline(root, pid, limit=CMDLINE_BYTES)
            except (procfs.ProcessGone, OSError, ValueError):
                seen.pop(pid, None)
                continue
            if argv and parse_launcher(argv) is not None:
                out.append(pid)
            elif argv is not None and looks < LAUNCHER_RECHECKS and self._scanned and allowed is None:
                # what the first listing found is past its fork and exec; a newcomer is looked at again next tick
                self._recheck[pid] = (now, looks + 1)
        self._scanned = True
        return out

    def forget(self, pid: int) -> None:
        """Look at ``pid`` again at the next listing (a launcher over LAUNCHERS_WITHOUT_GPU)."""
        self._seen.pop(pid, None)

    _scanned = False  # the first listing is done: what it found is old, past its fork and exec


# ---------------------------------------------------------------------------------------- collector
@dataclass(frozen=True, slots=True)
class _Slot:
    """Where a GPU process goes among the tick's identities, worked out once per process: its group's key and
    what it tells the group (what the tick's loop sets on that group for each of its processes)."""

    kind: str
    key: str
    name: str = ""  # container / unit / launcher name ("" : none to set)
    namespace: str = ""  # pods: namespace and pod from the container's on-disk state ("" : unnamed)
    pod: str = ""
    container: str = ""  # Kubernetes container name
    pod_uid: str = ""
    job_id: str = ""
    cgroup: str = ""  # the identity's own cgroup (not for a launcher of its own)
    group: tuple[str, str] = field(init=False, default=("", ""))  # (kind, key): the tick's groups are keyed so

    def __post_init__(self) -> None:
        object.__setattr__(self, "group", (self.kind, self.key))


@dataclass(slots=True)
class _Pid:
    inode: int  # /proc/PID's inode (-1: watched through ``pidfd`` instead)
    identity: CgroupIdentity | None
    launcher_pid: int = 0  # the outermost launcher among the process and its ancestors (0: none)
    launcher: Launcher | None = None
    pidfd: int = -1  # a pidfd of the process (live procfs): readable once it exits, so a reused pid is seen
    slot: _Slot | None = None  # None: not an automatic workload's process


@dataclass(frozen=True, slots=True)
class _Addition:
    """What a source other than the GPU processes adds to an identity: the kubelet (a pod's name, containers
    and devices), a job mapping file (a job's GPUs), the launcher names made unique (a name)."""

    pod: tuple[str, str] | None = None  # (namespace, name) to set
    containers: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    job_id: str = ""
    name: str = ""


def _added(g: _Group | None, key: tuple[str, str], add: _Addition) -> _Group:
    """A copy of ``g`` (a new group when None) with what a source adds to it."""
    if g is None:
        g = _Group(key[0], key[1], pids=[], gpus={}, containers={})
    else:
        g = _Group(g.kind, g.key, g.name, g.pids, dict(g.gpus or {}), g.namespace, g.pod, dict(g.containers or {}),
                   g.pod_uid, g.job_id, g.cgroup, g.launcher_pid, g.launcher)
    if add.pod:
        g.namespace, g.pod = add.pod
    g.containers.update(dict.fromkeys(add.containers))  # type: ignore[union-attr]
    g.gpus.update(dict.fromkeys(add.gpus))  # type: ignore[union-attr]
    if add.job_id:
        g.job_id = add.job_id
    if add.name:
        g.name = add.name
    return g


@dataclass(slots=True)
class _Group:
    kind: str
    key: str
    name: str = ""
    pids: list[int] | None = None
    gpus: dict[str, None] | None = None
    namespace: str = ""
    pod: str = ""
    containers: dict[str, None] | None = None
    pod_uid: str = ""
    job_id: str = ""
    cgroup: str = ""
    launcher_pid: int = 0
    launcher: Launcher | None = None


_CGROUP = operator.attrgetter("cgroup")


def _auto_setting(value: Any) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_AUTO
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value)]
    return tuple(v for v in items if v)


@register
class IdentityCollector(Collector):
    name = "identity"
    default_enabled = True
    description = "Automatic workloads: the pods, Slurm jobs, containers, units and launchers that hold a GPU"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        s = ctx.settings
        self.auto = frozenset(_auto_setting(s.get("auto")))
        unknown = self.auto - set(KINDS)
        if unknown:
            from headroom.sources import CollectorError

            raise CollectorError(f"workloads.auto: unknown kind(s) {', '.join(sorted(unknown))}; "
                                 f"choose from {', '.join(KINDS)}")
        self.kubernetes = bool(s.get("kubernetes", False))
        self.max_workloads = int(s.get("max_workloads") or DEFAULT_MAX_WORKLOADS)
        mapping = s.get("hpc_job_mapping_dir")
        self.mapping_dir = Path(mapping) if mapping else None  # as given, like the socket (not under --path.rootfs)
        self._mapping_error: str | None = None
        self._mapping_reader: JobMappingReader | None = None
        self._mapping_refused: tuple[str, ...] = ()
        self._sysfs = str(ctx.paths.sysfs)  # the cgroup directories' owners: who made a cgroup a job or pod is in
        self.poller = None
        if self.kubernetes:
            from headroom.sources.kubelet import DEFAULT_SOCKET, PodResourcesPoller

            socket = s.get("pod_resources_socket") or DEFAULT_SOCKET
            self.poller = PodResourcesPoller(str(socket), timeout=float(s.get("pod_resources_timeout") or 2.0),
                                             refresh=float(s.get("pod_resources_refresh") or 5.0))
        self._pids: dict[int, _Pid] = {}
        self._meta: dict[str, ContainerMeta | None] = {}  # container ID -> names, while a GPU process of it lives
        self._containers: dict[str, int] = {}  # container ID -> its GPU processes known
        self._refused: set[tuple[str, str]] = set()
        self.dropped_total = 0
        # exported identity -> (its IdentityGroup, the name it is shown by, None when a declared profile takes its
        # place), the shown names (-> identities shown by it) and their kinds: to log arrivals and departures
        self._shown: dict[tuple[str, str], tuple[IdentityGroup, str | None]] = {}
        self._shown_names: dict[str, int] = {}
        self._kinds: dict[str, str] = {}
        self._claims: tuple[frozenset[int], frozenset[str]] | None = None
        self._exported: set[tuple[str, str]] = set()  # (kind, key) exported last tick: the cap keeps them
        self._dirs: dict[str, _CgroupDir] = {}  # identity cgroup -> its v2 directory, while the identity lives
        # cgroup files kept open only on the live kernel's trees (in a fixture a replaced file would be read
        # through its old descriptor: procfs.ProcFile's rule)
        self._keep_cgroup_files = procfs.is_live_procfs(ctx.paths.procfs)
        self._dirs_seen: set[str] = set()
        self._open_dirs = 0  # of _dirs, those whose files are kept open
        self._unified = 0  # 1: the last identity's cgroup was under fs/cgroup/unified (a hybrid host): look there first
        self._tick = 0  # ticks so far: when each identity's cgroup files were last read (_CgroupDir.read_at)
        # each identity's cgroup files are read again within this many ticks (CGROUP_REFRESH_SECONDS)
        self.refresh_ticks = max(1, int(CGROUP_REFRESH_SECONDS / ctx.interval)) if ctx.interval > 0 else 1
        # each exported identity's IdentityGroup and what it was made from; the IdentityGroups alone
        self._built: dict[tuple[str, str], tuple[tuple[Any, ...], IdentityGroup]] = {}
        self._made: dict[tuple[str, str], IdentityGroup] = {}
        # GPU processes watched through pidfds (live procfs of our own pid namespace): one poll per tick says
        # which exited, instead of a stat of /proc/PID per process per tick
        self._watch = select.poll() if self._keep_cgroup_files and hasattr(os, "pidfd_open") else None
        self._by_fd: dict[int, int] = {}  # pidfd -> pid
        self._watched: set[int] = set()  # the pids watched so
        self._touched: set[int] = set()  # pids read or forgotten since the groups were last brought up to date
        self._unassembled: set[tuple[str, str]] = set()  # groups whose parts changed, until _assemble has run
        self._last_gpu: dict[int, tuple[str, ...]] = {}  # the GPU processes of the last tick (pid -> GPU UUIDs)
        self._members: dict[tuple[str, str], set[int]] = {}  # group -> its GPU processes
        self._member_of: dict[int, tuple[str, str]] = {}
        self._parts: dict[tuple[str, str], _Group] = {}  # groups as their GPU processes make them
        self._groups: dict[tuple[str, str], _Group] = {}  # the groups with what sources add (_assemble)
        self._last_additions: list[dict[tuple[str, str], _Addition]] = []
        self._unique: tuple[int, dict[tuple[str, str], _Addition]] = (-1, {})
        self._parts_version = 0  # bumped when _parts change
        self._launcher_keys: set[tuple[str, str]] = set()  # of _parts, the launchers'
        # the pods' names as their processes give them (_pod_named), for what the kubelet adds (_kubelet)
        self._by_name: dict[tuple[str, str], tuple[str, str]] = {}
        self._ref_keys: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._part_ref: dict[tuple[str, str], tuple[str, str]] = {}
        self._unnamed: dict[tuple[str, str], None] = {}
        self._renamed: set[tuple[str, str]] = set()
        # the kubelet's additions (its answer's pods by group): (the answer's pods, additions, pod -> group key)
        self._kube: tuple[Any, dict[tuple[str, str], _Addition], dict[tuple[str, str], tuple[str, str]]] | None = None
        # live ancestors of GPU processes (a launcher, a shell, a container's shim) as the launcher search read
        # them, watched through pidfds like the GPU processes: pid -> (pidfd, launcher, parent pid); least
        # recently used first. A torchrun's or a vLLM server's workers, and the pods of one parent, read their
        # common ancestors once
        self._ancestors: dict[int, tuple[int, Launcher | None, int]] = {}
        self._ancestor_fds: dict[int, int] = {}  # pidfd -> pid
        self._unknown: dict[str, tuple[str, ...]] = {}  # source -> unknown devices last logged
        self._hidden: dict[tuple[str, str], str] = {}  # pod groups the kubelet's answer does not confirm -> why
        # (answer, known devices, the DRA driver's names of them, what _kubelet read from it)
        self._kubelet_view: tuple[Any, Any, Any, Any] | None = None
        self._models: dict[tuple[int, str], ModelInfo] = {}  # (launcher pid, model) -> its config, while it lives
        # config.json and safetensors headers are read off the tick, in a daemon thread (a big checkpoint has
        # hundreds of shards; a hostile file can be slow): the tick never waits for model files (_ModelReader)
        self._reader: _ModelReader | None = None
        # launchers holding no GPU (CPU serving, a model still loading): found among new processes, followed like GPU
        # processes (pid -> None, at most LAUNCHERS_WITHOUT_GPU), with "launchers" on
        self._scan = _LauncherScan(ctx.paths.procfs, procfs.is_live_procfs(ctx.paths.procfs)) \
            if "launchers" in self.auto else None
        self._without_gpu: dict[int, None] = {}
        self._over_cap = False  # LAUNCHERS_WITHOUT_GPU reached: logged once

    def close(self) -> None:
        for d in self._dirs.values():
            d.close()
        self._dirs.clear()
        self._open_dirs = 0
        for pid in list(self._pids):
            self._forget(pid)
        for pid in list(self._ancestors):
            self._drop_ancestor(pid)
        if self.poller is not None:
            self.poller.close()
        if self._reader is not None:
            self._reader.close()

    def _model(self, pid: int, model: str) -> ModelInfo:
        """The launcher's model config once read; while it is being read, a ModelInfo saying so."""
        key = (pid, model)
        known = self._models.get(key)
        if known is not None:
            return known
        if self._reader is None:
            self._reader = _ModelReader()
        if not self._reader.queued(key):
            # its credentials and start time now, the tick its command line was read: a setuid exec later
            # does not lend the launcher root's permissions
            who = process_identity(self.ctx.paths.procfs, pid)
            if isinstance(who, str):
                self._models[key] = ModelInfo(error=who)
                return self._models[key]
            self._reader.submit(key, self.ctx.paths.procfs, pid, model, who)
        info = self._reader.result(key)
        if info is None:
            return ModelInfo(error=self._reader.waiting(key))
        self._models[key] = info
        return info

    # -- inputs
    def _gpu_processes(self, previous: Any) -> tuple[dict[int, tuple[str, ...]], NvmlSample | None]:
        """(pid -> the UUIDs of the GPUs NVML listed it on in ``previous``, its NVML sample)."""
        nvml = previous.data("nvml") if previous is not None else None
        if not isinstance(nvml, NvmlSample):
            return {}, None
        out: dict[int, tuple[str, ...]] = {}
        for g in nvml.gpus:
            uuid = (g.uuid,)
            for p in g.processes:
                out[p.pid] = out[p.pid] + uuid if p.pid in out else uuid
        return out, nvml

    def _forget(self, pid: int) -> None:
        known = self._pids.pop(pid, None)
        if known is not None:
            self._touched.add(pid)
            cid = known.identity.container_id if known.identity is not None and not known.identity.delegated else ""
            if cid and self._containers.get(cid, 0) <= 1:  # its container's last GPU process: its names go
                self._containers.pop(cid, None)
                self._meta.pop(cid, None)
            elif cid:
                self._containers[cid] -= 1
        if known is not None and known.pidfd >= 0:
            self._by_fd.pop(known.pidfd, None)
            self._watched.discard(pid)
            assert self._watch is not None
            self._watch.unregister(known.pidfd)
            os.close(known.pidfd)

    def _exited(self) -> None:
        """Forget the watched processes that exited since the last tick (their pidfds are readable)."""
        if self._by_fd or self._ancestor_fds:
            for fd, _ in self._watch.poll(0):  # type: ignore[union-attr]
                pid = self._by_fd.get(fd)
                if pid is not None:
                    self._forget(pid)
                    self._without_gpu.pop(pid, None)  # ended
                    continue
                pid = self._ancestor_fds.get(fd)
                if pid is not None:
                    self._drop_ancestor(pid)
                    for child in [c for c, (_, _, parent) in self._ancestors.items() if parent == pid]:
                        self._drop_ancestor(child)  # reparented: its parent is read again when asked

    def _drop_ancestor(self, pid: int) -> None:
        fd = self._ancestors.pop(pid)[0]
        del self._ancestor_fds[fd]
        self._watch.unregister(fd)  # type: ignore[union-attr]
        os.close(fd)

    def _ancestor(self, pid: int) -> tuple[Launcher | None, int] | None:
        """``launcher_step`` of a GPU process's ancestor, read once while it lives (a live procfs)."""
        known = self._ancestors.get(pid)
        if known is not None:
            self._ancestors[pid] = self._ancestors.pop(pid)  # most recently used
            return known[1], known[2]
        root = self.ctx.paths.procfs
        fd = -1
        if self._watch is not None and len(self._by_fd) + len(self._ancestors) < WATCHED_PIDS:
            try:
                fd = os.pidfd_open(pid)  # before the reads: what they read is this process's if it still runs
            except OSError:
                fd = -1
        got = launcher_step(root, pid)
        if fd < 0:
            return got
        if got is None or select.select((fd,), (), (), 0)[0]:
            os.close(fd)
            return got
        if len(self._ancestors) >= ANCESTORS:
            self._drop_ancestor(next(iter(self._ancestors)))
        self._ancestors[pid] = (fd, got[0], got[1])
        self._ancestor_fds[fd] = pid
        self._watch.register(fd, select.POLLIN)  # type: ignore[union-attr]
        return got

    def _known(self, pid: int) -> _Pid | None:
        """The process's identity (read when it is new to the collector); None when it is gone."""
        known = self._pids.get(pid)
        if known is not None and known.pidfd >= 0:
            return known  # alive: its pidfd was not readable at this tick's poll
        root = self.ctx.paths.procfs
        pidfd = -1
        if known is None and self._watch is not None and len(self._by_fd) + len(self._ancestors) < WATCHED_PIDS:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._without_gpu.pop(pid, None)
                return None
            except OSError:
                pass  # not a thread group leader, out of descriptors, or no pidfds here: its inode is checked
            # (one that exited already, a zombie, is read and included, as /proc/PID still shows it: the next
            # tick's poll says it exited)
        inode = -1
        if pidfd < 0:
            try:
                inode = os.stat(f"{root}/{pid}").st_ino  # a string: a Path per GPU process per tick costs more
            except OSError:
                self._forget(pid)
                self._without_gpu.pop(pid, None)
                return None
            if known is not None and known.inode == inode:
                return known
            self._forget(pid)
        known = self._pids[pid] = self._read(pid, inode, pidfd)
        self._touched.add(pid)
        if pidfd >= 0:
            self._by_fd[pidfd] = pid
            self._watched.add(pid)
            self._watch.register(pidfd, select.POLLIN)  # type: ignore[union-attr]
        return known

    def _read(self, pid: int, inode: int, pidfd: int) -> _Pid:
        """A new GPU process: its cgroup identity, launcher and place among the identities, read once."""
        root = self.ctx.paths.procfs
        try:
            groups = procfs.read_pid_cgroup(root, pid)
        except (procfs.ProcessGone, OSError, ValueError):
            groups = None
        ident, why = classify(groups, self._sysfs) if groups is not None else (None, "")
        if ident is not None and not ident.cgroup and groups is not None:  # named by a v1 path: its place there
            ident = replace(ident, cgroup=v1_identity_cgroup(groups, ident))
        if why:  # another user's cgroup names are hers to choose: what she named is not taken, and said so once
            log.debug("identity_not_taken", pid=pid, reason=why)
        if ident is not None and ident.container_id and not ident.delegated:
            self._containers[ident.container_id] = self._containers.get(ident.container_id, 0) + 1
        launcher_pid, launcher = find_launcher(root, pid, lambda p: launcher_step(root, p) if p == pid
                                               else self._ancestor(p))
        if launcher is not None and launcher.runtime == "ollama" and launcher.metrics_url:
            launcher = ollama_endpoint(root, launcher_pid, launcher)
        if launcher is not None and launcher.metrics_url and not same_network_namespace(root, launcher_pid):
            # its --host/--port are in a pod's or container's network: 127.0.0.1 here is another host's
            launcher = replace(launcher, metrics_url="", problems=(
                *launcher.problems, "its /metrics is in another network namespace (a pod or container) or one "
                "headroom cannot see: not scraped; a profile with endpoint: reads it"))
        if launcher is not None and launcher.metrics_url and not is_local_address(launcher.metrics_url):
            # a command line is anyone's to write: it must not point the agent's requests at other machines
            launcher = replace(launcher, metrics_url="", problems=(
                *launcher.problems, "its metrics address is not one of this host's: not scraped; a profile with "
                "endpoint: reads it"))
        return _Pid(inode, ident, launcher_pid, launcher, pidfd, self._slot(ident, launcher_pid, launcher))

    def _slot(self, ident: CgroupIdentity | None, launcher_pid: int, launcher: Launcher | None) -> _Slot | None:
        """The automatic workload a process with this identity and launcher belongs to (None: none)."""
        meta = self._container_meta(ident) if ident is not None else None
        if ident is None:
            pass
        elif ident.kind == "pod" and self.kubernetes and "pods" in self.auto:
            # the runtime's record names this container's pod: taken when it is this pod (its UID, where recorded)
            named = meta is not None and bool(meta.pod) and meta.pod_uid in ("", ident.pod_uid)
            return _Slot("pod", ident.pod_uid, pod_uid=ident.pod_uid, namespace=meta.namespace if named else "",
                         pod=meta.pod if named else "", container=meta.container if named else "",
                         cgroup=ident.cgroup)
        elif ident.kind == "job" and "jobs" in self.auto:
            return _Slot("job", ident.job_id, job_id=ident.job_id, cgroup=ident.cgroup)
        elif ident.kind == "container" and "containers" in self.auto:
            if ident.delegated:  # a user's own (rootless Podman): apart from the system's, whatever its ID
                return _Slot("container", f"{ident.delegated}/{ident.container_id}", cgroup=ident.cgroup,
                             name=f"{ident.delegated}/{ident.container_id[:12]}")
            return _Slot("container", ident.container_id, cgroup=ident.cgroup,
                         name=(meta.name if meta is not None else "") or ident.container_id[:12])
        elif ident.kind == "unit" and "units" in self.auto:
            name = f"{ident.delegated}/{ident.unit}" if ident.delegated else ident.unit
            return _Slot("unit", name, name=name, cgroup=ident.cgroup)
        if launcher is None or "launchers" not in self.auto:
            return None
        return _Slot("launcher", str(launcher_pid), name=display_name(launcher))  # outside a pod, job, container, unit

    def _container_meta(self, ident: CgroupIdentity) -> ContainerMeta | None:
        cid = ident.container_id
        if not cid or ident.delegated:  # the system runtimes' state does not describe a user's own containers
            return None
        if cid not in self._meta:
            self._meta[cid] = container_meta(self.ctx.paths.rootfs, cid, ident.runtime)
        return self._meta[cid]

    # -- launchers without a GPU
    def _find_launchers(self) -> None:
        """Follow the launchers the scan found since the last tick (up to LAUNCHERS_WITHOUT_GPU)."""
        assert self._scan is not None
        scenario = self.ctx.scenario
        allowed = None
        if scenario is not None:  # simulated: the scenario's stand-ins only, never a real process of the machine
            standins = getattr(scenario, "standin_pids", None)
            allowed = (standins() if standins is not None else None) or frozenset()
            # a stand-in named after a declared profile is that profile's process (as the processes collector
            # counts it): not an automatic workload beside it
            declared = {p.name for p in self.ctx.workloads}
            owner = getattr(scenario, "standin_workload", None)
            if declared and owner is not None:
                allowed = frozenset(pid for pid in allowed if owner(pid) not in declared)
        for pid in self._scan.found((self.ctx.monotonic or time.monotonic)(), allowed):
            if len(self._without_gpu) >= LAUNCHERS_WITHOUT_GPU:
                self._scan.forget(pid)  # found again at a later listing, when there is room
                if not self._over_cap:
                    self._over_cap = True
                    log.warning("launchers_without_gpu_over_cap", cap=LAUNCHERS_WITHOUT_GPU,
                                hint="more launchers that hold no GPU are not followed as workloads")
                continue
            self._without_gpu[pid] = None

    def _with_launchers_without_gpu(self, on_gpu: dict[int, tuple[str, ...]]) -> dict[int, tuple[str, ...]]:
        """``on_gpu`` with the launchers that hold no GPU, each as a process on no GPU, so that the tick makes it a
        workload as it does a GPU process (its cgroup identity, its launcher, its group) and it leaves within a
        tick of its end (its pidfd). Not while one of its GPU processes runs (that process's group is its
        workload), nor one that is not the outermost launcher it was found as (a forked worker with its server's
        command line belongs to the server; it is forgotten for good: the scan does not answer it again)."""
        known = self._pids
        covered = {k.launcher_pid for pid in on_gpu if (k := known.get(pid)) is not None and k.launcher is not None}
        out = on_gpu
        for pid in list(self._without_gpu):
            if pid in on_gpu:
                continue
            if pid in covered:
                if pid in known:
                    self._forget(pid)  # followed again when its GPU processes end
                continue
            k = self._known(pid)
            if k is None or k.launcher is None or k.launcher_pid != pid:
                self._without_gpu.pop(pid, None)
                if k is not None:
                    self._forget(pid)
                continue
            if out is on_gpu:
                out = dict(on_gpu)
            out[pid] = ()
        return out

    # -- the tick
    def collect(self) -> IdentitySample:
        """This tick's identities. Work follows what changed: a GPU process is read when it is new, the groups of
        the processes that came, went or moved are rebuilt (``_parts``), what the kubelet and the job mapping
        add is merged again only into the groups it or they changed (``_groups``), and an identity whose inputs
        are all unchanged is last tick's IdentityGroup (``_built``)."""
        previous = self.ctx.previous() if self.ctx.previous is not None else None
        on_gpu, nvml = self._gpu_processes(previous)
        self._tick += 1
        pids = self._pids
        self._exited()
        if self._scan is not None:
            self._find_launchers()
        for pid in pids.keys() - on_gpu.keys() - self._without_gpu.keys():
            self._forget(pid)
        for pid in sorted(on_gpu.keys() - self._watched):  # new, or not watched: read, or its inode checked
            self._known(pid)
        if self._without_gpu:
            on_gpu = self._with_launchers_without_gpu(on_gpu)
        # the groups to make again: this tick's, and any a failed tick left (a fault must not leave stale groups)
        dirty = self._unassembled = self._update_parts(on_gpu) | self._unassembled
        self._touched.clear()

        sources, additions = [], []
        if self.poller is not None:
            source, adds, changed = self._kubelet(self._parts, nvml)
            sources.append(source)
            additions.append((adds, changed))
        if self.mapping_dir is not None:
            source, adds, changed = self._job_mapping(nvml)
            sources.append(source)
            additions.append((adds, changed))
        additions.append((self._launcher_names(), None))
        groups = self._assemble(dirty, additions)
        self._unassembled = set()
        if self._hidden:  # pods the kubelet does not list: not exported (the kubelet's source says why)
            hidden = self._hidden
            groups = {k: g for k, g in groups.items() if k not in hidden}

        # the cap keeps what it exported before (its series go on), then takes newcomers by kind and key
        # (set operations and sorts, no Python loop over the identities: this runs every tick)
        was = self._exported
        ordered = sorted(groups.keys() & was)
        if len(ordered) < len(groups):
            ordered += sorted(groups.keys() - was)
        cap = self.max_workloads
        chosen = list(map(groups.__getitem__, ordered[:cap]))
        for key in ordered[cap:]:
            if key not in self._refused:
                self._refused.add(key)
                self.dropped_total += 1
                if self.dropped_total == 1 or self.dropped_total % 100 == 0:
                    log.warning("workload_identities_dropped", cap=self.max_workloads, dropped_total=self.dropped_total)
        self._exported = set(ordered[:cap])
        if self._refused:
            self._refused = {k for k in self._refused if k in groups}
        refreshed = self._read_cgroups(list(filter(None, map(_CGROUP, chosen))))
        # an identity is made again only when its group, its cgroup figures or its model changed (or it is new)
        built = self._built
        claimed, declared = _declared_claims(previous, self.ctx.workloads)
        again = (claimed, declared) != self._claims
        self._claims = (claimed, declared)
        made = []
        exported = self._exported
        todo = dirty.union(exported - built.keys(), self._launcher_keys, *(self._dirs[p].owners for p in refreshed))
        for key in todo:
            if key in exported:
                group = self._finish(groups[key], built)
                if again or group is not self._shown.get(key, (None,))[0]:
                    made.append(key)
        gone = built.keys() - exported
        for key in gone:
            del built[key]
            del self._made[key]
        out = list(map(self._made.__getitem__, ordered[:cap]))
        if len(self._dirs) != len(self._dirs_seen):
            for path in [p for p in self._dirs if p not in self._dirs_seen]:
                directory = self._dirs.pop(path)
                self._open_dirs -= bool(directory.fds)
                directory.close()
        if self._models or self._reader is not None:
            live_models = {(g.launcher_pid, g.launcher.model) for g in groups.values() if g.launcher is not None}
            for key in [k for k in self._models if k not in live_models]:
                del self._models[key]
            if self._reader is not None:
                self._reader.forget(live_models)
        # logged as attribution will show them: a declared profile that has these processes takes their place
        self._show(made if not again else list(built), gone, claimed, declared)
        return IdentitySample(groups=tuple(out), sources=tuple(sources), dropped_total=self.dropped_total,
                              max_groups=self.max_workloads)

    def _show(self, made: list[tuple[str, str]], gone: set[tuple[str, str]], claimed: frozenset[int],
              declared: frozenset[str]) -> None:
        """Log the automatic workloads that appear and end, by name, as attribution will show them (a declared
        profile that has a group's processes, or its name, takes its place): ``made``: the identities made
        this tick, ``gone``: those no longer exported."""
        shown, count = self._shown, self._shown_names
        for key in [*made, *gone]:
            before = shown.pop(key, (None, None))[1]
            entry = self._built.get(key)
            now = None
            if entry is not None:
                g = entry[1]
                now = None if claimed_by_declared(g, claimed, declared) else g.name
                shown[key] = (g, now)
                if now is not None:
                    count[now] = count.get(now, 0) + 1
                    if count[now] == 1:
                        log.info("auto_workload_found", workload=now, kind=g.kind)
            if before is not None:
                count[before] -= 1
                if not count[before]:
                    del count[before]
                    log.info("auto_workload_gone", workload=before, kind=self._kinds.pop(before, ""))
            if now is not None:
                self._kinds.setdefault(now, entry[1].kind)  # type: ignore[index]

    def _update_parts(self, on_gpu: dict[int, tuple[str, ...]]) -> set[tuple[str, str]]:
        """Rebuild the groups (``_parts``: each identity's GPU processes and what they say about it) of the GPU
        processes that came, went, were read again or moved to other GPUs since the last tick; returns their
        keys."""
        last = self._last_gpu
        self._renamed.clear()
        if on_gpu == last and not self._touched:
            return set()
        touched = self._touched
        touched.update(pid for pid, _ in on_gpu.items() ^ last.items())  # came, went or moved
        self._last_gpu = on_gpu
        dirty = set()
        members, member_of = self._members, self._member_of
        for pid in touched:
            old = member_of.pop(pid, None)
            if old is not None:
                members[old].discard(pid)
                dirty.add(old)
            known = self._pids.get(pid)
            if known is not None and known.slot is not None and pid in on_gpu:
                key = member_of[pid] = known.slot.group
                members.setdefault(key, set()).add(pid)
                dirty.add(key)
        self._parts_version += 1
        for key in dirty:
            if members.get(key):
                part = self._parts[key] = self._part(sorted(members[key]), on_gpu)
                if key[0] == "launcher":
                    self._launcher_keys.add(key)
            else:
                members.pop(key, None)
                self._parts.pop(key, None)
                self._launcher_keys.discard(key)
                part = None
            if key[0] == "pod":
                self._pod_named(key, part)
        return dirty

    def _pod_named(self, key: tuple[str, str], part: _Group | None) -> None:
        """Keep ``_by_name`` ((namespace, pod) -> the group of that pod's processes; of two, the first key) and
        ``_unnamed`` (pod groups whose processes gave no names) as the pod group ``key`` now is; the names
        whose group changed are noted in ``_renamed`` for the kubelet's additions."""
        ref = (part.namespace, part.pod) if part is not None and part.pod else None
        old = self._part_ref.get(key)
        self._unnamed.pop(key, None)
        if part is not None and ref is None:
            self._unnamed[key] = None
        if old == ref:
            return
        for name, add in ((old, False), (ref, True)):
            if name is None:
                continue
            keys = self._ref_keys.setdefault(name, set())
            if add:
                keys.add(key)
                self._part_ref[key] = name
            else:
                keys.discard(key)
                del self._part_ref[key]
            if keys:
                self._by_name[name] = min(keys)
            else:
                del self._ref_keys[name]
                self._by_name.pop(name, None)
            self._renamed.add(name)

    def _part(self, pids: list[int], on_gpu: dict[int, tuple[str, ...]]) -> _Group:
        """A group from its GPU processes (ascending pids): the first one's slot, then what the others add."""
        g: _Group | None = None
        for pid in pids:
            known = self._pids[pid]
            slot = known.slot
            assert slot is not None
            if g is None:
                g = _Group(slot.kind, slot.key, slot.name, [pid], dict.fromkeys(on_gpu[pid]), slot.namespace, slot.pod,
                           {slot.container: None} if slot.container else {}, slot.pod_uid, slot.job_id, slot.cgroup,
                           known.launcher_pid if known.launcher is not None else 0, known.launcher)
                continue
            if slot.pod:
                g.namespace, g.pod = slot.namespace, slot.pod
            if slot.container:
                g.containers[slot.container] = None  # type: ignore[index]
            if slot.name:
                g.name = slot.name
            if slot.cgroup and not g.cgroup:
                g.cgroup = slot.cgroup
            if known.launcher is not None and g.launcher is None:
                g.launcher, g.launcher_pid = known.launcher, known.launcher_pid
            g.pids.append(pid)  # type: ignore[union-attr]
            g.gpus.update(dict.fromkeys(on_gpu[pid]))  # type: ignore[union-attr]
        assert g is not None
        return g

    def _assemble(self, dirty: set[tuple[str, str]],
                  additions: list[tuple[dict[tuple[str, str], _Addition], set[tuple[str, str]] | None]]
                  ) -> dict[tuple[str, str], _Group]:
        """This tick's groups (``_groups``, kept from tick to tick): each group of GPU processes with what the
        sources add to it (the kubelet, a job mapping, launcher names), and the groups only a source knows.
        Made again only for the groups whose processes (``dirty``, which this extends) or additions changed
        since the last tick (as a source says, or found by comparing its additions with its last ones)."""
        groups, last = self._groups, self._last_additions
        if len(last) != len(additions):
            dirty.update(groups, self._parts, *(adds for adds, _ in additions))
        else:
            for (new, changed), old in zip(additions, last, strict=True):
                if changed is not None:
                    dirty.update(changed)
                elif new is not old and new != old:
                    dirty.update(k for k, a in new.items() if old.get(k) != a)
                    dirty.update(k for k in old if k not in new)
        for key in dirty:
            g = self._parts.get(key)
            for adds, _ in additions:
                add = adds.get(key)
                if add is not None:
                    g = _added(g, key, add)
            if g is None:
                groups.pop(key, None)
            else:
                groups[key] = g
        self._last_additions = [adds for adds, _ in additions]
        return groups

    def _launcher_names(self) -> dict[tuple[str, str], _Addition]:
        """Launcher groups' names made unique (``_unique_names``), worked out again when the groups changed."""
        cached = self._unique
        if cached[0] != self._parts_version:
            names = _unique_names({k: self._parts[k] for k in self._launcher_keys}) if self._launcher_keys else {}
            cached = self._unique = (self._parts_version, names if names or cached[1] else cached[1])
        return cached[1]

    def _finish(self, g: _Group, built: dict[tuple[str, str], tuple[tuple[Any, ...], IdentityGroup]]
                ) -> IdentityGroup:
        """The group's IdentityGroup: last tick's object when nothing in it changed (most of a tick's pods),
        so an unchanged identity costs a comparison and is kept once in the window."""
        stats = processes = None
        members: tuple[int, ...] = (g.launcher_pid,) if g.kind == "launcher" and g.launcher_pid else ()
        if g.cgroup:
            directory = self._dirs.get(g.cgroup)
            if directory is not None:
                stats, processes, members = directory.stats, directory.processes, directory.members
                directory.owners.add((g.kind, g.key))
        model = None
        if g.launcher is not None and g.launcher.model:
            model = self._model(g.launcher_pid, g.launcher.model)
        key = (g.kind, g.key)
        last = self._built.get(key)
        if last is not None and last[0][0] is g and last[0][1] is stats and last[0][2] == processes \
                and last[0][3] == model and last[0][4] == members:
            return last[1]
        if g.kind == "pod":
            name = f"{g.namespace}/{g.pod}" if g.pod else g.pod_uid
        elif g.kind == "job":
            name = f"job_{g.job_id}"
        else:
            name = g.name or g.key
        group = IdentityGroup(kind=g.kind, name=name, pids=tuple(g.pids or ()), gpus=tuple(g.gpus or ()),
                              namespace=g.namespace, pod=g.pod, container=",".join(g.containers or ()),
                              pod_uid=g.pod_uid, job_id=g.job_id, cgroup=stats, processes=processes,
                              launcher=g.launcher, model=model, members=members)
        if last is not None:
            group = share_unchanged(group, last[1])  # a group made again (its pod renamed by the kubelet...)
        built[key] = ((g, stats, processes, model, members), group)
        self._made[key] = group
        return group

    def _read_cgroups(self, paths: list[str]) -> set[str]:
        """Read the cgroup files (and list the member processes) of this tick's identities: a new identity's at
        once, then the ones read longest ago, CGROUP_EVERY_TICK of them per tick or more, as many as it takes to
        read each identity's
        again within CGROUP_REFRESH_SECONDS of ticks (``refresh_ticks``): all of them every tick while there are
        no more than CGROUP_EVERY_TICK; with 50 pods, 5 a tick and each every 10 ticks. Directories are looked
        up and their files opened once (kept while the identity lives); ``_dirs`` is kept in the order they
        were last read. Returns the cgroups whose figures changed."""
        dirs, tick = self._dirs, self._tick
        seen = self._dirs_seen = set(paths)
        refreshed = set()
        for path in sorted(seen - dirs.keys()):  # new identities
            directory = self._open_cgroup(path)
            if directory is not None:
                directory.refresh(tick)
                refreshed.add(path)
        budget = max(CGROUP_EVERY_TICK, -(-len(seen) // self.refresh_ticks))
        for path in list(dirs):
            if budget <= 0:
                break
            directory = dirs[path]
            if directory.read_at == tick or path not in seen:
                continue
            if directory.refresh(tick):
                refreshed.add(path)
            dirs[path] = dirs.pop(path)  # to the end: read most recently
            budget -= 1
        return refreshed

    def _open_cgroup(self, path: str) -> _CgroupDir | None:
        """The identity cgroup ``path``'s directory: a cgroup v2 path (``/kubepods.slice/...``), or a v1 one as
        ``CONTROLLER:PATH`` (``v1_identity_cgroup``: its members listed there, its figures read from the
        _V1_FILES hierarchies at the same path); None when it does not exist."""
        keep_open = self._keep_cgroup_files and self._open_dirs < OPEN_CGROUP_DIRS
        if not path.startswith("/"):
            controller, _, rel = path.partition(":")
            base = f"{self.ctx.paths.sysfs}/fs/cgroup"
            where = f"{base}/{controller.removeprefix('name=')}{rel}".rstrip("/")
            if not os.path.isdir(where):
                return None
            files = {name: f"{base}/{hierarchy}{rel}/{name}" for name, hierarchy in _V1_FILES.items()}
            directory = self._dirs[path] = _CgroupDir.open(where, keep_open, rel, files)
            self._open_dirs += bool(directory.fds)
            return directory
        if keep_open:  # the files opened where the last identity's were, without looking first (a cgroup v2
            # directory always has cpu.stat); elsewhere looked up
            base = f"{self.ctx.paths.sysfs}/fs/cgroup/unified" if self._unified else f"{self.ctx.paths.sysfs}/fs/cgroup"
            directory = _CgroupDir.open(f"{base}/{path.lstrip('/')}".rstrip("/"), True, path,
                                        v1_base=f"{self.ctx.paths.sysfs}/fs/cgroup" if self._unified else "")
            if directory.fds:
                self._dirs[path] = directory
                self._open_dirs += 1
                return directory
        found = _cgroup_dir(str(self.ctx.paths.sysfs), path, self._unified)
        if found is None:
            return None
        self._unified = int(found.startswith(f"{self.ctx.paths.sysfs}/fs/cgroup/unified/"))
        directory = self._dirs[path] = _CgroupDir.open(
            found, keep_open, path, v1_base=f"{self.ctx.paths.sysfs}/fs/cgroup" if self._unified else "")
        self._open_dirs += bool(directory.fds)
        return directory

    def _kubelet(self, groups: dict[tuple[str, str], _Group], nvml: NvmlSample | None
                 ) -> tuple[IdentitySource, dict[tuple[str, str], _Addition], set[tuple[str, str]] | None]:
        """The kubelet's source state, and what its newest answer adds to the groups: each pod's name (for a pod
        UID without on-disk names: the only pod the kubelet gave the GPUs its processes use), containers and
        devices; a pod with a GPU but no process on it yet is a group of its own. Third: the groups whose
        additions changed since the last tick (None: compare them all)."""
        from headroom.sources.kubelet import NVIDIA_DRA_DRIVER, device_uuid

        assert self.poller is not None
        self.poller.start()
        state = self.poller.state()
        if state.devices is None:
            self._hidden = {}
            return IdentitySource("kubelet", False, state.error), {}, None
        known = _known_devices(nvml)
        dra_names = _dra_names(nvml)
        view = self._kubelet_view
        if view is not None and view[0] is state.devices and view[1] == known and view[2] == dra_names:
            holders, pods, unknown = view[3]  # the same answer on the same GPUs: read once
        else:
            holders, containers, devices, unknown = {}, {}, {}, {}  # holders: GPU or MIG UUID -> pods (namespace, name)
            for c in state.devices:
                if c.claim is not None:  # a DRA claim's devices: only the NVIDIA DRA driver's are GPUs
                    if c.resource != NVIDIA_DRA_DRIVER:
                        continue
                elif not c.resource.startswith("nvidia.com/"):
                    continue
                for raw in c.device_ids:
                    if c.claim is None:
                        uuid, why = device_uuid(raw), None
                    else:
                        uuid, why = _dra_uuid(raw, dra_names)
                    if uuid is None or (known is not None and uuid not in known):
                        unknown[raw if c.claim is None else f"{raw} (claim {c.claim}: {why})"] = None
                        continue
                    holders.setdefault(_parent(uuid, nvml), set()).add((c.namespace, c.pod))
                    containers.setdefault((c.namespace, c.pod), {})[c.container] = None
                    devices.setdefault((c.namespace, c.pod), {})[uuid] = None
            pods = {ref: _Addition(ref, tuple(names), tuple(devices[ref])) for ref, names in containers.items()}
            self._kubelet_view = (state.devices, known, dra_names, (holders, pods, unknown))
        self._log_unknown("kubelet", tuple(unknown))
        source = IdentitySource("kubelet", state.error is None, state.error, unknown_devices=tuple(unknown))
        # up: the last call answered; after a failure the last answer is still used for a while (kubelet.py)
        if "pods" not in self.auto:
            self._hidden = {}
            return source, {}, None
        by_name, unnamed, cached = self._by_name, self._unnamed, self._kube
        if not unnamed and cached is not None and cached[0] is pods:
            # the same answer: only the pods whose groups came, went or were renamed this tick move
            out, ref_key = cached[1], cached[2]
            changed = set()
            for ref in self._renamed:
                add = pods.get(ref)
                if add is None:
                    continue
                key = by_name.get(ref) or ("pod", f"{ref[0]}/{ref[1]}")
                old = ref_key.get(ref)
                if old != key:
                    if old is not None and out.get(old) is add:
                        del out[old]
                        changed.add(old)
                    out[key], ref_key[ref] = add, key
                    changed.add(key)
            return self._kubelet_lists(source, state.pods, out), out, changed
        out, ref_key = {}, {}
        if unnamed:
            by_name = dict(by_name)  # the map kept from tick to tick stays as the groups' own names make it
        for key in sorted(unnamed, key=lambda k: groups[k].pids[0]):  # lowest pid first, as the groups were made
            g = groups[key]
            candidates = set.intersection(*[holders.get(u, set()) for u in g.gpus]) if g.gpus else set()
            candidates -= by_name.keys()
            if len(candidates) == 1:
                ref = next(iter(candidates))
                by_name[ref] = key
                if ref not in pods:
                    out[key] = _Addition(ref)
        for ref, add in pods.items():
            key = by_name.get(ref) or ("pod", f"{ref[0]}/{ref[1]}")
            out[key] = add
            ref_key[ref] = key
        self._kube = None if unnamed else (pods, out, ref_key)
        return self._kubelet_lists(source, state.pods, out), out, None

    def _kubelet_lists(self, source: IdentitySource, listed: frozenset[tuple[str, str]] | None,
                       out: dict[tuple[str, str], _Addition]) -> IdentitySource:
        """Cross-check the pods that cgroup paths name with the kubelet's answer: a pod UID is shown as a pod only
        when the kubelet lists that pod, by the name its runtime's record gives it, or, without one, as the only
        pod holding its GPUs (the answer has no UIDs). The others are not exported (``_hidden``; their processes
        belong to no automatic workload) and ``source.refused`` says why, one line each."""
        hidden: dict[tuple[str, str], str] = {}
        if listed is not None:
            for key in self._unnamed:
                add = out.get(key)
                if add is None or add.pod is None:
                    hidden[key] = (f"pod {key[1]}: no pod the kubelet lists holds its GPUs alone, and no runtime "
                                   "record names it: not shown as a pod")
            for ref, key in self._by_name.items():
                if ref not in listed and key[1] not in hidden:
                    hidden[key] = (f"pod {key[1]}: its runtime's record names it {ref[0]}/{ref[1]}, which the "
                                   "kubelet does not list: not shown as a pod")
        if hidden != self._hidden:
            if hidden:
                log.debug("identity_pods_not_listed", pods=sorted(k[1] for k in hidden),
                          hint="pod UIDs from cgroup paths that the kubelet's pod-resources answer does not confirm")
            self._hidden = hidden
        if not hidden:
            return source
        reasons = sorted(hidden.values())
        if len(reasons) > REFUSED_REASONS:
            reasons[REFUSED_REASONS - 1:] = [f"... and {len(reasons) - REFUSED_REASONS + 1} more"]
        return replace(source, refused=tuple(reasons))

    def _job_mapping(self, nvml: NvmlSample | None
                     ) -> tuple[IdentitySource, dict[tuple[str, str], _Addition], set[tuple[str, str]] | None]:
        assert self.mapping_dir is not None
        if self._mapping_reader is None:
            self._mapping_reader = JobMappingReader(self.mapping_dir)
        try:
            mapping, refused = self._mapping_reader.read(tuple(g.index for g in nvml.gpus) if nvml is not None else ())
        except OSError as exc:
            error = f"cannot read {self.mapping_dir}: {exc.strerror or exc}"
            if error != self._mapping_error:
                log.warning("hpc_job_mapping_unreadable", directory=str(self.mapping_dir), error=error)
            self._mapping_error = error
            return IdentitySource("hpc_job_mapping", False, error), {}, None
        self._mapping_error = None
        by_index = {g.index: g.uuid for g in nvml.gpus} if nvml is not None else {}
        unknown = []
        gpus: dict[str, dict[str, None]] = {}
        for index, jobs in sorted(mapping.items()):
            uuid = by_index.get(index)
            if uuid is None:
                if nvml is not None:
                    unknown.append(str(index))
                continue
            if "jobs" not in self.auto:
                continue
            for job in jobs:
                gpus.setdefault(job, {})[uuid] = None
        self._log_unknown("hpc_job_mapping", tuple(unknown))
        if refused != self._mapping_refused:
            if refused:
                log.warning("hpc_job_mapping_refused", directory=str(self.mapping_dir), refused=list(refused))
            self._mapping_refused = refused
        return (IdentitySource("hpc_job_mapping", True, None, unknown_devices=tuple(unknown), refused=refused),
                {("job", job): _Addition(gpus=tuple(uuids), job_id=job) for job, uuids in gpus.items()}, None)

    def _log_unknown(self, source: str, unknown: tuple[str, ...]) -> None:
        """Warn once per change about devices a source assigned that this host does not have."""
        if unknown != self._unknown.get(source, ()):
            if unknown:
                log.warning("identity_unknown_devices", source=source, devices=list(unknown),
                            hint="device IDs that match no GPU or MIG UUID (GPU index for job mapping files) here; "
                                 "a DRA claim's device says why")
            self._unknown[source] = unknown


class _ModelReader:
    """Reads launchers' model files one at a time, each in a daemon thread of its own, off the tick.

    A read has MODEL_READ_SECONDS (its Tree's deadline, checked between files, and this reader's, for a read
    stuck inside one system call: a hung NFS or FUSE mount). A read past its deadline is given up: its launcher
    gets a reason, the next read starts in a new thread, and the stuck thread is left to finish (a daemon: it
    cannot keep the agent from exiting). With STUCK_READERS stuck, no more are started until one returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: dict[tuple[int, str], tuple[Any, ...]] = {}  # waiting, in order
        self._results: dict[tuple[int, str], ModelInfo] = {}
        self._running: tuple[tuple[int, str], float, threading.Thread] | None = None
        self._stuck: set[threading.Thread] = set()
        self._closed = False

    def queued(self, key: tuple[int, str]) -> bool:
        with self._lock:
            return key in self._queue or key in self._results or (self._running is not None
                                                                   and self._running[0] == key)

    def submit(self, key: tuple[int, str], *args: Any) -> None:
        with self._lock:
            self._queue[key] = args
        self._step()

    def result(self, key: tuple[int, str]) -> ModelInfo | None:
        self._step()
        with self._lock:
            return self._results.pop(key, None)

    def waiting(self, key: tuple[int, str]) -> str:
        with self._lock:
            if self._running is not None and self._running[0] == key:
                return "reading its config.json (in the background)"
            if len(self._stuck) >= STUCK_READERS:
                return (f"waiting to read its config.json: {len(self._stuck)} earlier model reads are stuck "
                        "(a hung filesystem?)")
            return "waiting to read its config.json (in the background)"

    def _step(self) -> None:
        """Give up a read past its deadline; start the next one when none runs."""
        with self._lock:
            self._stuck = {t for t in self._stuck if t.is_alive()}
            now = time.monotonic()
            if self._running is not None:
                key, started, thread = self._running
                if not thread.is_alive():
                    self._running = None
                elif now - started > MODEL_READ_SECONDS + 1.0:
                    self._results[key] = ModelInfo(error=f"gave up reading its model files after "
                                                         f"{MODEL_READ_SECONDS:g} s (a hung filesystem?): not sized")
                    self._stuck.add(thread)
                    self._running = None
            if self._running is not None or not self._queue or self._closed or len(self._stuck) >= STUCK_READERS:
                return
            key = next(iter(self._queue))
            args = self._queue.pop(key)
            thread = threading.Thread(target=self._read, args=(key, args), name="identity-model", daemon=True)
            self._running = (key, now, thread)
        thread.start()

    def _read(self, key: tuple[int, str], args: tuple[Any, ...]) -> None:
        try:
            info = read_launcher_model(*args, deadline=time.monotonic() + MODEL_READ_SECONDS)
        except Exception as exc:  # read_launcher_model turns file problems into reasons; this is a bug's
            info = ModelInfo(error=f"cannot read the model config: {type(exc).__name__}")
        with self._lock:
            if self._running is not None and self._running[0] == key and self._running[2] is threading.current_thread():
                self._results[key] = info
                self._running = None
        self._step()

    def forget(self, live: set[tuple[int, str]]) -> None:
        """Drop the waiting reads and results of launchers that ended."""
        with self._lock:
            for d in (self._queue, self._results):
                for key in [k for k in d if k not in live]:
                    del d[key]

    def close(self) -> None:
        """Start no more reads; one running is not waited for (its thread is a daemon)."""
        with self._lock:
            self._closed = True
            self._queue.clear()


def _declared_claims(previous: Any, profiles: tuple[Any, ...]) -> tuple[frozenset[int], frozenset[str]]:
    """(pids the declared profiles' processes had in ``previous``, the declared profiles' names)."""
    names = frozenset(p.name for p in profiles)
    processes = previous.data("processes") if previous is not None and names else None
    # the declared entries only: the automatic workloads' entries (by their own names) follow them
    pids = frozenset(pid for w in getattr(processes, "workloads", ()) if w.name in names for pid in w.pids)
    return pids, names


def _unique_names(groups: Mapping[tuple[str, str], _Group]) -> dict[tuple[str, str], _Addition]:
    """Two launchers of one name (two servers of a model on one port cannot be; two trainings of one
    script can): the later ones get their launcher's pid appended (the names to set, by group)."""
    seen: set[str] = set()
    out = {}
    for (kind, key), g in sorted((k, g) for k, g in groups.items() if k[0] == "launcher"):
        name = g.name
        if name in seen:
            name = f"{name}#{key}"
            out[(kind, key)] = _Addition(name=name)
        seen.add(name)
    return out


# ------------------------------------------------------------------------------------- launchers
def find_launcher(root: Path, pid: int, step: Callable[[int], tuple[Launcher | None, int] | None] | None = None
                  ) -> tuple[int, Launcher | None]:
    """(pid, Launcher) of the outermost serving or training launcher among ``pid`` and its ancestors (up to
    LAUNCHER_DEPTH): a vLLM engine core or a torchrun worker belongs to the server or launcher above it, and
    a forked child with its parent's command line to the parent. (0, None) when there is none or /proc
    denies the reads. Called once per new GPU process. ``step``: what ``launcher_step`` reads for a pid (the
    collector answers from what it remembers of live ancestors)."""
    found: tuple[int, Launcher | None] = (0, None)
    current = pid
    for _ in range(LAUNCHER_DEPTH):
        if current <= 1:
            break
        got = step(current) if step is not None else launcher_step(root, current)
        if got is None:
            break
        launcher, current_parent = got
        if launcher is not None:
            found = (current, launcher)
        current = current_parent
    return found


def launcher_step(root: Path, pid: int) -> tuple[Launcher | None, int] | None:
    """(the launcher its command line names or None, its parent's pid; 0 when /proc/PID/stat is denied) of one
    process, or None when it is gone or unreadable: the search ends there."""
    try:
        argv = procfs.read_pid_cmdline(root, pid, limit=CMDLINE_BYTES)
        stat = procfs.read_pid_stat(root, pid)
    except (procfs.ProcessGone, OSError, ValueError):
        return None
    return (parse_launcher(argv) if argv else None), (stat.ppid if stat is not None else 0)


def same_network_namespace(root: Path, pid: int) -> bool:
    """True when the process shares the agent's network namespace (its loopback is ours); False when it does
    not or that cannot be read (another user's process without CAP_SYS_PTRACE)."""
    try:
        return os.readlink(f"{root}/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def is_local_address(url: str) -> bool:
    """True when the URL's host is an address of this host (loopback, or one a socket can bind here)."""
    import ipaddress
    import socket
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: resolving it would be a request of its own
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))  # only an address of this host's interfaces binds
    except OSError:
        return False
    return True


CMDLINE_BYTES = 16384  # of a launcher's command line: its flags (a longer one is cut there)


def ollama_endpoint(procfs_root: Path, pid: int, launcher: Launcher) -> Launcher:
    """``ollama serve``'s launcher with its /api/ps where its environment's OLLAMA_HOST puts it (read once, for a new
    launcher; workload/launchers.ollama_status_url applies Ollama's own rule), or with none and the reason when that
    environment is closed to the agent (another user's process: its address is unknown, not the default)."""
    try:
        with open(procfs_root / str(pid) / "environ", "rb") as f:
            data = f.read(256 * 1024)
    except OSError:
        return replace(launcher, metrics_url="", problems=(
            *launcher.problems, "its environment (OLLAMA_HOST) is closed to the agent: its /api/ps is not read; a "
            "profile with endpoint: reads it"))
    value = next((item.partition(b"=")[2] for item in data.split(b"\0") if item.startswith(b"OLLAMA_HOST=")), None)
    url, problem = ollama_status_url(value.decode("utf-8", "replace") if value is not None else None)
    return replace(launcher, metrics_url=url, problems=(*launcher.problems, problem) if problem else launcher.problems)


def _environ(procfs_root: Path, pid: int) -> dict[str, str]:
    """The process's initial environment (/proc/PID/environ; readable by its user and root), {} if denied."""
    try:
        with open(procfs_root / str(pid) / "environ", "rb") as f:
            data = f.read(256 * 1024)
    except OSError:
        return {}
    out = {}
    for item in data.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key in (b"HF_HOME", b"HF_HUB_CACHE", b"HUGGINGFACE_HUB_CACHE", b"XDG_CACHE_HOME", b"HOME"):
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _home_of(procfs_root: Path, pid: int) -> str | None:
    """The home directory of the process's real user (passwd), when its environment does not say."""
    import pwd

    try:
        status = procfs.read_pid_status(procfs_root, pid)
    except (procfs.ProcessGone, OSError, ValueError):
        return None
    uid = getattr(status, "uid", None) if status is not None else None
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None


MODEL_READ_SECONDS = 30.0  # one model's files (config.json, index, every shard's header): then it is given up
STUCK_READERS = 2  # model reads past their deadline (a hung filesystem) before no more are started


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a launcher is, captured when its command line was read: its credentials and start time. Its model
    files are read with these credentials and the result kept only if the process is still this one after."""

    creds: Credentials
    start: int  # /proc/PID/stat starttime: a pid reused by another process starts later
    status: tuple[str, ...]  # its Uid, Gid and Groups lines: a setuid exec since changes them


def process_identity(procfs_root: Path, pid: int) -> ProcessIdentity | str:
    """The process's ProcessIdentity, or why it cannot be had (a one-line reason)."""
    try:
        text = _read_status(procfs_root / str(pid) / "status")
        creds = Credentials.from_status(text)
        stat = procfs.read_pid_stat(procfs_root, pid)
    except (procfs.ProcessGone, OSError, ValueError):
        return "the process's credentials are unreadable: its model files are not read"
    if stat is None:
        return "the process's start time is unreadable: its model files are not read"
    lines = tuple(line for line in text.splitlines() if line.startswith(("Uid:", "Gid:", "Groups:", "CapEff:")))
    return ProcessIdentity(creds, stat.starttime_ticks, lines)


STATUS_BYTES = 64 * 1024  # of /proc/PID/status (about 1.5 KB; a huge Groups line cut here lists fewer groups, and a
# CapEff line cut off reads as no capabilities: a cut refuses more, never allows more)


def _read_status(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(STATUS_BYTES).decode("utf-8", "replace")


def read_launcher_model(procfs_root: Path, pid: int, model: str, who: ProcessIdentity | None = None,
                        deadline: float | None = None) -> ModelInfo:
    """The config.json of the model a launcher names, seen as the process sees it, offline: a path (absolute,
    or relative to its working directory), else ``ORG/NAME`` in its user's Hugging Face cache
    (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache/huggingface/hub`` from its environment, else its user's
    home). Every file is read through safeio.Tree on /proc/PID/root: symlinks resolved inside the process's
    root, each directory and file checked against ``who``'s credentials (captured when its command line was
    read; read now when not given) on the opened descriptors, regular files only, size-capped, confined to the
    model's directory; the result is kept only if the process is still ``who`` afterwards (same start time,
    same credentials: not exited, its pid not reused, no setuid program exec'd since). Never raises: a problem
    is the ModelInfo's ``error``, one line, never a file's content."""
    import json as _json

    from headroom.workload import modelconfig

    closed = _files_closed(procfs_root / str(pid) / "root")
    if closed:
        return ModelInfo(error=closed)
    if who is None:
        got = process_identity(procfs_root, pid)
        if isinstance(got, str):
            return ModelInfo(error=got)
        who = got
    try:
        with Tree(procfs_root / str(pid) / "root", who.creds, deadline) as tree:
            if model.startswith("/"):
                path, source = model, model
            else:
                cwd = _cwd_in_root(procfs_root, pid)
                local = f"{cwd}/{model}" if cwd is not None else None
                if _looks_like_hub_name(model) and (local is None or tree.kind(f"{local}/config.json") == ""):
                    directory = modelconfig.find_cached_model(model, _cache_env(procfs_root, pid), tree)
                    path, source = str(directory), str(directory / "config.json")
                elif local is None:
                    return ModelInfo(error=f"{model}: its working directory is not inside its root: not read")
                else:
                    path, source = local, f"(working directory)/{model}"  # a path, as vLLM tries first
            mc = modelconfig.read_model_config(path, tree, confine=True)
    except modelconfig.ModelConfigError as exc:
        return ModelInfo(error=_readable(str(exc)))
    except RecursionError:
        return ModelInfo(error=f"{model}: config.json is nested too deeply to read")
    except OSError as exc:  # the root itself (the process exited, /proc/PID/root denied)
        return ModelInfo(error=_readable(f"cannot read the model files: {exc.strerror or type(exc).__name__}"))
    except (ValueError, TypeError) as exc:  # hostile files: a reason, never a traceback
        return ModelInfo(error=_readable(f"cannot read the model config: {type(exc).__name__}"))
    after = process_identity(procfs_root, pid)
    if isinstance(after, str) or after.start != who.start or after.status != who.status:
        return ModelInfo(error="the process changed (exited, or changed credentials: a setuid program?) while its "
                               "model files were read: not sized")  # fmt: skip
    return ModelInfo(source=source, fields_json=_json.dumps(mc.fields, sort_keys=True),
                     max_context=mc.max_context, encoder_only=mc.encoder_only)


def _files_closed(root: Path) -> str:
    """Why the process's files cannot be seen through /proc/PID/root ("" when they can): the kernel's ptrace
    access check (PTRACE_MODE_READ) closes /proc/PID/root, cwd and environ of another uid's process, and of a
    root process holding capabilities the agent lacks, to an agent without CAP_SYS_PTRACE (docs/deploy.md)."""
    try:
        os.stat(root)
    except PermissionError:
        return ("its files and environment are closed to the agent (/proc/PID/root: permission denied; another "
                "user's process, or root's with capabilities the agent lacks): its model config is not read; run "
                "the agent as root with its capabilities, or declare a profile")
    except OSError:
        return ""  # gone: the reader says so
    return ""


def _cwd_in_root(procfs_root: Path, pid: int) -> str | None:
    """The process's working directory as it sees it (inside its root), or None when that cannot be said."""
    try:
        root = os.readlink(procfs_root / str(pid) / "root")
        cwd = os.readlink(procfs_root / str(pid) / "cwd")
    except OSError:
        return None
    if root == "/":  # its own root (another mount namespace shows "/"): cwd is already as it sees it
        return cwd
    if cwd == root or cwd.startswith(root.rstrip("/") + "/"):
        return cwd[len(root.rstrip("/")):] or "/"
    return None


def _looks_like_hub_name(model: str) -> bool:
    parts = model.split("/")
    return len(parts) == 2 and all(parts) and not model.startswith(("~", "."))


def _cache_env(procfs_root: Path, pid: int) -> dict[str, str]:
    """The Hugging Face cache variables of the process (its environment, else its user's home), as the
    process names them (paths inside its root)."""
    env = _environ(procfs_root, pid)
    if not env.get("HOME"):
        home = _home_of(procfs_root, pid)
        if home:
            env["HOME"] = home
    if not env.get("XDG_CACHE_HOME") and env.get("HOME"):
        env["XDG_CACHE_HOME"] = env["HOME"].rstrip("/") + "/.cache"
    if env.get("HUGGINGFACE_HUB_CACHE") and not env.get("HF_HUB_CACHE"):
        env["HF_HUB_CACHE"] = env["HUGGINGFACE_HUB_CACHE"]  # the older name huggingface_hub still reads
    out = {k: v for k, v in env.items() if k in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME") and v.startswith("/")}
    if not out:
        raise ModelConfigError("--model", "no Hugging Face cache to look in: the process's environment and user "
                                          "are unreadable (run headroom as root or as the server's user)")
    return out


def _readable(message: str) -> str:
    """A message without the CLI's prefix, on one line and not too long."""
    message = " ".join(message.replace("--model: ", "").split())
    return message if len(message) <= 400 else message[:397] + "..."


def _known_devices(nvml: NvmlSample | None) -> set[str] | None:
    if nvml is None:
        return None
    out = set()
    for g in nvml.gpus:
        out.add(g.uuid)
        out.update(m.uuid for m in g.mig_instances)
    return out


def _dra_names(nvml: NvmlSample | None) -> dict[tuple[int, ...], str] | None:
    """What the NVIDIA DRA driver names each GPU and MIG device by -> its UUID: (minor,) for a GPU, (minor, GPU
    instance profile id, placement start) for a MIG device (kubelet.dra_device); a MIG device whose GPU instance
    NVML did not describe is under (minor, -1) (for the reason)."""
    if nvml is None:
        return None
    out: dict[tuple[int, ...], str] = {}
    for g in nvml.gpus:
        if g.minor_number is None:
            continue
        out[(g.minor_number,)] = g.uuid
        for m in g.mig_instances:
            if m.profile_id is None or m.placement_start is None:
                out[(g.minor_number, -1)] = m.uuid
            else:
                out[(g.minor_number, m.profile_id, m.placement_start)] = m.uuid
    return out


def _dra_uuid(name: str, names: dict[tuple[int, ...], str] | None) -> tuple[str | None, str | None]:
    """The GPU or MIG UUID of an NVIDIA DRA driver device name (or CDI device name), or None and why not."""
    from headroom.sources.kubelet import dra_device

    dev = dra_device(name)
    if dev.kind in ("gpu", "mig") and names is None:
        return None, "no NVML answer to look its GPU up in"
    if dev.kind == "gpu":
        uuid = names.get((dev.minor,))
        return (uuid, None) if uuid is not None else (None, f"no GPU with minor number {dev.minor} here")
    if dev.kind == "mig":
        uuid = names.get((dev.minor, dev.profile_id, dev.placement_start))
        if uuid is not None:
            return uuid, None
        if (dev.minor,) not in names:
            return None, f"no GPU with minor number {dev.minor} here"
        if (dev.minor, -1) in names:
            return None, ("NVML did not describe the MIG instances of its GPU (nvmlGpuInstanceGetInfo, which NVML "
                          "documents as needing a privileged user)")
        return None, (f"no MIG device with GPU instance profile {dev.profile_id} at placement {dev.placement_start} "
                      f"on the GPU with minor number {dev.minor}")
    if dev.kind == "vfio":
        return None, "a GPU passed through to a virtual machine (vfio): NVML does not see it"
    return None, "not a device name of the NVIDIA DRA driver"


def _parent(uuid: str, nvml: NvmlSample | None) -> str:
    """The GPU UUID of a MIG UUID (itself for a GPU UUID)."""
    if nvml is not None and uuid.startswith("MIG-"):
        for g in nvml.gpus:
            if any(m.uuid == uuid for m in g.mig_instances):
                return g.uuid
    return uuid


# an identity's cgroup v2 files: CPU, memory and processes (every refresh), its limit, I/O and pressure (the same
# figures a declared workload's cgroup gives, sources/processes.read_cgroup)
_STAT_FILES = ("cpu.stat", "memory.current", "pids.current", "cpu.max", "io.stat", "cpu.pressure",
               "memory.pressure", "io.pressure")
# their cgroup v1 equivalents, each in its own hierarchy at the identity's path there (Slurm's task/cgroup and
# Docker's cgroupfs driver use the same path in every controller): file -> (hierarchy under fs/cgroup)
_V1_FILES = {"cpuacct.stat": "cpuacct", "memory.usage_in_bytes": "memory", "pids.current": "pids",
             "cpu.cfs_quota_us": "cpu", "cpu.cfs_period_us": "cpu", "blkio.throttle.io_service_bytes": "blkio"}
# the v1 hierarchies an identity's member processes are listed in, in this order: freezer is where Slurm's
# proctrack/cgroup puts every process of a job; the others where task/cgroup, Docker and systemd put them
_V1_MEMBER_ORDER = ("freezer", "pids", "memory", "cpuacct", "cpu,cpuacct", "cpuacct,cpu", "cpu", "devices", "cpuset",
                    "blkio", "name=systemd")


# an identity's cgroup files are read when it appears, then again within CGROUP_REFRESH_SECONDS of ticks (the ones
# read longest ago first, as many a tick as that takes), and every tick while there are no more than
# CGROUP_EVERY_TICK identities: 50 pods cost 5 reads a tick instead of 50 (docs/workload-identity.md). cAdvisor,
# which the kubelet's own container metrics come from, reads them every 10 to 15 s. Its member processes
# (cgroup.procs of its cgroup and every cgroup below) are listed at the same reads
CGROUP_REFRESH_SECONDS = 10.0
CGROUP_EVERY_TICK = 5
MEMBER_PIDS = 4096  # member processes listed per identity (the lowest directories first are not preferred: walk order)
MEMBER_DIRS = 256  # cgroup directories walked per identity (its own and those below: a pod's containers, a job's
# steps and tasks)
# pidfds kept: GPU processes and their remembered ancestors together (a descriptor each; with the cgroup files,
# 256 + 512 stay under the usual limit of 1 024); more GPU processes are checked by /proc/PID's inode each tick
WATCHED_PIDS = 256
ANCESTORS = 64  # of those, live ancestors of GPU processes remembered for the launcher search
REFUSED_REASONS = 16  # one-line reasons a source's status lists (the rest are counted in one more line)
OPEN_CGROUP_DIRS = 64  # identity cgroups whose files are kept open (up to 8 descriptors each); the rest are read by path


@dataclass(slots=True)
class _CgroupDir:
    """An identity cgroup's files (of _STAT_FILES, or _V1_FILES on a cgroup v1 hierarchy: those it has; a
    controller that is not enabled there has none, and is not asked for every tick), kept open while the
    identity lives and read again from their start at each refresh (one pread instead of a walk down the
    cgroup's long path, an open and a close: cgroupfs regenerates a file's text at offset 0), for the first
    OPEN_CGROUP_DIRS identities on a live kernel; later ones, and fixture trees, are read by path (the cap allows
    10 000 identities, descriptors are fewer). ``path`` is the directory whose tree lists its member processes."""

    path: str
    files: dict[str, str]  # file -> its path (v2: in ``path``; v1: in its controller's hierarchy)
    fds: dict[str, int]  # file -> open descriptor ({} : read by path)
    cgroup: str = ""  # the identity's cgroup path (relative to its hierarchy's root), as CgroupStats.path says it
    v1: bool = False
    stats: CgroupStats | None = None  # what the last read found (kept, the same object, until the next read)
    processes: int | None = None
    members: tuple[int, ...] = ()  # the processes in its cgroup and every cgroup below, at the last read
    read_at: int = -1  # the collector's tick of that read (-1: never read)
    owners: set[tuple[str, str]] = field(default_factory=set)  # the identities that show these figures

    @classmethod
    def open(cls, directory: str, keep_open: bool, cgroup: str = "",
             files: Mapping[str, str] | None = None, v1_base: str = "") -> _CgroupDir:
        """The cgroup v2 directory ``directory`` (``files`` None), or a v1 identity listed in ``directory`` with
        its ``files`` in their hierarchies. ``v1_base`` (the v1 mounts of a hybrid host, ``fs/cgroup``): a v2
        directory's figures that its hierarchy lacks (no memory controller in a hybrid host's unified tree) are
        read from the v1 hierarchies at the same path (``v1/<file>``)."""
        v1 = files is not None
        wanted = dict(files) if files is not None else {name: f"{directory}/{name}" for name in _STAT_FILES}
        if v1_base and files is None:
            wanted.update({f"v1/{name}": f"{v1_base}/{hierarchy}{cgroup}/{name}"
                           for name, hierarchy in _V1_FILES.items()})
        found, fds = {}, {}
        for name, path in wanted.items():
            if not keep_open or name.startswith("v1/"):  # a hybrid host's v1 figures: read by path (descriptors)
                if os.path.exists(path):
                    found[name] = path
                continue
            try:
                fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            except OSError:  # out of descriptors, or denied: read by path, as later ones are
                pass
            found[name] = path
        return cls(directory, found, fds, cgroup, v1)

    def refresh(self, tick: int) -> bool:
        """Read the files again (``stats``, ``processes`` and ``members``; the previous objects are kept when
        equal); True when they changed. The members are listed again only when the cgroup's CPU or process count
        moved since the last read (or either is unknown): a process cannot join a cgroup, or leave it, without
        one of them moving (it runs there, and ``pids.current`` counts it), so an idle pod costs its files'
        reads and no walk of its tree."""
        stats, processes = read_identity_cgroup(self, self.cgroup)
        last = self.stats
        if self.read_at < 0 or processes is None or processes != self.processes or stats is None or last is None \
                or stats.cpu_user_seconds_total is None \
                or stats.cpu_user_seconds_total != last.cpu_user_seconds_total \
                or stats.cpu_system_seconds_total != last.cpu_system_seconds_total:
            members = list_members(self.path)
        else:
            members = self.members
        self.read_at = tick
        if processes == self.processes and stats == self.stats and members == self.members:
            return False
        self.stats, self.processes = stats, processes
        self.members = members
        return True

    def read(self, name: str) -> str | None:
        """A small kernel file's text from its start, or None when absent or unreadable (the cgroup removed)."""
        fd = self.fds.get(name)
        try:
            if fd is not None:
                return os.pread(fd, 4096, 0).decode("ascii", "replace")
            path = self.files.get(name)
            if path is None:
                return None
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.read(fd, 4096).decode("ascii", "replace")
        except OSError:
            return None
        finally:
            os.close(fd)

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)


def list_members(directory: str) -> tuple[int, ...]:
    """The processes (ascending pids) in cgroup ``directory`` and every cgroup below it (a pod's containers, a
    Slurm job's steps and tasks): each directory's ``cgroup.procs`` (cgroup v2, and v1, where it lists thread
    group leaders; where a v1 hierarchy has only ``tasks``, its thread ids, of which a thread group leader's id is
    its process's). At most MEMBER_DIRS directories and MEMBER_PIDS processes; () when unreadable (the cgroup
    removed)."""
    found: set[int] = set()
    todo, walked = [directory], 0
    while todo and walked < MEMBER_DIRS and len(found) < MEMBER_PIDS:
        d = todo.pop()
        walked += 1
        try:
            with os.scandir(d) as entries:
                subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        todo.extend(sorted(subdirs, reverse=True))
        text = None
        for name in ("cgroup.procs", "tasks"):
            try:
                fd = os.open(f"{d}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                chunks = []
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
                text = b"".join(chunks)
            except OSError:
                text = None
            finally:
                os.close(fd)
            if text is not None:
                break
        if text:
            found.update(int(x) for x in text.split() if x.isdigit())
    return tuple(sorted(found)[:MEMBER_PIDS])


def v1_identity_cgroup(groups: procfs.PidCgroups, ident: CgroupIdentity) -> str:
    """The cgroup v1 place of ``ident`` (an identity classified from a v1 path, whose ``cgroup`` is ""), as
    ``CONTROLLER:PATH``: the first hierarchy of _V1_MEMBER_ORDER (then any other) whose path in ``groups`` names
    the same identity, cut at the identity's own cgroup; "" when none does."""
    order = [c for c in _V1_MEMBER_ORDER if c in groups.controllers]
    order += [c for c in sorted(groups.controllers) if c not in _V1_MEMBER_ORDER]
    for controller in order:
        other = classify_cgroup_path(groups.controllers[controller])[0]
        if other is not None and other.cgroup and (other.kind, other.job_id, other.pod_uid, other.container_id,
                                                   other.unit) == (ident.kind, ident.job_id, ident.pod_uid,
                                                                   ident.container_id, ident.unit):
            return f"{controller}:{other.cgroup}"
    return ""


def _cgroup_dir(sysfs: str, path: str, first: int = 0) -> str | None:
    """The directory of cgroup ``path`` in the v2 hierarchy (``fs/cgroup``, or ``fs/cgroup/unified`` on a hybrid
    v1 host) under ``sysfs``; None when it does not exist. processes.cgroup_root with strings: it runs in the
    tick for each new identity. ``first``: the base to try first (1: unified, where the last one was)."""
    rel = path.lstrip("/")
    bases = (f"{sysfs}/fs/cgroup", f"{sysfs}/fs/cgroup/unified")
    for base in bases[first:] + bases[:first]:
        d = f"{base}/{rel}" if rel else base
        if os.path.exists(f"{d}/cgroup.procs") or os.path.exists(f"{d}/cpu.stat") \
                or os.path.exists(f"{d}/memory.current"):
            return d
    return None


def _cpu_seconds(text: str) -> tuple[float | None, float | None]:
    """(user, system) seconds from a cgroup v2 cpu.stat (``user_usec N`` lines; the kernel writes them
    second and third); None for a field that is absent or not a number. Two searches, not a split of every
    line: it runs for every automatic workload every tick."""
    return _usec(text, "user_usec "), _usec(text, "system_usec ")


def _usec(text: str, key: str) -> float | None:
    """The number after ``key`` at the start of a line of ``text``, in seconds (from microseconds)."""
    if text.startswith(key):
        start = len(key)
    else:
        at = text.find("\n" + key)
        if at < 0:
            return None
        start = at + 1 + len(key)
    end = text.find("\n", start)
    try:
        return int(text[start:end] if end >= 0 else text[start:]) / 1e6
    except ValueError:
        return None


def read_identity_cgroup(directory: _CgroupDir, path: str) -> tuple[CgroupStats | None, int | None]:
    """(its CgroupStats, pids.current) of an identity's cgroup: cgroup v2's cpu.stat, memory.current, cpu.max,
    io.stat and PSI, or cgroup v1's equivalents (cpuacct.stat, memory.usage_in_bytes, cpu.cfs_quota_us /
    cfs_period_us, blkio.throttle.io_service_bytes; v1 has no PSI); a file it lacks leaves its field None."""
    if directory.v1:
        return _read_v1(directory, path)
    cpu = directory.read("cpu.stat")
    memory = directory.read("memory.current")
    if cpu is None and memory is None:
        return None, None
    stats, processes = _read_v2(directory, path, cpu, memory)
    if any(name.startswith("v1/") for name in directory.files):
        # a hybrid host: what its unified tree has no controller for, from the v1 hierarchies at the same path
        v1, v1_processes = _read_v1(directory, path, "v1/")
        if v1 is not None:
            stats = replace(stats, **{f: getattr(v1, f) for f in _V1_FILLED if getattr(stats, f) is None})
        processes = processes if processes is not None else v1_processes
    return stats, processes


_V1_FILLED = ("cpu_user_seconds_total", "cpu_system_seconds_total", "memory_bytes", "read_bytes_total",
              "written_bytes_total", "cpu_quota_cores")


def _read_v2(directory: _CgroupDir, path: str, cpu: str | None, memory: str | None
             ) -> tuple[CgroupStats, int | None]:
    user, system = _cpu_seconds(cpu) if cpu is not None else (None, None)
    memory_bytes = int(memory) if memory is not None and memory.strip().isdigit() else None
    pids = directory.read("pids.current")
    processes = int(pids) if pids is not None and pids.strip().isdigit() else None
    quota = text = None
    if (text := directory.read("cpu.max")) is not None:
        quota = parse_cpu_max(text)
    read = written = None
    if (text := directory.read("io.stat")) is not None:
        try:
            read, written = parse_io_stat(text)
        except ValueError:
            pass
    pressure = {}
    for resource in procfs.PRESSURE_RESOURCES:
        if (text := directory.read(f"{resource}.pressure")) is not None and (avg := _some_avg10(text)) is not None:
            pressure[resource] = avg
    return CgroupStats(path=path, cpu_user_seconds_total=user, cpu_system_seconds_total=system,
                       memory_bytes=memory_bytes, read_bytes_total=read, written_bytes_total=written,
                       pressure_some_avg10=MappingProxyType(pressure) if pressure else EMPTY,
                       cpu_quota_cores=quota), processes


def _some_avg10(text: str) -> float | None:
    """The "some avg10" of a PSI file as a ratio (``some avg10=1.50 ...`` -> 0.015); None when garbled. One slice
    where the kernel's layout is the usual one (the whole file parsed otherwise): identities' figures are read
    every tick."""
    if text.startswith("some avg10="):
        end = text.find(" ", 11)
        try:
            return float(text[11:end]) / 100.0
        except ValueError:
            pass
    try:
        return procfs.parse_pressure(text).some.avg10
    except ValueError:
        return None


def _read_v1(directory: _CgroupDir, path: str, key: str = "") -> tuple[CgroupStats | None, int | None]:
    """A cgroup v1 identity's figures (``key``: the prefix its files have in ``directory.files``)."""
    user = system = None
    if (text := directory.read(f"{key}cpuacct.stat")) is not None:  # "user N\nsystem N" in USER_HZ ticks
        ticks = {k: v for k, _, v in (line.partition(" ") for line in text.splitlines())}
        hz = clock_ticks_per_second()
        try:
            user = int(ticks["user"]) / hz if "user" in ticks else None
            system = int(ticks["system"]) / hz if "system" in ticks else None
        except ValueError:
            user = system = None
    memory = directory.read(f"{key}memory.usage_in_bytes")
    memory_bytes = int(memory) if memory is not None and memory.strip().isdigit() else None
    pids = directory.read(f"{key}pids.current")
    processes = int(pids) if pids is not None and pids.strip().isdigit() else None
    quota = None
    q, period = directory.read(f"{key}cpu.cfs_quota_us"), directory.read(f"{key}cpu.cfs_period_us")
    if q is not None and period is not None:
        quota = parse_cpu_max(f"{q.strip() if q.strip() != '-1' else 'max'} {period.strip()}")
    read = written = None
    if (text := directory.read(f"{key}blkio.throttle.io_service_bytes")) is not None:  # "MAJ:MIN Read N" lines
        read = written = 0
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                if parts[1] == "Read":
                    read += int(parts[2])
                elif parts[1] == "Write":
                    written += int(parts[2])
    if user is None and memory_bytes is None and processes is None:
        return None, None
    return CgroupStats(path=path, cpu_user_seconds_total=user, cpu_system_seconds_total=system,
                       memory_bytes=memory_bytes, read_bytes_total=read, written_bytes_total=written,
                       cpu_quota_cores=quota), processes
