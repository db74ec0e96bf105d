"""Pure /proc parsers (text in, typed values out) and thin readers that take a root path.

Parsers never touch the filesystem: tests feed them strings and fixture files. They raise
``ValueError`` with a specific message when the text is not what the kernel writes. Readers take the
``--path.procfs`` root (``Path("/proc")`` on a live host) and return what the parser returns; they
let ``OSError`` through, except where a missing file has a documented meaning (no PSI, vanished pid).

Host-wide: ``parse_stat``, ``parse_loadavg``, ``parse_pressure``, ``parse_meminfo``,
``parse_vmstat``, ``parse_diskstats``, ``parse_net_dev``, ``parse_mounts``; ``mount_usage`` (statvfs)
for shm. Under ``--path.sysfs``: ``parse_net_speed`` / ``read_net_speed`` (class/net/<dev>/speed).
Per process (workload attribution): ``parse_pid_stat``, ``parse_pid_status``, ``parse_pid_io``,
``parse_pid_cmdline``, ``parse_pid_cgroup`` and their ``read_pid_*`` readers, which raise
``ProcessGone`` when the pid vanished and return None when the kernel denies access.

One purpose a module, the layers pointing one way (host <- pid <- readers):

- ``host.py``: the host-wide parsers (and ``mount_usage``), ``USER_HZ_DEFAULT`` and the default device filters;
- ``pid.py``: the per-process parsers, their types and ``ProcessGone``;
- ``readers.py``: kept files (``ProcFile``, ``PidFiles``) and every reader of a root path.

This module re-exports them all: the agent, the tests and the benchmarks use ``procfs.NAME``.
"""

from __future__ import annotations

from headroom.sources.procfs.host import (
    DEFAULT_DISK_EXCLUDE,
    DEFAULT_NET_EXCLUDE,
    PRESSURE_RESOURCES,
    SECTOR_BYTES,
    USER_HZ_DEFAULT,
    MountEntry,
    StatInfo,
    mount_usage,
    parse_diskstats,
    parse_loadavg,
    parse_meminfo,
    parse_mounts,
    parse_net_dev,
    parse_net_speed,
    parse_pressure,
    parse_stat,
    parse_vmstat,
    vmstat_counter,
)
from headroom.sources.procfs.pid import (
    PidCgroups,
    PidIo,
    PidSchedstat,
    PidStat,
    PidStatus,
    ProcessGone,
    parse_pid_cgroup,
    parse_pid_cmdline,
    parse_pid_io,
    parse_pid_schedstat,
    parse_pid_stat,
    parse_pid_status,
)
from headroom.sources.procfs.readers import (
    PidFiles,
    ProcFile,
    is_live_procfs,
    net_speed,
    read_failure,
    read_mounts,
    read_net_dev,
    read_net_speed,
    read_pid_cgroup,
    read_pid_cmdline,
    read_pid_io,
    read_pid_schedstat,
    read_pid_stat,
    read_pid_status,
    read_pressure,
    read_pressure_files,
)

__all__ = ["DEFAULT_DISK_EXCLUDE", "DEFAULT_NET_EXCLUDE", "MountEntry", "PRESSURE_RESOURCES", "PidCgroups",
           "PidFiles", "PidIo", "PidSchedstat", "PidStat", "PidStatus", "ProcFile", "ProcessGone",
           "SECTOR_BYTES", "StatInfo", "USER_HZ_DEFAULT", "is_live_procfs", "mount_usage", "net_speed",
           "parse_diskstats", "parse_loadavg", "parse_meminfo", "parse_mounts", "parse_net_dev",
           "parse_net_speed", "parse_pid_cgroup", "parse_pid_cmdline", "parse_pid_io",
           "parse_pid_schedstat", "parse_pid_stat", "parse_pid_status", "parse_pressure", "parse_stat",
           "parse_vmstat", "read_failure", "read_mounts", "read_net_dev", "read_net_speed",
           "read_pid_cgroup", "read_pid_cmdline", "read_pid_io", "read_pid_schedstat", "read_pid_stat",
           "read_pid_status", "read_pressure", "read_pressure_files", "vmstat_counter"]
