"""The net collector: per-interface traffic counters from /proc/net/dev and link speed from sysfs.

The analysis compares a distributed workload's throughput with what its links can carry (the
``network`` bottleneck), so the speed matters as much as the counters.

Reads <procfs>/net/dev (required; the agent's own network namespace, so run it in the host's) and
<sysfs>/class/net/<device>/speed (megabits per second; absent, -1 or unreadable -> unknown).

Settings (``collectors.net``):
  device_exclude  regex (re.search); interfaces matching it are dropped. Default
                  ``procfs.DEFAULT_NET_EXCLUDE`` (lo, veth, docker, bridges, CNI overlays);
                  "" drops nothing.
  device_include  regex (re.search); when set (non-empty), only matching interfaces are kept, and
                  device_exclude applies only if it is also set explicitly.
"""

from __future__ import annotations

import dataclasses
import re

from headroom.samples import NetSample
from headroom.sources import Collector, CollectorError, SourceContext, procfs, register


def _compile(key: str, pattern: object) -> re.Pattern[str]:
    """Returns the compiled regex of setting ``key``; raises CollectorError when it is not one."""
    if not isinstance(pattern, str):
        raise CollectorError(f"collectors.net.{key}: expected a regex string, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise CollectorError(f"collectors.net.{key}: invalid regex {pattern!r}: {exc}") from None


@register
class NetCollector(Collector):
    name = "net"
    default_enabled = True
    description = "Network interface bytes, packets, errors and drops from /proc/net/dev; link speed from sysfs"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        settings = ctx.settings
        include = settings.get("device_include")
        self._include = None if include in (None, "") else _compile("device_include", include)
        exclude = settings.get("device_exclude")
        if exclude is None and self._include is None:
            exclude = procfs.DEFAULT_NET_EXCLUDE
        self._exclude = None if exclude in (None, "") else _compile("device_exclude", exclude)

    def wanted(self, device: str) -> bool:
        """Returns True when ``device`` passes the include and exclude filters."""
        if self._include is not None and not self._include.search(device):
            return False
        return self._exclude is None or not self._exclude.search(device)

    def collect(self) -> NetSample:
        """Returns the NetSample of the wanted interfaces; raises CollectorError when net/dev fails."""
        root = self.ctx.paths.procfs
        try:
            devices = procfs.read_net_dev(root)
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "net" / "dev", exc) from None
        sysfs = self.ctx.paths.sysfs
        return NetSample(devices=tuple(
            dataclasses.replace(d, speed_bytes_per_second=procfs.read_net_speed(sysfs, d.device))
            for d in devices if self.wanted(d.device)
        ))  # fmt: skip
