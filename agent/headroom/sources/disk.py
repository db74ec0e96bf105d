"""The disk collector: per-device I/O counters from /proc/diskstats, filtered by name.

Settings (``collectors.disk``):
  device_exclude  regex (re.search); devices matching it are dropped. Default
                  ``procfs.DEFAULT_DISK_EXCLUDE`` (partitions, loop, ram, zram, fd, sr);
                  "" drops nothing (like node_exporter's empty flag).
  device_include  regex (re.search); when set (non-empty), only matching devices are kept, and
                  device_exclude applies only if it is also set explicitly.
"""

from __future__ import annotations

from headroom.samples import DiskSample, DiskStats, share_unchanged
from headroom.sources import Collector, DeviceFilter, SourceContext, procfs, register


@register
class DiskCollector(Collector):
    name = "disk"
    default_enabled = True
    description = "Block device reads, writes, bytes, busy and weighted I/O time from /proc/diskstats"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._last: dict[str, DiskStats] = {}  # device -> last tick's (samples.share_unchanged)
        self._filter = DeviceFilter("disk", ctx.settings, procfs.DEFAULT_DISK_EXCLUDE)
        self._diskstats = procfs.ProcFile(ctx.paths.procfs / "diskstats", procfs.is_live_procfs(ctx.paths.procfs))

    def wanted(self, device: str) -> bool:
        """Returns True when ``device`` passes the include and exclude filters."""
        return self._filter.wanted(device)

    def collect(self) -> DiskSample:
        """Returns the DiskSample of the wanted devices; raises CollectorError when diskstats fails."""
        root = self.ctx.paths.procfs
        try:
            # a device name that is not UTF-8 keeps its bad bytes as \xNN (it affects only that device)
            devices = procfs.parse_diskstats(self._diskstats.text("backslashreplace"))
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "diskstats", exc) from None
        last = self._last
        out = tuple(share_unchanged(d, last.get(d.device)) for d in devices if self.wanted(d.device))  # idle: shared
        self._last = {d.device: d for d in out}
        return DiskSample(devices=out)

    def close(self) -> None:
        self._diskstats.close()
