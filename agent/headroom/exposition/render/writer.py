"""Render a Snapshot as Prometheus text exposition (format 0.0.4), once per tick.

Rendering happens in the sampler thread; a scrape only sends the bytes. Each ``_render_<source>``
below turns one collector's sample into series; names come from ``catalog.py`` and the writer
refuses anything else, so the exposition never drifts from the catalogue.

We render by hand instead of through prometheus_client's registry: building 2 000 samples through
custom collectors costs ~13 ms of CPU, far over the 10 ms tick budget (docs/benchmarks.md); the text
format itself is simple and ``promtool check metrics`` plus the golden file guard it.
"""

from __future__ import annotations

import math
import platform
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import structlog

from headroom import __version__
from headroom.exposition.catalog import BY_NAME, CATALOG
from headroom.samples import (
    CpuSample,
    DiskSample,
    InfinibandSample,
    MemorySample,
    NetSample,
    NvmlSample,
    ShmSample,
)

log = structlog.get_logger()

if TYPE_CHECKING:
    from headroom.samples import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_ORDER = {m.name: i for i, m in enumerate(CATALOG)}
_GPU_IDS = ("gpu", "uuid")  # the leading labels of every per-GPU series


class UnknownMetric(KeyError):
    pass


def _escape(value: str) -> str:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes kept as surrogates (a mountpoint): write them escaped
            value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


# rendered label sets, reused across families and ticks (a GPU's ``gpu="0",uuid="GPU-..."`` appears in
# ~40 families per tick); cleared when it grows past the bound, so changing label values cannot leak
_LABEL_TEXT: dict[tuple[tuple[str, ...], tuple[Any, ...]], str] = {}
_LABEL_TEXT_MAX = 20_000


def _label_text(names: tuple[str, ...], values: tuple[Any, ...]) -> str:
    """``k1="v1",k2="v2"`` with values escaped for the text format."""
    key = (names, values)
    try:
        text = _LABEL_TEXT.get(key)
    except TypeError:  # an unhashable label value: render it, don't cache it
        key, text = None, None
    if text is None:
        text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in zip(names, values, strict=True))
        if key is None:
            return text
        if len(_LABEL_TEXT) >= _LABEL_TEXT_MAX:
            _LABEL_TEXT.clear()
        _LABEL_TEXT[key] = text
    return text


# (family, label values) -> what rendering that series needs, kept across ticks: most series repeat every tick
# and most of their values too (samples.share_unchanged keeps unchanged values, and the analysis repeats its
# scores), so a series usually costs one lookup and one append of last tick's line. Each entry is a tuple
# (family's position in the catalogue, the text up to the closing brace or value, e.g. ``name{gpu="0",uuid="GPU-.."``,
# the GPU UUID whose identity labels (Writer.gpu_extra) go before the brace (None for a series not labelled
# gpu, uuid), those labels as last rendered, the head up to the value, the last value, its line). A line is
# reused only for a value of the same type that compares equal (the same text by format_value; NaN never
# equals, so it is written anew), and only with the same identity labels. The entry is replaced, never
# changed in place, so a render in another thread sees an old or a new entry, both consistent. Checked
# against the catalogue when first seen. Kept in two generations so churning pods cannot grow it: when the
# current one reaches the bound it becomes the old one (the one before is dropped); an entry still in use is
# moved back from the old one on its next use, so the swap costs no rendering. Each Renderer has its own
# (Renderer.series, .series_old): two samplers in one process (a benchmark's pair) do not evict each other.
_SERIES_MAX = 2_000  # entries per generation (the reference host with 50 pods uses ~250: most series go in groups)
_UNSET = object()  # the value of an entry not rendered yet: equal to no value


def _series(cache: Renderer, name: str, label_values: tuple[Any, ...], key: tuple[str, tuple[Any, ...]] | None
            ) -> tuple[int, str, str | None, str, str, Any, str]:
    """The cache's entry for this series, from the old generation or new (stored unless ``key`` is None: an
    unhashable label value)."""
    entry = cache.series_old.pop(key, None) if key is not None else None
    if entry is None:
        entry = _new_series(name, label_values)
    if key is not None:
        if len(cache.series) >= _SERIES_MAX:
            cache.series_old, cache.series = cache.series, {}
        cache.series[key] = entry
    return entry


def _new_series(name: str, label_values: tuple[Any, ...]) -> tuple[int, str, str | None, str, str, Any, str]:
    spec = BY_NAME.get(name)
    if spec is None:
        raise UnknownMetric(f"{name} is not in the metric catalogue")
    names = spec.labels
    if len(label_values) != len(names):
        raise ValueError(f"{name} takes labels {names}, got {len(label_values)} values")
    if not label_values:
        return (_ORDER[name], name, None, "", f"{name} ", _UNSET, "")
    prefix = f"{name}{{{_label_text(names, label_values)}"
    uuid = label_values[1] if names[:2] == _GPU_IDS else None
    return (_ORDER[name], prefix, uuid, "", f"{prefix}}} ", _UNSET, "")


# (names, label values, tails) -> the same for a group of series written by one Writer.add_many call: (the GPU
# UUID whose identity labels the group's gpu, uuid series carry or None, those labels as last rendered, then
# per series: family position, prefix (None where no identity labels apply: the head is then fixed), head,
# last value and line). Replaced whole, in two generations per Renderer (.groups, .groups_old), like the series.
_GROUPS_MAX = 1_000  # entries per generation (the reference host with 50 pods uses ~220)


def _group(cache: Renderer, names: tuple[str, ...], label_values: tuple[Any, ...], tails: tuple[Any, ...] | None,
           key: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The cache's entry for this group, from the old generation or new: each series checked against the
    catalogue as ``Writer.add`` checks it."""
    entry = cache.groups_old.pop(key, None) if key is not None else None
    if entry is None:
        entry = _new_group(names, label_values, tails)
    if key is not None:
        if len(cache.groups) >= _GROUPS_MAX:
            cache.groups_old, cache.groups = cache.groups, {}
        cache.groups[key] = entry
    return entry


def _new_group(names: tuple[str, ...], label_values: tuple[Any, ...], tails: tuple[Any, ...] | None
               ) -> tuple[Any, ...]:
    if tails is not None and len(tails) != len(names):
        raise ValueError(f"{len(names)} names but {len(tails)} tail labels")
    uuid, indexes, prefixes, heads = None, [], [], []
    for i, name in enumerate(names):
        tail = None if tails is None else tails[i]
        labels = (label_values if tail is None else (*label_values, *tail) if type(tail) is tuple
                  else (*label_values, tail))
        index, prefix, gpu, _, head, _, _ = _new_series(name, labels)
        indexes.append(index)
        prefixes.append(prefix if gpu is not None else None)
        heads.append(head)
        if gpu is not None:
            if uuid is not None and gpu != uuid:  # the group's identity labels are one GPU's
                raise ValueError(f"one group holds the series of GPUs {uuid} and {gpu}")
            uuid = gpu
    unset = (_UNSET,) * len(names)
    return (uuid, "", tuple(indexes), tuple(prefixes), tuple(heads), unset, unset)


class Renderer:
    """Renders snapshots with its own rendered-text caches (the series and groups above): a sampler renders
    with one. ``render()`` below uses the process's."""

    __slots__ = ("findings", "groups", "groups_old", "refused", "series", "series_old", "workloads")

    def __init__(self) -> None:
        self.series: dict[tuple[str, tuple[Any, ...]], tuple[int, str, str | None, str, str, Any, str]] = {}
        self.series_old: dict[tuple[str, tuple[Any, ...]], tuple[int, str, str | None, str, str, Any, str]] = {}
        self.groups: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.groups_old: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        # workload name -> (its status as last rendered, the lines it wrote: (family position, lines) pairs). A
        # status is immutable and the analysis hands back the same object while a workload's inputs do not change
        # (attribution.AutoStatuses: most pods, most ticks), so the same object writes the same lines (no workload
        # series carries a GPU's identity labels). Holding the object keeps its id from being reused; only the
        # last render's workloads are kept.
        self.workloads: dict[str, tuple[Any, tuple[tuple[int, list[str]], ...]]] = {}
        # the same for each workload's finding (verdict and headroom series): analysis keeps an automatic
        # workload's finding object between its scorings (pipeline.AUTO_REFRESH_SECONDS)
        self.findings: dict[str, tuple[Any, tuple[tuple[int, list[str]], ...]]] = {}
        self.refused: frozenset[str] = frozenset()  # the series names the last render left out (logged when new)

    def render(self, snapshot: Snapshot) -> bytes:
        """The full exposition for one snapshot."""
        w = Writer(self)
        render_into(w, snapshot)
        refused = frozenset(w.refused)
        if refused - self.refused:
            log.error("exposition_value_refused", series=sorted(refused - self.refused)[:20], samples=len(w.refused),
                      reason="a value Prometheus cannot parse (an integer beyond a float's range) is left out, so "
                             "the scrape is not rejected whole")  # fmt: skip
        self.refused = refused
        w.add("headroom_exposition_refused_samples", len(w.refused))
        return w.render()

    def clear(self) -> None:
        for cache in (self.series, self.series_old, self.groups, self.groups_old, self.workloads, self.findings):
            cache.clear()


def clear_caches() -> None:
    """Empty the process's rendered-text caches (bounded, so never a leak; a memory measurement clears them
    first)."""
    _LABEL_TEXT.clear()
    _PROCESS.clear()


class ValueRefused(ValueError):
    """A value the exposition cannot carry: Prometheus' parser rejects the whole scrape over it."""


# An integer beyond a float's range fails Prometheus' ParseFloat ("value out of range") and with it the whole
# scrape: the host drops out of Prometheus. Such a sample is left out and counted (headroom_exposition_refused_samples).
_INT_LIMIT = int(sys.float_info.max)


def format_value(value: float | int | bool) -> str:
    """The sample's text; ValueRefused for an integer Prometheus could not parse."""
    kind = type(value)
    if kind is float:  # most values: tested first, by exact type (a float subclass takes the general path)
        if value.is_integer():
            if abs(value) < 1e15:
                return str(int(value))
        elif value != value:
            return "NaN"
        elif value in _INFINITIES:
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    if kind is int:
        if -_INT_LIMIT <= value <= _INT_LIMIT:
            return str(value)
        raise ValueRefused("an integer beyond a float's range")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        if -_INT_LIMIT <= value <= _INT_LIMIT:
            return str(value)
        raise ValueRefused("an integer beyond a float's range")
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


_INFINITIES = (math.inf, -math.inf)


class Writer:
    """Collects series per family; ``add`` takes label values in the catalogue's label order."""

    __slots__ = ("_cache", "_lines", "gpu_extra", "refused")

    def __init__(self, cache: Renderer | None = None) -> None:
        self._cache = cache or _PROCESS  # where series and groups keep their text across ticks
        self._lines: list[list[str]] = [[] for _ in _HEADERS]  # each family's series lines, in catalogue order
        # GPU UUID -> ',namespace="..",pod=".."': appended to every series labelled gpu, uuid (identity labels)
        self.gpu_extra: dict[str, str] = {}
        self.refused: list[str] = []  # the names of the samples left out (format_value refused their value)

    def add(self, name: str, value: float | int | bool | None, *label_values: Any) -> None:
        if value is None:
            return  # unknown / unsupported: the series is absent, never 0
        key = (name, label_values)
        cache = self._cache
        try:
            index, prefix, uuid, extra, head, last, line = cache.series[key]
        except KeyError:
            index, prefix, uuid, extra, head, last, line = _series(cache, name, label_values, key)
        except TypeError:  # an unhashable label value: rendered, not cached
            index, prefix, uuid, extra, head, last, line = _series(cache, name, label_values, None)
            key = None
        if uuid is not None:
            now = self.gpu_extra.get(uuid, "")
            if now != extra:
                extra, head, last = now, f"{prefix}{now}}} ", _UNSET
        if type(value) is not type(last) or value != last:
            try:
                line = head + format_value(value)
            except ValueRefused:
                self.refused.append(name)
                return
            if key is not None:
                cache.series[key] = (index, prefix, uuid, extra, head, value, line)
        self._lines[index].append(line)

    def add_many(self, names: tuple[str, ...], values: Iterable[float | int | bool | None],
                 label_values: tuple[Any, ...] = (), tails: tuple[Any, ...] | None = None) -> None:
        """``add(names[i], value_i, *label_values)`` for each value in order, with ``tails[i]`` as the last
        label where ``tails`` is given (and not None; a tuple: the last labels), in one call: the same output as
        those ``add`` calls, at a fraction of their cost for a group of series that repeats every tick (a GPU's
        gauges, a verdict, a workload's series)."""
        key = (names, label_values, tails)
        cache = self._cache
        try:
            group = cache.groups.get(key)
        except TypeError:  # an unhashable label value: rendered, not cached
            key, group = None, None
        if group is None:
            group = _group(cache, names, label_values, tails, key)
        uuid, extra, indexes, prefixes, heads, lasts, lines = group
        if type(values) is not tuple:
            values = tuple(values)
        if len(values) != len(indexes):
            raise ValueError(f"{len(indexes)} series but {len(values)} values")
        changed = False
        if uuid is not None:
            now = self.gpu_extra.get(uuid, "")
            if now != extra:
                extra, changed = now, True
                heads = tuple(h if p is None else f"{p}{now}}} " for p, h in zip(prefixes, heads, strict=True))
                lasts = (_UNSET,) * len(indexes)
        fresh = None
        out = self._lines
        i = 0
        for value, last in zip(values, lasts, strict=True):
            if value is not None:
                if type(value) is type(last) and value == last:
                    out[indexes[i]].append(lines[i])
                else:
                    if fresh is None:
                        fresh = list(lines)
                    try:
                        fresh[i] = line = heads[i] + format_value(value)
                    except ValueRefused:
                        self.refused.append(names[i])
                        key = None  # not cached: the value is refused again (and counted) while it lasts
                    else:
                        out[indexes[i]].append(line)
            i += 1
        if (fresh is not None or changed) and key is not None:
            cache.groups[key] = (uuid, extra, indexes, prefixes, heads, values, lines if fresh is None else tuple(fresh))

    def names(self) -> set[str]:
        return {m.name for m, lines in zip(CATALOG, self._lines, strict=True) if lines}

    def render(self) -> bytes:
        out: list[str] = []
        for header, lines in zip(_HEADERS, self._lines, strict=True):
            if lines:
                out.append(header)
                out.extend(lines)
        out.append("")
        return "\n".join(out).encode("utf-8")


# each family's HELP and TYPE lines, in catalogue order
_HEADERS = tuple(f"# HELP {m.name} {m.help.replace(chr(92), chr(92) * 2)}\n# TYPE {m.name} {m.type}" for m in CATALOG)


_PROCESS = Renderer()  # the process's caches: render() and a Writer made without one use them


def render(snapshot: Snapshot) -> bytes:
    """The full exposition for one snapshot (with the process's caches: an agent has one sampler)."""
    return _PROCESS.render(snapshot)




def render_into(w: Writer, snapshot: Snapshot) -> None:
    sample = snapshot.sample
    _render_self(w, snapshot)
    identity = sample.data("identity")
    if identity is not None:
        _render_identity(w, identity, sample, getattr(snapshot.findings, "workloads", None))
    nvml = sample.sources.get("nvml")
    if nvml is not None:
        _render_nvml(w, nvml.data if nvml.ok else None)
    for name, fn in _HOST_RENDERERS:
        data = sample.data(name)
        if data is not None:
            fn(w, data, snapshot)
    if snapshot.findings is not None:
        _render_findings(w, snapshot.findings)
        _render_workloads(w, getattr(snapshot.findings, "workloads", ()) or ())


def _render_self(w: Writer, snap: Snapshot) -> None:
    w.add("headroom_build_info", 1, __version__, platform.python_version())
    if snap.scenario:
        w.add("headroom_simulation_info", 1, snap.scenario)
    sources = snap.sample.sources
    values: list[Any] = []
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


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _render_verdict(w: Writer, prefix: str, ids: tuple[str, ...], verdict: Any) -> None:
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

    if prefix == "headroom_gpu":  # a KV cache belongs to a serving workload, never to a GPU on its own
        RESOURCES = tuple(r for r in RESOURCES if r != "kv_cache")  # noqa: N806
    n = len(RESOURCES)
    names = (f"{prefix}_bottleneck_score",) * n + (f"{prefix}_bottleneck_long_score",) * n + (f"{prefix}_bottleneck",) * (n + 1)
    _VERDICT_SERIES[prefix] = entry = (RESOURCES, names, (*RESOURCES, *RESOURCES, *RESOURCES, NONE))
    return entry


def _render_identity(w: Writer, identity: Any, sample: Any, statuses: Iterable[Any] | None = None) -> None:
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


def _render_workloads(w: Writer, statuses: Iterable[Any]) -> None:
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


def _workload_series(st: Any) -> tuple[tuple[str, ...], list[Any], tuple[Any, ...]]:
    """One workload's series for Writer.add_many: (names, values, tail labels)."""
    source = getattr(st, "source", "declared")
    m = st.measured
    if m is not None:
        # an automatic workload's cgroup figures: the processes collector's, else the identity collector's (a new
        # identity's first tick, before its members were measured with their cgroup)
        cg = m.cgroup if m.cgroup is not None or source != "auto" else getattr(st, "cgroup", None)
        measured = (m.processes, m.threads, _r(m.cpu_user_seconds_total, 2), _r(m.cpu_system_seconds_total, 2),
                    m.resident_memory_bytes, m.read_bytes_total, m.written_bytes_total,
                    _r(m.sched_wait_seconds_total, 3), _r(m.sched_run_seconds_total, 3), m.cpus_allowed)
    else:  # an automatic workload without measured processes still counts them, and has its cgroup
        cg = getattr(st, "cgroup", None) if source == "auto" else None
        measured = (st.processes if source == "auto" else None, None, None, None, None, None, None, None, None, None)
    names = _WORKLOAD_ROW
    tails = ((st.kind, st.model, st.precision, st.runtime, source), (st.team, st.job), *_WORKLOAD_ROW_TAILS)
    values = [1, 1 if st.job or st.team else None, *measured]
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


def _render_findings(w: Writer, f: Any) -> None:
    for g in f.gpu_findings:
        ids = (str(g.index), g.uuid)
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


def _render_serving_findings(w: Writer, wf: Any) -> None:
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


def _render_serving(w: Writer, data: Any, snap: Snapshot) -> None:
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
    values: list[Any] = []
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


def _render_agent(w: Writer, a: Any, snap: Snapshot) -> None:
    w.add("headroom_agent_cpu_seconds_total", _r(a.cpu_user_seconds_total), "user")
    w.add("headroom_agent_cpu_seconds_total", _r(a.cpu_system_seconds_total), "system")
    w.add("headroom_agent_resident_memory_bytes", a.resident_memory_bytes)
    w.add("headroom_agent_threads", a.threads)
    w.add("headroom_agent_open_fds", a.open_fds)
    w.add("headroom_agent_start_time_seconds", _r(a.start_time_seconds))


def _render_probe(w: Writer, p: Any, snap: Snapshot) -> None:
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


_HOST_RENDERERS: Iterable[tuple[str, Any]] = (
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
