"""The cpu collector: CPU time per mode, load averages, run queue and PSI from /proc.

Reads <procfs>/stat (required), <procfs>/loadavg (required) and <procfs>/pressure/{cpu,memory,io}.
PSI for all three resources lives here (CpuSample.pressure keyed "cpu", "memory", "io"): it is empty
on kernels without PSI, and a PSI file that cannot be read degrades to "absent" with one log event
instead of failing the whole collector.
"""

from __future__ import annotations

import os
from types import MappingProxyType

import structlog

from headroom.samples import CpuSample, Pressure, share_unchanged
from headroom.sources import Collector, SourceContext, procfs, register

log = structlog.get_logger("headroom.sources.cpu")


def clock_ticks_per_second() -> int:
    """Returns USER_HZ (sysconf SC_CLK_TCK), or 100 where sysconf cannot say."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return procfs.USER_HZ_DEFAULT


@register
class CpuCollector(Collector):
    name = "cpu"
    default_enabled = True
    description = "CPU seconds per mode, load averages, runnable/blocked tasks, PSI (cpu, memory, io)"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._user_hz = clock_ticks_per_second()
        self._pressure_error: str | None = None
        self._last: CpuSample | None = None  # the previous tick's (samples.share_unchanged)
        root = ctx.paths.procfs
        keep = procfs.is_live_procfs(root)
        self._stat = procfs.ProcFile(root / "stat", keep)
        self._loadavg = procfs.ProcFile(root / "loadavg", keep)
        self._psi = {r: procfs.ProcFile(root / "pressure" / r, keep) for r in procfs.PRESSURE_RESOURCES}

    def collect(self) -> CpuSample:
        """Returns this tick's CpuSample; raises CollectorError when /proc/stat or loadavg fails."""
        root = self.ctx.paths.procfs
        try:
            stat = procfs.parse_stat(self._stat.text(), self._user_hz)
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "stat", exc) from None
        try:
            load1, load5, load15 = procfs.parse_loadavg(self._loadavg.text())
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "loadavg", exc) from None
        # load averages move every 5 s and PSI averages every 2 s: an unchanged value is last tick's object
        self._last = share_unchanged(CpuSample(
            times=stat.times,
            logical_cpus=stat.logical_cpus,
            load1=load1,
            load5=load5,
            load15=load15,
            procs_running=stat.procs_running,
            procs_blocked=stat.procs_blocked,
            pressure=MappingProxyType(self._pressure()),
        ), self._last)
        return self._last

    def _pressure(self) -> dict[str, Pressure]:
        """Returns PSI per resource; {} (logged once) when the files exist but cannot be read."""
        root = self.ctx.paths.procfs / "pressure"
        try:
            pressure = procfs.read_pressure_files(self._psi)
        except (OSError, ValueError) as exc:
            error = str(procfs.read_failure(root, exc))
            if error != self._pressure_error:
                log.warning("pressure_unreadable", error=error)
                self._pressure_error = error
            return {}
        if self._pressure_error is not None:
            log.info("pressure_readable_again", resources=sorted(pressure))
            self._pressure_error = None
        last = self._last.pressure if self._last is not None else {}
        for resource, p in pressure.items():
            old = last.get(resource)
            if old is not None:
                p = Pressure(some=share_unchanged(p.some, old.some),
                             full=share_unchanged(p.full, old.full) if p.full is not None else None)
                pressure[resource] = share_unchanged(p, old)
        return pressure

    def close(self) -> None:
        for f in (self._stat, self._loadavg, *self._psi.values()):
            f.close()
