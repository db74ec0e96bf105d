"""Render a Snapshot as Prometheus text exposition (format 0.0.4), once per tick.

Rendering happens in the sampler thread; a scrape only sends the bytes. This module holds the ``Writer``
(catalogued series into text, each series' and group's line kept across ticks), the ``Renderer`` that owns those
caches, and ``render_into``, which hands each part of a Snapshot to its family: each ``_render_<source>``
(``collectors.py``: a collector's sample; ``findings.py``: the analysis) turns it into series; names come from
``catalog.py`` and the writer refuses anything else, so the exposition never drifts from the catalogue.

We render by hand instead of through prometheus_client's registry: building 2 000 samples through
custom collectors costs ~13 ms of CPU, far over the 10 ms tick budget (docs/benchmarks.md); the text
format itself is simple and ``promtool check metrics`` plus the golden file guard it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import structlog

from headroom.exposition.catalog import BY_NAME, CATALOG
from headroom.exposition.render.collectors import (
    _HOST_RENDERERS,
    _render_identity,
    _render_nvml,
    _render_self,
)
from headroom.exposition.render.findings import _render_findings, _render_workloads
from headroom.exposition.render.text import (
    _HEADERS,
    _LABEL_TEXT,
    _ORDER,
    Labels,
    ValueRefused,
    _label_text,
    format_value,
)

log = structlog.get_logger()

if TYPE_CHECKING:
    from headroom.analysis.pipeline import Findings, WorkloadFinding
    from headroom.samples import Snapshot
    from headroom.workload.attribution import WorkloadStatus

_GPU_IDS = ("gpu", "uuid")  # the leading labels of every per-GPU series

# the caches' entries (their layout in the comments below): a series', and a group's (Writer.add_many)
_Series = tuple[int, str, "str | None", str, str, object, str]
_SeriesKey = tuple[str, Labels]
_Group = tuple["str | None", str, tuple[int, ...], tuple["str | None", ...], tuple[str, ...], tuple[object, ...],
               tuple[str, ...]]
_GroupKey = tuple[tuple[str, ...], Labels, "tuple[object, ...] | None"]  # names, label values, tails


class UnknownMetric(KeyError):
    pass


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


def _series(cache: Renderer, name: str, label_values: Labels, key: _SeriesKey | None) -> _Series:
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


def _new_series(name: str, label_values: Labels) -> _Series:
    spec = BY_NAME.get(name)
    if spec is None:
        raise UnknownMetric(f"{name} is not in the metric catalogue")
    names = spec.labels
    if len(label_values) != len(names):
        raise ValueError(f"{name} takes labels {names}, got {len(label_values)} values")
    if not label_values:
        return (_ORDER[name], name, None, "", f"{name} ", _UNSET, "")
    prefix = f"{name}{{{_label_text(names, label_values)}"
    uuid = cast("str", label_values[1]) if names[:2] == _GPU_IDS else None  # a GpuSample's uuid
    return (_ORDER[name], prefix, uuid, "", f"{prefix}}} ", _UNSET, "")


# (names, label values, tails) -> the same for a group of series written by one Writer.add_many call: (the GPU
# UUID whose identity labels the group's gpu, uuid series carry or None, those labels as last rendered, then
# per series: family position, prefix (None where no identity labels apply: the head is then fixed), head,
# last value and line). Replaced whole, in two generations per Renderer (.groups, .groups_old), like the series.
_GROUPS_MAX = 1_000  # entries per generation (the reference host with 50 pods uses ~220)


def _group(cache: Renderer, names: tuple[str, ...], label_values: Labels, tails: tuple[object, ...] | None,
           key: _GroupKey | None) -> _Group:
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


def _new_group(names: tuple[str, ...], label_values: Labels, tails: tuple[object, ...] | None) -> _Group:
    if tails is not None and len(tails) != len(names):
        raise ValueError(f"{len(names)} names but {len(tails)} tail labels")
    uuid: str | None = None
    indexes: list[int] = []
    prefixes: list[str | None] = []
    heads: list[str] = []
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
    # no value rendered yet: no line (never read while its last value is _UNSET, which equals no value)
    return (uuid, "", tuple(indexes), tuple(prefixes), tuple(heads), (_UNSET,) * len(names), ("",) * len(names))


class Renderer:
    """Renders snapshots with its own rendered-text caches (the series and groups above): a sampler renders
    with one. ``render()`` below uses the process's."""

    __slots__ = ("findings", "groups", "groups_old", "refused", "series", "series_old", "workloads")

    def __init__(self) -> None:
        self.series: dict[_SeriesKey, _Series] = {}
        self.series_old: dict[_SeriesKey, _Series] = {}
        self.groups: dict[_GroupKey, _Group] = {}
        self.groups_old: dict[_GroupKey, _Group] = {}
        # workload name -> (its status as last rendered, the lines it wrote: (family position, lines) pairs). A
        # status is immutable and the analysis hands back the same object while a workload's inputs do not change
        # (attribution.AutoStatuses: most pods, most ticks), so the same object writes the same lines (no workload
        # series carries a GPU's identity labels). Holding the object keeps its id from being reused; only the
        # last render's workloads are kept.
        self.workloads: dict[str, tuple[WorkloadStatus, tuple[tuple[int, list[str]], ...]]] = {}
        # the same for each workload's finding (verdict and headroom series): analysis keeps an automatic
        # workload's finding object between its scorings (pipeline.AUTO_REFRESH_SECONDS)
        self.findings: dict[str, tuple[WorkloadFinding, tuple[tuple[int, list[str]], ...]]] = {}
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


class Writer:
    """Collects series per family; ``add`` takes label values in the catalogue's label order."""

    __slots__ = ("_cache", "_lines", "gpu_extra", "refused")

    def __init__(self, cache: Renderer | None = None) -> None:
        self._cache = cache or _PROCESS  # where series and groups keep their text across ticks
        self._lines: list[list[str]] = [[] for _ in _HEADERS]  # each family's series lines, in catalogue order
        # GPU UUID -> ',namespace="..",pod=".."': appended to every series labelled gpu, uuid (identity labels)
        self.gpu_extra: dict[str, str] = {}
        self.refused: list[str] = []  # the names of the samples left out (format_value refused their value)

    def add(self, name: str, value: float | int | bool | None, *label_values: object) -> None:
        if value is None:
            return  # unknown / unsupported: the series is absent, never 0
        lookup = (name, label_values)
        key: _SeriesKey | None = lookup  # None: not cached
        cache = self._cache
        try:
            index, prefix, uuid, extra, head, last, line = cache.series[lookup]
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
                 label_values: Labels = (), tails: tuple[object, ...] | None = None) -> None:
        """``add(names[i], value_i, *label_values)`` for each value in order, with ``tails[i]`` as the last
        label where ``tails`` is given (and not None; a tuple: the last labels), in one call: the same output as
        those ``add`` calls, at a fraction of their cost for a group of series that repeats every tick (a GPU's
        gauges, a verdict, a workload's series)."""
        lookup = (names, label_values, tails)
        key: _GroupKey | None = lookup  # None: not cached
        cache = self._cache
        try:
            group = cache.groups.get(lookup)
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
        for i, (value, last) in enumerate(zip(values, lasts, strict=True)):
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
        # the Snapshot holds the samples.Findings protocol; its one implementation is the pipeline's, rendered here
        _render_findings(w, cast("Findings", snapshot.findings))
        _render_workloads(w, getattr(snapshot.findings, "workloads", ()) or ())
