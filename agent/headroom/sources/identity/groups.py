"""The tick's groups: where a GPU process goes among the identities (``_Slot``, worked out once per process), what
the collector keeps of each process (``_Pid``), a group of processes (``_Group``) and what a source other than the
GPU processes adds to one (``_Addition``: the kubelet, a job mapping, launcher names made unique).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

from headroom.samples import CgroupIdentity, Launcher


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
    pids: list[int] = field(default_factory=list)  # every constructor gives them
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
