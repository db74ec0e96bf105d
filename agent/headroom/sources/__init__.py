"""Sources: one module per collector, registered by name with a default on/off switch.

A collector reads one part of the host (NVML, /proc/stat, /dev/shm ...) and returns a frozen
dataclass from ``headroom.samples``. It knows nothing of Prometheus. It may keep state between ticks
(handles, accumulators), and it raises ``CollectorError`` (or anything else) when it cannot read: the
sampler turns that into ``headroom_collector_success{collector} 0`` and the rest of the tick goes on.

What a collector gets is ``SourceContext``: its paths and settings, the declared workloads, its clock, the
simulation scenario (as ``Simulation``: what collectors use of it, so sources never import the simulation) and
``previous``, which returns the one thing it may read of the tick before: a ``samples.PreviousTick``
(docs/architecture.md: the previous-tick arrow). ``collect()`` returns the collector's own frozen value; each
collector's annotation says which (``Collector.collect`` is ``object``, narrowed by every subclass).

To add a collector: write ``sources/<name>.py`` with a class decorated ``@register``; import the
module in ``_MODULES`` below; add its metrics to ``exposition/catalog.py`` and their rendering to
``exposition/render/collectors.py``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NoReturn, Protocol, TypeVar

from headroom.jsontypes import Settings
from headroom.samples import MountUsage, PreviousTick

if TYPE_CHECKING:  # workload/ imports no source; sources read its profile type only in annotations
    from headroom.workload.profiles import WorkloadProfile


class CollectorError(Exception):
    """A collector could not read its source this tick. The message is shown to users as is."""


@dataclass(frozen=True)
class Paths:
    """Roots every reader hangs off (node_exporter's --path.* flags)."""

    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")
    rootfs: Path = Path("/")

    def host(self, path: str | Path) -> Path:
        """A host path (e.g. /dev/shm) seen through --path.rootfs."""
        p = Path(path)
        return self.rootfs / p.relative_to("/") if p.is_absolute() else self.rootfs / p


class SimulatedDriver(Protocol):
    """The NVML driver stand-in (``headroom.simulation.nvml_driver.NvmlDriver``) as the NVML collector uses it."""

    def install(self) -> object: ...  # make it the binding's loaded library


class Simulation(Protocol):
    """What collectors use of a simulation scenario (``headroom.simulation.Scenario``); real sources never
    import the simulation (tests/test_architecture.py), they call these."""

    def nvml_library(self) -> SimulatedDriver: ...  # nvml: the driver stand-in under the real binding
    def standin_pids(self) -> frozenset[int] | None: ...  # processes, identity: the only processes counted
    def standin_workload(self, pid: int) -> str | None: ...  # identity: the scenario workload of a stand-in
    def standin_endpoint(self, pid: int) -> str | None: ...  # serving: where a stand-in launcher serves
    def serving_endpoints(self) -> dict[str, str]: ...  # serving: workload -> its stand-in's /metrics URL
    def host_statvfs(self, mountpoint: str) -> MountUsage | None: ...  # shm: statvfs(2) of the synthetic tree


@dataclass(frozen=True)
class SourceContext:
    """What a collector gets at construction."""

    paths: Paths = field(default_factory=Paths)
    # the collector's own section of config.yaml (``collectors.<name>``), already validated: each key's value of
    # the type config.py's schema declares for it
    settings: Settings = field(default_factory=dict)
    # the simulation scenario or None on a real host
    scenario: Simulation | None = None
    # seconds; used by collectors that accumulate counters from instantaneous readings
    interval: float = 1.0
    # the declared workload profiles, config file then drop-ins
    workloads: tuple[WorkloadProfile, ...] = ()
    monotonic: Callable[[], float] | None = None
    # what the collector may read of the tick before this one (None before the first; ``previous`` None: a
    # collector run on its own): samples.PreviousTick documents each field and who reads it
    previous: Callable[[], PreviousTick | None] | None = None

    def previous_tick(self) -> PreviousTick | None:
        """The previous tick's input, or None (before the first tick, or no ``previous`` given)."""
        return self.previous() if self.previous is not None else None


class Collector:
    """Base class. Subclasses set ``name`` and ``default_enabled`` and implement ``collect``."""

    name: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True
    description: ClassVar[str] = ""

    def __init__(self, ctx: SourceContext) -> None:
        self.ctx = ctx

    def collect(self) -> object:
        """This tick's frozen value (each subclass narrows the type: ``CpuSample``, ``NvmlSample`` ...)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release handles and threads. Called once at shutdown."""


class DeviceFilter:
    """The ``device_include`` / ``device_exclude`` settings of a per-device collector (disk, net).

    Both are regexes applied with re.search, like node_exporter's flags. Without an include, the
    collector's default exclude applies; an explicit "" turns a filter off; with an include, the exclude
    applies only when it is also given.
    """

    def __init__(self, collector: str, settings: Settings, default_exclude: str) -> None:
        include = settings.get("device_include")
        self.include = None if include in (None, "") else self._compile(collector, "device_include", include)
        exclude = settings.get("device_exclude")
        if exclude is None and self.include is None:
            exclude = default_exclude
        self.exclude = None if exclude in (None, "") else self._compile(collector, "device_exclude", exclude)

    @staticmethod
    def _compile(collector: str, key: str, pattern: object) -> re.Pattern[str]:
        if not isinstance(pattern, str):
            raise CollectorError(f"collectors.{collector}.{key}: expected a regex string, got {pattern!r}")
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise CollectorError(f"collectors.{collector}.{key}: invalid regex {pattern!r}: {exc}") from None

    def wanted(self, device: str) -> bool:
        """True when ``device`` passes the include and exclude filters."""
        if self.include is not None and not self.include.search(device):
            return False
        return self.exclude is None or not self.exclude.search(device)


REGISTRY: dict[str, type[Collector]] = {}

# Modules that define collectors, in exposition order.
_MODULES = ("nvml", "cpu", "memory", "shm", "disk", "net", "infiniband", "processes", "serving", "identity", "agent", "probe")


_C = TypeVar("_C", bound=type[Collector])


def register(cls: _C) -> _C:
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    REGISTRY[cls.name] = cls
    return cls


# module -> why it failed to import (its collector then reports that reason on every tick)
IMPORT_ERRORS: dict[str, str] = {}


def _unloadable(module: str, reason: str) -> type[Collector]:
    """A stand-in collector for a module that failed to import: it fails every tick with ``reason``."""

    class Unloadable(Collector):
        name = module
        default_enabled = True
        description = f"(failed to load: {reason})"

        def collect(self) -> NoReturn:
            raise CollectorError(f"collector failed to load: {reason}")

    return Unloadable


def load_all() -> dict[str, type[Collector]]:
    """Import every collector module (idempotent) and return the registry, in ``_MODULES`` order.

    Registration order is import order, and what imported which collector module first (a test module,
    a benchmark) must not change the order collectors run and render in: the registry is re-sorted.
    A module that fails to import takes down only its own collector: it is registered as one that fails
    every tick with the reason (collector_success 0, /healthz degraded, logged once), never the agent.
    """
    for module in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{module}")
        except Exception as exc:
            IMPORT_ERRORS[module] = f"{type(exc).__name__}: {exc}"
            REGISTRY.setdefault(module, _unloadable(module, IMPORT_ERRORS[module]))
    rank = {f"{__name__}.{module}": i for i, module in enumerate(_MODULES)}
    by_name = {module: i for i, module in enumerate(_MODULES)}  # an unloadable module's stand-in collector
    ordered = sorted(REGISTRY.items(),
                     key=lambda item: rank.get(item[1].__module__, by_name.get(item[0], len(rank))))  # fmt: skip
    REGISTRY.clear()
    REGISTRY.update(ordered)
    return REGISTRY
