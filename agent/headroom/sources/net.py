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

from headroom.samples import NetDevice, NetSample, share_unchanged
from headroom.sources import Collector, DeviceFilter, SourceContext, procfs, register


@register
class NetCollector(Collector):
    name = "net"
    default_enabled = True
    description = "Network interface bytes, packets, errors and drops from /proc/net/dev; link speed from sysfs"

    def __init__(self, ctx: SourceContext) -> None:
        super().__init__(ctx)
        self._last: dict[str, NetDevice] = {}  # device -> last tick's (samples.share_unchanged)
        self._filter = DeviceFilter("net", ctx.settings, procfs.DEFAULT_NET_EXCLUDE)

    def wanted(self, device: str) -> bool:
        """Returns True when ``device`` passes the include and exclude filters."""
        return self._filter.wanted(device)

    def collect(self) -> NetSample:
        """Returns the NetSample of the wanted interfaces; raises CollectorError when net/dev fails."""
        root = self.ctx.paths.procfs
        try:
            devices = procfs.read_net_dev(root)
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "net" / "dev", exc) from None
        sysfs = self.ctx.paths.sysfs
        last = self._last
        out = tuple(
            share_unchanged(dataclasses.replace(d, speed_bytes_per_second=procfs.read_net_speed(sysfs, d.device)),
                            last.get(d.device))  # an idle interface: last tick's object
            for d in devices if self.wanted(d.device)
        )  # fmt: skip
        self._last = {d.device: d for d in out}
        return NetSample(devices=out)
