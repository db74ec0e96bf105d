"""The memory collector: /proc/meminfo (required) plus major page faults from /proc/vmstat."""

from __future__ import annotations

import dataclasses

import structlog

from headroom.samples import MemorySample, share_unchanged
from headroom.sources import Collector, SourceContext, procfs, register

log = structlog.get_logger("headroom.sources.memory")


@register
class MemoryCollector(Collector):
    name = "memory"
    default_enabled = True
    description = "RAM total/available/free, buffers, cache, shmem, dirty, swap, major page faults"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._last: MemorySample | None = None  # last tick's (samples.share_unchanged)
        self._vmstat_error: str | None = None
        keep = procfs.is_live_procfs(ctx.paths.procfs)
        self._meminfo = procfs.ProcFile(ctx.paths.procfs / "meminfo", keep)
        self._vmstat = procfs.ProcFile(ctx.paths.procfs / "vmstat", keep)

    def collect(self) -> MemorySample:
        """Returns this tick's MemorySample; raises CollectorError when /proc/meminfo fails.

        A failing /proc/vmstat only leaves ``major_faults_total`` None (logged once).
        """
        root = self.ctx.paths.procfs
        try:
            sample = procfs.parse_meminfo(self._meminfo.text())
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "meminfo", exc) from None
        # totals and counters that did not move since the last tick are last tick's objects
        self._last = share_unchanged(dataclasses.replace(sample, major_faults_total=self._major_faults()), self._last)
        return self._last

    def _major_faults(self) -> int | None:
        """Returns pgmajfault from /proc/vmstat, or None when it cannot be read."""
        root = self.ctx.paths.procfs
        try:
            major = procfs.vmstat_counter(self._vmstat.text(), "pgmajfault")
        except (OSError, ValueError) as exc:
            error = str(procfs.read_failure(root / "vmstat", exc))
            if error != self._vmstat_error:
                log.warning("vmstat_unreadable", error=error)
                self._vmstat_error = error
            return None
        if self._vmstat_error is not None:
            log.info("vmstat_readable_again")
            self._vmstat_error = None
        return major

    def close(self) -> None:
        self._meminfo.close()
        self._vmstat.close()
