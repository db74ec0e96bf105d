"""Workload attribution: expected against measured, per declared workload, for one tick.

Pure: a Sample (the processes collector's members of each workload, NVML's per-GPU process lists)
plus the profiles and sizing constants in, ``WorkloadStatus`` out. Nothing here reads the host.

Semantics (also in the metric HELP texts and docs/sizing.md, "Expected against measured"):

- GPUs of a workload: those where NVML lists one of its processes, plus those its profile declares
  (index, GPU UUID, or MIG UUID: then the MIG instance's memory is its capacity).
- measured: ``gpu_memory_used_bytes`` per GPU is the sum of NVML's per-process used memory of its
  processes there (0 on a declared GPU where none of them runs; None when NVML cannot say for any);
  per-GPU utilization is the sum of its processes' SM utilization samples (None when unsupported).
- expected: ``sizing.estimate`` with the smallest memory among its GPUs and their count (no GPU seen
  or declared: the profile's parallel layout, memory unknown). Components are per GPU.
  ``expected_peak_bytes`` (exported as headroom_workload_gpu_memory_expected_peak_bytes) is what NVML should show summed over its GPUs: the per-GPU usage
  (vLLM's reservation for vLLM inference, else the sum of components) x its GPU count, comparable
  with the sum of ``gpu_memory_used_bytes`` and with ``gpu_memory_capacity_bytes`` (the summed memory
  of its GPUs). cpu-inference: components are host memory, sized against MemTotal; no GPU series.
- a profile the memory model cannot size (missing inputs) gets ``estimate_error`` and no expected
  values; its measured values are still there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from operator import attrgetter
from types import MappingProxyType

from headroom.safeio import clip
from headroom.samples import (
    EMPTY,
    CgroupStats,
    GpuProcess,
    GpuSample,
    IdentityGroup,
    IdentitySample,
    NvmlSample,
    Sample,
    WorkloadProcesses,
)
from headroom.workload.profiles import Kind, WorkloadProfile
from headroom.workload.sizing import DEFAULTS, Estimate, OverheadConstants, SizingError, estimate

# what a memoised status was made from (AutoStatuses): a tuple of hashable inputs, compared for equality only
_Inputs = tuple[object, ...]
_Listing = tuple[int, int, int, GpuProcess]  # (GPU position, MIG position, place in the list, the process)

MAX_RANKS_NAMED = 8  # ranks a declared-against-measured workers problem names one by one (the rest are counted)


@dataclass(frozen=True, slots=True)
class WorkloadGpu:
    index: int
    uuid: str
    memory_used_bytes: int | None  # the workload's processes on this GPU, summed
    utilization_ratio: float | None  # SM utilization of its processes, summed (capped at 1)
    memory_total_bytes: int | None  # the GPU's (or the declared MIG instance's) memory
    declared: bool  # listed in the profile's gpus
    attributed: bool  # NVML lists one of the workload's processes here
    # the MIG instances of this GPU it holds (declared by UUID, or listing its processes): its memory is theirs,
    # not the whole GPU's (memory_total_bytes is their sum, and analysis judges VRAM on them)
    mig_instances: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    """One declared workload this tick: identity, measured values and what the memory model expects."""

    name: str
    kind: str
    model: str  # "" when the profile does not say
    precision: str
    runtime: str
    processes: int | None  # live processes; None: the profile has no process rule, or the collector failed
    measured: WorkloadProcesses | None  # the processes collector's entry (CPU, RSS, I/O, cgroup)
    gpus: tuple[WorkloadGpu, ...] = ()
    gpu_memory_used_bytes: int | None = None  # summed over its GPUs
    gpu_memory_capacity_bytes: int | None = None  # summed over its GPUs
    estimate: Estimate | None = None  # sizing.estimate against its GPUs (host memory for cpu-inference)
    expected_components: Mapping[str, int] = field(default_factory=lambda: EMPTY)  # per GPU (host: cpu-inference)
    expected_per_gpu_bytes: int | None = None  # what NVML should show on each of its GPUs
    expected_peak_bytes: int | None = None  # expected_per_gpu_bytes x its GPU count
    estimate_error: str | None = None  # why there is no estimate
    # the DataLoader worker processes found under its ranks, summed over them (WorkloadProcesses.ranks): for a
    # trainer (not a serving kind) or a profile that declares workers, whose processes are measured; else None
    dataloader_workers: int | None = None
    declared_dataloader_workers: int | None = None  # what its profile says (per rank: a DataLoader's num_workers)
    source: str = "declared"  # "declared" (a profile) | "auto" (a pod, job, container or unit holding a GPU)
    cgroup: CgroupStats | None = None  # auto workloads: their cgroup's v2 files (declared: in ``measured``)
    job: str = ""  # the profile's job (a job spanning hosts) and team, "" when it names none
    team: str = ""
    # auto workloads: the profile made from their launcher, else ``minimal_profile`` (their name alone)
    profile: WorkloadProfile | None = None

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """Indices of the GPUs it uses (attributed or declared)."""
        return tuple(g.index for g in self.gpus)

    @property
    def dataloader_workers_problem(self) -> str | None:
        """Why the declared ``dataloader_workers`` is not what runs (both numbers, per rank), or None when they agree
        or either is unknown: the analysis uses the measured count, never the declared one."""
        declared, procs = self.declared_dataloader_workers, self.measured
        if declared is None or procs is None or not procs.ranks:
            return None
        counts = sorted(procs.ranks.items())
        if all(len(w) == declared for _, w in counts):
            return None
        found = ", ".join(f"pid {r} {len(w)}" for r, w in counts[:MAX_RANKS_NAMED])
        more = f" and {len(counts) - MAX_RANKS_NAMED} more" if len(counts) > MAX_RANKS_NAMED else ""
        return (f"the profile declares dataloader_workers {declared} (per rank) but "
                f"{procs.dataloader_workers} run under its {len(counts)} {'rank' if len(counts) == 1 else 'ranks'} "
                f"({found}{more}); the measured count is used")

    @property
    def cpu_quota_cores(self) -> float | None:
        """The CPU limit of its cgroup (cpu.max) in cores; None when unlimited or unknown."""
        cgroup = self.measured.cgroup if self.measured is not None else None
        return cgroup.cpu_quota_cores if cgroup is not None else None


def attribute(
    sample: Sample, profiles: Sequence[WorkloadProfile], constants: OverheadConstants | None = None,
    memo: AutoStatuses | None = None,
) -> tuple[WorkloadStatus, ...]:
    """Returns one WorkloadStatus per profile, in declaration order, then one per automatic workload.
    ``memo``: the caller's AutoStatuses, kept from tick to tick (pipeline.Analysis holds one), so that an
    automatic workload whose inputs did not change gets last tick's status again instead of a new one."""
    constants = constants or DEFAULTS
    procs_sample = sample.data("processes")
    by_name: dict[str, WorkloadProcesses] = {w.name: w for w in procs_sample.workloads} if procs_sample else {}
    nvml: NvmlSample | None = sample.data("nvml")
    gpus = nvml.gpus if nvml is not None else ()
    memory = sample.data("memory")
    host_memory = getattr(memory, "total_bytes", None)
    where = _GpuIndex.of(gpus)
    declared = tuple(_status(p, by_name.get(p.name), gpus, host_memory, constants, where) for p in profiles)
    identity = sample.data("identity")
    if memo is not None:
        # a tick the identity collector failed or missed the deadline of (a host saturated by the very load being
        # diagnosed): its workloads are unknown, not gone; the last known ones stand for UNKNOWN_IDENTITY_TICKS
        identity = memo.identity(identity, failed="identity" in sample.sources)
    if not isinstance(identity, IdentitySample) or not identity.groups:
        if memo is not None:
            memo.tick_done()  # no automatic workload this tick: forget them all
        return declared
    names = {p.name for p in profiles}
    # the declared profiles' processes (the entries of automatic workloads, under their own names, follow them)
    claimed = {pid for name, w in by_name.items() if name in names for pid in w.pids}
    autos = tuple(st for g in identity.groups
                  if (st := _auto_status(g, claimed, names, gpus, constants, where, memo, by_name.get(g.name)))
                  is not None)
    if memo is not None:
        memo.tick_done()
    return declared + autos


_STATUS_FIELDS = tuple(f.name for f in fields(WorkloadStatus) if f.init)  # in __init__'s order
_STATUS_VALUES = attrgetter(*_STATUS_FIELDS)
_CGROUP = _STATUS_FIELDS.index("cgroup")
_PROCESSES = _STATUS_FIELDS.index("processes")
_MEASURED = _STATUS_FIELDS.index("measured")
_WORKERS = _STATUS_FIELDS.index("dataloader_workers")


# ticks in a row a failed identity collector's last answer stands for it (attribute): its automatic workloads keep
# their statuses, verdicts and holds through a few late ticks on a saturated host, and go once it stays failed
UNKNOWN_IDENTITY_TICKS = 10


class AutoStatuses:
    """Last tick's automatic workload statuses, each with the inputs it was made from (``_auto_status``):
    a workload whose inputs equal (``==``) last tick's gets the same WorkloadStatus object again, with only
    its cgroup figures replaced where they changed; one whose inputs changed is made anew. Fifty idle pods
    time-slicing eight GPUs are then fifty comparisons a tick, not fifty statuses built
    (docs/workload-identity.md, "Cost").

    The inputs are all that ``_auto_status`` reads: the identity group's fields but its cgroup, the pids left
    to it after the declared profiles' claims, the sizing constants, each GPU it uses (index, UUID, up, memory
    total, its MIG instances' UUIDs and memory totals) and each listing of its pids in NVML's process lists
    (``_GpuIndex.lookup``; NVML's collector keeps an unchanged process's entry the same object, so comparing
    them is cheap). Only the workloads of the newest tick are kept: one that ends is forgotten at the next
    tick (churn leaks nothing)."""

    __slots__ = ("_held", "_identity", "_last", "_now")

    def __init__(self) -> None:
        self._last: dict[str, tuple[_Inputs, WorkloadStatus]] = {}
        self._now: dict[str, tuple[_Inputs, WorkloadStatus]] = {}
        self._identity: IdentitySample | None = None  # the newest identity the collector answered
        self._held = 0  # ticks in a row it has stood for a failed one

    def identity(self, now: object, failed: bool) -> object:
        """This tick's identity: ``now`` when the collector answered (remembered), else, where it ran and failed
        (``failed``), the last answer for at most UNKNOWN_IDENTITY_TICKS ticks in a row."""
        if now is not None or not failed:
            self._identity, self._held = (now if isinstance(now, IdentitySample) else None), 0
            return now
        self._held += 1
        return self._identity if self._held <= UNKNOWN_IDENTITY_TICKS else None

    def __len__(self) -> int:
        return len(self._last)

    def get(self, name: str, key: _Inputs, cgroup: CgroupStats | None, measured: WorkloadProcesses | None = None,
            processes: int | None = None) -> WorkloadStatus | None:
        """Last tick's status of ``name`` if it was made from inputs equal to ``key`` (its cgroup ``cgroup``, its
        processes collector's entry ``measured`` and member count ``processes``: figures it only carries)."""
        found = self._last.get(name)
        if found is None or found[0] != key:
            return None
        st = found[1]
        if (st.cgroup is not cgroup and st.cgroup != cgroup) or st.measured is not measured \
                or st.processes != processes:  # busy pods: every tick
            values = list(_STATUS_VALUES(st))  # as dataclasses.replace, at half its cost
            values[_CGROUP], values[_MEASURED], values[_PROCESSES] = cgroup, measured, processes
            values[_WORKERS] = measured_workers(st.kind, None, measured)
            st = WorkloadStatus(*values)
        self._now[name] = (key, st)
        return st

    def put(self, name: str, key: _Inputs, status: WorkloadStatus) -> None:
        self._now[name] = (key, status)

    def tick_done(self) -> None:
        """This tick's statuses become the ones the next tick compares with; older ones are dropped."""
        self._last, self._now = self._now, {}


def claimed_by_declared(g: IdentityGroup, claimed: set[int] | frozenset[int], names: set[str] | frozenset[str]) -> bool:
    """True when a declared profile takes the place of automatic workload ``g``: its profile's processes are
    all of ``g``'s GPU processes (``claimed``: the pids the declared profiles matched), or it has ``g``'s name."""
    return bool(g.pids and all(pid in claimed for pid in g.pids)) or g.name in names


@dataclass(frozen=True, slots=True)
class _GpuIndex:
    """Where each GPU process and device is among a tick's GPUs, built once per tick, so that each workload (50
    pods time-slicing 8 GPUs, and the declared ones) looks only at its own GPUs."""

    # pid -> where NVML lists it, in list order: (GPU position, MIG instance position or -1 for the whole-GPU
    # list, position in that list, the GpuProcess): all that attribution reads of a process
    by_pid: Mapping[int, tuple[tuple[int, int, int, GpuProcess], ...]]
    # a GPU's index or UUID, or a MIG instance's UUID -> positions of the GPUs that have it (what a profile's
    # or an identity's ``gpus`` may name; a dict lookup matches as the set membership ``_gpus_of`` tests)
    by_ref: Mapping[object, Sequence[int]]
    # per GPU position, what attribution reads of the GPU itself: index, UUID, up, memory total and its MIG
    # instances' (UUID, memory total)
    facts: tuple[_Inputs, ...]

    @classmethod
    def of(cls, gpus: Sequence[GpuSample]) -> _GpuIndex:
        by_pid: dict[int, list[tuple[int, int, int, GpuProcess]]] = {}
        by_ref: dict[object, list[int]] = {}
        facts = []
        for i, g in enumerate(gpus):
            by_ref.setdefault(g.index, []).append(i)
            by_ref.setdefault(g.uuid, []).append(i)
            for j, m in enumerate(g.mig_instances):
                by_ref.setdefault(m.uuid, []).append(i)
                for k, x in enumerate(m.processes):  # listed only by its instance (the whole-GPU list needs privileges)
                    by_pid.setdefault(x.pid, []).append((i, j, k, x))
            for k, x in enumerate(g.processes):
                by_pid.setdefault(x.pid, []).append((i, -1, k, x))
            facts.append((g.index, g.uuid, g.up, g.memory_total_bytes,
                          tuple((m.uuid, m.memory_total_bytes) for m in g.mig_instances)))
        return cls({k: tuple(v) for k, v in by_pid.items()}, by_ref, tuple(facts))

    def lookup(self, pids: Sequence[int], refs: Iterable[object], inputs: bool = True) -> tuple[list[int], _Inputs]:
        """(the positions of the GPUs that list one of ``pids`` or that ``refs`` name, what ``_gpus_of`` reads for
        ``pids`` on those GPUs when ``inputs``: the GPUs' facts and every listing of the pids (GPU, MIG instance,
        GpuProcess) in list order (the order of its sums), without their places in the lists (other processes
        coming and going move them))."""
        by_pid = self.by_pid
        listed: Sequence[_Listing]
        if len(pids) == 1:
            listed = by_pid.get(pids[0], ())
        else:
            several = [e for pid in pids for e in by_pid.get(pid, ())]
            if inputs:
                several.sort(key=_place)
            listed = several
        found = {e[0] for e in listed}
        by_ref = self.by_ref
        for ref in refs:
            found.update(by_ref.get(ref, ()))
        positions = sorted(found)
        if not inputs:
            return positions, ()
        facts = self.facts
        return positions, (tuple([facts[i] for i in positions]), tuple([(i, j, x) for i, j, _, x in listed]))


def _place(listing: tuple[int, int, int, GpuProcess]) -> tuple[int, int, int]:
    return listing[0], listing[1], listing[2]


def _auto_status(g: IdentityGroup, claimed: set[int], names: set[str], gpus: Sequence[GpuSample],
                 constants: OverheadConstants, where: _GpuIndex | None = None,
                 memo: AutoStatuses | None = None, measured: WorkloadProcesses | None = None
                 ) -> WorkloadStatus | None:
    """An automatic workload (a pod, job, container, unit or launcher holding a GPU); None when a declared
    profile already matches its GPU processes (the declared profile wins) or carries the same name. One
    started by a serving or training launcher gets a profile from its command line and model config
    (workload/launchers.py) and is sized like a declared one; without a readable model config it has its
    measured values and the reason in ``estimate_error``, nothing guessed. Any other gets a profile of its
    name alone (``minimal_profile``: no memory model, so no expected memory, "automatic workload: no profile
    to size it"), so that it still gets the verdicts that need none. ``measured``: the processes collector's
    entry of its name (its members' CPU, threads, RSS, I/O), whose count is its ``processes``."""
    if claimed_by_declared(g, claimed, names):
        return None
    pids = [pid for pid in g.pids if pid not in claimed] if claimed else list(g.pids)
    if where is None:
        where = _GpuIndex.of(gpus)
    positions, inputs = where.lookup(pids, g.gpus)
    key: _Inputs = ()
    if measured is not None:
        processes: int | None = measured.processes
    else:  # the processes collector has not measured it yet (its first tick) or failed: what its cgroup says
        processes = g.processes if g.processes is not None else (len(pids) if pids else None)
    if memo is not None:  # every input below but the figures the status only carries (AutoStatuses)
        key = (g.kind, g.launcher, g.model, g.gpus, tuple(pids), constants, inputs)
        if (known := memo.get(g.name, key, g.cgroup, measured, processes)) is not None:
            return known
    used = _gpus_of(set(pids), set(g.gpus), [gpus[i] for i in positions])
    known_used = [x.memory_used_bytes for x in used if x.memory_used_bytes is not None]
    totals = [x.memory_total_bytes for x in used if x.memory_total_bytes is not None]
    kind, model, precision, runtime = g.kind, "", "", ""
    profile: WorkloadProfile = minimal_profile(g.name)
    error: str | None = NO_PROFILE
    est = None
    expected: tuple[Mapping[str, int], int | None, int | None] = (EMPTY, None, None)
    if g.launcher is not None:
        from headroom.workload.launcher_profiles import auto_profile

        profile, error = auto_profile(g.launcher, g.model, g.name)
        if g.kind == "launcher":
            kind = profile.kind.value
        model, runtime = profile.model.name or "", profile.runtime.name or ""
        if error is None:
            precision = profile.weight_precision.value if profile.weight_precision else ""
            est, error = _sized(profile, totals, len(used), constants)
            if est is not None:
                expected = _expected(profile, est, len(used))
    components, per_gpu, peak = expected
    workers = measured_workers(kind, None, measured)  # as AutoStatuses.get makes it again from a new ``measured``
    status = WorkloadStatus(
        name=g.name, kind=kind, model=model, precision=precision, runtime=runtime, processes=processes,
        measured=measured, dataloader_workers=workers, gpus=used,
        gpu_memory_used_bytes=sum(known_used) if known_used else None,
        gpu_memory_capacity_bytes=sum(totals) if used and len(totals) == len(used) else None,
        estimate=est, expected_components=components, expected_per_gpu_bytes=per_gpu, expected_peak_bytes=peak,
        estimate_error=error, source="auto", cgroup=g.cgroup, profile=profile,
    )  # fmt: skip
    if memo is not None:
        memo.put(g.name, key, status)
    return status


NO_PROFILE = "automatic workload: no profile to size it"  # estimate_error of one no launcher describes


@lru_cache(maxsize=1024)
def minimal_profile(name: str) -> WorkloadProfile:
    """The profile of an automatic workload that no launcher describes: its name, and nothing the memory model
    could size (no model, no expected memory); kind ``inference``, the one whose rules assume least (not
    ``cpu-inference``, which has no GPU; not ``training``, whose remedies speak of micro-batches). Enough for
    the verdicts that need no memory model: cpu, host and shared memory, disk, network, serving and the GPU's
    own rules on its GPUs. Memoised: the same object every tick (a pod's churn replaces the oldest)."""
    return WorkloadProfile(name=name, kind=Kind.INFERENCE)


def _sized(p: WorkloadProfile, totals: Sequence[int], gpus: int, constants: OverheadConstants
           ) -> tuple[Estimate | None, str | None]:
    return _estimate(p, min(totals) if totals else None, gpus or None, constants)


def _expected(p: WorkloadProfile, est: Estimate, gpus: int) -> tuple[Mapping[str, int], int | None, int | None]:
    """(components, expected per GPU, expected peak summed over its GPUs) of an estimate."""
    components = MappingProxyType({c.name: c.bytes for c in est.components})
    if p.kind == Kind.CPU_INFERENCE:
        return components, None, None
    per_gpu = est.expected_usage_bytes
    return components, per_gpu, per_gpu * (gpus or max(est.gpus_needed, 1))


def gpu_identity_labels(sample: Sample) -> dict[str, tuple[str, str, str, str]]:
    """GPU UUID -> (namespace, pod, container, hpc_job) of the pods and jobs holding it (a MIG device counts
    for its GPU); several holders (time-slicing, MPS, MIG) are joined with ",", sorted."""
    identity = sample.data("identity")
    if not isinstance(identity, IdentitySample) or not identity.groups:
        return {}
    nvml = sample.data("nvml")
    parent = {m.uuid: g.uuid for g in nvml.gpus for m in g.mig_instances} if isinstance(nvml, NvmlSample) else {}
    pods: dict[str, dict[tuple[str, str, str], None]] = {}
    jobs: dict[str, dict[str, None]] = {}
    for g in identity.groups:
        for ref in g.gpus:
            uuid = parent.get(ref, ref)
            if g.kind == "pod" and g.pod:
                pods.setdefault(uuid, {})[(g.namespace, g.pod, g.container)] = None
            elif g.kind == "job":
                jobs.setdefault(uuid, {})[g.job_id] = None
    out = {}
    for uuid in set(pods) | set(jobs):
        held = sorted(pods.get(uuid, {}))
        out[uuid] = (",".join(sorted({h[0] for h in held})), ",".join(h[1] for h in held),
                     ",".join(h[2] for h in held if h[2]), ",".join(sorted(jobs.get(uuid, {}))))
    return out


def _status(p: WorkloadProfile, procs: WorkloadProcesses | None, gpus: Sequence[GpuSample],
            host_memory: int | None, constants: OverheadConstants, where: _GpuIndex | None = None) -> WorkloadStatus:
    used = _gpus(p, procs, gpus, where) if p.kind != Kind.CPU_INFERENCE else ()
    known_used = [g.memory_used_bytes for g in used if g.memory_used_bytes is not None]
    totals = [g.memory_total_bytes for g in used if g.memory_total_bytes is not None]
    capacity = sum(totals) if used and len(totals) == len(used) else None

    if p.kind == Kind.CPU_INFERENCE:
        est, error = _sized(p, [host_memory] if host_memory is not None else [], 0, constants)
    else:
        est, error = _sized(p, totals, len(used), constants)
    peak = per_gpu = None
    components: Mapping[str, int] = EMPTY
    if est is not None:
        components, per_gpu, peak = _expected(p, est, len(used))

    precision = p.weight_precision
    return WorkloadStatus(
        name=p.name, kind=p.kind.value, model=p.model.name or "", precision=precision.value if precision else "",
        runtime=p.runtime.name or "", processes=procs.processes if procs is not None else None, measured=procs,
        gpus=used, gpu_memory_used_bytes=sum(known_used) if known_used else None, gpu_memory_capacity_bytes=capacity,
        estimate=est, expected_components=components, expected_per_gpu_bytes=per_gpu, expected_peak_bytes=peak,
        estimate_error=error, dataloader_workers=measured_workers(p.kind, p.dataloader_workers, procs),
        declared_dataloader_workers=p.dataloader_workers, job=p.job or "", team=p.team or "",
    )  # fmt: skip


def measured_workers(kind: Kind | str, declared: int | None, procs: WorkloadProcesses | None) -> int | None:
    """The DataLoader workers found under a workload's ranks, summed: for a trainer (any kind but a serving one) or a
    profile that declares workers, where its processes are measured; None otherwise (a serving runtime's own
    processes are not DataLoader workers, and an unmeasured workload's count is unknown, not 0)."""
    if procs is None:
        return None
    found = getattr(procs, "dataloader_workers", None)
    serving = Kind(kind).is_inference if kind in set(Kind) else False
    if serving and declared is None and not found:
        return None
    return found


def _gpus(p: WorkloadProfile, procs: WorkloadProcesses | None, gpus: Sequence[GpuSample],
          where: _GpuIndex | None = None) -> tuple[WorkloadGpu, ...]:
    """The GPUs the workload uses: where NVML lists its processes, plus the declared ones."""
    pids = tuple(getattr(procs, "pids", ()))
    if where is not None:  # only those the index says it may use, not every GPU
        gpus = [gpus[i] for i in where.lookup(pids, p.gpus, inputs=False)[0]]
    return _gpus_of(set(pids), set(p.gpus), gpus)


def _gpus_of(pids: set[int], declared: set[int | str], gpus: Sequence[GpuSample]) -> tuple[WorkloadGpu, ...]:
    """The GPUs where NVML lists one of ``pids``, plus the ``declared`` ones (index, GPU or MIG UUID). On a MIG
    GPU its processes may be listed only by their instance (the whole-GPU list needs more privileges)."""
    out = []
    for g in gpus:
        held = tuple(m for m in g.mig_instances
                     if m.uuid in declared or any(x.pid in pids for x in m.processes))
        mine = {x.pid: x for x in g.processes if x.pid in pids}
        for m in held:  # the instance's own list: the same process is counted once
            for x in m.processes:
                if x.pid in pids:
                    mine.setdefault(x.pid, x)
        is_declared = g.index in declared or g.uuid in declared or any(m.uuid in declared for m in g.mig_instances)
        if not mine and not is_declared:
            continue
        known = [x.used_memory_bytes for x in mine.values() if x.used_memory_bytes is not None]
        if mine:  # noqa: SIM108 - two cases, each with its own unknown
            memory_used = sum(known) if known else None
        else:
            memory_used = 0 if g.up else None
        sm = [x.sm_utilization_ratio for x in mine.values() if x.sm_utilization_ratio is not None]
        mig_totals = [m.memory_total_bytes for m in held if m.memory_total_bytes is not None]
        out.append(WorkloadGpu(
            index=g.index, uuid=g.uuid, memory_used_bytes=memory_used,
            utilization_ratio=min(1.0, sum(sm)) if sm else None,
            memory_total_bytes=sum(mig_totals) if held and len(mig_totals) == len(held) else
            (None if held else g.memory_total_bytes),
            declared=is_declared, attributed=bool(mine), mig_instances=tuple(m.uuid for m in held),
        ))  # fmt: skip
    return tuple(out)


@lru_cache(maxsize=128)
def _estimate(p: WorkloadProfile, memory: int | None, gpus: int | None, constants: OverheadConstants
              ) -> tuple[Estimate | None, str | None]:
    """(sizing.estimate, None) or (None, why it cannot size), memoised: profiles and GPU memory rarely change
    between ticks, and a profile the model cannot size stays unsizable (the refusal is memoised too)."""
    try:
        return estimate(p, gpu_memory_bytes=memory, gpus=gpus, overhead=constants), None
    except SizingError as exc:
        return None, str(exc)
    except (ArithmeticError, ValueError, TypeError) as exc:  # figures the model cannot hold: that workload unsized
        return None, f"the memory model cannot size this profile ({type(exc).__name__}: {clip(str(exc), 120)})"

