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
import os

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
        self._keep = procfs.is_live_procfs(ctx.paths.procfs)
        self._dev = procfs.ProcFile(ctx.paths.procfs / "net" / "dev", self._keep)
        # the kernel's own sysfs (not a tree of files, nor a host's mounted elsewhere): its files may stay open
        self._keep_sysfs = self._keep and os.path.realpath(ctx.paths.sysfs) == "/sys"
        self._speeds: dict[str, procfs.ProcFile] = {}  # device -> its class/net/<device>/speed

    def wanted(self, device: str) -> bool:
        """Returns True when ``device`` passes the include and exclude filters."""
        return self._filter.wanted(device)

    def collect(self) -> NetSample:
        """Returns the NetSample of the wanted interfaces; raises CollectorError when net/dev fails."""
        root = self.ctx.paths.procfs
        try:
            # a device name that is not UTF-8 keeps its bad bytes as \xNN (it affects only that device)
            devices = procfs.parse_net_dev(self._dev.text("backslashreplace"))
        except (OSError, ValueError) as exc:
            raise procfs.read_failure(root / "net" / "dev", exc) from None
        wanted = [d for d in devices if self.wanted(d.device)]
        for gone in self._speeds.keys() - {d.device for d in wanted}:
            self._speeds.pop(gone).close()
        last = self._last
        out = tuple(
            share_unchanged(dataclasses.replace(d, speed_bytes_per_second=procfs.net_speed(self._speed_file(d.device))),
                            last.get(d.device))  # an idle interface: last tick's object
            for d in wanted
        )  # fmt: skip
        self._last = {d.device: d for d in out}
        return NetSample(devices=out)

    def _speed_file(self, device: str) -> procfs.ProcFile:
        f = self._speeds.get(device)
        if f is None:
            f = self._speeds[device] = procfs.ProcFile(self.ctx.paths.sysfs / "class" / "net" / device / "speed",
                                                       self._keep_sysfs)
        return f

    def close(self) -> None:
        self._dev.close()
        for f in self._speeds.values():
            f.close()
        self._speeds.clear()
