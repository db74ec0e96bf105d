"""The series of the analysis' Findings: each GPU's and workload's verdict (``_render_verdict``: scores, long scores,
the primary, a pending candidate), GPU idle time and cost, GPU health, each workload's headroom and serving findings
(latency percentiles, SLOs, KV headroom: ``_render_serving_findings``), and the workloads measured against expected
(``_render_workloads``). A finding or status rendered last tick writes last tick's lines (Renderer.findings,
Renderer.workloads)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from headroom.exposition.render.text import _ORDER, _r

if TYPE_CHECKING:
    from headroom.analysis.bottleneck import Verdict
    from headroom.analysis.pipeline import Findings, WorkloadFinding
    from headroom.exposition.render.writer import Writer
    from headroom.workload.attribution import WorkloadStatus


def _render_verdict(w: Writer, prefix: str, ids: tuple[str, ...], verdict: Verdict) -> None:
    resources, names, tails = _VERDICT_SERIES.get(prefix) or _verdict_series(prefix)
    primary = verdict.primary
    w.add_many(names, (*map(verdict.scores.get, resources), *map(verdict.long_scores.get, resources),
                       *[resource == primary for resource in tails[len(resources) * 2:]]), ids, tails)
    if verdict.pending_seconds is not None:  # a candidate waits out analysis.hold: how long it has held
        w.add(f"{prefix}_bottleneck_pending_seconds", _r(verdict.pending_seconds), *ids, verdict.pending)


# prefix -> (the resources scored, the names and the resource labels of a verdict's series)
_VERDICT_SERIES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {}


def _verdict_series(prefix: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    from headroom.analysis.bottleneck import NONE, RESOURCES

    resources: tuple[str, ...] = RESOURCES
    if prefix == "headroom_gpu":  # a KV cache belongs to a serving workload, never to a GPU on its own
        resources = tuple(r for r in RESOURCES if r != "kv_cache")
    n = len(resources)
    names = (f"{prefix}_bottleneck_score",) * n + (f"{prefix}_bottleneck_long_score",) * n + (f"{prefix}_bottleneck",) * (n + 1)
    _VERDICT_SERIES[prefix] = entry = (resources, names, (*resources, *resources, *resources, NONE))
    return entry


def _render_workloads(w: Writer, statuses: Iterable[WorkloadStatus]) -> None:
    """Measured against expected per workload (analysis.workloads.WorkloadStatus), declared and automatic: each
    workload's series in one group; a status rendered last tick writes last tick's lines (Renderer.workloads)."""
    cache = w._cache
    last, kept = cache.workloads, {}
    out = w._lines
    for st in statuses:
        hit = last.get(st.name)
        if hit is not None and hit[0] is st:
            for index, lines in hit[1]:
                out[index].extend(lines)
            kept[st.name] = hit
            continue
        names, values, tails = _workload_series(st)
        families = {_ORDER[n] for n in names}
        before = {i: len(out[i]) for i in families}
        refused = len(w.refused)
        w.add_many(names, values, (st.name,), tails)
        if len(w.refused) == refused:  # one with a refused value is rendered (and counted) again while it lasts
            kept[st.name] = (st, tuple((i, out[i][n:]) for i, n in before.items() if len(out[i]) > n))
    cache.workloads = kept


def _workload_series(st: WorkloadStatus
                     ) -> tuple[tuple[str, ...], list[float | int | bool | None], tuple[object, ...]]:
    """One workload's series for Writer.add_many: (names, values, tail labels)."""
    source = getattr(st, "source", "declared")
    m = st.measured
    if m is not None:
        # an automatic workload's cgroup figures: the processes collector's, else the identity collector's (a new
        # identity's first tick, before its members were measured with their cgroup)
        cg = m.cgroup if m.cgroup is not None or source != "auto" else getattr(st, "cgroup", None)
        measured: tuple[float | int | None, ...] = (
            m.processes, m.threads, _r(m.cpu_user_seconds_total, 2), _r(m.cpu_system_seconds_total, 2),
            m.resident_memory_bytes, m.read_bytes_total, m.written_bytes_total,
            _r(m.sched_wait_seconds_total, 3), _r(m.sched_run_seconds_total, 3), m.cpus_allowed)
    else:  # an automatic workload without measured processes still counts them, and has its cgroup
        cg = getattr(st, "cgroup", None) if source == "auto" else None
        measured = (st.processes if source == "auto" else None, None, None, None, None, None, None, None, None, None)
    names: tuple[str, ...] = _WORKLOAD_ROW
    tails: tuple[object, ...] = ((st.kind, st.model, st.precision, st.runtime, source), (st.team, st.job),
                                 *_WORKLOAD_ROW_TAILS)
    values: list[float | int | bool | None] = [1, 1 if st.job or st.team else None, *measured]
    if cg is None:
        values += (None, None, None)
    else:
        values += (_r(cg.cpu_user_seconds_total, 6), _r(cg.cpu_system_seconds_total, 6), cg.memory_bytes)
    values += (st.dataloader_workers, st.expected_peak_bytes, st.gpu_memory_capacity_bytes)
    if cg is not None and cg.pressure_some_avg10:
        pressure = sorted(cg.pressure_some_avg10.items())
        names += ("headroom_workload_cgroup_pressure_ratio",) * len(pressure)
        tails += tuple(k for k, _ in pressure)
        values += (v for _, v in pressure)
    for g in st.gpus:
        index = str(g.index)
        names += _WORKLOAD_GPU_ROW
        tails += (index, index)
        values += (g.memory_used_bytes, _r(g.utilization_ratio, 4))
    components = st.expected_components
    if components:
        names += ("headroom_workload_memory_expected_bytes",) * len(components)
        tails += tuple(components)
        values += components.values()
    return names, values, tails


# a workload's series (labelled workload, then the tail labels given here), in the order of the values
# _render_workloads passes for them; its cgroup's pressure, its GPUs and its expected components follow
_WORKLOAD_ROW = tuple(f"headroom_workload_{n}" for n in (
    "info", "fleet_info", "processes", "threads", "cpu_seconds_total", "cpu_seconds_total", "resident_memory_bytes",
    "read_bytes_total", "written_bytes_total", "cpu_wait_seconds_total", "cpu_run_seconds_total", "cpus_allowed",
    "cgroup_cpu_seconds_total", "cgroup_cpu_seconds_total",
    "cgroup_memory_bytes", "dataloader_workers", "gpu_memory_expected_peak_bytes", "gpu_memory_capacity_bytes"))
_WORKLOAD_ROW_TAILS = (None, None, "user", "system", None, None, None, None, None, None, "user", "system", None, None,
                       None, None)
_WORKLOAD_GPU_ROW = ("headroom_workload_gpu_memory_used_bytes", "headroom_workload_gpu_utilization_ratio")


def _render_findings(w: Writer, f: Findings) -> None:
    for g in f.gpu_findings:
        ids: tuple[str, ...] = (str(g.index), g.uuid)
        _render_verdict(w, "headroom_gpu", ids, g.verdict)
        w.add_many(_GPU_FINDINGS_ROW, (g.idle, f.host.gpu_cost_per_hour.get(g.index)), ids)
    for h in getattr(f, "gpu_health", ()):
        ids = (str(h.index), h.uuid)
        w.add("headroom_gpu_healthy", h.healthy, *ids)
        # a condition's series only while it holds: six always-0 series per GPU cost a fleet's Prometheus more than
        # they say (headroom_gpu_healthy is there for every GPU; a cleared condition's series goes stale)
        for condition in sorted({c.condition for c in h.conditions}):
            w.add("headroom_gpu_health_condition", 1, *ids, condition)
    if f.gpu_findings:
        w.add("headroom_gpus_idle", f.host.gpus_idle)
        w.add("headroom_gpu_idle_seconds_total", _r(f.host.gpu_idle_seconds_total))
        w.add("headroom_gpu_idle_cost_total", _r(f.host.gpu_idle_cost_total, 6), f.host.currency)
    cache = w._cache
    last, kept = cache.findings, {}
    out = w._lines
    for wf in f.workload_findings:
        hit = last.get(wf.name)
        if hit is not None and hit[0] is wf:  # the same finding object writes the same lines
            for index, lines in hit[1]:
                out[index].extend(lines)
            kept[wf.name] = hit
            continue
        # one with serving series (latency, SLOs, KV headroom) is rendered each time: only verdict and headroom
        # lines are kept
        plain = getattr(wf, "serving", None) is None and not getattr(wf, "slos", ()) \
            and getattr(wf, "serving_headroom", None) is None
        before = {i: len(out[i]) for i in _FINDING_FAMILIES()} if plain else {}
        refused = len(w.refused)
        ids = (wf.name,)
        _render_verdict(w, "headroom_workload", ids, wf.verdict)
        h = wf.headroom
        w.add_many(_HEADROOM_ROW, (h.gpu_memory_bytes, h.cpu_cores, h.host_memory_bytes, h.shared_memory_bytes,
                                   h.power_watts, h.thermal_celsius), ids)
        if h.basis:  # more sequences and context, labelled with where they come from (analysis/headroom.py BASES)
            w.add_many(_CAPACITY_ROW, (h.sequences, h.context_tokens), (*ids, h.basis))
        if h.measured_sequences is not None:  # a recent probe's capacity beside them (analysis/headroom.py)
            w.add("headroom_workload_headroom_sequences", h.measured_sequences, *ids, "measured")
        _render_serving_findings(w, wf)
        if plain and len(w.refused) == refused:
            kept[wf.name] = (wf, tuple((i, out[i][n:]) for i, n in before.items() if len(out[i]) > n))
    cache.findings = kept


_FINDING_INDICES: list[tuple[int, ...]] = []


def _FINDING_FAMILIES() -> tuple[int, ...]:  # noqa: N802 - a constant made once
    """The positions of the families a workload finding without serving writes (verdict, headroom)."""
    if not _FINDING_INDICES:
        names = {*_verdict_series("headroom_workload")[1], "headroom_workload_bottleneck_pending_seconds",
                 *_HEADROOM_ROW, *_CAPACITY_ROW}
        _FINDING_INDICES.append(tuple(sorted(_ORDER[n] for n in names)))
    return _FINDING_INDICES[0]


_GPU_FINDINGS_ROW = ("headroom_gpu_idle", "headroom_gpu_cost_per_hour")
_HEADROOM_ROW = tuple(f"headroom_workload_headroom_{n}" for n in (
    "gpu_memory_bytes", "cpu_cores", "host_memory_bytes", "shared_memory_bytes", "power_watts", "thermal_celsius"))
_CAPACITY_ROW = ("headroom_workload_headroom_sequences", "headroom_workload_headroom_context_tokens")


def _render_serving_findings(w: Writer, wf: WorkloadFinding) -> None:
    """Latency quantiles and KV headroom of a serving workload (analysis/serving.py)."""
    s, room = getattr(wf, "serving", None), getattr(wf, "serving_headroom", None)
    ids = (wf.name,)
    if s is not None:
        for q, v in s.ttft.items():
            w.add("headroom_workload_time_to_first_token_seconds", _r(v, 6), *ids, f"p{q * 100:g}")
        for q, v in s.itl.items():
            w.add("headroom_workload_inter_token_latency_seconds", _r(v, 6), *ids, f"p{q * 100:g}")
        for key, p in s.percentiles.items():  # the resolution of each: a bound carries its bucket
            latency, _, percentile = key.partition("_")
            w.add("headroom_workload_latency_percentile_bounded", p.bounded, *ids, latency, percentile)
            if p.bounded:
                w.add("headroom_workload_latency_percentile_bucket_seconds", p.lower, *ids, latency, percentile,
                      "lower")
                w.add("headroom_workload_latency_percentile_bucket_seconds",
                      math.inf if p.upper is None else p.upper, *ids, latency, percentile, "upper")
    for slo in getattr(wf, "slos", ()):
        w.add("headroom_workload_slo_target_seconds", slo.target_seconds, *ids, slo.objective)
        w.add("headroom_workload_slo_met", slo.met, *ids, slo.objective)
        if slo.judgement != "no_data":
            w.add("headroom_workload_slo_decided", slo.met is not None, *ids, slo.objective)
    if room is not None:
        w.add("headroom_workload_kv_capacity_tokens", room.kv_capacity_runtime_tokens, *ids, "runtime")
        w.add("headroom_workload_kv_capacity_tokens", room.kv_capacity_estimate_tokens, *ids, "estimate")
        w.add("headroom_workload_kv_headroom_sequences", room.sequences_observed, *ids, "observed")
        w.add("headroom_workload_kv_headroom_sequences", room.sequences_max_context, *ids, "max_context")
