"""Cgroup paths: what a process's /proc/PID/cgroup names (a Kubernetes pod, a Slurm job, a container, a systemd
unit) and who may name it.

``classify_cgroup_path`` reads one path (cgroup v1 and v2, cgroupfs and systemd drivers, containerd / CRI-O / Docker /
Podman naming; a job or pod only in Slurm's and the kubelet's own layouts, never in a user's or a delegated subtree,
``cgroup_owners``); ``classify`` reads every line of a process's cgroup file and takes the highest-ranking identity
(``RANK``: pod > job > container > unit); ``v1_identity_cgroup`` says where a v1-named identity's cgroup is. Pure
parsing, but for the directories' owners (``os.lstat`` along the path) and the hybrid host's unified mount.
"""

from __future__ import annotations

import os
import re
import stat as stat_module
from collections.abc import Callable
from dataclasses import dataclass

from headroom.samples import CgroupIdentity
from headroom.sources import procfs

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


# a test of one cgroup name: a match (re.Match) or True when it is the one a layout wants there
_Test = Callable[[str], object]


def _is(value: str) -> Callable[[str], bool]:
    return value.__eq__


# the cgroups above a job or a pod, from the hierarchy's root, as Slurm and the kubelet make them
_JOB_LAYOUTS: tuple[tuple[_Test, ...], ...] = (
    (_is("system.slice"), _SLURM_V2.match),  # cgroup v2: /system.slice/slurmstepd.scope/job_N
    (_SLURM_V1.match, _SLURM_UID.match),  # cgroup v1: /slurm/uid_N/job_N
    (_SLURM_V1.match,),
)
_POD_LAYOUTS: tuple[tuple[_Test, ...], ...] = (
    (_KUBEPODS.__contains__, _QOS.__contains__),  # /kubepods.slice/kubepods-burstable.slice/..., /kubepods/besteffort
    (_KUBEPODS.__contains__,),  # guaranteed pods
)
_COLON_LAYOUTS: tuple[tuple[_Test, ...], ...] = (
    (_is("system.slice"), lambda c: c.endswith(".service")),  # containerd's own unit, systemd driver names
)


def _laid_out(above: list[str], layouts: tuple[tuple[_Test, ...], ...], verified: bool) -> bool:
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
        elif verified and not n and len(rest) > len(layout):  # noqa: SIM102 - the two cases read alike
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
               layouts: tuple[tuple[_Test, ...], ...], what: str, kind: str) -> str:
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


# the v1 hierarchies an identity's member processes are listed in, in this order: freezer is where Slurm's
# proctrack/cgroup puts every process of a job; the others where task/cgroup, Docker and systemd put them
_V1_MEMBER_ORDER = ("freezer", "pids", "memory", "cpuacct", "cpu,cpuacct", "cpuacct,cpu", "cpu", "devices", "cpuset",
                    "blkio", "name=systemd")


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
