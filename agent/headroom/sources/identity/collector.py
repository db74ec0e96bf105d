"""The identity collector: each tick, the GPU processes (NVML's lists of the previous tick) and the launchers that
hold no GPU, grouped into automatic workloads by what their cgroup paths name (``cgroup_paths``), their runtime's
on-disk names (``containers``), their launchers (``launchers``, their models read by ``models``), with what the
kubelet and a job mapping add (``additions``, ``jobs``) and each identity's cgroup figures (``cgroup_files``); work
follows what changed (the package's docstring, docs/workload-identity.md).
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import structlog

from headroom.samples import (
    CgroupIdentity,
    CgroupStats,
    IdentityGroup,
    IdentitySample,
    Launcher,
    ModelInfo,
    NvmlSample,
    PreviousTick,
    share_unchanged,
)
from headroom.sources import Collector, SourceContext, procfs, register
from headroom.sources.identity.additions import _Additions, _KubeAdditions, _KubeletView
from headroom.sources.identity.cgroup_files import CGROUP_REFRESH_SECONDS, _CgroupDir, _CgroupReads
from headroom.sources.identity.cgroup_paths import classify, v1_identity_cgroup
from headroom.sources.identity.containers import ContainerMeta, container_meta
from headroom.sources.identity.groups import _CGROUP, _added, _Addition, _Group, _Pid, _Slot, _unique_names
from headroom.sources.identity.jobs import JobMappingReader
from headroom.sources.identity.launchers import (
    _LauncherScan,
    find_launcher,
    is_local_address,
    launcher_step,
    ollama_endpoint,
    same_network_namespace,
)
from headroom.sources.identity.models import _ModelReader, process_identity
from headroom.sources.identity.watch import _PidWatch
from headroom.workload.attribution import claimed_by_declared
from headroom.workload.launcher_profiles import display_name
from headroom.workload.profiles import WorkloadProfile

log = structlog.get_logger("headroom.sources.identity")

KINDS = ("pods", "jobs", "containers", "units", "launchers")  # --workloads.auto values
DEFAULT_AUTO = ("pods", "jobs", "launchers")  # pods need --kubernetes too
DEFAULT_MAX_WORKLOADS = 100
# launchers that hold no GPU (found by launchers._LauncherScan) followed as workloads at once
LAUNCHERS_WITHOUT_GPU = 16  # launchers holding no GPU followed at once (a pidfd each); more are not workloads


# what an exported identity's IdentityGroup was made from: its group, cgroup figures, process count, model, members
_MadeFrom = tuple[_Group, CgroupStats | None, int | None, ModelInfo | None, tuple[int, ...]]


def _auto_setting(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_AUTO
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value)]
    return tuple(v for v in items if v)


@register
class IdentityCollector(_Additions, _CgroupReads, _PidWatch, Collector):
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
        self._built: dict[tuple[str, str], tuple[_MadeFrom, IdentityGroup]] = {}
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
        self._kube: _KubeAdditions | None = None
        # live ancestors of GPU processes (a launcher, a shell, a container's shim) as the launcher search read
        # them, watched through pidfds like the GPU processes: pid -> (pidfd, launcher, parent pid); least
        # recently used first. A torchrun's or a vLLM server's workers, and the pods of one parent, read their
        # common ancestors once
        self._ancestors: dict[int, tuple[int, Launcher | None, int]] = {}
        self._ancestor_fds: dict[int, int] = {}  # pidfd -> pid
        self._unknown: dict[str, tuple[str, ...]] = {}  # source -> unknown devices last logged
        self._hidden: dict[tuple[str, str], str] = {}  # pod groups the kubelet's answer does not confirm -> why
        # (answer, known devices, the DRA driver's names of them, what _kubelet read from it)
        self._kubelet_view: _KubeletView | None = None
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
    def _gpu_processes(self, previous: PreviousTick | None) -> tuple[dict[int, tuple[str, ...]], NvmlSample | None]:
        """(pid -> the UUIDs of the GPUs NVML listed it on in ``previous``, its NVML sample)."""
        nvml = previous.nvml if previous is not None else None
        if nvml is None:
            return {}, None
        out: dict[int, tuple[str, ...]] = {}
        for g in nvml.gpus:
            uuid = (g.uuid,)
            for p in g.processes:
                out[p.pid] = out[p.pid] + uuid if p.pid in out else uuid
        return out, nvml

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
            named = meta if meta is not None and meta.pod and meta.pod_uid in ("", ident.pod_uid) else None
            return _Slot("pod", ident.pod_uid, pod_uid=ident.pod_uid, namespace=named.namespace if named else "",
                         pod=named.pod if named else "", container=named.container if named else "",
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
        previous = self.ctx.previous_tick()  # NVML's processes and the declared workloads' pids (PreviousTick)
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
            for model_key in [k for k in self._models if k not in live_models]:
                del self._models[model_key]
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
            g.pids.append(pid)
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

    def _finish(self, g: _Group, built: dict[tuple[str, str], tuple[_MadeFrom, IdentityGroup]]
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


def _declared_claims(previous: PreviousTick | None,
                     profiles: tuple[WorkloadProfile, ...]) -> tuple[frozenset[int], frozenset[str]]:
    """(pids the declared profiles' processes had in ``previous``, the declared profiles' names)."""
    names = frozenset(p.name for p in profiles)
    processes = previous.processes if previous is not None and names else None
    # the declared entries only: the automatic workloads' entries (by their own names) follow them
    pids = frozenset(pid for w in (processes.workloads if processes is not None else ()) if w.name in names
                     for pid in w.pids)
    return pids, names
