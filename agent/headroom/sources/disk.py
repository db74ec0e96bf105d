"""The disk collector: per-device I/O counters from /proc/diskstats, filtered by name.

Settings (``collectors.disk``):
  device_exclude  regex (re.search); devices matching it are dropped. Default
                  ``procfs.DEFAULT_DISK_EXCLUDE`` (partitions, loop, ram, zram, fd, sr);
                  "" drops nothing (like node_exporter's empty flag).
  device_include  regex (re.search); when set (non-empty), only matching devices are kept, and
                  device_exclude applies only if it is also set explicitly.
"""

from __future__ import annotations

import re

from headroom.samples import DiskSample
from headroom.sources import Collector, CollectorError, SourceContext, procfs, register


def _compile(key: str, pattern: object) -> re.Pattern[str]:
    """Returns the compiled regex of setting ``key``; raises CollectorError when it is not one."""
    if not isinstance(pattern, str):
        raise CollectorError(f"collectors.disk.{key}: expected a regex string, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise CollectorError(f"collectors.disk.{key}: invalid regex {pattern!r}: {exc}") from None


@register
class DiskCollector(Collector):
    name = "disk"
    default_enabled = True
    description = "Block device reads, writes, bytes, busy and weighted I/O time from /proc/diskstats"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        include = settings.get("device_include")
        self._include = None if include in (None, "") else _compile("device_include", include)
        exclude = settings.get("device_exclude")
        if exclude is None and self._include is None:
            exclude = procfs.DEFAULT_DISK_EXCLUDE
        self._exclude = None if exclude in (None, "") else _compile("device_exclude", exclude)

    def wanted(self, device: str) -> bool:
        """Returns True when ``device`` passes the include and exclude filters."""
        if self._include is not None and not self._include.search(device):
            return False
        return self._exclude is None or not self._exclude.search(device)

    def collect(self) -> DiskSample:
        """Returns the DiskSample of the wanted devices; raises CollectorError when diskstats fails."""
        root = self.ctx.paths.procfs
        try:
            devices = procfs.read_diskstats(root)
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "diskstats", exc) from None
        return DiskSample(devices=tuple(d for d in devices if self.wanted(d.device)))
