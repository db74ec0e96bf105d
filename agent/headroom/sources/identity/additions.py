"""What the kubelet and a job mapping add to the tick's groups: the kubelet's pod-resources answer (each pod's name,
containers and GPU or MIG devices, DRA claims' devices by the NVIDIA DRA driver's names; a pod with a GPU and no
process on it yet) merged with the pods their cgroup paths name, and cross-checked with them (``_kubelet``,
``_kubelet_lists``, ``_pod_named``); a job mapping's jobs on their GPUs (``_job_mapping``). Methods of the
collector (a mixin of ``IdentityCollector``, whose ``__init__`` sets this state).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from headroom.samples import IdentitySource, NvmlSample
from headroom.sources.identity.groups import _Addition, _Group
from headroom.sources.identity.jobs import JobMappingReader

if TYPE_CHECKING:
    from headroom.sources.kubelet import ContainerDevices, PodResourcesPoller

log = structlog.get_logger("headroom.sources.identity")

REFUSED_REASONS = 16  # one-line reasons a source's status lists (the rest are counted in one more line)



# what the tick keeps of the kubelet's last answer: (its containers' devices, the GPUs known, the DRA driver's
# names of them, what was read from it: GPU or MIG UUID -> pods, the pods' additions, the unknown devices)
_KubeletView = tuple[tuple["ContainerDevices", ...], set[str] | None, dict[tuple[int, ...], str] | None,
                     tuple[dict[str, set[tuple[str, str]]], dict[tuple[str, str], _Addition], dict[str, None]]]
# the kubelet's additions by group: (the answer's pods, each group's addition, pod -> group key)
_KubeAdditions = tuple[dict[tuple[str, str], _Addition], dict[tuple[str, str], _Addition],
                       dict[tuple[str, str], tuple[str, str]]]


class _Additions:
    """The identity collector's merge of what the kubelet and a job mapping say (see the module's docstring)."""

    auto: frozenset[str]
    poller: PodResourcesPoller | None  # with --kubernetes
    mapping_dir: Path | None
    _mapping_error: str | None
    _mapping_reader: JobMappingReader | None
    _mapping_refused: tuple[str, ...]
    _by_name: dict[tuple[str, str], tuple[str, str]]  # (namespace, pod) -> the group of that pod's processes
    _ref_keys: dict[tuple[str, str], set[tuple[str, str]]]
    _part_ref: dict[tuple[str, str], tuple[str, str]]
    _unnamed: dict[tuple[str, str], None]  # pod groups whose processes gave no names
    _renamed: set[tuple[str, str]]
    _kube: _KubeAdditions | None
    _kubelet_view: _KubeletView | None
    _hidden: dict[tuple[str, str], str]  # pod groups the kubelet's answer does not confirm -> why
    _unknown: dict[str, tuple[str, ...]]  # source -> unknown devices last logged

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
        holders: dict[str, set[tuple[str, str]]]  # GPU or MIG UUID -> pods (namespace, name)
        pods: dict[tuple[str, str], _Addition]
        unknown: dict[str, None]
        if view is not None and view[0] is state.devices and view[1] == known and view[2] == dra_names:
            holders, pods, unknown = view[3]  # the same answer on the same GPUs: read once
        else:
            holders, unknown = {}, {}
            containers: dict[tuple[str, str], dict[str, None]] = {}  # pod -> its containers' names, in order
            devices: dict[tuple[str, str], dict[str, None]] = {}  # pod -> its GPU and MIG UUIDs, in order
            for c in state.devices:
                if c.claim is not None:  # a DRA claim's devices: only the NVIDIA DRA driver's are GPUs
                    if c.resource != NVIDIA_DRA_DRIVER:
                        continue
                elif not c.resource.startswith("nvidia.com/"):
                    continue
                for raw in c.device_ids:
                    uuid: str | None
                    why: str | None
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
                if ref not in listed and key not in hidden:
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
    # dra_device gives a gpu its minor number, a mig device its minor number, profile id and placement start
    if dev.kind == "gpu":
        assert names is not None and dev.minor is not None
        uuid = names.get((dev.minor,))
        return (uuid, None) if uuid is not None else (None, f"no GPU with minor number {dev.minor} here")
    if dev.kind == "mig":
        assert names is not None and dev.minor is not None
        assert dev.profile_id is not None and dev.placement_start is not None
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
