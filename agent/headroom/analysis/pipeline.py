"""The analysis stage of every tick: window + configuration -> (derived values, Findings).

Pure: reads Samples and workload profiles, never a source, never Prometheus, never the clock (time is
each Sample's monotonic stamp), so replaying a recording reproduces the live verdicts. Each step lives
in its own module (rates, workloads, signals, bottleneck, headroom) and is table-tested on its own.
State that must persist across ticks (hysteresis, idle-time counters) lives in the Analysis object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from headroom.analysis import bottleneck, rates, remedies, signals
from headroom.analysis import serving as serving_analysis
from headroom.analysis.bottleneck import NONE, Hysteresis, Verdict
from headroom.analysis.headroom import WorkloadHeadroom, workload_headroom
from headroom.safeio import clip
from headroom.samples import NvmlSample, Sample

LONG_REFRESH_SECONDS = 5.0  # long-window scores are recomputed this often (sample time), not every tick
# ... from at most this many evenly spaced samples of the long window (every 5th of 300 at 1 s): a refresh then
# costs a few short ticks instead of ~20 (docs/analysis.md, "From samples to a verdict")
LONG_POINTS = signals.VRAM_TREND_MAX_POINTS  # 60, as the VRAM trend fit thins its own points

DEFAULTS: dict[str, Any] = {
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
    neighbours: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class HostFinding:
    gpus_idle: int = 0
    gpu_idle_seconds_total: float = 0.0
    gpu_idle_cost_total: float | None = None  # None when no cost per GPU-hour is configured
    gpu_cost_per_hour: Mapping[int, float] = field(default_factory=dict)  # GPU index -> price, where one is set
    currency: str = "USD"  # ISO 4217 code of the cost


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

    workloads: tuple[Any, ...] = ()  # analysis.workloads.WorkloadStatus, one per declared workload
    gpu_findings: tuple[GpuFinding, ...] = ()
    workload_findings: tuple[WorkloadFinding, ...] = ()
    host: HostFinding = field(default_factory=HostFinding)
    changes: tuple[Change, ...] = ()
    # (entity, reason) of each workload whose analysis failed this tick: its verdict says why; the sampler logs it
    errors: tuple[tuple[str, str], ...] = ()
    # the thresholds this tick was judged by (analysis.thresholds over DEFAULT_THRESHOLDS): the page draws them
    thresholds: Mapping[str, float] = field(default_factory=dict)

    def primaries(self) -> dict[str, str]:
        """{"workload/<name>": primary, "gpu/<index>": primary}: what replay compares."""
        out = {f"workload/{w.name}": w.verdict.primary for w in self.workload_findings}
        out.update({f"gpu/{g.index}": g.verdict.primary for g in self.gpu_findings})
        return out


class Analysis:
    """Holds the configuration analysis needs (profiles, sizing constants, thresholds) and any state
    that must persist across ticks (hysteresis, idle counters). Called once per tick with the window."""

    def __init__(self, config: Any) -> None:
        self.config = config
        section = dict(getattr(config, "analysis", None) or {})
        self.settings = {k: (section.get(k) if section.get(k) is not None else v) for k, v in DEFAULTS.items()}
        self.thresholds = {**bottleneck.DEFAULT_THRESHOLDS, **{k: v for k, v in
                                                             (section.get("thresholds") or {}).items()
                                                             if v is not None}}
        self.profiles = tuple(getattr(config, "workloads", ()) or ())
        self._hysteresis: dict[str, Hysteresis] = {}
        self._settled: set[str] = set()  # hysteresis keys updated in the current tick
        self._last_monotonic: float | None = None
        self._idle_seconds = 0.0
        self._idle_cost = 0.0
        self._long_at: float | None = None
        self._long_scores: dict[str, Mapping[str, float]] = {}
        self._auto: Any = None  # attribution.AutoStatuses: last tick's automatic workload statuses

    def _hold(self, key: str) -> Hysteresis:
        h = self._hysteresis.get(key)
        if h is None:
            h = self._hysteresis[key] = Hysteresis(hold=self.settings["hold"])
        return h

    def _attribute(self, sample: Sample) -> tuple[Any, ...]:
        """Workload statuses of this tick (workload/attribution.py). The bottleneck and headroom steps read,
        from each status: ``name``, ``gpu_indices`` (GPUs it uses), ``processes``, ``estimate``
        (sizing.Estimate or None), ``expected_peak_bytes`` and optionally ``cpu_quota_cores``."""
        try:
            from headroom.workload import attribution
        except ImportError:
            return ()
        if self._auto is None:
            self._auto = attribution.AutoStatuses()
        return attribution.attribute(sample, self.profiles, getattr(self.config, "sizing", None), self._auto)

    def __call__(self, window: Sequence[Sample]) -> tuple[Mapping[str, Any], Findings]:
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
            self._long_scores = {}
            long_span = signals.thinned(window, s["long_window"], LONG_POINTS)
            host_long = signals.host_signals(long_span, s["long_window"])
            view_long = bottleneck.host_view(host_long, t)
            rules_long = bottleneck.GpuRules(t)
            gpus_long = {g.uuid: g for g in signals.gpu_signals(long_span, s["long_window"], s["gpu_slowdown_celsius"])}
        changes: list[Change] = []
        self._settled = set()

        status_by_name = {getattr(st, "name", None): st for st in statuses}
        # declared profiles, then the automatic workloads that a launcher's command line gave a profile
        # (workload/launchers.py): both get verdicts and headroom the same way
        auto = tuple(st.profile for st in statuses
                     if getattr(st, "source", "declared") == "auto" and getattr(st, "profile", None) is not None)
        profiles = self.profiles + auto
        indices_of = {p.name: tuple(getattr(status_by_name.get(p.name), "gpu_indices", ()) or ())
                      or _declared_indices(p, sample) for p in profiles}
        # what runs on each GPU: a serving runtime that reserves the card up front makes a full card normal
        reserved = {i: name for p in profiles
                    if (name := bottleneck.reserving_runtime(getattr(p, "runtime", None))) for i in indices_of[p.name]}
        gpu_findings = []
        for g in gpus:
            v = bottleneck.score_gpu(g, host, t, reserved.get(g.index), view, rules)
            key = f"gpu/{g.uuid}"
            if refresh:
                self._long_scores[key] = bottleneck.score_gpu(gpus_long.get(g.uuid, g), host_long, t,
                                                              reserved.get(g.index), view_long, rules_long).scores
            v = self._settle(v, self._long_scores.get(key, {}), key, "gpu", str(g.index), now, changes,
                             remedies.Facts(gpus=(g,), host=host))
            gpu_findings.append(GpuFinding(g.index, g.uuid, g.name, v, idle=_is_idle(g, s),
                                           clock_events=dict(g.reason_shares),
                                           thermal_limit_celsius=g.thermal_limit_celsius,
                                           thermal_limit_source=g.thermal_limit_source))

        by_index = {g.index: g for g in gpus}
        workload_findings = []
        errors: list[tuple[str, str]] = []
        for p in profiles:
            try:
                st = status_by_name.get(p.name)
                indices = indices_of[p.name]
                w = signals.workload_signals(window, s["short_window"], st, p, host.logical_cpus)
                # a workload on MIG instances: its GPUs' memory figures are those of its instances
                slices = {wg.index: wg.mig_instances for wg in getattr(st, "gpus", ()) or ()
                          if getattr(wg, "mig_instances", ())}
                mine = [signals.mig_memory(by_index[i], window, s["short_window"], slices[i]) if i in slices
                        else by_index[i] for i in indices if i in by_index]
                peak = getattr(st, "expected_peak_bytes", None)
                est = getattr(st, "estimate", None)
                srv = serving_analysis.serving_signals(window, s["short_window"], p.name)  # declared or detected
                alt = ""
                if srv is not None and srv.up and est is not None and (srv.usage or 0) >= t["kv_usage_low"]:
                    alt = serving_analysis.alternatives(p, est.gpu_memory_bytes, est.gpus_available, srv.capacity_tokens)
                v = bottleneck.score_workload(p, w, mine, host, t, peak, srv, alt, view, rules)
                key = f"workload/{p.name}"
                if refresh:
                    w_long = signals.workload_signals(long_span, s["long_window"], st, p, host.logical_cpus)
                    mine_long = [signals.mig_memory(gpus_long.get(g.uuid, g), long_span, s["long_window"], slices[g.index])
                                 if g.index in slices else gpus_long.get(g.uuid, g) for g in mine]
                    srv_long = serving_analysis.serving_signals(long_span, s["long_window"], p.name)
                    self._long_scores[key] = bottleneck.score_workload(p, w_long, mine_long, host_long, t, peak,
                                                                       srv_long, view=view_long, rules=rules_long).scores
                v = self._settle(v, self._long_scores.get(key, {}), key, "workload", p.name, now, changes,
                                 remedies.Facts(tuple(mine), host, w, p, srv, est))
                room = workload_headroom(p, w, mine, host, est, s["gpu_slowdown_celsius"], srv)
                workload_findings.append(WorkloadFinding(p.name, v, room, tuple(indices), srv,
                                                         serving_analysis.serving_headroom(srv, p, est),
                                                         serving_analysis.slo_status(p, srv),
                                                         _neighbours(host, p.name)))
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
        )
        return derived, Findings(tuple(statuses), tuple(gpu_findings), tuple(workload_findings), host_finding,
                                 tuple(changes), tuple(errors), t)

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
        settled = Verdict(scores=v.scores, evidence=v.evidence, candidate=v.candidate, primary=primary,
                          long_scores=long_scores, remedies=fixes,
                          **({"pending": pending[0], "pending_seconds": round(pending[1], 3),
                              "confirm_in_seconds": round(pending[2], 3)} if pending is not None else {}))
        if changed:
            evidence = v.evidence.get(primary, "") if primary != NONE else \
                v.evidence.get(NONE, "no resource scores high enough")
            fix = settled.remedies.get(primary)
            changes.append(Change(entity, name, before, primary, evidence, fix.text if fix else "",
                                  fix.runbook_url if fix else "", fix.runbook_path if fix else ""))
        return settled


def _neighbours(host: signals.HostSignals, workload: str) -> dict[str, tuple[Any, ...]]:
    found = {r: tuple(bottleneck.neighbours_of(host, r, workload)) for r in bottleneck.NEIGHBOUR_RESOURCES}
    return {r: n for r, n in found.items() if n}


def _is_idle(g: signals.GpuSignals, s: Mapping[str, Any]) -> bool:
    return g.up and g.busy is not None and g.busy < s["idle_busy_ratio"]


def _declared_indices(profile: Any, sample: Sample) -> tuple[int, ...]:
    """The GPUs a profile lists (indices or UUIDs), as indices present in this sample."""
    nvml = sample.data("nvml")
    gpus = nvml.gpus if isinstance(nvml, NvmlSample) else ()
    out = []
    for ref in getattr(profile, "gpus", ()) or ():
        for g in gpus:
            if ref == g.index or ref == g.uuid:
                out.append(g.index)
    return tuple(out)


def _gpu_costs(profiles: Sequence[Any], findings: Sequence[WorkloadFinding]) -> dict[int, float]:
    """GPU index -> cost per GPU-hour of the first workload on it that declares one."""
    costs: dict[int, float] = {}
    by_name = {p.name: p for p in profiles}
    for f in findings:
        cost = getattr(by_name.get(f.name), "cost_per_gpu_hour", None)
        if cost is not None:
            for i in f.gpus:
                costs.setdefault(i, cost)
    return costs
