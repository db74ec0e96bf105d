"""The series of each collector's data in a Sample: the agent's own (``_render_self``: build, collectors, ticks;
``_render_agent``), NVML's GPUs (``_render_nvml``), the identity sources and the pod / job labels of the GPUs they
hold (``_render_identity``), and the host collectors, the serving endpoints and the last probe (``_HOST_RENDERERS``,
each ``(source name, function)``)."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from headroom import __version__
from headroom.exposition.render.text import _escape, _r
from headroom.samples import (
    CpuSample,
    DiskSample,
    InfinibandSample,
    MemorySample,
    NetSample,
    NvmlSample,
    ShmSample,
)

if TYPE_CHECKING:
    from headroom.exposition.render.writer import Writer
    from headroom.samples import (
        AgentSample,
        IdentitySample,
        ProbeSample,
        Sample,
        ServingSample,
        Snapshot,
    )
    from headroom.workload.attribution import WorkloadStatus


def _render_self(w: Writer, snap: Snapshot) -> None:
    w.add("headroom_build_info", 1, __version__, platform.python_version())
    if snap.scenario:
        w.add("headroom_simulation_info", 1, snap.scenario)
    sources = snap.sample.sources
    values: list[float | int | bool | None] = []
    for result in sources.values():
        values += (result.ok, round(result.duration_seconds, 6))
    w.add_many(_COLLECTOR_ROW * len(sources), values, (), tuple(n for n in sources for _ in _COLLECTOR_ROW))
    w.add_many(_SELF_ROW, (round(snap.sample.timestamp, 3), round(snap.tick_duration_seconds, 6), snap.ticks,
                           snap.interval, snap.config_reload_ok, _r(snap.config_reload_success_timestamp),
                           snap.record_ok, snap.record_written_bytes_total, snap.web_config_reload_ok))
    t = snap.timing
    if t is not None:
        w.add("headroom_sample_lateness_seconds", _r(t.lateness_seconds, 6))
        w.add("headroom_sample_lateness_max_seconds", _r(max(t.recent_lateness_seconds, default=None), 6))
        w.add("headroom_sample_duration_max_seconds", _r(max(t.recent_duration_seconds, default=None), 6))
        w.add("headroom_samples_missed_total", t.missed_total)


_COLLECTOR_ROW = ("headroom_collector_success", "headroom_collector_duration_seconds")
_SELF_ROW = tuple(f"headroom_{n}" for n in (
    "last_sample_timestamp_seconds", "sample_duration_seconds", "samples_total", "sample_interval_seconds",
    "config_last_reload_successful", "config_last_reload_success_timestamp_seconds", "record_success",
    "record_written_bytes_total", "web_config_last_reload_successful"))


def _render_nvml(w: Writer, data: NvmlSample | None) -> None:
    w.add("headroom_nvml_up", bool(data is not None and data.up))
    if data is None:
        return
    driver = data.driver_version or ""
    for g in data.gpus:
        ids = (str(g.index), g.uuid)
        w.add("headroom_gpu_info", 1, str(g.index), g.uuid, g.name, g.pci_bus_id, driver)
        w.add("headroom_gpu_up", g.up, *ids)
        w.add("headroom_gpu_memory_size_bytes", g.memory_total_bytes, *ids)
        if not g.up:
            continue
        active, seconds = g.clock_events_active, g.clock_events_seconds_total
        known = [p.used_memory_bytes for p in g.processes if p.used_memory_bytes is not None]
        w.add_many(_GPU_ROW, (
            g.utilization_ratio, g.memory_utilization_ratio, _r(g.busy_seconds_total), g.memory_used_bytes,
            g.memory_free_bytes, g.memory_reserved_bytes, g.power_watts, g.power_limit_watts, g.energy_joules_total,
            g.temperature_celsius, g.memory_temperature_celsius, g.sm_clock_hertz, g.sm_clock_max_hertz,
            g.memory_clock_hertz, g.memory_clock_max_hertz, g.performance_state, g.fan_speed_ratio,
            g.pcie_tx_bytes_per_second, g.pcie_rx_bytes_per_second, g.pcie_tx_bytes_total, g.pcie_rx_bytes_total,
            g.pcie_link_generation, g.pcie_link_max_generation, g.pcie_link_width, g.pcie_link_max_width,
            g.sm_active_ratio, g.sm_occupancy_ratio, g.tensor_active_ratio, g.dram_active_ratio,
            len(g.processes), sum(known) if known or not g.processes else None, g.processes_stale, g.mig_enabled,
            g.ecc_uncorrected_volatile_total, g.ecc_uncorrected_aggregate_total, g.remapped_rows_correctable,
            g.remapped_rows_uncorrectable, g.remapped_rows_pending, g.remapped_rows_failure,
        ), ids, _GPU_ROW_TAILS)
        w.add_many(("headroom_gpu_clock_event_active",) * len(active)
                   + ("headroom_gpu_clock_event_seconds_total",) * len(seconds),
                   (*active.values(), *map(_r, seconds.values())), ids, (*active, *seconds))
        for link in g.nvlink_links:
            w.add("headroom_gpu_nvlink_link_up", link.up, *ids, str(link.link))
            w.add("headroom_gpu_nvlink_bytes_total", link.tx_bytes_total, *ids, str(link.link), "tx")
            w.add("headroom_gpu_nvlink_bytes_total", link.rx_bytes_total, *ids, str(link.link), "rx")
        for mig in g.mig_instances:
            mids = (*ids, str(mig.gpu_instance_id), mig.uuid)
            w.add("headroom_gpu_mig_memory_used_bytes", mig.memory_used_bytes, *mids)
            w.add("headroom_gpu_mig_memory_size_bytes", mig.memory_total_bytes, *mids)
            w.add("headroom_gpu_mig_processes", len(mig.processes), *mids)
            mig_known = [p.used_memory_bytes for p in mig.processes if p.used_memory_bytes is not None]
            w.add("headroom_gpu_mig_process_memory_used_bytes", sum(mig_known) if mig_known or not mig.processes else None, *mids)
        for xid, count in sorted(g.xid_errors_total.items()):
            w.add("headroom_gpu_xid_errors_total", count, *ids, str(xid))


# the series of a GPU that is up with the labels gpu, uuid (and the tail label given here, where not None), in
# the order of the values _render_nvml passes for them
_GPU_ROW, _GPU_ROW_TAILS = (tuple(c) for c in zip(*(
    (f"headroom_gpu_{name}", tail) for name, tail in (
        ("utilization_ratio", None), ("memory_utilization_ratio", None), ("busy_seconds_total", None),
        ("memory_used_bytes", None), ("memory_free_bytes", None), ("memory_reserved_bytes", None),
        ("power_watts", None), ("power_limit_watts", None), ("energy_joules_total", None),
        ("temperature_celsius", None), ("memory_temperature_celsius", None), ("sm_clock_hertz", None),
        ("sm_clock_max_hertz", None), ("memory_clock_hertz", None), ("memory_clock_max_hertz", None),
        ("performance_state", None), ("fan_speed_ratio", None),
        ("pcie_throughput_bytes_per_second", "tx"), ("pcie_throughput_bytes_per_second", "rx"),
        ("pcie_bytes_total", "tx"), ("pcie_bytes_total", "rx"), ("pcie_link_generation", None),
        ("pcie_link_max_generation", None), ("pcie_link_width", None), ("pcie_link_max_width", None),
        ("sm_active_ratio", None), ("sm_occupancy_ratio", None), ("tensor_active_ratio", None),
        ("dram_active_ratio", None), ("processes", None), ("process_memory_used_bytes", None),
        ("processes_stale", None), ("mig_enabled", None), ("ecc_uncorrected_errors_total", "volatile"),
        ("ecc_uncorrected_errors_total", "aggregate"), ("remapped_rows", "correctable"),
        ("remapped_rows", "uncorrectable"), ("remapped_rows_pending", None), ("remapped_rows_failure", None),
    )), strict=True))


def _render_identity(w: Writer, identity: IdentitySample, sample: Sample,
                     statuses: Iterable[WorkloadStatus] | None = None) -> None:
    """Identity sources, the cap, and the pod / job labels of the GPUs they hold (sources/identity.py).
    ``headroom_workload_identities`` counts the automatic workloads exported (``statuses``, attribution's: an
    identity a declared profile takes the place of is none, and identities of one name are one workload); the
    identities themselves where there are no statuses (analysis did not run)."""
    from headroom.exposition.catalog import GPU_IDENTITY_LABELS
    from headroom.workload.attribution import gpu_identity_labels

    for src in identity.sources:
        w.add("headroom_identity_source_up", src.up, src.name)
        if src.up or src.unknown_devices:
            w.add("headroom_identity_unknown_devices", len(src.unknown_devices), src.name)
    exported = len(identity.groups) if statuses is None else \
        len({st.name for st in statuses if getattr(st, "source", "declared") == "auto"})
    w.add("headroom_workload_identities", exported)
    w.add("headroom_workload_identities_max", identity.max_groups)
    w.add("headroom_workload_identities_dropped_total", identity.dropped_total)
    for uuid, values in gpu_identity_labels(sample).items():
        w.gpu_extra[uuid] = "".join(f',{k}="{_escape(v)}"' for k, v in zip(GPU_IDENTITY_LABELS, values, strict=True)
                                    if v)


def _render_serving(w: Writer, data: ServingSample, snap: Snapshot) -> None:
    """The serving collector's endpoints, one workload each (sources/serving.py)."""
    for e in data.endpoints:
        ids = (e.workload,)
        if e.up is None:
            continue  # no scrape finished yet: absent, not down
        w.add("headroom_workload_serving_up", e.up, *ids)
        w.add("headroom_workload_serving_scrape_duration_seconds", _r(e.scrape_duration_seconds, 6), *ids)
        w.add("headroom_workload_serving_dropped_series_total", e.dropped_series_total, *ids, "series")
        w.add("headroom_workload_serving_dropped_series_total", e.dropped_buckets_total, *ids, "buckets")
        if not e.up:
            continue
        w.add("headroom_workload_serving_info", 1, *ids, e.runtime or "")
        w.add("headroom_workload_kv_cache_usage_ratio", _r(e.kv_cache_usage_ratio, 6), *ids)
        w.add("headroom_workload_requests_running", e.requests_running, *ids)
        w.add("headroom_workload_requests_waiting", e.requests_waiting, *ids)
        w.add("headroom_workload_preemptions_total", e.preemptions_total, *ids)
        w.add("headroom_workload_kv_cache_capacity_tokens", e.kv_cache_capacity_tokens, *ids)
        w.add("headroom_workload_prompt_tokens_total", e.prompt_tokens_total, *ids)
        w.add("headroom_workload_generation_tokens_total", e.generation_tokens_total, *ids)
        w.add("headroom_workload_requests_waiting_deferred", e.requests_waiting_deferred, *ids)
        w.add("headroom_workload_admission_rejections_total", e.admission_rejections_total, *ids)
        w.add("headroom_workload_serving_sleep_level", e.sleep_level, *ids)
        if e.resident_bytes is not None:
            w.add("headroom_workload_resident_models", len(e.resident_models), *ids)
        w.add("headroom_workload_resident_model_bytes", e.resident_bytes, *ids)
        w.add("headroom_workload_resident_model_vram_bytes", e.resident_vram_bytes, *ids)
        for prefix, h in (("time_to_first_token", e.time_to_first_token),
                          ("inter_token_latency", e.inter_token_latency),
                          ("request_queue_time", e.request_queue_time)):
            if h is not None:
                w.add(f"headroom_workload_{prefix}_seconds_total", _r(h.sum, 6), *ids)
                w.add(f"headroom_workload_{prefix}_observations_total", h.count, *ids)


def _render_cpu(w: Writer, cpu: CpuSample, snap: Snapshot) -> None:
    modes = cpu.times.modes()
    w.add_many(("headroom_cpu_seconds_total",) * len(modes), [_r(v, 2) for v in modes.values()], (), tuple(modes))
    w.add_many(_CPU_ROW, (cpu.logical_cpus, _r(snap.rates.get("cpu_utilization_ratio"), 4), cpu.load1, cpu.load5,
                          cpu.load15, cpu.procs_running, cpu.procs_blocked))
    names: tuple[str, ...] = ()
    tails: tuple[tuple[str, ...], ...] = ()
    values: list[float | int | bool | None] = []
    for resource, pressure in sorted(cpu.pressure.items()):
        for kind, line in (("some", pressure.some), ("full", pressure.full)):
            if line is None:
                continue
            names += _PRESSURE_ROW
            tails += ((resource, kind), (resource, kind, "10s"), (resource, kind, "60s"), (resource, kind, "300s"))
            values += (_r(line.total_seconds, 6), line.avg10, line.avg60, line.avg300)
    if names:
        w.add_many(names, values, (), tails)


_CPU_ROW = tuple(f"headroom_{n}" for n in (
    "cpu_logical_cpus", "cpu_utilization_ratio", "load1", "load5", "load15", "procs_running", "procs_blocked"))
_PRESSURE_ROW = ("headroom_pressure_stalled_seconds_total",) + ("headroom_pressure_ratio",) * 3


def _render_memory(w: Writer, m: MemorySample, snap: Snapshot) -> None:
    w.add_many(_MEMORY_ROW, (m.total_bytes, m.available_bytes, m.free_bytes, m.buffers_bytes, m.cached_bytes,
                             m.shmem_bytes, m.dirty_bytes, m.writeback_bytes, m.swap_total_bytes, m.swap_free_bytes,
                             m.major_faults_total))


_MEMORY_ROW = tuple(f"headroom_memory_{n}" for n in (
    "size_bytes", "available_bytes", "free_bytes", "buffers_bytes", "cached_bytes", "shmem_bytes", "dirty_bytes",
    "writeback_bytes", "swap_size_bytes", "swap_free_bytes", "major_faults_total"))


def _render_shm(w: Writer, shm: ShmSample, snap: Snapshot) -> None:
    for mount in shm.mounts:
        w.add_many(_SHM_ROW, (1, mount.size_bytes, mount.used_bytes, mount.available_bytes), (mount.mountpoint,))
    for missing in shm.missing:
        w.add("headroom_shm_present", 0, missing)


_SHM_ROW = ("headroom_shm_present", "headroom_shm_size_bytes", "headroom_shm_used_bytes", "headroom_shm_available_bytes")


def _render_disk(w: Writer, disk: DiskSample, snap: Snapshot) -> None:
    for d in disk.devices:
        w.add_many(_DISK_ROW, (d.reads_completed, d.read_bytes, d.writes_completed, d.written_bytes,
                               _r(d.io_time_seconds), _r(d.weighted_io_time_seconds), d.in_flight), (d.device,))


_DISK_ROW = tuple(f"headroom_disk_{n}" for n in (
    "reads_completed_total", "read_bytes_total", "writes_completed_total", "written_bytes_total",
    "io_time_seconds_total", "io_time_weighted_seconds_total", "io_in_flight"))


def _render_net(w: Writer, net: NetSample, snap: Snapshot) -> None:
    for d in net.devices:
        w.add_many(_NET_ROW, (d.receive_bytes, d.transmit_bytes, d.receive_drops, d.transmit_drops,
                              d.speed_bytes_per_second), (d.device,))


_NET_ROW = tuple(f"headroom_network_{n}" for n in (
    "receive_bytes_total", "transmit_bytes_total", "receive_drops_total", "transmit_drops_total", "speed_bytes"))


def _render_infiniband(w: Writer, ib: InfinibandSample, snap: Snapshot) -> None:
    for p in ib.devices:
        ids = (p.hca, str(p.port))
        w.add_many(_IB_ROW, (p.receive_bytes, p.transmit_bytes, p.receive_packets, p.transmit_packets,
                             p.speed_bytes_per_second), ids)
        w.add("headroom_infiniband_port_active", p.state == "ACTIVE", *ids, p.link_layer)
        for counter, value in p.events.items():
            w.add("headroom_infiniband_port_events_total", value, *ids, counter)


_IB_ROW = tuple(f"headroom_infiniband_port_{n}" for n in (
    "receive_bytes_total", "transmit_bytes_total", "receive_packets_total", "transmit_packets_total", "rate_bytes"))


def _render_agent(w: Writer, a: AgentSample, snap: Snapshot) -> None:
    w.add("headroom_agent_cpu_seconds_total", _r(a.cpu_user_seconds_total), "user")
    w.add("headroom_agent_cpu_seconds_total", _r(a.cpu_system_seconds_total), "system")
    w.add("headroom_agent_resident_memory_bytes", a.resident_memory_bytes)
    w.add("headroom_agent_threads", a.threads)
    w.add("headroom_agent_open_fds", a.open_fds)
    w.add("headroom_agent_start_time_seconds", _r(a.start_time_seconds))


def _render_probe(w: Writer, p: ProbeSample, snap: Snapshot) -> None:
    """The last `headroom probe` result (sources/probe.py): the capacity measured at the SLO and its load shape."""
    if not p.found:
        return
    shape = (p.bound_by or "none", _label_number(p.input_tokens), _label_number(p.output_tokens))
    ids = (p.workload or "",)
    w.add("headroom_workload_capacity_concurrency", p.concurrency, *ids, *shape)
    w.add("headroom_workload_capacity_requests_per_second", p.requests_per_second, *ids, *shape)
    w.add("headroom_workload_capacity_measured_timestamp_seconds", _r(p.measured_at), *ids)
    w.add("headroom_workload_capacity_partial", p.partial, *ids)


def _label_number(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


# Any: each function takes its own source's sample type (sample.data(name), untyped by name)
_HOST_RENDERERS: Iterable[tuple[str, Callable[[Writer, Any, Snapshot], None]]] = (
    ("agent", _render_agent),
    ("cpu", _render_cpu),
    ("memory", _render_memory),
    ("shm", _render_shm),
    ("disk", _render_disk),
    ("net", _render_net),
    ("infiniband", _render_infiniband),
    ("serving", _render_serving),
    ("probe", _render_probe),
)
