"""The analysis stage of every tick: window + configuration -> (derived values, Findings).

Pure: reads Samples and workload profiles, never a source, never Prometheus, never the clock (time is
each Sample's monotonic stamp), so replaying a recording reproduces the live verdicts. Each step lives
in its own module (rates, workloads, signals, bottleneck, headroom) and is table-tested on its own.
State that must persist across ticks (hysteresis, idle-time counters) lives in the Analysis object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple, TypedDict, cast

from headroom.analysis import bottleneck, health, rates, remedies, signals
from headroom.analysis import serving as serving_analysis
from headroom.analysis.bottleneck import NONE, Hysteresis, Verdict
from headroom.analysis.headroom import (
    PROBE_RECENT_SECONDS,
    WorkloadHeadroom,
    measured_headroom,
    workload_headroom,
)
from headroom.analysis.window import VRAM_TREND_MAX_POINTS, recent, thinned
from headroom.safeio import clip
from headroom.samples import Neighbour, NvmlSample, Sample, ServingEndpoint
from headroom.workload import attribution

if TYPE_CHECKING:
    from headroom.config import Config
    from headroom.workload.attribution import AutoStatuses, WorkloadStatus
    from headroom.workload.profiles.types import WorkloadProfile

LONG_REFRESH_SECONDS = 5.0  # long-window scores are recomputed this often (sample time), not every tick
# ... from at most this many evenly spaced samples of the long window (every 5th of 300 at 1 s): a refresh then
# costs a few short ticks instead of ~20 (docs/analysis.md, "From samples to a verdict")
LONG_POINTS = VRAM_TREND_MAX_POINTS  # 60, as the VRAM trend fit thins its own points
# automatic workloads (pods, jobs ...: up to collectors.identity.max_workloads) are scored again within this many
# seconds of sample time, the ones scored longest ago first, at least AUTO_EVERY_TICK a tick (so every tick while
# there are no more; 5 a tick for 50 pods at 1 Hz); a new one at once; in between a workload keeps its last
# finding (the same object). As the cgroup figures of sources/identity.py (CGROUP_REFRESH_SECONDS) and well within
# analysis.hold (20 s). A verdict costs about 0.4 ms here: 50 pods scored every tick would add 20 ms a tick
AUTO_REFRESH_SECONDS = 10.0
AUTO_EVERY_TICK = 5
# ... unless nothing it is judged from moved since it was scored (``_auto_marks``: its status equal, so its own
# processes, cgroup and GPU listings the same; its GPUs' verdicts, primary and candidate, the same; the host's
# pressures on the same side of 0.5; no serving endpoint): then its finding stands, taking none of that budget,
# until this many seconds after it was scored (one with a pending candidate: until that would hold for
# analysis.hold). Its scores and evidence are then up to that old; its verdict is re-made the tick any of those
# moves. 50 pods on the reference bench: about 4 scorings a tick instead of 8 (docs/benchmarks.md)
AUTO_STEADY_SECONDS = 30.0
# an automatic workload's long-window scores (minutes of samples) are made again within this many seconds, at the
# long-window refreshes (LONG_REFRESH_SECONDS), the ones made longest ago first: all of them at each refresh while
# there are no more than AUTO_EVERY_TICK, 9 per refresh for 50 pods
AUTO_LONG_REFRESH_SECONDS = 30.0

class Settings(TypedDict):
    """The ``analysis:`` section's settings (DEFAULTS where unset)."""

    short_window: float
    long_window: float
    hold: float
    idle_busy_ratio: float
    gpu_slowdown_celsius: float
    cost_per_gpu_hour: float | None
    currency: str


DEFAULTS: Settings = {
    "short_window": 15.0,  # seconds of samples the scores look at
    "long_window": 300.0,
    "hold": 20.0,  # a new primary must hold this long before it replaces the current one
    "idle_busy_ratio": 0.05,  # a GPU below this utilization counts as idle
    "gpu_slowdown_celsius": 87.0,  # for thermal headroom where NVML gives no slowdown threshold
    "cost_per_gpu_hour": None,  # for GPUs no workload claims (a workload's own cost_per_gpu_hour wins)
    "currency": "USD",  # of every cost_per_gpu_hour; the `currency` label of headroom_gpu_idle_cost_total
}


@dataclass(frozen=True)
class GpuFinding:
    index: int
    uuid: str
    name: str
    verdict: Verdict
    idle: bool
    clock_events: Mapping[str, float] = field(default_factory=dict)  # reason -> share of the window active
    # the temperature heat is judged against (signals.thermal_limit) and where it came from: the landing page's line
    thermal_limit_celsius: float | None = None
    thermal_limit_source: str = ""
    idle_seconds: float = 0.0  # how long the GPU has been idle without a break (0 while busy)
    allocated_to: tuple[str, ...] = ()  # the workloads (declared, pods, jobs ...) that hold this GPU


@dataclass(frozen=True)
class WorkloadFinding:
    name: str
    verdict: Verdict
    headroom: WorkloadHeadroom
    gpus: tuple[int, ...] = ()
    serving: serving_analysis.ServingSignals | None = None  # the runtime's view (profiles with an endpoint)
    serving_headroom: serving_analysis.ServingHeadroom | None = None
    slos: tuple[serving_analysis.SloStatus, ...] = ()  # the profile's latency objectives (slo:)
    # resource -> the top processes outside the workload pressing on it (samples.Neighbour), where any do
    neighbours: Mapping[str, tuple[Neighbour, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class HostFinding:
    gpus_idle: int = 0
    gpu_idle_seconds_total: float = 0.0
    gpu_idle_cost_total: float | None = None  # None when no cost per GPU-hour is configured
    gpu_cost_per_hour: Mapping[int, float] = field(default_factory=dict)  # GPU index -> price, where one is set
    currency: str = "USD"  # ISO 4217 code of the cost
    # the host-wide signals of the starvation rules before each workload's own use scales them (bottleneck.host_view):
    # "cpu", "disk_io", "host_memory" -> 0-1. Pressure a workload that uses little of it is not blamed for still
    # has neighbours worth naming (sources/neighbours.py ``scored``)
    host_pressure: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    """A primary bottleneck that changed this tick (logged once, recorded)."""

    entity: str  # "workload" | "gpu"
    name: str  # workload name or GPU index
    before: str
    after: str
    evidence: str
    remedy: str = ""  # what to do about ``after`` (analysis/remedies.py); "" for none
    runbook_url: str = ""  # its runbook section on GitHub (remedies.runbook_url)
    runbook_path: str = ""  # the same section on the agent's own /runbook page (remedies.runbook_path)


@dataclass(frozen=True)
class Findings:
    """What analysis concluded this tick. Exposition renders it; record/replay compares it."""

    workloads: tuple[WorkloadStatus, ...] = ()  # one per declared workload, then the automatic ones
    gpu_findings: tuple[GpuFinding, ...] = ()
    workload_findings: tuple[WorkloadFinding, ...] = ()
    host: HostFinding = field(default_factory=HostFinding)
    changes: tuple[Change, ...] = ()
    # (entity, reason) of each workload whose analysis failed this tick: its verdict says why; the sampler logs it
    errors: tuple[tuple[str, str], ...] = ()
    # the thresholds this tick was judged by (analysis.thresholds over DEFAULT_THRESHOLDS): the page draws them
    thresholds: Mapping[str, float] = field(default_factory=dict)
    # each GPU's health (analysis/health.py): the conditions that make it unfit for work, with their reasons
    gpu_health: tuple[health.GpuHealth, ...] = ()

    def primaries(self) -> dict[str, str]:
        """{"workload/<name>": primary, "gpu/<index>": primary}: what replay compares."""
        out = {f"workload/{w.name}": w.verdict.primary for w in self.workload_findings}
        out.update({f"gpu/{g.index}": g.verdict.primary for g in self.gpu_findings})
        return out


class Analysis:
    """Holds the configuration analysis needs (profiles, sizing constants, thresholds) and any state
    that must persist across ticks (hysteresis, idle counters). Called once per tick with the window."""

    def __init__(self, config: Config | None) -> None:
        self.config = config
        section = dict(getattr(config, "analysis", None) or {})
        # each set key's type is the one config.py's _analysis_spec validated (a Duration or Number: float, str)
        self.settings = cast(Settings, {k: (section.get(k) if section.get(k) is not None else v)
                                        for k, v in DEFAULTS.items()})
        self.thresholds = {**bottleneck.DEFAULT_THRESHOLDS, **{k: v for k, v in
                                                             (section.get("thresholds") or {}).items()
                                                             if v is not None}}
        self.profiles: tuple[WorkloadProfile, ...] = tuple(getattr(config, "workloads", ()) or ())
        self._hysteresis: dict[str, Hysteresis] = {}
        self._settled: set[str] = set()  # hysteresis keys updated in the current tick
        self._last_monotonic: float | None = None
        self._idle_seconds = 0.0
        self._idle_since: dict[str, float] = {}  # GPU uuid -> sample time its current idle stretch began
        self._health = health.HealthTracker(self.thresholds)
        self._idle_cost = 0.0
        self._long_at: float | None = None
        self._long_scores: dict[str, Mapping[str, float]] = {}
        self._auto: AutoStatuses | None = None  # last tick's automatic workload statuses
        # automatic workload -> (when it was last scored, that finding), in the order they were scored
        self._auto_findings: dict[str, tuple[float, WorkloadFinding, _Due]] = {}  # ... and what it was judged from
        self._auto_long_at: dict[str, float] = {}  # automatic workload -> when its long scores were made

    def _hold(self, key: str) -> Hysteresis:
        h = self._hysteresis.get(key)
        if h is None:
            h = self._hysteresis[key] = Hysteresis(hold=self.settings["hold"])
        return h

    def _attribute(self, sample: Sample) -> tuple[WorkloadStatus, ...]:
        """Workload statuses of this tick (workload/attribution.py). The bottleneck and headroom steps read,
        from each status: ``name``, ``gpu_indices`` (GPUs it uses), ``processes``, ``estimate``
        (sizing.Estimate or None), ``expected_peak_bytes`` and optionally ``cpu_quota_cores``."""
        if self._auto is None:
            self._auto = attribution.AutoStatuses()
        return attribution.attribute(sample, self.profiles, getattr(self.config, "sizing", None), self._auto)

    def __call__(self, window: Sequence[Sample]) -> tuple[Mapping[str, float | None], Findings]:
        derived = rates.derive(window, self.settings["short_window"])
        if not window:
            return derived, Findings()
        sample = window[-1]
        now = sample.monotonic
        dt = 0.0 if self._last_monotonic is None else max(0.0, now - self._last_monotonic)
        self._last_monotonic = now
        t, s = self.thresholds, self.settings
        statuses = self._attribute(sample)
        host = signals.host_signals(window, s["short_window"])
        view = bottleneck.host_view(host, t)  # the host's side of the starvation rules, shared by every verdict
        rules = bottleneck.GpuRules(t)  # each GPU's own rules, shared by its verdict and its workloads'
        gpus = signals.gpu_signals(window, s["short_window"], s["gpu_slowdown_celsius"])
        # the long window (minutes of samples) changes slowly: its scores are refreshed every
        # LONG_REFRESH_SECONDS of sample time, not every tick (a full pass costs ~20x a short one)
        refresh = self._long_at is None or not 0 <= now - self._long_at < LONG_REFRESH_SECONDS
        if refresh:
            self._long_at = now
            # an automatic workload's long scores are kept until it is due again (_autos_long_due)
            self._long_scores = {k: v for k, v in self._long_scores.items() if k[9:] in self._auto_long_at}
            long_span = thinned(window, s["long_window"], LONG_POINTS)
            host_long = signals.host_signals(long_span, s["long_window"])
            view_long = bottleneck.host_view(host_long, t)
            rules_long = bottleneck.GpuRules(t)
            gpus_long = {g.uuid: g for g in signals.gpu_signals(long_span, s["long_window"], s["gpu_slowdown_celsius"])}
        changes: list[Change] = []
        self._settled = set()

        status_by_name = {st.name: st for st in statuses}
        # declared profiles, then every automatic workload: a launcher's command line gives one a profile
        # (workload/launchers.py), any other has its name alone (attribution.minimal_profile: no memory model, so
        # the verdicts that need one find no expected memory): all get verdicts and headroom the same way
        auto = tuple(profile for st in statuses
                     if getattr(st, "source", "declared") == "auto" and (profile := st.profile) is not None)
        profiles = self.profiles + auto
        indices_of = {p.name: tuple(getattr(status_by_name.get(p.name), "gpu_indices", ()) or ())
                      or _declared_indices(p, sample) for p in profiles}
        own_reservation, reserved = _reservations(profiles, {p.name for p in auto}, indices_of,
                                                  _served(window, s["short_window"]))
        holders: dict[int, list[str]] = {}
        for name, held in indices_of.items():
            for i in held:
                holders.setdefault(i, []).append(name)
        idle_since = {}
        gpu_findings = []
        for g in gpus:
            v = bottleneck.score_gpu(g, host, t, reserved.get(g.index), view, rules)
            key = f"gpu/{g.uuid}"
            if refresh:
                self._long_scores[key] = bottleneck.score_gpu(gpus_long.get(g.uuid, g), host_long, t,
                                                              reserved.get(g.index), view_long, rules_long).scores
            v = self._settle(v, self._long_scores.get(key, {}), key, "gpu", str(g.index), now, changes,
                             remedies.Facts(gpus=(g,), host=host, reserved=reserved.get(g.index)))
            is_idle = _is_idle(g, s)
            if is_idle:
                idle_since[g.uuid] = self._idle_since.get(g.uuid, now)
            gpu_findings.append(GpuFinding(g.index, g.uuid, g.name, v, idle=is_idle,
                                           clock_events=dict(g.reason_shares),
                                           thermal_limit_celsius=g.thermal_limit_celsius,
                                           thermal_limit_source=g.thermal_limit_source,
                                           idle_seconds=round(now - idle_since[g.uuid], 3) if is_idle else 0.0,
                                           allocated_to=tuple(holders.get(g.index, ()))))
        self._idle_since = idle_since

        by_index = {g.index: g for g in gpus}
        workload_findings: list[WorkloadFinding] = []
        errors: list[tuple[str, str]] = []
        due = self._autos_due(auto, now, dt, _auto_marks(auto, status_by_name, indices_of, gpu_findings, view, sample))
        long_due = self._autos_long_due(auto) if refresh else set()
        for p in profiles:
            key = f"workload/{p.name}"
            scored = due.get(p.name)
            kept = None if isinstance(scored, _Due) else scored  # one scored not long ago: its last finding stands
            if kept is not None and p.name not in long_due:
                workload_findings.append(kept)
                self._settled.add(key)  # and its hysteresis
                continue
            try:
                st = status_by_name.get(p.name)
                indices = indices_of[p.name]
                # a workload on MIG instances: its GPUs' memory figures are those of its instances
                slices = {wg.index: wg.mig_instances for wg in getattr(st, "gpus", ()) or ()
                          if getattr(wg, "mig_instances", ())}
                mine = [signals.mig_memory(by_index[i], window, s["short_window"], slices[i]) if i in slices
                        else by_index[i] for i in indices if i in by_index]
                peak = getattr(st, "expected_peak_bytes", None)
                if refresh and (p.name not in due or p.name in long_due):
                    if p.name in due:
                        self._auto_long_at[p.name] = now
                    w_long = signals.workload_signals(long_span, s["long_window"], st, p, host.logical_cpus)
                    mine_long = [signals.mig_memory(gpus_long.get(g.uuid, g), long_span, s["long_window"], slices[g.index])
                                 if g.index in slices else gpus_long.get(g.uuid, g) for g in mine]
                    srv_long = serving_analysis.serving_signals(long_span, s["long_window"], p.name, t)
                    self._long_scores[key] = bottleneck.score_workload(
                        p, w_long, mine_long, host_long, t, peak, srv_long, view=view_long, rules=rules_long,
                        reserved=own_reservation.get(p.name)).scores
                if kept is not None:  # its long scores only: its finding shows them when it is scored next
                    workload_findings.append(kept)
                    self._settled.add(key)
                    continue
                w = signals.workload_signals(window, s["short_window"], st, p, host.logical_cpus)
                est = getattr(st, "estimate", None)
                srv = serving_analysis.serving_signals(window, s["short_window"], p.name, t)  # declared or detected
                alt = ""
                if srv is not None and srv.up and est is not None and (srv.usage or 0) >= t["kv_usage_low"]:
                    alt = serving_analysis.alternatives(p, est.gpu_memory_bytes, est.gpus_available, srv.capacity_tokens)
                v = bottleneck.score_workload(p, w, mine, host, t, peak, srv, alt, view, rules,
                                              own_reservation.get(p.name))
                v = self._settle(v, self._long_scores.get(key, {}), key, "workload", p.name, now, changes,
                                 remedies.Facts(tuple(mine), host, w, p, srv, est))
                room = workload_headroom(p, w, mine, host, est, s["gpu_slowdown_celsius"], srv)
                room = measured_headroom(room, sample.data("probe"), p.name, srv, sample.timestamp)
                workload_findings.append(WorkloadFinding(p.name, v, room, tuple(indices), srv,
                                                         serving_analysis.serving_headroom(srv, p, est),
                                                         serving_analysis.slo_status(
                                                             p, srv, sample.data("probe"), sample.timestamp,
                                                             PROBE_RECENT_SECONDS),
                                                         _neighbours(host, p.name)))
                if isinstance(scored, _Due):  # (an automatic workload whose finding is not kept)
                    self._auto_findings[p.name] = (now, workload_findings[-1], scored)
            except Exception as exc:  # a fault in one workload's figures (a hostile config.json) degrades that
                # workload only: its verdict says why, the other workloads and the tick go on (docs/reliability.md)
                reason = f"analysis failed: {type(exc).__name__}: {clip(str(exc))}"
                errors.append((f"workload/{p.name}", reason))
                workload_findings.append(WorkloadFinding(p.name, Verdict({}, {NONE: reason}, NONE), WorkloadHeadroom(),
                                                         tuple(indices_of[p.name])))

        declared = {f"workload/{p.name}" for p in self.profiles}
        for key in [k for k in self._hysteresis if k.startswith("workload/") and k not in self._settled
                    and k not in declared]:  # an automatic workload that ended: forget it (churn leaks nothing)
            del self._hysteresis[key]
            self._long_scores.pop(key, None)
        for key, h in self._hysteresis.items():
            if key not in self._settled:  # not seen this tick: its pending candidate was interrupted
                h.interrupt()
        idle = [g for g in gpu_findings if g.idle]
        costs = _gpu_costs(self.profiles, workload_findings)
        default_cost = s["cost_per_gpu_hour"]
        self._idle_seconds += dt * len(idle)
        self._idle_cost += sum(dt / 3600.0 * (costs.get(g.index, default_cost) or 0.0) for g in idle)
        priced = default_cost is not None or bool(costs)
        host_finding = HostFinding(
            gpus_idle=len(idle), gpu_idle_seconds_total=round(self._idle_seconds, 6),
            gpu_idle_cost_total=round(self._idle_cost, 6) if priced else None, currency=s["currency"],
            gpu_cost_per_hour={g.index: c for g in gpu_findings
                               if (c := costs.get(g.index, default_cost)) is not None},
            host_pressure={"cpu": view.cpu[0], "disk_io": view.disk[0], "host_memory": view.memory[0]},
        )
        nvml = sample.data("nvml")
        gpu_health = self._health(nvml.gpus, now) if isinstance(nvml, NvmlSample) else ()
        return derived, Findings(tuple(statuses), tuple(gpu_findings), tuple(workload_findings), host_finding,
                                 tuple(changes), tuple(errors), t, gpu_health)

    def _autos_long_due(self, auto: tuple[WorkloadProfile, ...]) -> set[str]:
        """The automatic workloads whose long-window scores are made again at this refresh (every
        LONG_REFRESH_SECONDS): those made longest ago (never first), as many as it takes to make each again within
        AUTO_LONG_REFRESH_SECONDS, at least AUTO_EVERY_TICK (so all of them while there are no more)."""
        at = self._auto_long_at
        budget = max(AUTO_EVERY_TICK, -(-len(auto) * int(LONG_REFRESH_SECONDS) // int(AUTO_LONG_REFRESH_SECONDS)))
        if len(auto) <= budget:
            return {p.name for p in auto}
        return set(sorted((p.name for p in auto), key=lambda name: at.get(name, -1e18))[:budget])

    def _autos_due(self, auto: tuple[WorkloadProfile, ...], now: float, dt: float,
                   marks: Mapping[str, _Mark] | None = None) -> dict[str, WorkloadFinding | _Due]:
        """Automatic workload name -> its last finding (a WorkloadFinding: kept), or what it is judged from this
        tick (``marks``, ``_auto_marks``; None where there are none) when it is scored this tick: new ones at
        once, then the ones scored longest ago, as many as it takes to score each again within
        AUTO_REFRESH_SECONDS (at least AUTO_EVERY_TICK a tick), leaving out those whose marks equal the ones they
        were scored with (steady: kept, within AUTO_STEADY_SECONDS). Forgets those that ended (churn leaks
        nothing)."""
        findings = self._auto_findings
        marks = marks or {}
        names = [p.name for p in auto]
        live = set(names)
        for name in [n for n in findings if n not in live]:
            del findings[name]
            self._auto_long_at.pop(name, None)
        for name in [n for n in self._auto_long_at if n not in live]:
            del self._auto_long_at[name]
        due: dict[str, WorkloadFinding | _Due] = {name: _Due(marks.get(name)) for name in names if name not in findings}
        ticks = max(1, int(AUTO_REFRESH_SECONDS / dt)) if dt > 0 else 1
        budget = max(AUTO_EVERY_TICK, -(-len(names) // ticks))
        for name, (at, finding, was) in list(findings.items()):  # scored longest ago first
            mark = marks.get(name)
            if mark is not None and 0 <= now - at < _steady_for(finding.verdict) and mark == was.mark:
                due[name] = finding  # nothing it is judged from moved: its finding stands
            elif budget > 0 or now - at >= AUTO_REFRESH_SECONDS:  # (a sample clock that stepped back: not due)
                due[name] = _Due(mark)
                budget -= 1
                del findings[name]  # put back at the end when scored
            else:
                due[name] = finding
        return due

    def _settle(self, v: Verdict, long_scores: Mapping[str, float], key: str, entity: str, name: str, now: float,
                changes: list[Change], facts: remedies.Facts) -> Verdict:
        """The verdict after hysteresis: its primary, the candidate still pending (with how long it has held and
        how long it must still hold) and what to do about both (remedies.py)."""
        h = self._hold(key)
        self._settled.add(key)
        before = h.primary
        primary, changed = h.update(v.candidate, now)
        pending = h.pending(now)
        fixes = remedies.Remedies((primary, pending[0] if pending is not None else NONE), facts)
        # (Verdict's defaults where no candidate is pending)
        waiting, held, confirm_in = ((pending[0], round(pending[1], 3), round(pending[2], 3)) if pending is not None
                                     else (NONE, None, None))
        settled = Verdict(scores=v.scores, evidence=v.evidence, candidate=v.candidate, primary=primary,
                          long_scores=long_scores, remedies=fixes, pending=waiting, pending_seconds=held,
                          confirm_in_seconds=confirm_in)
        if changed:
            evidence = v.evidence.get(primary, "") if primary != NONE else \
                v.evidence.get(NONE, "no resource scores high enough")
            fix = settled.remedies.get(primary)
            changes.append(Change(entity, name, before, primary, evidence, fix.text if fix else "",
                                  fix.runbook_url if fix else "", fix.runbook_path if fix else ""))
        return settled


def _served(window: Sequence[Sample], seconds: float) -> dict[str, ServingEndpoint]:
    """workload -> its newest serving scrape that was read (up, its runtime detected) in the last ``seconds``: the
    format of its metrics says which runtime serves it, and one failed scrape does not forget that."""
    out: dict[str, ServingEndpoint] = {}
    for sample in reversed(recent(window, seconds)):
        for e in getattr(sample.data("serving"), "endpoints", ()) or ():
            if e.workload not in out and e.up and e.runtime:
                out[e.workload] = e
    return out


def _reservations(profiles: Sequence[WorkloadProfile], auto: set[str], indices_of: Mapping[str, tuple[int, ...]],
                  served: Mapping[str, ServingEndpoint]) -> tuple[dict[str, bottleneck.Reserved], dict[int, bottleneck.Reserved]]:
    """(workload -> the reservation of the runtime that runs it, GPU index -> the reservation on it). What runs is
    found from the workload's serving metrics, else its profile (an automatic workload's from its launcher's
    command line): workload/runtimes.py says whether that runtime reserves up front. On a GPU it shares with a
    workload that does not reserve, the reservation names that workload: it leaves it no room, so the GPU's
    full card is not normal (two reserving runtimes sized to share a card are)."""
    own = {p.name: r for p in profiles if (r := bottleneck.reserved_by(p, served.get(p.name), p.name in auto))}
    on_gpu: dict[int, list[str]] = {}
    for p in profiles:
        for i in indices_of[p.name]:
            on_gpu.setdefault(i, []).append(p.name)
    per_gpu: dict[int, bottleneck.Reserved] = {}
    for name, r in own.items():
        for i in indices_of[name]:
            if i not in per_gpu:
                others = tuple(n for n in on_gpu[i] if n not in own)
                per_gpu[i] = replace(r, others=others) if others else r
    return own, per_gpu


def _neighbours(host: signals.HostSignals, workload: str) -> dict[str, tuple[Neighbour, ...]]:
    found = {r: tuple(bottleneck.neighbours_of(host, r, workload)) for r in bottleneck.NEIGHBOUR_RESOURCES}
    return {r: n for r, n in found.items() if n}


def _is_idle(g: signals.GpuSignals, s: Settings) -> bool:
    return g.up and g.busy is not None and g.busy < s["idle_busy_ratio"]


def _steady_for(v: Verdict) -> float:
    """How long after it was scored a steady automatic workload's finding may stand: AUTO_STEADY_SECONDS, or until
    its pending candidate would have held for analysis.hold (it is scored then, and becomes the primary)."""
    if v.pending == NONE:
        return AUTO_STEADY_SECONDS
    return min(AUTO_STEADY_SECONDS, v.confirm_in_seconds if v.confirm_in_seconds is not None else 0.0)


# what an automatic workload is judged from (_auto_marks): (its status, the host's pressures at 0.5 or more, each of
# its GPUs' (primary, candidate) or None), compared with == only
_Mark = tuple[object, ...]


class _Due(NamedTuple):
    """An automatic workload scored this tick, with what it is judged from (``_auto_marks``)."""

    mark: _Mark | None


def _auto_marks(auto: tuple[WorkloadProfile, ...], statuses: Mapping[str, WorkloadStatus], indices_of: Mapping[str, tuple[int, ...]],
                gpu_findings: list[GpuFinding], view: bottleneck.HostView, sample: Sample) -> dict[str, _Mark]:
    """Automatic workload name -> what its verdict is judged from this tick, as a value compared with the one
    it was last scored with (AUTO_STEADY_SECONDS): its status (equal while its processes, cgroup and GPU listings
    do not change: attribution.AutoStatuses), its GPUs' verdicts (primary and candidate) and which of the host's
    pressures are at 0.5 or more. None, never steady, for one with a serving endpoint (its runtime's figures move
    every scrape) or without a status."""
    served = {e.workload for e in getattr(sample.data("serving"), "endpoints", ()) or ()}
    gpus = {g.index: (g.verdict.primary, g.verdict.candidate) for g in gpu_findings}
    host = (view.cpu[0] >= 0.5, view.memory[0] >= 0.5, view.shm[0] >= 0.5, view.disk[0] >= 0.5)
    out: dict[str, _Mark] = {}
    for p in auto:
        st = statuses.get(p.name)
        if st is None or p.name in served:
            continue
        out[p.name] = (st, host, *(gpus.get(i) for i in indices_of[p.name]))
    return out


def _declared_indices(profile: WorkloadProfile, sample: Sample) -> tuple[int, ...]:
    """The GPUs a profile lists (indices or UUIDs), as indices present in this sample."""
    nvml = sample.data("nvml")
    gpus = nvml.gpus if isinstance(nvml, NvmlSample) else ()
    out = []
    for ref in getattr(profile, "gpus", ()) or ():
        for g in gpus:
            if ref == g.index or ref == g.uuid:
                out.append(g.index)
    return tuple(out)


def _gpu_costs(profiles: Sequence[WorkloadProfile], findings: Sequence[WorkloadFinding]) -> dict[int, float]:
    """GPU index -> cost per GPU-hour of the first workload on it that declares one."""
    costs: dict[int, float] = {}
    by_name = {p.name: p for p in profiles}
    for f in findings:
        cost = getattr(by_name.get(f.name), "cost_per_gpu_hour", None)
        if cost is not None:
            for i in f.gpus:
                costs.setdefault(i, cost)
    return costs
